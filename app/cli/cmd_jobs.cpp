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

int runJobs(bool json) {
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
