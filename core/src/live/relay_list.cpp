// Front ends that reach a job through a relay (docs/RELAY.md): rank lists as discovery entries.
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "trainscope/core/live/live_session.h"

namespace trainscope::core {
namespace {

std::mutex gRelayMutex;
std::string gRelayHost, gRelaySecret;

}  // namespace

void LiveSession::useRelay(const std::string& hostPort, const std::string& secretFile) {
  std::lock_guard g(gRelayMutex);
  gRelayHost = hostPort;
  gRelaySecret = secretFile;
}

std::string LiveSession::relayHost() {  // a copy: useRelay may change it from another thread
  std::lock_guard g(gRelayMutex);
  return gRelayHost;
}

Result<LiveSession::RelayRanks> LiveSession::relayRanks(const std::string& jobId, int timeoutMs) {
  std::string host, secret;
  {
    std::lock_guard g(gRelayMutex);
    host = gRelayHost;
    secret = gRelaySecret;
  }
  if (host.empty()) return Status(ErrorCode::InvalidArgument, "no relay given (--host HOST:PORT)");
  if (secret.empty())
    if (const char* s = std::getenv("TRAINSCOPE_SECRET_FILE")) secret = s;
  if (secret.empty() && !jobId.empty()) {
    // `launch` keeps the job's secret in the runtime directory of the machine it runs on.
    if (auto dir = discovery::runtimeDir(false); dir.isOk()) {
      const auto p = dir.value() / (jobId + ".secret");
      std::error_code ec;
      if (std::filesystem::exists(p, ec)) secret = p.string();
    }
  }
  if (secret.empty())
    return Status(ErrorCode::InvalidArgument, "a relay needs the job's secret: --secret-file FILE (or TRAINSCOPE_SECRET_FILE)");
  AgentClient::Options o;
  o.timeoutMs = timeoutMs;
  o.clientName = "trainscope rank list";
  o.secretFile = secret;
  auto c = AgentClient::connect("relay:" + host, o);
  if (!c) return c.status();
  auto list = c.value()->rankList();
  c.value()->close();
  if (!list) return Status(list.status().code(), "relay " + host + ": " + list.status().message());
  if (!jobId.empty() && list->jobId != jobId)
    return Status(ErrorCode::NotFound, "the relay at " + host + " serves job \"" + list->jobId + "\", not \"" + jobId + "\"");
  RelayRanks out;
  out.jobId = list->jobId;
  out.problems = list->problems;
  for (const auto& r : list->ranks) {
    discovery::Entry e;
    e.jobId = list->jobId;
    e.rank = r.rank;
    e.worldSize = r.worldSize;
    e.localRank = r.localRank;
    e.host = r.host;
    e.pid = r.pid;
    e.startTimeNs = r.startTimeNs;
    e.endpoint = "relay:" + host + "/" + std::to_string(r.rank);
    e.secretFile = secret;
    out.entries.push_back(std::move(e));
  }
  out.ranks = std::move(list->ranks);
  return out;
}

}  // namespace trainscope::core
