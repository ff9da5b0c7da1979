#include "config.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <initializer_list>

namespace trainscope::agent {

namespace {
const char* firstEnv(std::initializer_list<const char*> names) {
  for (const char* n : names) {
    const char* v = std::getenv(n);
    if (v && *v) return v;
  }
  return nullptr;
}

int64_t envInt(std::initializer_list<const char*> names, int64_t def) {
  const char* v = firstEnv(names);
  if (!v) return def;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  return (end && *end == '\0') ? x : def;
}
}  // namespace

Config configFromEnv(const ts_init_params* p) {
  Config c;
  if (p && p->job_id && *p->job_id) {
    c.jobId = p->job_id;
  } else if (const char* j = firstEnv({"TRAINSCOPE_JOB_ID", "PMIX_NAMESPACE", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"})) {
    c.jobId = j;
  } else {
    c.jobId = "job-" + std::to_string(getppid());
  }
  // Job ids become file names: keep them to a safe alphabet.
  for (char& ch : c.jobId)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.')) ch = '_';

  c.rank = p && p->rank >= 0 ? p->rank
                             : static_cast<int32_t>(envInt({"TRAINSCOPE_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK",
                                                            "RANK", "SLURM_PROCID"}, 0));
  c.worldSize = p && p->world_size > 0
                    ? p->world_size
                    : static_cast<int32_t>(envInt({"TRAINSCOPE_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "WORLD_SIZE",
                                                   "SLURM_NTASKS"}, 1));
  c.localRank = p && p->local_rank >= 0
                    ? p->local_rank
                    : static_cast<int32_t>(envInt({"TRAINSCOPE_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                                   "LOCAL_RANK", "SLURM_LOCALID"}, 0));
  if (c.worldSize < 1) c.worldSize = 1;
  if (p && p->hostname && *p->hostname) {
    c.host = p->hostname;
  } else {
    char h[256] = {};
    if (gethostname(h, sizeof h - 1) == 0) c.host = h;
  }

  const int64_t bufferMb = std::clamp<int64_t>(envInt({"TRAINSCOPE_BUFFER_MB"}, 64), 1, 1 << 16);
  const int64_t flightMb = std::clamp<int64_t>(envInt({"TRAINSCOPE_FLIGHT_MB"}, 16), 0, bufferMb);
  c.bufferBytes = static_cast<size_t>(bufferMb) << 20;
  // The flight recorder gets at most half the budget: rings for the job's threads come first.
  c.flightBytes = std::min(static_cast<size_t>(flightMb) << 20, c.bufferBytes / 2);
  c.flightNs = std::max<int64_t>(envInt({"TRAINSCOPE_FLIGHT_SECONDS"}, 30), 0) * 1'000'000'000LL;
  const int64_t ringKb = std::clamp<int64_t>(envInt({"TRAINSCOPE_RING_KB"}, 1024), 1, 1 << 20);
  c.ringRecords = static_cast<size_t>(ringKb) * 1024 / 32;
  c.clockShiftNs = envInt({"TRAINSCOPE_CLOCK_SHIFT_NS"}, 0);
  c.clockDriftPpb = envInt({"TRAINSCOPE_CLOCK_DRIFT_PPB"}, 0);
  if (const char* k = firstEnv({"TRAINSCOPE_CLOCK"})) c.clock = k;
  if (const char* l = firstEnv({"TRAINSCOPE_LISTEN"})) c.listen = l;
  if (const char* s = firstEnv({"TRAINSCOPE_SECRET_FILE"})) c.secretFile = s;
  c.clientQueueBytes = static_cast<size_t>(std::clamp<int64_t>(envInt({"TRAINSCOPE_CLIENT_QUEUE_MB"}, 8), 1, 1024)) << 20;
  c.clientStallNs = std::clamp<int64_t>(envInt({"TRAINSCOPE_CLIENT_STALL_MS"}, 10'000), 100, 3'600'000) * 1'000'000LL;
  c.pendingHoldNs = std::clamp<int64_t>(envInt({"TRAINSCOPE_PENDING_HOLD_MS"}, 30'000), 0, 86'400'000) * 1'000'000LL;
  c.acceptPerSec = std::clamp<int64_t>(envInt({"TRAINSCOPE_ACCEPT_PER_S"}, 200), 1, 1'000'000);
  return c;
}

}  // namespace trainscope::agent
