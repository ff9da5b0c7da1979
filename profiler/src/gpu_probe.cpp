#include "trainscope/profiler/gpu_probe.h"

#if TRAINSCOPE_HAVE_GPU
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <nccl.h>
#endif

namespace trainscope::profiler {

GpuEnvironment probeGpuEnvironment() noexcept {
  GpuEnvironment env;
#if TRAINSCOPE_HAVE_GPU
  env.builtWithGpu = true;
  cudaRuntimeGetVersion(&env.cudaRuntimeVersion);
  if (cudaDriverGetVersion(&env.cudaDriverVersion) != cudaSuccess) env.cudaDriverVersion = 0;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaSuccess) {
    env.deviceCount = count;
    cudaDeviceProp prop{};
    if (count > 0 && cudaGetDeviceProperties(&prop, 0) == cudaSuccess) env.firstDeviceName = prop.name;
  } else {
    env.deviceCount = 0;  // the runtime may leave count untouched on error
    env.deviceError = cudaGetErrorString(err);
    cudaGetLastError();   // clear the sticky error for later callers
  }
  uint32_t cupti = 0;
  if (cuptiGetVersion(&cupti) == CUPTI_SUCCESS) env.cuptiApiVersion = cupti;
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) env.ncclVersion = nccl;
#else
  env.deviceError = "built without GPU support (TRAINSCOPE_GPU=OFF or no CUDA toolkit)";
#endif
  return env;
}

}  // namespace trainscope::profiler
