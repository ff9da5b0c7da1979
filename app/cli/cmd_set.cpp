// `trainscope-cli set --job ID NAME=VALUE...`: change knobs live on every rank (JobSession's
// protocol) and print the step at which every rank applied them. Exit 1 with the reason when a
// value is refused or not applied in time -- or when the job, having applied it, runs another
// value (it refused the combination at that step and restored the old one): every rank's values
// are read back after the change.
// `set --job ID --from tuned.json`: the knobs of a tuned configuration (docs/FORMATS.md) that the
// job has and that differ from its current values, in one change; knobs the job does not have
// are named on stderr (skipped), never dropped silently.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "live.h"
#include "trainscope/core/tune/config.h"

namespace trainscope::cli {
namespace {

struct SetOptions {
  std::string job;
  std::string from;
  std::vector<std::string> assignments;
  double timeoutS = 60;
  bool json = false;
};

// Equal knob values: the same text, or the same number ("65536" and "65536.0").
bool sameValue(const std::string& a, const std::string& b) {
  if (a == b) return true;
  char *ea = nullptr, *eb = nullptr;
  const double x = std::strtod(a.c_str(), &ea), y = std::strtod(b.c_str(), &eb);
  return ea && *ea == 0 && eb && *eb == 0 && !a.empty() && !b.empty() && x == y;
}

int runSet(const SetOptions& o) {
  std::vector<std::pair<std::string, std::string>> changes;
  for (const auto& a : o.assignments) {
    const size_t eq = a.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::fprintf(stderr, "trainscope-cli: \"%s\" is not NAME=VALUE\n", a.c_str());
      return kExitUsage;
    }
    changes.emplace_back(a.substr(0, eq), a.substr(eq + 1));
  }
  if (o.from.empty() == changes.empty()) {
    std::fprintf(stderr, "trainscope-cli: set needs NAME=VALUE pairs or --from FILE (one of them)\n");
    return kExitUsage;
  }
  // The file first: a configuration that cannot be read is refused before any job is touched.
  core::Result<core::TunedConfig> cfg = core::TunedConfig{};
  if (!o.from.empty()) cfg = core::readConfigFile(o.from);
  if (!cfg) return fail(cfg.status());
  auto js = connectJob(o.job, true, 5000);
  if (!js) return fail(js.status());
  if (!o.from.empty()) {
    auto list = js.value()->knobList();
    if (!list) return fail(list.status());
    auto same = sameValue;
    int unchanged = 0;
    for (const auto& [name, value] : cfg->knobs) {
      const core::wire::KnobDescriptor* d = nullptr;
      for (const auto& k : list->knobs)
        if (k.name == name) d = &k;
      if (!d) {
        std::fprintf(stderr, "%s = %s skipped: job %s has no such knob\n", name.c_str(), value.c_str(),
                     o.job.c_str());
      } else if (same(d->currentValue, value)) {
        ++unchanged;
      } else {
        changes.emplace_back(name, value);
      }
    }
    if (changes.empty()) {
      std::fprintf(o.json ? stderr : stdout, "%s: nothing to change (%d knob%s already at the configured values)\n",
                   o.from.c_str(), unchanged, unchanged == 1 ? "" : "s");
      if (o.json) std::cout << "[]\n";
      return unchanged > 0 ? kExitOk
                           : fail({core::ErrorCode::InvalidArgument,
                                   o.from + ": none of its knobs exists in job " + o.job});
    }
    if (unchanged > 0)
      std::fprintf(stderr, "%d knob%s already at the configured values\n", unchanged, unchanged == 1 ? "" : "s");
  }
  auto res = js.value()->setKnobs(changes, static_cast<int>(o.timeoutS * 1000));
  if (!res) return fail(res.status());
  // Applied is not kept: a job may refuse a combination at the step it applies it and restore
  // the old values there (trainscope-train keeps what runs when dp.algorithm=hierarchical and
  // dp.compression=int8 arrive together). Read every rank's values back and report what each
  // rank runs now (issue 40).
  std::map<std::string, std::map<int32_t, std::string>> keptOther;  // name -> rank -> value it runs
  std::map<std::string, std::string> requested(changes.begin(), changes.end());  // the last value of a name wins
  // A job restores inside the step that applied the change (or just after it returns from the
  // agent): read back once every rank is past that step, waiting at most 10 s for slow steps.
  int64_t appliedAt = INT64_MIN;
  for (const auto& a : res.value())
    for (const auto& [rank, step] : a.stepPerRank) appliedAt = std::max(appliedAt, step);
  core::Result<std::vector<core::wire::KnobList>> lists = core::Status(core::ErrorCode::NotFound, "not read");
  for (int tries = 0; tries < 200; ++tries) {
    lists = js.value()->knobLists();
    if (!lists) break;
    bool past = true;
    for (const auto& l : lists.value()) past = past && l.currentStep > appliedAt;
    if (past) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (lists) {
    const std::vector<core::AgentClient*> clients = js.value()->clients();  // by rank, as the lists
    for (size_t i = 0; i < lists.value().size() && i < clients.size(); ++i)
      for (const auto& k : lists.value()[i].knobs)
        if (auto it = requested.find(k.name); it != requested.end() && !sameValue(k.currentValue, it->second))
          keptOther[k.name][clients[i]->job().rank] = k.currentValue;
  } else {
    std::fprintf(stderr, "trainscope-cli: warning: could not read the values back: %s\n",
                 lists.status().message().c_str());
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& a : res.value()) {
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (const auto& [rank, step] : a.stepPerRank) {
      lo = std::min(lo, step);
      hi = std::max(hi, step);
    }
    const auto refused = keptOther.find(a.name);
    if (o.json) {
      nlohmann::json steps = nlohmann::json::object();
      for (const auto& [rank, step] : a.stepPerRank) steps[std::to_string(rank)] = step;
      nlohmann::json refusedBy = nlohmann::json::object();  // rank -> the value it runs instead
      if (refused != keptOther.end())
        for (const auto& [rank, value] : refused->second) refusedBy[std::to_string(rank)] = value;
      out.push_back({{"name", a.name},
                     {"value", a.value},
                     {"change_seq", a.changeSeq},
                     {"step", lo},
                     {"same_step", lo == hi},
                     {"steps_per_rank", steps},
                     {"kept", refused == keptOther.end()},
                     {"refused_by", refusedBy}});
    } else if (refused != keptOther.end()) {
      std::printf("%s = %s reached every rank at step %lld and was refused there (see below)\n", a.name.c_str(),
                  a.value.c_str(), static_cast<long long>(lo));
    } else if (lo == hi) {
      std::printf("%s = %s applied at step %lld on all %zu ranks\n", a.name.c_str(), a.value.c_str(),
                  static_cast<long long>(lo), a.stepPerRank.size());
    } else {
      std::printf("%s = %s applied on all %zu ranks, at different steps:", a.name.c_str(), a.value.c_str(),
                  a.stepPerRank.size());
      for (const auto& [rank, step] : a.stepPerRank)
        std::printf(" rank %d@%lld", rank, static_cast<long long>(step));
      std::printf("\n");
    }
  }
  if (o.json) std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  if (!keptOther.empty()) {
    for (const auto& [name, byRank] : keptOther) {
      std::string ranks;
      std::map<std::string, int> values;
      for (const auto& [rank, value] : byRank) {
        ranks += (ranks.empty() ? "" : ", ") + std::to_string(rank);
        ++values[value];
      }
      std::fprintf(stderr, "trainscope-cli: %s = %s was refused by the job: rank(s) %s run %s = %s (the job restored it "
                           "where it applied it)\n",
                   name.c_str(), requested[name].c_str(), ranks.c_str(), name.c_str(),
                   values.size() == 1 ? values.begin()->first.c_str() : "other values");
    }
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace

void addSetCommand(CLI::App& app, Runner& run) {
  auto opts = std::make_shared<SetOptions>();
  CLI::App* cmd = app.add_subcommand(
      "set", "Change knobs of a running job on every rank; prints the step they took effect");
  cmd->add_option("--job", opts->job, "Job id (see `jobs`)")->required();
  cmd->add_option("ASSIGNMENTS", opts->assignments, "NAME=VALUE pairs");
  cmd->add_option("--from", opts->from,
                  "A tuned configuration (export --format config, tune --out): apply its knobs");
  cmd->add_option("--timeout", opts->timeoutS, "Seconds to wait until every rank applied the change")
      ->capture_default_str();
  cmd->add_flag("--json", opts->json, "Print JSON");
  cmd->callback([opts, &run] { run = [opts] { return runSet(*opts); }; });
}

}  // namespace trainscope::cli
