// What GPU stack this process can see. Safe on machines without a GPU or driver: the CUDA
// runtime reports "insufficient driver" and the device count stays 0.
#pragma once

#include <string>

namespace trainscope::profiler {

struct GpuEnvironment {
  bool builtWithGpu = false;   // compiled with CUDA/CUPTI/NCCL (TRAINSCOPE_GPU=ON and toolkit found)
  int cudaRuntimeVersion = 0;  // e.g. 13000
  int cudaDriverVersion = 0;   // 0 when no driver is installed
  int deviceCount = 0;
  std::string deviceError;     // why deviceCount is 0, when it is
  unsigned cuptiApiVersion = 0;
  int ncclVersion = 0;         // e.g. 22809
  std::string firstDeviceName;
};

// Queries the CUDA runtime, CUPTI and NCCL. Never throws, never aborts.
GpuEnvironment probeGpuEnvironment() noexcept;

}  // namespace trainscope::profiler
