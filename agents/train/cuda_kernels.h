// Our CUDA kernels (cuda_kernels.cu): the compression codecs on device buffers, bit-identical to
// gpu_codec_ref.h, and the model's element-wise and row-wise pieces. Every function enqueues on
// the given stream and returns at once; pointers are device pointers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "compress.h"

namespace trainscope::train::gpu {

// ---- compression (one chunk of n values; out/in hold Codec::payloadBytes(n), 4-byte aligned) --
size_t encodeScratchBytes(const Codec& c, size_t n);  // device scratch encode() needs
// With err (n floats) and an error-feedback codec: v += err, encode, err = v - decode(out).
// Without: encode(v). scratch: encodeScratchBytes(c, n) bytes.
void encode(const Codec& c, float* v, float* err, size_t n, uint64_t seed, uint8_t* out, void* scratch,
            cudaStream_t s);
void decodeAdd(const Codec& c, const uint8_t* in, size_t n, float* acc, cudaStream_t s);  // acc += D(in)

// ---- model pieces (row-major) ---------------------------------------------------------------
void reluForward(float* x, size_t n, cudaStream_t s);                   // in place
void reluBackward(const float* y, float* dy, size_t n, cudaStream_t s);  // dy *= (y > 0)
// Per row: rowLoss = log sum exp(z - max) - (z[label] - max); dlogits (when non-null) =
// (softmax(z) - onehot(label)) / rows.
void softmaxCrossEntropy(const float* logits, const int* labels, int rows, int cols, float* rowLoss,
                         float* dlogits, cudaStream_t s);
// y = xhat * g + b, xhat = (x - mean) * rstd, rstd = 1 / sqrt(var + 1e-5) (as the CPU model).
void layerNormForward(const float* x, const float* g, const float* b, int rows, int cols, float* y, float* xhat,
                      float* rstd, cudaStream_t s);
// dx += rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * g.
void layerNormBackward(const float* dy, const float* g, const float* xhat, const float* rstd, int rows, int cols,
                       float* dx, cudaStream_t s);
// Attention scores: rows of len values, row r is query t = r % len and sees keys u <= t.
void causalSoftmaxForward(float* p, int rows, int len, cudaStream_t s);
void causalSoftmaxBackward(const float* p, float* dp, int rows, int len, cudaStream_t s);  // dp = p(dp - <dp,p>)

}  // namespace trainscope::train::gpu
