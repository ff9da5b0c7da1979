// Agent settings, from ts_init_params and the environment (see agent.h and docs).
#pragma once

#include <cstdint>
#include <string>

#include "trainscope/agent.h"

namespace trainscope::agent {

struct Config {
  std::string jobId;
  int32_t rank = 0;
  int32_t worldSize = 1;
  int32_t localRank = 0;
  std::string host;
  size_t bufferBytes = 64u << 20;   // TRAINSCOPE_BUFFER_MB: rings + flight recorder
  size_t flightBytes = 16u << 20;   // TRAINSCOPE_FLIGHT_MB
  int64_t flightNs = 30'000'000'000LL;  // TRAINSCOPE_FLIGHT_SECONDS
  size_t ringRecords = 32768;       // TRAINSCOPE_RING_KB (per thread) / 32 bytes
  int64_t clockShiftNs = 0;         // TRAINSCOPE_CLOCK_SHIFT_NS
  int64_t clockDriftPpb = 0;        // TRAINSCOPE_CLOCK_DRIFT_PPB (test hook)
  std::string clock;                // TRAINSCOPE_CLOCK: "" / "auto" (TSC when invariant), "monotonic"
  std::string listen;               // TRAINSCOPE_LISTEN: "" / "unix", "tcp", "tcp:ADDR:PORT", "none"
  std::string secretFile;           // TRAINSCOPE_SECRET_FILE
  size_t clientQueueBytes = 8u << 20;  // TRAINSCOPE_CLIENT_QUEUE_MB
};

Config configFromEnv(const ts_init_params* p);

}  // namespace trainscope::agent
