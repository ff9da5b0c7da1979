// A tiny kernel that proves the CUDA toolchain, the runtime and (when present) a device work.
#include <cuda_runtime.h>

#include <cstdio>

namespace {
__global__ void iotaKernel(int* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i * 3 + 1;
}

int fail(char* msg, size_t len, const char* what, cudaError_t err) {
  if (msg && len) std::snprintf(msg, len, "%s: %s", what, cudaGetErrorString(err));
  cudaGetLastError();
  return static_cast<int>(err) == 0 ? 1 : static_cast<int>(err);
}
}  // namespace

extern "C" int ts_cuda_selftest_impl(char* msg, size_t len) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) return fail(msg, len, "no CUDA device", err);
  if (count == 0) return fail(msg, len, "no CUDA device", cudaErrorNoDevice);
  constexpr int n = 4096;
  int* d = nullptr;
  if ((err = cudaMalloc(&d, n * sizeof(int))) != cudaSuccess) return fail(msg, len, "cudaMalloc", err);
  iotaKernel<<<(n + 255) / 256, 256>>>(d, n);
  static int h[n];
  err = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  cudaFree(d);
  if (err != cudaSuccess) return fail(msg, len, "kernel or copy", err);
  for (int i = 0; i < n; ++i) {
    if (h[i] != i * 3 + 1) {
      if (msg && len) std::snprintf(msg, len, "wrong result at %d: %d", i, h[i]);
      return 1;
    }
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  if (msg && len) std::snprintf(msg, len, "ok: kernel ran on %s (sm_%d%d)", prop.name, prop.major, prop.minor);
  return 0;
}
