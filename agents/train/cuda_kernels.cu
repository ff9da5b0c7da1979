#include <cub/device/device_radix_sort.cuh>
#include <cuda_fp16.h>

#include "codec_math.h"
#include "cuda_kernels.h"

namespace trainscope::train::gpu {
namespace {

constexpr int kThreads = 256;
unsigned blocksFor(size_t n) {
  const size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 32 ? (b ? b : 1) : 65535 * 32);
}
#define TS_FOR_EACH(i, n) \
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < (n); i += size_t(gridDim.x) * blockDim.x)

__device__ float warpSum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ float warpMax(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ unsigned warpMaxU(unsigned v) {
  for (int o = 16; o > 0; o /= 2) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// ---- fp16 -------------------------------------------------------------------------------------
__global__ void fp16Encode(const float* v, size_t n, __half* out) {
  TS_FOR_EACH(i, n) out[i] = __float2half_rn(v[i]);
}
__global__ void fp16DecodeAdd(const __half* in, size_t n, float* acc) {
  TS_FOR_EACH(i, n) acc[i] += __half2float(in[i]);
}

__global__ void f32DecodeAdd(const float* in, size_t n, float* acc) {
  TS_FOR_EACH(i, n) acc[i] += in[i];
}

// ---- int8: scale = max |v| as the max of the |v| bit patterns, then stochastic rounding -------
__global__ void absMaxBits(const float* v, size_t n, unsigned* out) {
  unsigned m = 0;
  TS_FOR_EACH(i, n) m = max(m, magnitudeKey(v[i]));
  m = warpMaxU(m);
  if ((threadIdx.x & 31) == 0) atomicMax(out, m);
}
__global__ void int8Encode(const float* v, size_t n, uint64_t seed, uint8_t* out) {
  const float inv = int8Inv(*reinterpret_cast<const float*>(out));
  TS_FOR_EACH(i, n) out[4 + i] = static_cast<uint8_t>(int8Quantize(v[i], inv, seed, i));
}
__global__ void int8DecodeAdd(const uint8_t* in, size_t n, float* acc) {
  const float step = int8Step(*reinterpret_cast<const float*>(in));
  TS_FOR_EACH(i, n) acc[i] += step * static_cast<float>(static_cast<int8_t>(in[4 + i]));
}

// ---- onebit: deterministic mean |v| (the order gpu_codec_ref.cpp reproduces), signs by ballot --
__device__ double blockTree(double* s) {  // s[kReduceThreads] in shared memory
  __syncthreads();
  for (int stride = kReduceThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) s[threadIdx.x] += s[threadIdx.x + stride];
    __syncthreads();
  }
  return s[0];
}
__global__ void absSumPartial(float* v, const float* err, size_t n, double* partial) {
  __shared__ double s[kReduceThreads];
  double acc = 0;
  const size_t G = size_t(kReduceBlocks) * kReduceThreads;
  for (size_t i = blockIdx.x * size_t(kReduceThreads) + threadIdx.x; i < n; i += G) {
    if (err) v[i] += err[i];  // error feedback folded in: each value is read by exactly one thread
    acc += static_cast<double>(fabsf(v[i]));
  }
  s[threadIdx.x] = acc;
  const double total = blockTree(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}
__global__ void onebitScale(const double* partial, size_t n, uint8_t* out) {
  __shared__ double s[kReduceThreads];
  double acc = 0;
  for (int j = threadIdx.x; j < kReduceBlocks; j += kReduceThreads) acc += partial[j];
  s[threadIdx.x] = acc;
  const double total = blockTree(s);
  if (threadIdx.x == 0)
    *reinterpret_cast<float*>(out) = n ? static_cast<float>(total / static_cast<double>(n)) : 0.0f;
}
__global__ void onebitPack(const float* v, float* err, size_t n, uint8_t* out) {
  const float scale = *reinterpret_cast<const float*>(out);
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;  // the grid covers n rounded up to 32
  const bool bit = i < n && v[i] >= 0;
  const unsigned word = __ballot_sync(0xffffffffu, bit);
  if (err && i < n) err[i] = v[i] - onebitValue(bit, scale);
  if ((threadIdx.x & 31) == 0) {
    const size_t bytes = (n + 7) / 8;
    for (size_t b = 0; b < 4; ++b)
      if (i / 8 + b < bytes) out[4 + i / 8 + b] = static_cast<uint8_t>(word >> (8 * b));
  }
}
__global__ void onebitDecodeAdd(const uint8_t* in, size_t n, float* acc) {
  const float scale = *reinterpret_cast<const float*>(in);
  TS_FOR_EACH(i, n) acc[i] += onebitValue((in[4 + i / 8] >> (i % 8)) & 1u, scale);
}

// ---- top-k: stable descending radix sort of the |v| keys (ties keep the lower index first) ----
__global__ void topkKeys(float* v, const float* err, size_t n, uint32_t* keys, uint32_t* idx) {
  TS_FOR_EACH(i, n) {
    if (err) v[i] += err[i];
    keys[i] = magnitudeKey(v[i]);
    idx[i] = static_cast<uint32_t>(i);
  }
}
__global__ void topkGather(const float* v, const uint32_t* idx, size_t k, uint8_t* out) {
  TS_FOR_EACH(j, k) {
    reinterpret_cast<uint32_t*>(out)[2 * j] = idx[j];
    reinterpret_cast<float*>(out)[2 * j + 1] = v[idx[j]];
  }
}
__global__ void copyTo(const float* v, size_t n, float* err) {
  TS_FOR_EACH(i, n) err[i] = v[i];
}
__global__ void topkClearSent(const uint32_t* idx, size_t k, float* err) {  // err = v - D(C(v))
  TS_FOR_EACH(j, k) err[idx[j]] = 0.0f;
}
__global__ void topkDecodeAdd(const uint8_t* in, size_t k, size_t n, float* acc) {
  TS_FOR_EACH(j, k) {
    const uint32_t i = reinterpret_cast<const uint32_t*>(in)[2 * j];
    if (i < n) acc[i] += reinterpret_cast<const float*>(in)[2 * j + 1];
  }
}

size_t align256(size_t b) { return (b + 255) / 256 * 256; }
size_t cubSortBytes(size_t n) {
  size_t bytes = 0;
  cub::DeviceRadixSort::SortPairsDescending(nullptr, bytes, static_cast<const uint32_t*>(nullptr),
                                            static_cast<uint32_t*>(nullptr), static_cast<const uint32_t*>(nullptr),
                                            static_cast<uint32_t*>(nullptr), static_cast<int64_t>(n));
  return bytes;
}

// ---- rows: one warp per row -------------------------------------------------------------------
__global__ void xentRows(const float* z, const int* labels, int rows, int cols, float* rowLoss, float* d) {
  const int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (r >= rows) return;
  const float* zr = z + size_t(r) * cols;
  float mx = -INFINITY;
  for (int j = lane; j < cols; j += 32) mx = fmaxf(mx, zr[j]);
  mx = warpMax(mx);
  float sum = 0;
  for (int j = lane; j < cols; j += 32) sum += expf(zr[j] - mx);
  sum = warpSum(sum);
  const int y = labels[r];
  if (lane == 0) rowLoss[r] = logf(sum) - (zr[y] - mx);
  if (d) {
    const float inv = 1.0f / static_cast<float>(rows);
    for (int j = lane; j < cols; j += 32) d[size_t(r) * cols + j] = (expf(zr[j] - mx) / sum - (j == y)) * inv;
  }
}
__global__ void lnForwardRows(const float* x, const float* g, const float* b, int rows, int cols, float* y,
                              float* xhat, float* rstd) {
  const int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (r >= rows) return;
  const size_t o = size_t(r) * cols;
  float mean = 0;
  for (int j = lane; j < cols; j += 32) mean += x[o + j];
  mean = warpSum(mean) / cols;
  float var = 0;
  for (int j = lane; j < cols; j += 32) var += (x[o + j] - mean) * (x[o + j] - mean);
  const float rs = rsqrtf(warpSum(var) / cols + 1e-5f);
  if (lane == 0) rstd[r] = rs;
  for (int j = lane; j < cols; j += 32) {
    const float xh = (x[o + j] - mean) * rs;
    xhat[o + j] = xh;
    y[o + j] = xh * g[j] + b[j];
  }
}
__global__ void lnBackwardRows(const float* dy, const float* g, const float* xhat, const float* rstd, int rows,
                               int cols, float* dx) {
  const int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (r >= rows) return;
  const size_t o = size_t(r) * cols;
  float m1 = 0, m2 = 0;
  for (int j = lane; j < cols; j += 32) {
    const float dxh = dy[o + j] * g[j];
    m1 += dxh;
    m2 += dxh * xhat[o + j];
  }
  m1 = warpSum(m1) / cols;
  m2 = warpSum(m2) / cols;
  for (int j = lane; j < cols; j += 32) dx[o + j] += rstd[r] * (dy[o + j] * g[j] - m1 - xhat[o + j] * m2);
}
__global__ void causalSoftmaxRows(float* p, int rows, int len) {
  const int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (r >= rows) return;
  float* row = p + size_t(r) * len;
  const int t = r % len;
  float mx = -INFINITY;
  for (int u = lane; u <= t; u += 32) mx = fmaxf(mx, row[u]);
  mx = warpMax(mx);
  float sum = 0;
  for (int u = lane; u < len; u += 32) sum += (row[u] = u <= t ? expf(row[u] - mx) : 0.0f);
  sum = warpSum(sum);
  for (int u = lane; u <= t; u += 32) row[u] /= sum;
}
__global__ void softmaxBackwardRows(const float* p, float* dp, int rows, int len) {
  const int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (r >= rows) return;
  const size_t o = size_t(r) * len;
  float dot = 0;
  for (int u = lane; u < len; u += 32) dot += dp[o + u] * p[o + u];
  dot = warpSum(dot);
  for (int u = lane; u < len; u += 32) dp[o + u] = p[o + u] * (dp[o + u] - dot);
}
unsigned rowBlocks(int rows) { return static_cast<unsigned>((rows + kThreads / 32 - 1) / (kThreads / 32)); }

__global__ void reluFwd(float* x, size_t n) {
  TS_FOR_EACH(i, n) x[i] = fmaxf(x[i], 0.0f);
}
__global__ void reluBwd(const float* y, float* dy, size_t n) {
  TS_FOR_EACH(i, n) if (y[i] <= 0.0f) dy[i] = 0.0f;
}

}  // namespace

size_t encodeScratchBytes(const Codec& c, size_t n) {
  switch (c.kind) {
    case Compression::OneBitEf:
      return sizeof(double) * kReduceBlocks;
    case Compression::TopkEf:
      return 4 * align256(4 * n) + align256(cubSortBytes(n));
    default:
      return 0;
  }
}

void encode(const Codec& c, float* v, float* err, size_t n, uint64_t seed, uint8_t* out, void* scratch,
            cudaStream_t s) {
  if (!c.errorFeedback()) err = nullptr;
  if (n == 0) {  // the CPU codec writes a zero scale (int8, onebit) and nothing else
    cudaMemsetAsync(out, 0, c.payloadBytes(0), s);
    return;
  }
  switch (c.kind) {
    case Compression::None:
      cudaMemcpyAsync(out, v, 4 * n, cudaMemcpyDeviceToDevice, s);
      return;
    case Compression::Fp16:
      fp16Encode<<<blocksFor(n), kThreads, 0, s>>>(v, n, reinterpret_cast<__half*>(out));
      return;
    case Compression::Int8:
      cudaMemsetAsync(out, 0, 4, s);
      absMaxBits<<<blocksFor(n), kThreads, 0, s>>>(v, n, reinterpret_cast<unsigned*>(out));
      int8Encode<<<blocksFor(n), kThreads, 0, s>>>(v, n, seed, out);
      return;
    case Compression::OneBitEf: {
      auto* partial = static_cast<double*>(scratch);
      absSumPartial<<<kReduceBlocks, kReduceThreads, 0, s>>>(v, err, n, partial);
      onebitScale<<<1, kReduceThreads, 0, s>>>(partial, n, out);
      onebitPack<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, s>>>(v, err, n, out);
      return;
    }
    case Compression::TopkEf: {
      const size_t k = c.payloadBytes(n) / 8, a = align256(4 * n);
      auto* base = static_cast<uint8_t*>(scratch);
      auto* keys = reinterpret_cast<uint32_t*>(base);
      auto* keysOut = reinterpret_cast<uint32_t*>(base + a);
      auto* idx = reinterpret_cast<uint32_t*>(base + 2 * a);
      auto* idxOut = reinterpret_cast<uint32_t*>(base + 3 * a);
      size_t tempBytes = cubSortBytes(n);
      topkKeys<<<blocksFor(n), kThreads, 0, s>>>(v, err, n, keys, idx);
      cub::DeviceRadixSort::SortPairsDescending(base + 4 * a, tempBytes, keys, keysOut, idx, idxOut,
                                                static_cast<int64_t>(n), 0, 32, s);
      topkGather<<<blocksFor(k), kThreads, 0, s>>>(v, idxOut, k, out);
      if (err) {
        copyTo<<<blocksFor(n), kThreads, 0, s>>>(v, n, err);
        topkClearSent<<<blocksFor(k), kThreads, 0, s>>>(idxOut, k, err);
      }
      return;
    }
  }
}

void decodeAdd(const Codec& c, const uint8_t* in, size_t n, float* acc, cudaStream_t s) {
  switch (c.kind) {
    case Compression::None:
      f32DecodeAdd<<<blocksFor(n), kThreads, 0, s>>>(reinterpret_cast<const float*>(in), n, acc);
      return;
    case Compression::Fp16:
      fp16DecodeAdd<<<blocksFor(n), kThreads, 0, s>>>(reinterpret_cast<const __half*>(in), n, acc);
      return;
    case Compression::Int8:
      int8DecodeAdd<<<blocksFor(n), kThreads, 0, s>>>(in, n, acc);
      return;
    case Compression::OneBitEf:
      onebitDecodeAdd<<<blocksFor(n), kThreads, 0, s>>>(in, n, acc);
      return;
    case Compression::TopkEf:
      topkDecodeAdd<<<blocksFor(n), kThreads, 0, s>>>(in, c.payloadBytes(n) / 8, n, acc);
      return;
  }
}

void reluForward(float* x, size_t n, cudaStream_t s) { reluFwd<<<blocksFor(n), kThreads, 0, s>>>(x, n); }
void reluBackward(const float* y, float* dy, size_t n, cudaStream_t s) {
  reluBwd<<<blocksFor(n), kThreads, 0, s>>>(y, dy, n);
}
void softmaxCrossEntropy(const float* logits, const int* labels, int rows, int cols, float* rowLoss,
                         float* dlogits, cudaStream_t s) {
  xentRows<<<rowBlocks(rows), kThreads, 0, s>>>(logits, labels, rows, cols, rowLoss, dlogits);
}
void layerNormForward(const float* x, const float* g, const float* b, int rows, int cols, float* y, float* xhat,
                      float* rstd, cudaStream_t s) {
  lnForwardRows<<<rowBlocks(rows), kThreads, 0, s>>>(x, g, b, rows, cols, y, xhat, rstd);
}
void layerNormBackward(const float* dy, const float* g, const float* xhat, const float* rstd, int rows, int cols,
                       float* dx, cudaStream_t s) {
  lnBackwardRows<<<rowBlocks(rows), kThreads, 0, s>>>(dy, g, xhat, rstd, rows, cols, dx);
}
void causalSoftmaxForward(float* p, int rows, int len, cudaStream_t s) {
  causalSoftmaxRows<<<rowBlocks(rows), kThreads, 0, s>>>(p, rows, len);
}
void causalSoftmaxBackward(const float* p, float* dp, int rows, int len, cudaStream_t s) {
  softmaxBackwardRows<<<rowBlocks(rows), kThreads, 0, s>>>(p, dp, rows, len);
}

}  // namespace trainscope::train::gpu
