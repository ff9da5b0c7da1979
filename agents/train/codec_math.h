// The per-value arithmetic of the compression codecs, shared by the CPU codecs (compress.cpp),
// the CUDA kernels (cuda_kernels.cu) and their host reference (cuda_codec_ref.cpp): one
// definition, so the GPU encodes exactly what the CPU encodes.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "tensor.h"

namespace trainscope::train {

// int8: scale = max |v|; q = floor(v * 127 / scale + u), u ~ U[0,1) from (seed, i): unbiased.
TS_HD inline float int8Inv(float scale) { return scale > 0 ? 127.0f / scale : 0.0f; }
TS_HD inline float int8Step(float scale) { return scale / 127.0f; }
TS_HD inline int8_t int8Quantize(float v, float inv, uint64_t seed, uint64_t i) {
  const double u = uniformOf(hashOf(seed, i));
  double q = floor(static_cast<double>(v * inv) + u);
  q = q < -127.0 ? -127.0 : (q > 127.0 ? 127.0 : q);
  return static_cast<int8_t>(q);
}

// top-k order key: the bits of |v| (non-negative floats order like their bit patterns), larger
// first, ties by lower index.
TS_HD inline uint32_t magnitudeKey(float v) {
  const float a = fabsf(v);
  uint32_t k;
  memcpy(&k, &a, 4);
  return k;
}

// onebit: bit set for v >= 0; decoded value +scale / -scale.
TS_HD inline float onebitValue(bool bit, float scale) { return bit ? scale : -scale; }

// The deterministic |v| sum used by the GPU's onebit scale: kReduceBlocks blocks of
// kReduceThreads threads; thread t of block b sums i = b*T + t, then every G = B*T values
// (grid stride), in double; each block folds its threads as a halving tree; one block then sums
// the B partials the same way (thread t sums partials t, t + T, ..., then the tree).
inline constexpr int kReduceThreads = 256;
inline constexpr int kReduceBlocks = 64;

}  // namespace trainscope::train
