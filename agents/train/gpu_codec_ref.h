// Host reference of the CUDA compression kernels (cuda_kernels.cu): what the GPU writes, byte for
// byte. It differs from the CPU codec (Codec::encode) in one place only: onebit's mean |v| is
// summed in the kernels' fixed reduction order (gpuAbsSum) instead of sequentially. Built in every
// configuration, so the no-GPU tests compare it with the CPU codec and a GPU run compares the
// kernels with it (trainscope-cuda-check).
#pragma once

#include <cstddef>
#include <cstdint>

#include "compress.h"

namespace trainscope::train {

// sum |v[i]| in double, in the reduction order of the kernels (see codec_math.h).
double gpuAbsSum(const float* v, size_t n);
void gpuReferenceEncode(const Codec& c, const float* v, size_t n, uint64_t seed, uint8_t* out);
// v += err; encode(v); err = v - decode (error-feedback codecs; otherwise encode).
void gpuReferenceEncodeWithFeedback(const Codec& c, float* v, float* err, size_t n, uint64_t seed, uint8_t* out);

}  // namespace trainscope::train
