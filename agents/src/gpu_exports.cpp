// The agent library's GPU entry points (built with TRAINSCOPE_GPU only):
//  - InitializeInjection: CUDA calls it at cuInit when CUDA_INJECTION64_PATH names this library;
//    it starts the agent (if the preload did not already) and CUPTI activity tracing.
//  - ncclProfiler_v5 / ncclProfiler_v6 and ncclTunerPlugin_v5 / ncclTunerPlugin_v6: the tables
//    NCCL finds with dlsym when NCCL_PROFILER_PLUGIN / NCCL_TUNER_PLUGIN name this library.
//  - the nccl.* knobs, registered when NCCL first initializes a plugin, and their callbacks.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "external.h"
#include "gpu.h"
#include "log.h"
#include "runtime.h"
#include "trainscope/agent.h"
#include "trainscope/profiler/cupti_source.h"
#include "trainscope/profiler/nccl_plugins.h"

namespace trainscope::agent {
namespace {

namespace prof = trainscope::profiler;
namespace nccl = trainscope::nccl_abi;

std::atomic<bool> g_injected{false};  // CUDA called InitializeInjection: trace CUDA from now on
std::atomic<bool> g_cuptiNoted{false};  // this agent start put CUPTI's failure into the trace

// TRAINSCOPE_CUPTI: "0" never, "1" also at ts_init, anything else (auto) only when injected.
const char* cuptiMode() {
  const char* m = std::getenv("TRAINSCOPE_CUPTI");
  return m ? m : "auto";
}

void startCupti() {
  if (std::strcmp(cuptiMode(), "0") == 0) return;
  prof::CuptiConfig cfg;
  if (const char* mb = std::getenv("TRAINSCOPE_CUPTI_BUFFER_MB"); mb && std::atoi(mb) > 0)
    cfg.maxBuffers =
        std::max<size_t>(2, static_cast<size_t>(std::atoi(mb)) * (size_t{1} << 20) / cfg.bufferBytes);
  if (const char* d = std::getenv("TRAINSCOPE_CUPTI_DRIVER"); d && std::strcmp(d, "0") == 0)
    cfg.driverApi = false;  // no driver-API launches: library kernels then have no launch flow
  auto& cupti = prof::CuptiSource::instance();
  const prof::CuptiState st = cupti.start(ExternalQueue::instance(), cfg);
  // Also in the trace, once per agent start: a recording without GPU events says why.
  if (st != prof::CuptiState::Running && !g_cuptiNoted.exchange(true))
    ts_marker(ts_name(("CUPTI " + std::string(prof::cuptiStateName(st)) + ": " + cupti.message()).c_str()));
}

// ---- nccl.* knobs ---------------------------------------------------------------------------

ts_knob_t g_mask, g_algo, g_proto, g_channels;

void publishChoice(ts_knob_t, void*) {
  prof::NcclChoice c;
  c.algorithm = ts_knob_get_enum(g_algo) - 1;  // choice 0 is "auto"
  c.protocol = ts_knob_get_enum(g_proto) - 1;
  c.channels = static_cast<int>(ts_knob_get_int(g_channels));
  c.step = globals().currentStep.load();
  prof::NcclTuner::publish(c);
}

void applyMask(ts_knob_t k, void*) {
  prof::NcclProfiler::setMask(static_cast<int>(ts_knob_get_int(k)));
}

void setUpNccl() {
  static std::once_flag once;
  std::call_once(once, [] {
    prof::NcclProfiler::setSink(&ExternalQueue::instance());
    prof::NcclTuner::setSink(&ExternalQueue::instance());
    g_mask = ts_knob_int("nccl.profile_mask", 0, 0x7fff, prof::kDefaultNcclProfileMask,
                         "NCCL profiler event mask: 1 group, 2 coll, 4 p2p, 8 proxy op, 16 proxy step, "
                         "64 kernel channel, 256 group API, 512 coll API, 1024 p2p API, 2048 kernel launch",
                         0);
    static const char* const kAlgos[] = {"auto",          "tree", "ring",      "collnet_direct",
                                         "collnet_chain", "nvls", "nvls_tree", "pat"};
    static const char* const kProtos[] = {"auto", "ll", "ll128", "simple"};
    g_algo = ts_knob_enum("nccl.algorithm", kAlgos, 8, 0, "NCCL algorithm for collectives (tuner plugin)", 0);
    g_proto = ts_knob_enum("nccl.protocol", kProtos, 4, 0, "NCCL protocol for collectives (tuner plugin)", 0);
    g_channels = ts_knob_int("nccl.channels", 0, 64, 0, "NCCL channels per collective, 0 = NCCL decides", 0);
    ts_knob_on_change(g_mask, applyMask, nullptr);
    for (ts_knob_t k : {g_algo, g_proto, g_channels}) ts_knob_on_change(k, publishChoice, nullptr);
    prof::NcclProfiler::setMask(static_cast<int>(ts_knob_get_int(g_mask)));
    publishChoice(nullptr, nullptr);
  });
}

bool agentDisabled() {
  const char* d = std::getenv("TRAINSCOPE_DISABLE");
  return d && *d && std::strcmp(d, "0") != 0;
}

nccl::Result profilerInit(void** context, uint64_t commId, int* mask, const char* commName, int nNodes,
                          int nranks, int rank, nccl::DebugLogger logfn) {
  if (context) *context = nullptr;
  if (agentDisabled()) return nccl::InvalidUsage;  // NCCL goes on without the plugin
  try {
    setUpNccl();
  } catch (...) {
    return nccl::SystemError;
  }
  return prof::NcclProfiler::init(context, commId, mask, commName, nNodes, nranks, rank, logfn);
}

nccl::Result tunerInit(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes, nccl::DebugLogger logfn,
                       nccl::NvlDomainInfo_v5* nvl, nccl::TunerConstants_v5* constants) {
  if (ctx) *ctx = nullptr;
  if (agentDisabled()) return nccl::InvalidUsage;
  try {
    setUpNccl();
  } catch (...) {
    return nccl::SystemError;
  }
  return prof::NcclTuner::init(ctx, commId, nRanks, nNodes, logfn, nvl, constants);
}

}  // namespace

void gpuAfterStart() noexcept {
  g_cuptiNoted.store(false);
  try {
    if (g_injected.load() || std::strcmp(cuptiMode(), "1") == 0) startCupti();
  } catch (...) {
    logLine("CUPTI start failed; GPU activity tracing is off");
  }
}

void gpuBeforeStop() noexcept {
  prof::CuptiSource::instance().stop();
}

}  // namespace trainscope::agent

using trainscope::agent::profilerInit;
using trainscope::agent::tunerInit;
using trainscope::profiler::NcclProfiler;
using trainscope::profiler::NcclTuner;
namespace nccl_abi = trainscope::nccl_abi;

extern "C" {

// CUDA_INJECTION64_PATH entry point: called once by the CUDA driver during cuInit.
TS_AGENT_API int InitializeInjection(void) {
  try {
    if (!trainscope::agent::runtime() && trainscope::agent::isLauncherProcess()) return 1;  // not a rank
    trainscope::agent::g_injected.store(true);
    if (!trainscope::agent::runtime()) {
      const int rc = ts_init_from_env();  // starts CUPTI too (gpuAfterStart)
      if (rc == TS_DISABLED) return 1;
      if (rc == TS_OK || rc == TS_ERR_LISTEN) return 1;
    }
    trainscope::agent::startCupti();
  } catch (...) {
    trainscope::agent::logLine("InitializeInjection failed; GPU activity tracing is off");
  }
  return 1;  // CUDA goes on either way
}

TS_AGENT_EXPORT extern const nccl_abi::Profiler_v5 ncclProfiler_v5;
const nccl_abi::Profiler_v5 ncclProfiler_v5 = {"trainscope",
                                               profilerInit,
                                               NcclProfiler::startEventV5,
                                               NcclProfiler::stopEvent,
                                               NcclProfiler::recordEventState,
                                               NcclProfiler::finalize};

TS_AGENT_EXPORT extern const nccl_abi::Profiler_v6 ncclProfiler_v6;
const nccl_abi::Profiler_v6 ncclProfiler_v6 = {"trainscope",
                                               profilerInit,
                                               NcclProfiler::startEventV6,
                                               NcclProfiler::stopEvent,
                                               NcclProfiler::recordEventState,
                                               NcclProfiler::finalize};

TS_AGENT_EXPORT extern const nccl_abi::Tuner_v5 ncclTunerPlugin_v5;
const nccl_abi::Tuner_v5 ncclTunerPlugin_v5 = {"trainscope", tunerInit, NcclTuner::getCollInfo,
                                               NcclTuner::finalize};

TS_AGENT_EXPORT extern const nccl_abi::Tuner_v6 ncclTunerPlugin_v6;
const nccl_abi::Tuner_v6 ncclTunerPlugin_v6 = {"trainscope", tunerInit, NcclTuner::getCollInfo,
                                               NcclTuner::finalize, nullptr};

}  // extern "C"
