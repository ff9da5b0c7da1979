// `trainscope-cli whatif FILE --set NAME=VALUE... [--grid NAME=v1,v2...] [--json]`: the what-if
// simulator (core/tune/whatif.h, docs/TUNING.md) built from a recorded session, evaluated for
// other knob values: predicted step time, bubble fraction, overlap ratio, exposed communication
// and gradient bytes, next to the model's replay of the measured setting and the measurement.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "load.h"
#include "trainscope/core/tune/whatif.h"

namespace trainscope::cli {
namespace {

struct WhatIfOptions {
  std::string file;
  std::vector<std::string> sets, grids;
  int64_t fromStep = -1, toStep = -1;
  bool json = false, describe = false;
};

nlohmann::ordered_json timelineJson(const std::vector<core::StepOp>& ops) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (const auto& op : ops)
    a.push_back({{"lane", op.lane},
                 {"label", op.label},
                 {"kind", op.kind == core::StepOp::Kind::Compute         ? "compute"
                          : op.kind == core::StepOp::Kind::Communication ? "communication"
                                                                         : "other"},
                 {"start_ms", op.startMs},
                 {"end_ms", op.endMs}});
  return a;
}

nlohmann::ordered_json toJson(const core::WhatIfPrediction& p,
                              const std::map<std::string, std::string>& changes) {
  nlohmann::ordered_json j;
  nlohmann::ordered_json set = nlohmann::ordered_json::object();
  for (const auto& [k, v] : changes) set[k] = v;
  j["set"] = set;
  j["step_time_ms"] = p.stepTimeMs;
  j["bubble_fraction"] =
      p.bubbleFraction < 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(p.bubbleFraction);
  j["overlap_ratio"] =
      p.overlapRatio < 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(p.overlapRatio);
  j["exposed_comm_ms"] = p.exposedCommMs;
  j["bytes"] = p.bytes;
  j["buckets"] = p.buckets;
  j["extrapolated"] = p.extrapolated;
  j["notes"] = p.notes;
  if (!p.timeline.empty()) j["timeline"] = timelineJson(p.timeline);
  return j;
}

bool splitAssign(const std::string& a, std::string& k, std::string& v) {
  const size_t eq = a.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  k = a.substr(0, eq);
  v = a.substr(eq + 1);
  return true;
}

std::string cell(double v, const char* f) {
  if (v < 0) return "-";
  char b[32];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

int runWhatIf(const WhatIfOptions& o) {
  std::map<std::string, std::string> fixed;
  for (const auto& a : o.sets) {
    std::string k, v;
    if (!splitAssign(a, k, v)) {
      std::fprintf(stderr, "trainscope-cli: \"%s\" is not NAME=VALUE\n", a.c_str());
      return kExitUsage;
    }
    fixed[k] = v;
  }
  std::vector<std::pair<std::string, std::vector<std::string>>> grid;
  for (const auto& a : o.grids) {
    std::string k, v;
    if (!splitAssign(a, k, v)) {
      std::fprintf(stderr, "trainscope-cli: \"%s\" is not NAME=v1,v2,...\n", a.c_str());
      return kExitUsage;
    }
    std::vector<std::string> values;
    for (size_t p = 0;;) {
      const size_t c = v.find(',', p);
      values.push_back(v.substr(p, c == std::string::npos ? std::string::npos : c - p));
      if (c == std::string::npos) break;
      p = c + 1;
    }
    grid.emplace_back(k, values);
  }
  auto store = loadTrace(o.file);
  if (!store) return fail(store.status());
  core::WhatIfOptions wo;
  wo.fromStep = o.fromStep;
  wo.toStep = o.toStep;
  auto model = core::WhatIfModel::fromSession(store.value(), wo);
  if (!model) return fail(model.status());
  if (o.describe) {
    std::cout << model->describeJson() << "\n";
    return kExitOk;
  }
  // Every combination of the grid, each with the --set values.
  std::vector<std::map<std::string, std::string>> combos{fixed};
  for (const auto& [k, values] : grid) {
    std::vector<std::map<std::string, std::string>> next;
    for (const auto& c : combos)
      for (const auto& v : values) {
        auto d = c;
        d[k] = v;
        next.push_back(d);
      }
    combos = next;
  }
  auto replay = model->predict({});
  if (!replay) return fail(replay.status());
  const core::WhatIfPrediction measured = model->measured();
  // Each cell on its own: one the model refuses (a micro-batch count the schedule cannot run, a
  // value out of range) is reported as that cell's error and the others are predicted. The exit
  // status is 0 when at least one cell was predicted, 1 when none was.
  struct Cell {
    std::map<std::string, std::string> set;
    core::WhatIfPrediction p;
    std::string error;  // empty: predicted
  };
  std::vector<Cell> out;
  int predicted = 0;
  for (const auto& c : combos) {
    auto p = model->predict(c);
    if (p) {
      out.push_back({c, p.value(), {}});
      ++predicted;
    } else {
      out.push_back({c, {}, p.status().message()});
    }
  }
  auto settingName = [](const std::map<std::string, std::string>& c) {
    std::string name;
    for (const auto& [k, v] : c) name += (name.empty() ? "" : " ") + k + "=" + v;
    return name.empty() ? std::string("(no change)") : name;
  };
  if (predicted == 0) {
    for (const auto& c : out)
      std::fprintf(stderr, "trainscope-cli: %s: %s\n", settingName(c.set).c_str(), c.error.c_str());
  }
  if (o.json) {
    nlohmann::ordered_json j;
    j["file"] = o.file;
    j["from_step"] = model->fromStep();
    j["to_step"] = model->toStep();
    nlohmann::ordered_json base = nlohmann::ordered_json::object();
    for (const auto& [k, v] : model->baseKnobs()) base[k] = v;
    j["base_knobs"] = base;
    j["changes_in_window"] = model->windowChanges();
    nlohmann::ordered_json m = toJson(measured, {});
    m.erase("set");
    m.erase("buckets");
    m.erase("extrapolated");
    m.erase("notes");
    j["measured"] = m;
    j["measured"]["timeline_step"] = model->measuredTimelineStep();
    j["measured"]["timeline"] = timelineJson(model->measuredTimeline());
    j["replay"] = toJson(replay.value(), {});
    nlohmann::ordered_json preds = nlohmann::ordered_json::array();
    for (const auto& c : out) {
      if (c.error.empty()) {
        preds.push_back(toJson(c.p, c.set));
      } else {
        nlohmann::ordered_json e;
        nlohmann::ordered_json set = nlohmann::ordered_json::object();
        for (const auto& [k, v] : c.set) set[k] = v;
        e["set"] = set;
        e["error"] = c.error;
        preds.push_back(e);
      }
    }
    j["predictions"] = preds;
    j["cells_predicted"] = predicted;
    j["cells_failed"] = static_cast<int>(out.size()) - predicted;
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return predicted > 0 ? kExitOk : kExitFailed;
  }
  std::printf("model from %s, steps %lld..%lld at", o.file.c_str(), static_cast<long long>(model->fromStep()),
              static_cast<long long>(model->toStep()));
  for (const auto& [k, v] : model->baseKnobs()) std::printf(" %s=%s", k.c_str(), v.c_str());
  std::printf("\n%-44s %10s %8s %8s %10s %12s\n", "setting", "step_ms", "bubble", "overlap", "exposed_ms",
              "bytes");
  auto row = [&](const std::string& name, const core::WhatIfPrediction& p) {
    std::printf("%-44s %10s %8s %8s %10s %12s%s\n", name.c_str(), cell(p.stepTimeMs, "%.3f").c_str(),
                cell(p.bubbleFraction, "%.3f").c_str(), cell(p.overlapRatio, "%.3f").c_str(),
                cell(p.exposedCommMs, "%.3f").c_str(), cell(p.bytes, "%.0f").c_str(),
                p.extrapolated ? "  *" : "");
  };
  row("measured", measured);
  row("replay (model at the measured setting)", replay.value());
  for (const auto& c : out) {
    if (c.error.empty())
      row(settingName(c.set), c.p);
    else
      std::printf("%-44s error: %s\n", settingName(c.set).c_str(), c.error.c_str());
  }
  bool any = false;
  for (const auto& c : out) any |= c.error.empty() && c.p.extrapolated;
  if (any) std::printf("* extrapolated beyond what the session measured (see --json notes)\n");
  if (const std::string note = model->windowNote(); !note.empty()) std::printf("! %s\n", note.c_str());
  if (predicted < static_cast<int>(out.size()))
    std::printf("%d of %zu cells could not be predicted (their error above)\n", static_cast<int>(out.size()) - predicted,
                out.size());
  return predicted > 0 ? kExitOk : kExitFailed;
}

}  // namespace

void addWhatIfCommand(CLI::App& app, Runner& run) {
  auto opts = std::make_shared<WhatIfOptions>();
  CLI::App* cmd = app.add_subcommand("whatif",
                                     "Predict step time, bubble, overlap and bytes for other knob values "
                                     "from a recorded session");
  cmd->add_option("FILE", opts->file, "Session file (.tsdb)")->required();
  cmd->add_option("--set", opts->sets, "NAME=VALUE (repeatable)");
  cmd->add_option("--grid", opts->grids,
                  "NAME=v1,v2,... : a table of every combination (repeatable); a cell the model refuses is "
                  "reported with its error and the others predicted (exit 0 when at least one cell was "
                  "predicted, 1 when none)");
  cmd->add_option("--from-step", opts->fromStep,
                  "First step the model is built from (default: after the last knob change)");
  cmd->add_option("--to-step", opts->toStep, "Last step the model is built from");
  cmd->add_flag("--json", opts->json, "Print JSON");
  cmd->add_flag("--describe", opts->describe, "Print the fitted model (JSON) instead");
  cmd->callback([opts, &run] { run = [opts] { return runWhatIf(*opts); }; });
}

}  // namespace trainscope::cli
