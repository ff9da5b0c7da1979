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
  // A client whose output is over its budget and that has taken none of it for this long is cut
  // off (TRAINSCOPE_CLIENT_STALL_MS; docs/SECURITY.md, "Cost per client").
  int64_t clientStallNs = 10'000'000'000LL;
  // A silent client waiting for its knob change keeps its slot at most this long
  // (TRAINSCOPE_PENDING_HOLD_MS); afterwards it may give way like any idle client.
  int64_t pendingHoldNs = 30'000'000'000LL;
  // Connections accepted per second (token bucket, burst kAcceptBurst in server.cpp); the rest
  // wait in the kernel's backlog. 0: unlimited (the fuzzer). TRAINSCOPE_ACCEPT_PER_S.
  int64_t acceptPerSec = 200;
};

Config configFromEnv(const ts_init_params* p);

}  // namespace trainscope::agent
