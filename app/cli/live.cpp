#include "live.h"

#include <cstdio>

namespace trainscope::cli {

core::Result<std::unique_ptr<core::LiveSession>> connectJob(const std::string& jobId, bool requireAllRanks,
                                                            int timeoutMs) {
  auto entries = core::LiveSession::entriesOf(jobId, requireAllRanks);
  if (!entries) return entries.status();
  if (!requireAllRanks && static_cast<int>(entries->size()) < entries->front().worldSize)
    std::fprintf(stderr, "trainscope-cli: warning: job %s: only %zu of %d ranks are discoverable\n",
                 jobId.c_str(), entries->size(), entries->front().worldSize);
  core::AgentClient::Options o;
  o.timeoutMs = timeoutMs;
  o.clientName = "trainscope-cli";
  return core::LiveSession::connect(std::move(entries).value(), o);
}

std::string monotonicAge(int64_t stampNs) {
  const double s = static_cast<double>(core::monotonicNowNs() - stampNs) / 1e9;
  char buf[32];
  if (s < 0)
    std::snprintf(buf, sizeof buf, "?");
  else if (s < 120)
    std::snprintf(buf, sizeof buf, "%.1f s", s);
  else if (s < 7200)
    std::snprintf(buf, sizeof buf, "%.0f min", s / 60);
  else
    std::snprintf(buf, sizeof buf, "%.1f h", s / 3600);
  return buf;
}

}  // namespace trainscope::cli
