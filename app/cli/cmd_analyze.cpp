// `trainscope-cli analyze FILE [--json]`: the metrics of docs/ANALYSIS.md for a session (.tsdb)
// or a Chrome/Kineto trace (.json).
#include <cmath>
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "load.h"
#include <nlohmann/json.hpp>

#include "trainscope/core/analysis/analysis.h"
#include "trainscope/core/analysis/stragglers.h"

namespace trainscope::cli {
namespace {

struct AnalyzeOptions {
  std::string file;
  bool json = false;
};

std::string fmt(double v, const char* spec = "%.3f") {
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, spec, v);
  return buf;
}

std::string pct(double v) {
  return std::isnan(v) ? "-" : fmt(100 * v, "%.1f") + " %";
}

void printText(const core::AnalysisResult& r) {
  std::printf(
      "steps        %d (mean %s ms, p50 %s ms)%s\n", r.steps.count, fmt(r.steps.meanMs).c_str(),
      fmt(r.steps.p50Ms).c_str(),
      r.steps.incomplete ? ("  " + std::to_string(r.steps.incomplete) + " without an end").c_str() : "");
  for (const core::KnobChangeEntry& k : r.knobChanges) {
    std::printf("knob change  step %lld:", static_cast<long long>(k.step));
    for (const auto& [name, value] : k.values) std::printf(" %s=%s", name.c_str(), value.c_str());
    std::printf("\n");
  }
  std::printf(
      "\nbreakdown per step (ms)   step   compute  overlap.comm  exposed.comm    idle   outside-steps\n");
  for (const core::RankBreakdown& b : r.breakdown)
    std::printf("  rank %-4d %5d steps %8s %9s %13s %13s %7s %15s\n", b.rank, b.steps, fmt(b.stepMs).c_str(),
                fmt(b.computeMs).c_str(), fmt(b.overlappedCommMs).c_str(), fmt(b.exposedCommMs).c_str(),
                fmt(b.idleMs).c_str(), fmt(b.outsideStepsMs).c_str());
  if (r.pipeline.present) {
    const core::PipelineResult& p = r.pipeline;
    std::printf("\npipeline     %s (%s), %d stages, %d micro-batches, %d virtual: bubble %s (theory %s)\n",
                p.schedule.c_str(), p.scheduleSource.c_str(), p.stages, p.microbatches, p.virtualStages,
                pct(p.bubbleFraction).c_str(), pct(p.bubbleFractionTheory).c_str());
    for (const core::StageResult& s : p.perStage) {
      std::printf(
          "  stage %-3d bubble %s (theory %s)  %s ms/step: warm-up %s, steady %s, cool-down %s;  F %s B %s W "
          "%s ms\n",
          s.stage, pct(s.bubbleFraction).c_str(), pct(s.bubbleFractionTheory).c_str(),
          fmt(s.bubbleMs).c_str(), fmt(s.warmupMs).c_str(), fmt(s.steadyMs).c_str(),
          fmt(s.cooldownMs).c_str(), fmt(s.fMs).c_str(), fmt(s.bMs).c_str(), fmt(s.wMs).c_str());
      for (const core::BubbleWait& w : s.waits)
        std::printf(
            "      waiting %s ms/step for %s\n", fmt(w.ms).c_str(),
            w.peer >= 0 ? ("rank " + std::to_string(w.peer)).c_str() : "no peer (end of step / unknown)");
    }
  }
  if (r.dataParallel.present) {
    const core::DataParallelResult& dp = r.dataParallel;
    std::printf("\ndata parallel  overlap %s, exposed %s ms/step\n", pct(dp.overlapRatio).c_str(),
                fmt(dp.exposedCommMs).c_str());
    for (const core::BucketResult& b : dp.buckets)
      std::printf("  bucket %-3lld ready %s  comm %s..%s ms  hidden %s  exposed %s ms  overlap %s\n",
                  static_cast<long long>(b.bucket), fmt(b.readyMs).c_str(), fmt(b.commStartMs).c_str(),
                  fmt(b.commEndMs).c_str(), fmt(b.hiddenMs).c_str(), fmt(b.exposedMs).c_str(),
                  pct(b.overlapRatio).c_str());
  }
  if (!r.collectives.empty()) {
    std::printf("\ncollectives  type           size>=        n   count   algbw GB/s  busbw GB/s\n");
    for (const core::BandwidthClass& b : r.collectives)
      std::printf("  %-22s %12lld %4d %7llu %12s %11s\n", b.collective.c_str(),
                  static_cast<long long>(b.sizeClassBytes), b.ranks, static_cast<unsigned long long>(b.count),
                  fmt(b.algbwGBps).c_str(), fmt(b.busbwGBps).c_str());
  }
  if (!r.stragglers.perStep.empty())
    std::printf("\nstragglers   mean skew %s ms, slowest rank %d\n", fmt(r.stragglers.meanSkewMs).c_str(),
                r.stragglers.slowestRank);
  for (const core::DiscoLayer& d : r.disco)
    std::printf("disco layer %lld  N=%d sparsity %s  L_comm %s ms  L_comp %s ms  %s bytes  A=%s  S_eql %s\n",
                static_cast<long long>(d.layer), d.nodes, fmt(d.sparsity).c_str(), fmt(d.lCommMs).c_str(),
                fmt(d.lCompMs).c_str(), fmt(d.bytes, "%.0f").c_str(), fmt(d.ratioA).c_str(),
                fmt(d.equilibriumSparsity).c_str());
  for (const core::DiscoInferencePoint& p : r.discoInference)
    std::printf("disco inference  sparsity %s%s  %s bytes  pipelined %s ms  wait %s ms  accuracy %s\n",
                fmt(p.sparsity).c_str(), p.independent ? " (independent)" : "", fmt(p.bytes, "%.0f").c_str(),
                fmt(p.latencyPipelinedMs).c_str(), fmt(p.latencyWaitMs).c_str(), fmt(p.accuracy).c_str());
  if (!r.criticalPath.empty()) {
    const core::CriticalPathStep& c = r.criticalPath.back();
    std::printf("\ncritical path of step %lld: %s ms = compute %s + comm %s + wait %s, %zu segments\n",
                static_cast<long long>(c.step), fmt(c.lengthMs).c_str(), fmt(c.computeMs).c_str(),
                fmt(c.commMs).c_str(), fmt(c.waitMs).c_str(), c.segments.size());
  }
}

void printAttribution(const core::StragglerReport& s) {
  if (s.matchedCollectives == 0) return;
  std::printf("\nlast arrivals  %d collectives matched over %d steps; late = more than %s ms after the others\n",
              s.matchedCollectives, s.steps, fmt(s.thresholdMs).c_str());
  for (const core::Straggler& g : s.stragglers)
    std::printf("  rank %-4d last in %zu step(s), late %s ms (max %s), cause %s%s%s\n", g.rank, g.steps.size(),
                fmt(g.lateMs).c_str(), fmt(g.maxLateMs).c_str(), g.cause.c_str(), g.what.empty() ? "" : ": ",
                g.what.c_str());
}

int runAnalyze(const AnalyzeOptions& o) {
  auto store = loadTrace(o.file);
  if (!store) return fail(store.status());
  const core::AnalysisResult result = core::analyzeStore(store.value());
  // Who arrived last at the collectives, per step, and why (the same attribution as `doctor`).
  const core::StragglerReport attribution = core::findStragglers(store.value());
  if (o.json) {
    using J = nlohmann::ordered_json;
    J j = J::parse(core::analysisToJson(result));
    j["stragglers"]["attribution"] = J::parse(core::stragglerReportJson(attribution));
    std::cout << j.dump(2, ' ', false, J::error_handler_t::replace) << "\n";
  } else {
    printText(result);
    printAttribution(attribution);
  }
  return kExitOk;
}

}  // namespace

void addAnalyzeCommand(CLI::App& app, Runner& run) {
  auto opts = std::make_shared<AnalyzeOptions>();
  CLI::App* cmd = app.add_subcommand("analyze",
                                     "Steps, breakdown, pipeline bubbles, data-parallel overlap, bandwidth, "
                                     "stragglers, DISCO, critical path (docs/ANALYSIS.md)");
  cmd->add_option("FILE", opts->file, "Session file (.tsdb) or Chrome/Kineto trace (.json)")->required();
  cmd->add_flag("--json", opts->json, "Print JSON (the contract keys of docs/ANALYSIS.md)");
  cmd->callback([opts, &run] { run = [opts] { return runAnalyze(*opts); }; });
}

}  // namespace trainscope::cli
