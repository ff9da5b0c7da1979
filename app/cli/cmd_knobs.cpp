// `trainscope-cli knobs --job ID [--json]`: knob descriptors and current values. Descriptors come
// from the lowest rank; every other rank's current values are compared with it, because a knob
// that differs between ranks means a change was lost (or is still being applied).
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "live.h"

namespace trainscope::cli {
namespace {

struct KnobsOptions {
  std::string job;
  bool json = false;
  int timeoutMs = 5000;
};

const char* typeName(core::wire::KnobType t) {
  switch (t) {
    case core::wire::KnobType::Int:
      return "int";
    case core::wire::KnobType::Float:
      return "float";
    case core::wire::KnobType::Bool:
      return "bool";
    case core::wire::KnobType::Enum:
      return "enum";
  }
  return "?";
}

int runKnobs(const KnobsOptions& o) {
  auto js = connectJob(o.job, false, o.timeoutMs);
  if (!js) return fail(js.status());
  std::vector<std::pair<int32_t, core::wire::KnobList>> lists;
  for (core::AgentClient* c : js.value()->clients()) {
    auto l = c->knobList();
    if (!l)
      return fail(core::Status(l.status().code(),
                               "rank " + std::to_string(c->job().rank) + ": " + l.status().message()));
    lists.emplace_back(c->job().rank, std::move(l).value());
  }
  const core::wire::KnobList& ref = lists.front().second;
  // knob -> (rank -> value) for ranks whose value differs from the reference rank's
  std::map<std::string, std::map<int32_t, std::string>> differing;
  for (const auto& [rank, list] : lists)
    for (const auto& k : list.knobs)
      for (const auto& r : ref.knobs)
        if (r.name == k.name && r.currentValue != k.currentValue) differing[k.name][rank] = k.currentValue;
  if (o.json) {
    nlohmann::json out = {{"job_id", o.job},
                          {"ranks", lists.size()},
                          {"reference_rank", lists.front().first},
                          {"current_step", ref.currentStep},
                          {"last_change_seq", ref.lastChangeSeq},
                          {"knobs", nlohmann::json::array()}};
    for (const auto& k : ref.knobs) {
      nlohmann::json j = {{"name", k.name},
                          {"type", typeName(k.type)},
                          {"default", k.defaultValue},
                          {"current", k.currentValue},
                          {"description", k.description},
                          {"changes_math", k.changesMath},
                          {"ranks_agree", !differing.count(k.name)}};
      if (k.type == core::wire::KnobType::Int || k.type == core::wire::KnobType::Float) {
        j["min"] = k.min;
        j["max"] = k.max;
      }
      if (k.type == core::wire::KnobType::Enum) j["choices"] = k.choices;
      if (differing.count(k.name)) {
        nlohmann::json d = nlohmann::json::object();
        for (const auto& [rank, v] : differing[k.name]) d[std::to_string(rank)] = v;
        j["differing_ranks"] = d;
      }
      out["knobs"].push_back(std::move(j));
    }
    std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::printf("job %s  %zu ranks  step %lld  changes so far %llu\n", o.job.c_str(), lists.size(),
                static_cast<long long>(ref.currentStep), static_cast<unsigned long long>(ref.lastChangeSeq));
    for (const auto& k : ref.knobs) {
      std::string allowed;
      if (k.type == core::wire::KnobType::Enum) {
        for (const auto& c : k.choices) allowed += (allowed.empty() ? "" : "|") + c;
      } else if (k.type != core::wire::KnobType::Bool) {
        char buf[80];
        std::snprintf(buf, sizeof buf, "%s in [%g, %g]", typeName(k.type), k.min, k.max);
        allowed = buf;
      } else {
        allowed = "true|false";
      }
      std::printf("%-24s = %-14s (default %s; %s)%s\n", k.name.c_str(), k.currentValue.c_str(),
                  k.defaultValue.c_str(), allowed.c_str(), k.changesMath ? "  [changes the math]" : "");
      if (!k.description.empty()) std::printf("    %s\n", k.description.c_str());
      if (differing.count(k.name))
        for (const auto& [rank, v] : differing[k.name])
          std::printf("    ! rank %d has %s\n", rank, v.c_str());
    }
  }
  if (!differing.empty()) {
    std::fprintf(stderr, "trainscope-cli: warning: ranks disagree on %zu knob(s)\n", differing.size());
  }
  return kExitOk;
}

}  // namespace

void addKnobsCommand(CLI::App& app, Runner& run) {
  auto opts = std::make_shared<KnobsOptions>();
  CLI::App* cmd = app.add_subcommand("knobs", "Knob descriptors and current values of a running job");
  cmd->add_option("--job", opts->job, "Job id (see `jobs`)")->required();
  cmd->add_flag("--json", opts->json, "Print JSON");
  cmd->add_option("--timeout-ms", opts->timeoutMs, "Timeout for connecting and each request")
      ->capture_default_str();
  cmd->callback([opts, &run] { run = [opts] { return runKnobs(*opts); }; });
}

}  // namespace trainscope::cli
