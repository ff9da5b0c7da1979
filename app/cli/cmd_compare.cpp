// `trainscope-cli compare A.tsdb [B.tsdb] [--steps A:B] [--vs C:D] [--json]`: two step windows
// side by side -- of two sessions, or before and after a knob change in one -- with each
// metric's mean, its spread over the steps and the difference (core/tune/compare.h,
// docs/TUNING.md "Comparing"). One file and no windows: the steps before the last knob change
// against the steps from it.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "load.h"
#include "trainscope/core/analysis/analysis.h"
#include "trainscope/core/tune/compare.h"

namespace trainscope::cli {
namespace {

struct CompareOptions {
  std::vector<std::string> files;
  std::string steps, vs;
  bool json = false;
};

bool parseRange(const std::string& s, int64_t& a, int64_t& b) {
  const size_t c = s.find(':');
  if (c == std::string::npos) return false;
  try {
    size_t used = 0;
    a = c == 0 ? INT64_MIN : std::stoll(s.substr(0, c), &used);
    if (c != 0 && used != c) return false;
    b = c + 1 == s.size() ? INT64_MAX : std::stoll(s.substr(c + 1), &used);
    if (c + 1 != s.size() && used != s.size() - c - 1) return false;
  } catch (...) {
    return false;
  }
  return a <= b;
}

std::string cell(const core::Spread& s, const char* f) {
  if (!std::isfinite(s.mean)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, f, s.mean);
  std::string out = b;
  if (std::isfinite(s.sd)) {
    std::snprintf(b, sizeof b, f, s.sd);
    out += " ± " + std::string(b);
  }
  return out;
}

int runCompare(const CompareOptions& o) {
  if (o.files.empty() || o.files.size() > 2) {
    std::fprintf(stderr, "trainscope-cli: compare takes one or two session files\n");
    return kExitUsage;
  }
  int64_t a0 = INT64_MIN, a1 = INT64_MAX, b0 = INT64_MIN, b1 = INT64_MAX;
  if (!o.steps.empty() && !parseRange(o.steps, a0, a1)) {
    std::fprintf(stderr, "trainscope-cli: --steps wants FIRST:LAST (either may be empty), got \"%s\"\n",
                 o.steps.c_str());
    return kExitUsage;
  }
  if (!o.vs.empty() && !parseRange(o.vs, b0, b1)) {
    std::fprintf(stderr, "trainscope-cli: --vs wants FIRST:LAST (either may be empty), got \"%s\"\n",
                 o.vs.c_str());
    return kExitUsage;
  }
  auto first = loadTrace(o.files[0]);
  if (!first) return fail(first.status());
  const core::AnalysisResult ra = core::analyzeStore(first.value());
  core::Result<core::TraceStore> second = core::Status(core::ErrorCode::NotFound, "");
  core::AnalysisResult rb;
  const bool two = o.files.size() == 2;
  if (two) {
    second = loadTrace(o.files[1]);
    if (!second) return fail(second.status());
    rb = core::analyzeStore(second.value());
  } else if (o.steps.empty() && o.vs.empty()) {
    if (ra.knobChanges.empty())
      return fail(core::Status(core::ErrorCode::InvalidArgument,
                               o.files[0] + " has no knob change: give the windows with --steps A:B --vs C:D"));
    // The last change that happened after the first step: before it against from it.
    const int64_t at = ra.knobChanges.back().step;
    a1 = at - 1;
    b0 = at;
  } else if (o.steps.empty() || o.vs.empty()) {
    std::fprintf(stderr, "trainscope-cli: with one file give both --steps and --vs (or neither)\n");
    return kExitUsage;
  }
  const core::WindowMetrics wa = core::measureWindow(ra, first.value(), a0, a1);
  const core::WindowMetrics wb =
      two ? core::measureWindow(rb, second.value(), b0, b1) : core::measureWindow(ra, first.value(), b0, b1);
  if (wa.steps == 0 || wb.steps == 0)
    return fail(core::Status(core::ErrorCode::InvalidArgument,
                             std::string("no complete step in the ") + (wa.steps == 0 ? "first" : "second") +
                                 " window"));
  if (o.json) {
    nlohmann::ordered_json j;
    j["a"] = nlohmann::ordered_json::parse(core::windowMetricsJson(wa));
    j["a"]["file"] = o.files[0];
    j["b"] = nlohmann::ordered_json::parse(core::windowMetricsJson(wb));
    j["b"]["file"] = o.files[two ? 1 : 0];
    nlohmann::ordered_json d = nlohmann::ordered_json::object();
    auto diff = [&](const char* k, const core::Spread& x, const core::Spread& y) {
      d[k] = std::isfinite(x.mean) && std::isfinite(y.mean) ? nlohmann::ordered_json(y.mean - x.mean)
                                                             : nlohmann::ordered_json(nullptr);
    };
    diff("step_time_ms", wa.stepMs, wb.stepMs);
    diff("bubble_fraction", wa.bubbleFraction, wb.bubbleFraction);
    diff("overlap_ratio", wa.overlapRatio, wb.overlapRatio);
    diff("exposed_comm_ms", wa.exposedCommMs, wb.exposedCommMs);
    diff("bytes", wa.bytes, wb.bytes);
    diff("loss", wa.loss, wb.loss);
    j["difference"] = d;
    std::cout << j.dump(2) << "\n";
    return kExitOk;
  }
  auto label = [](const std::string& f, const core::WindowMetrics& w) {
    return f + " steps " + std::to_string(w.fromStep == INT64_MIN ? 0 : w.fromStep) + ".." +
           (w.toStep == INT64_MAX ? std::string("end") : std::to_string(w.toStep)) + " (" +
           std::to_string(w.steps) + " steps)";
  };
  std::printf("A: %s\nB: %s\n", label(o.files[0], wa).c_str(), label(o.files[two ? 1 : 0], wb).c_str());
  std::printf("%-20s %24s %24s %12s %8s\n", "metric", "A (mean ± sd)", "B (mean ± sd)", "B - A", "B/A");
  auto row = [](const char* name, const core::Spread& x, const core::Spread& y, const char* f) {
    char d[32] = "-", r[32] = "-";
    if (std::isfinite(x.mean) && std::isfinite(y.mean)) {
      std::snprintf(d, sizeof d, f, y.mean - x.mean);
      if (x.mean != 0) std::snprintf(r, sizeof r, "%.3f", y.mean / x.mean);
    }
    std::printf("%-20s %24s %24s %12s %8s\n", name, cell(x, f).c_str(), cell(y, f).c_str(), d, r);
  };
  row("step_time_ms", wa.stepMs, wb.stepMs, "%.3f");
  row("bubble_fraction", wa.bubbleFraction, wb.bubbleFraction, "%.3f");
  row("overlap_ratio", wa.overlapRatio, wb.overlapRatio, "%.3f");
  row("exposed_comm_ms", wa.exposedCommMs, wb.exposedCommMs, "%.3f");
  row("bytes", wa.bytes, wb.bytes, "%.0f");
  row("loss", wa.loss, wb.loss, "%.4f");
  return kExitOk;
}

}  // namespace

void addCompareCommand(CLI::App& app, Runner& run) {
  auto opts = std::make_shared<CompareOptions>();
  CLI::App* cmd = app.add_subcommand(
      "compare", "Two step windows side by side (two sessions, or before/after a knob change in one)");
  cmd->add_option("FILES", opts->files, "One or two session files (.tsdb or traces)")->required();
  cmd->add_option("--steps", opts->steps, "FIRST:LAST steps of the first window (default: all)");
  cmd->add_option("--vs", opts->vs, "FIRST:LAST steps of the second window");
  cmd->add_flag("--json", opts->json, "Print JSON");
  cmd->callback([opts, &run] { run = [opts] { return runCompare(*opts); }; });
}

}  // namespace trainscope::cli
