#include "trainscope/profiler/gpu_probe.h"

#if TRAINSCOPE_HAVE_GPU
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <dlfcn.h>
#endif

namespace trainscope::profiler {

#if TRAINSCOPE_HAVE_GPU
namespace {
// NCCL is looked up, never linked: the agent is preloaded into jobs that bring their own NCCL
// (PyTorch wheels), and a libnccl.so.2 among the agent's dependencies would be found first by
// soname and silently replace the job's. The process's NCCL when loaded, else the system's,
// opened only for the call.
int ncclVersionOfProcess() {
  void* h = ::dlopen("libnccl.so.2", RTLD_LAZY | RTLD_NOLOAD);
  if (!h) h = ::dlopen("libnccl.so.2", RTLD_LAZY | RTLD_LOCAL);
  if (!h) return 0;
  int v = 0;
  using GetVersion = int (*)(int*);  // ncclResult_t ncclGetVersion(int*), ncclSuccess == 0
  if (auto fn = reinterpret_cast<GetVersion>(::dlsym(h, "ncclGetVersion")); !fn || fn(&v) != 0) v = 0;
  ::dlclose(h);
  return v;
}
}  // namespace
#endif

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
  env.ncclVersion = ncclVersionOfProcess();
#else
  env.deviceError = "built without GPU support (TRAINSCOPE_GPU=OFF or no CUDA toolkit)";
#endif
  return env;
}

}  // namespace trainscope::profiler
