#include <cstdio>
#include <cstring>

#include "trainscope/agent.h"
#include "trainscope/profiler/gpu_probe.h"

#ifndef TRAINSCOPE_VERSION
#define TRAINSCOPE_VERSION "0.0.0"
#endif

extern "C" int ts_cuda_selftest_impl(char* msg, size_t len);  // agents/src/cuda/selftest.cu

namespace {
void copyMessage(char* msg, size_t len, const char* text) {
  if (msg && len > 0) std::snprintf(msg, len, "%s", text);
}
}  // namespace

extern "C" int ts_agent_abi_version(void) { return TRAINSCOPE_AGENT_ABI_VERSION; }

extern "C" size_t ts_agent_build_info(char* buf, size_t len) {
  const auto env = trainscope::profiler::probeGpuEnvironment();
  char tmp[256];
  const int n = std::snprintf(tmp, sizeof tmp, "trainscope-agent %s abi=%d gpu=%d cuda=%d cupti=%u nccl=%d",
                              TRAINSCOPE_VERSION, TRAINSCOPE_AGENT_ABI_VERSION, env.builtWithGpu ? 1 : 0,
                              env.cudaRuntimeVersion, env.cuptiApiVersion, env.ncclVersion);
  copyMessage(buf, len, tmp);
  return n < 0 ? 0 : static_cast<size_t>(n) + 1;
}

extern "C" int ts_agent_cuda_selftest(char* msg, size_t len) {
#if TRAINSCOPE_HAVE_GPU
  try {
    return ts_cuda_selftest_impl(msg, len);
  } catch (...) {  // nothing may cross the C boundary
    copyMessage(msg, len, "unexpected C++ exception in the CUDA self-test");
    return 1;
  }
#else
  copyMessage(msg, len, "built without GPU support");
  return -1;
#endif
}
