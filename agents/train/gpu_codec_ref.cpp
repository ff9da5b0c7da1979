#include "gpu_codec_ref.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "codec_math.h"

namespace trainscope::train {
namespace {
void halvingTree(std::vector<double>& s) {
  for (size_t stride = s.size() / 2; stride > 0; stride /= 2)
    for (size_t t = 0; t < stride; ++t) s[t] += s[t + stride];
}
}  // namespace

double gpuAbsSum(const float* v, size_t n) {
  const size_t T = kReduceThreads, B = kReduceBlocks, G = T * B;
  std::vector<double> partial(B), s(T);
  for (size_t b = 0; b < B; ++b) {
    for (size_t t = 0; t < T; ++t) {
      double acc = 0;
      for (size_t i = b * T + t; i < n; i += G) acc += static_cast<double>(std::fabs(v[i]));
      s[t] = acc;
    }
    halvingTree(s);
    partial[b] = s[0];
  }
  for (size_t t = 0; t < T; ++t) {
    double acc = 0;
    for (size_t j = t; j < B; j += T) acc += partial[j];
    s[t] = acc;
  }
  halvingTree(s);
  return s[0];
}

void gpuReferenceEncode(const Codec& c, const float* v, size_t n, uint64_t seed, uint8_t* out) {
  if (c.kind != Compression::OneBitEf) {
    c.encode(v, n, seed, out);  // same per-value math; max and the top-k order do not depend on order
    return;
  }
  const float scale = n ? static_cast<float>(gpuAbsSum(v, n) / static_cast<double>(n)) : 0.0f;
  std::memcpy(out, &scale, 4);
  std::memset(out + 4, 0, (n + 7) / 8);
  for (size_t i = 0; i < n; ++i)
    if (v[i] >= 0) out[4 + i / 8] |= static_cast<uint8_t>(1u << (i % 8));
}

void gpuReferenceEncodeWithFeedback(const Codec& c, float* v, float* err, size_t n, uint64_t seed, uint8_t* out) {
  if (!c.errorFeedback()) {
    gpuReferenceEncode(c, v, n, seed, out);
    return;
  }
  for (size_t i = 0; i < n; ++i) v[i] += err[i];
  gpuReferenceEncode(c, v, n, seed, out);
  std::vector<float> dec(n, 0.0f);
  c.decodeAdd(out, n, dec.data());
  for (size_t i = 0; i < n; ++i) err[i] = v[i] - dec[i];
}

}  // namespace trainscope::train
