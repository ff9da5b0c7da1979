// `trainscope-cli env [--json] [--cuda-selftest]`: what this build and machine can trace.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "trainscope/agent.h"
#include "trainscope/profiler/gpu_probe.h"

namespace trainscope::cli {
namespace {

struct EnvOptions {
  bool json = false;
  bool selftest = false;
};

int runEnv(const EnvOptions& o) {
  const auto env = profiler::probeGpuEnvironment();
  char info[256];
  ts_agent_build_info(info, sizeof info);
  int selftestRc = 0;
  char selftestMsg[256] = "";
  if (o.selftest) selftestRc = ts_agent_cuda_selftest(selftestMsg, sizeof selftestMsg);
  if (o.json) {
    nlohmann::json j = {{"agent", info},
                        {"built_with_gpu", env.builtWithGpu},
                        {"cuda_runtime_version", env.cudaRuntimeVersion},
                        {"cuda_driver_version", env.cudaDriverVersion},
                        {"device_count", env.deviceCount},
                        {"device_error", env.deviceError},
                        {"first_device", env.firstDeviceName},
                        {"cupti_api_version", env.cuptiApiVersion},
                        {"nccl_version", env.ncclVersion}};
    if (o.selftest) j["cuda_selftest"] = {{"rc", selftestRc}, {"message", selftestMsg}};
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::printf("agent          %s\n", info);
    std::printf("GPU support    %s\n", env.builtWithGpu ? "built in" : "not built");
    std::printf("CUDA runtime   %d   driver %d\n", env.cudaRuntimeVersion, env.cudaDriverVersion);
    std::printf("devices        %d%s%s\n", env.deviceCount, env.deviceError.empty() ? "" : "  (",
                env.deviceError.empty() ? "" : (env.deviceError + ")").c_str());
    if (!env.firstDeviceName.empty()) std::printf("device 0       %s\n", env.firstDeviceName.c_str());
    std::printf("CUPTI API      %u\n", env.cuptiApiVersion);
    std::printf("NCCL           %d\n", env.ncclVersion);
    if (o.selftest) std::printf("CUDA selftest  rc=%d  %s\n", selftestRc, selftestMsg);
  }
  return o.selftest && selftestRc != 0 ? kExitFailed : kExitOk;
}

}  // namespace

void addEnvCommand(CLI::App& app, Runner& run) {
  auto opts = std::make_shared<EnvOptions>();
  CLI::App* cmd = app.add_subcommand("env", "What this build and machine can trace (CUDA, CUPTI, NCCL, devices)");
  cmd->add_flag("--json", opts->json, "Print JSON");
  cmd->add_flag("--cuda-selftest", opts->selftest, "Run a tiny CUDA kernel on device 0 (fails without a GPU)");
  cmd->callback([opts, &run] { run = [opts] { return runEnv(*opts); }; });
}

}  // namespace trainscope::cli
