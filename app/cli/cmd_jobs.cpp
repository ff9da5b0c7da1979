// `trainscope-cli jobs [--json]`: running jobs discoverable on this machine (discovery files of
// live agents; stale ones are skipped).
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "commands.h"
#include "live.h"
#include "trainscope/core/wire/discovery.h"

namespace trainscope::cli {
namespace {

// Through a relay: the job it serves, every rank on every machine.
int runRelayJobs(bool json) {
  auto r = core::LiveSession::relayRanks("");
  if (!r) return fail(r.status());
  std::map<std::string, std::vector<const core::wire::RankEntry*>> byMachine;
  for (const auto& e : r->ranks) byMachine[e.machine].push_back(&e);
  const int world = r->ranks.empty() ? 0 : r->ranks.front().worldSize;
  if (json) {
    nlohmann::json j = {{"job_id", r->jobId},
                        {"relay", core::LiveSession::relayHost()},
                        {"world_size", world},
                        {"ranks_found", r->ranks.size()},
                        {"complete", static_cast<int>(r->ranks.size()) == world && world > 0},
                        {"machines", byMachine.size()},
                        {"problems", r->problems},
                        {"ranks", nlohmann::json::array()}};
    for (size_t i = 0; i < r->ranks.size(); ++i) {
      const auto& e = r->ranks[i];
      j["ranks"].push_back({{"rank", e.rank},
                            {"local_rank", e.localRank},
                            {"host", e.host},
                            {"machine", e.machine},
                            {"pid", e.pid},
                            {"relay", e.relay},
                            {"endpoint", r->entries[i].endpoint},
                            {"step", e.step},
                            {"auth", true}});
    }
    nlohmann::json out = {{"relay", core::LiveSession::relayHost()}, {"jobs", nlohmann::json::array({j})}};
    std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return kExitOk;
  }
  std::printf("job %s  ranks %zu/%d  machines %zu  (through the relay at %s)\n", r->jobId.c_str(), r->ranks.size(), world,
              byMachine.size(), core::LiveSession::relayHost().c_str());
  for (const auto& [m, ranks] : byMachine) {
    std::string list;
    for (const auto* e : ranks) list += (list.empty() ? "" : ",") + std::to_string(e->rank);
    std::printf("  machine %-16s relay %-24s ranks %s\n", m.c_str(), ranks.front()->relay.c_str(), list.c_str());
  }
  for (const auto& p : r->problems) std::printf("  problem: %s\n", p.c_str());
  return kExitOk;
}

int runJobs(bool json) {
  if (!core::LiveSession::relayHost().empty()) return runRelayJobs(json);
  namespace d = core::discovery;
  auto dir = d::runtimeDir();
  if (!dir) return fail(dir.status());
  std::map<std::string, std::vector<d::Entry>> jobs;
  for (auto& e : d::listEntries()) jobs[e.jobId].push_back(std::move(e));
  if (json) {
    nlohmann::json out = {{"runtime_dir", dir->string()}, {"jobs", nlohmann::json::array()}};
    for (const auto& [id, ranks] : jobs) {
      nlohmann::json j = {{"job_id", id},
                          {"world_size", ranks.front().worldSize},
                          {"ranks_found", ranks.size()},
                          {"complete", static_cast<int>(ranks.size()) == ranks.front().worldSize},
                          {"ranks", nlohmann::json::array()}};
      for (const auto& e : ranks)
        j["ranks"].push_back({{"rank", e.rank},
                              {"local_rank", e.localRank},
                              {"host", e.host},
                              {"pid", e.pid},
                              {"start_time_ns", e.startTimeNs},
                              {"endpoint", e.endpoint},
                              {"auth", !e.secretFile.empty()}});
      out["jobs"].push_back(std::move(j));
    }
    std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return kExitOk;
  }
  if (jobs.empty()) {
    std::printf("no running jobs (runtime dir %s)\n", dir->c_str());
    return kExitOk;
  }
  for (const auto& [id, ranks] : jobs) {
    std::set<std::string> hosts;
    int64_t start = ranks.front().startTimeNs;
    std::string pids;
    for (const auto& e : ranks) {
      hosts.insert(e.host);
      start = std::min(start, e.startTimeNs);
      pids += (pids.empty() ? "" : ",") + std::to_string(e.pid);
    }
    std::string hostList;
    for (const auto& h : hosts) hostList += (hostList.empty() ? "" : ",") + h;
    std::printf("job %s  ranks %zu/%d  host %s  pids %s  started %s ago\n", id.c_str(), ranks.size(),
                ranks.front().worldSize, hostList.c_str(), pids.c_str(), monotonicAge(start).c_str());
    for (const auto& e : ranks)
      std::printf("  rank %-4d pid %-8lld %s%s\n", e.rank, static_cast<long long>(e.pid), e.endpoint.c_str(),
                  e.secretFile.empty() ? "" : "  (auth)");
  }
  return kExitOk;
}

}  // namespace

void addJobsCommand(CLI::App& app, Runner& run) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd =
      app.add_subcommand("jobs", "Running jobs discoverable from this machine (ranks, pids, endpoints)");
  cmd->add_flag("--json", *json, "Print JSON");
  cmd->callback([json, &run] { run = [json] { return runJobs(*json); }; });
}

}  // namespace trainscope::cli
