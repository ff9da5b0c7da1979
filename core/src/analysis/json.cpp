// The `analyze --json` document. Keys are a contract (../shared/design.md, docs/ANALYSIS.md);
// NaN (not applicable) is written as null.
#include <cmath>
#include <nlohmann/json.hpp>

#include "trainscope/core/analysis/analysis.h"

namespace trainscope::core {
namespace {

using Json = nlohmann::ordered_json;

Json num(double v) {
  return std::isnan(v) || std::isinf(v) ? Json(nullptr) : Json(v);
}

Json stepsJson(const StepsResult& s) {
  Json per = Json::array();
  for (const StepStat& st : s.perStep)
    per.push_back(
        {{"step", st.step}, {"ranks", st.ranks}, {"time_ms", num(st.timeMs)}, {"span_ms", num(st.spanMs)}});
  return {{"count", s.count},
          {"step_time_ms", {{"mean", num(s.meanMs)}, {"p50", num(s.p50Ms)}}},
          {"incomplete", s.incomplete},
          {"per_step", per}};
}

Json breakdownJson(const std::vector<RankBreakdown>& rows) {
  Json per = Json::array();
  for (const RankBreakdown& b : rows) {
    Json steps = Json::array();
    for (const BreakdownStep& st : b.perStep)
      steps.push_back({{"step", st.step},
                       {"step_ms", num(st.stepMs)},
                       {"compute_ms", num(st.computeMs)},
                       {"overlapped_comm_ms", num(st.overlappedCommMs)},
                       {"exposed_comm_ms", num(st.exposedCommMs)},
                       {"idle_ms", num(st.idleMs)}});
    per.push_back({{"rank", b.rank},
                   {"steps", b.steps},
                   {"step_ms", num(b.stepMs)},
                   {"compute_ms", num(b.computeMs)},
                   {"overlapped_comm_ms", num(b.overlappedCommMs)},
                   {"exposed_comm_ms", num(b.exposedCommMs)},
                   {"idle_ms", num(b.idleMs)},
                   {"compute_total_ms", num(b.computeTotalMs)},
                   {"outside_steps_ms", num(b.outsideStepsMs)},
                   {"per_step", steps}});
  }
  return {{"per_rank", per}};
}

Json pipelineJson(const PipelineResult& p) {
  Json stages = Json::array();
  for (const StageResult& s : p.perStage) {
    Json waits = Json::array(), mbs = Json::array(), steps = Json::array();
    for (const StageStep& st : s.perStep)
      steps.push_back({{"step", st.step},
                       {"rank", st.rank},
                       {"bubble_ms", num(st.bubbleMs)},
                       {"bubble_fraction", num(st.bubbleFraction)},
                       {"bubble_fraction_theory", num(st.bubbleFractionTheory)},
                       {"bubble_fraction_simulated", num(st.bubbleFractionSimulated)}});
    for (const BubbleWait& w : s.waits)
      waits.push_back({{"peer", w.peer >= 0 ? Json(w.peer) : Json(nullptr)}, {"ms", num(w.ms)}});
    for (const MicroBatchTiming& m : s.microBatches)
      mbs.push_back({{"micro_batch", m.microBatch},
                     {"chunk", m.chunk},
                     {"f_ms", num(m.fMs)},
                     {"b_ms", num(m.bMs)},
                     {"w_ms", num(m.wMs)}});
    stages.push_back({{"stage", s.stage},
                      {"ranks", s.ranks},
                      {"samples", s.samples},
                      {"step_ms", num(s.stepMs)},
                      {"bubble_ms", num(s.bubbleMs)},
                      {"bubble_fraction", num(s.bubbleFraction)},
                      {"bubble_fraction_theory", num(s.bubbleFractionTheory)},
                      {"bubble_fraction_simulated", num(s.bubbleFractionSimulated)},
                      {"warmup_ms", num(s.warmupMs)},
                      {"steady_ms", num(s.steadyMs)},
                      {"cooldown_ms", num(s.cooldownMs)},
                      {"waits", waits},
                      {"handoff_ms", num(s.handoffMs)},
                      {"handoffs_per_step", num(s.handoffsPerStep)},
                      {"handoff_latency_us", num(s.handoffLatencyUs)},
                      {"f_ms", num(s.fMs)},
                      {"b_ms", num(s.bMs)},
                      {"w_ms", num(s.wMs)},
                      {"micro_batches", mbs},
                      {"per_step", steps}});
  }
  return {{"present", p.present},
          {"schedule", p.present ? Json(p.schedule) : Json(nullptr)},
          {"schedule_source", p.present ? Json(p.scheduleSource) : Json(nullptr)},
          {"stages", p.stages},
          {"microbatches", p.microbatches},
          {"virtual_stages", p.virtualStages},
          {"bubble_fraction", num(p.bubbleFraction)},
          {"bubble_fraction_theory", num(p.bubbleFractionTheory)},
          {"bubble_fraction_simulated", num(p.bubbleFractionSimulated)},
          {"per_stage", stages}};
}

Json dataParallelJson(const DataParallelResult& dp) {
  Json ranks = Json::array(), buckets = Json::array(), steps = Json::array();
  for (const DpStep& st : dp.perStep)
    steps.push_back(
        {{"step", st.step}, {"comm_ms", num(st.commMs)}, {"exposed_comm_ms", num(st.exposedCommMs)}});
  for (const DpRank& r : dp.perRank)
    ranks.push_back({{"rank", r.rank},
                     {"overlap_ratio", num(r.overlapRatio)},
                     {"comm_ms", num(r.commMs)},
                     {"exposed_comm_ms", num(r.exposedCommMs)}});
  for (const BucketResult& b : dp.buckets)
    buckets.push_back({{"bucket", b.bucket},
                       {"samples", b.samples},
                       {"bytes", num(b.bytes)},
                       {"ready_ms", num(b.readyMs)},
                       {"comm_start_ms", num(b.commStartMs)},
                       {"comm_end_ms", num(b.commEndMs)},
                       {"comm_ms", num(b.commMs)},
                       {"hidden_ms", num(b.hiddenMs)},
                       {"exposed_ms", num(b.exposedMs)},
                       {"overlap_ratio", num(b.overlapRatio)}});
  return {{"present", dp.present},
          {"overlap_ratio", num(dp.overlapRatio)},
          {"exposed_comm_ms", num(dp.exposedCommMs)},
          {"per_rank", ranks},
          {"per_step", steps},
          {"buckets", buckets}};
}

Json collectivesJson(const std::vector<BandwidthClass>& rows) {
  Json by = Json::array();
  for (const BandwidthClass& b : rows)
    by.push_back({{"collective", b.collective},
                  {"size_class_bytes", b.sizeClassBytes},
                  {"ranks", b.ranks},
                  {"count", b.count},
                  {"bytes", num(b.bytes)},
                  {"time_ms", num(b.timeMs)},
                  {"algbw_gbps", num(b.algbwGBps)},
                  {"busbw_gbps", num(b.busbwGBps)},
                  {"payload_bytes", num(b.payloadBytes)},
                  {"bytes_sent", num(b.bytesSent)},
                  {"bytes_received", num(b.bytesReceived)},
                  {"wire_gbps", num(b.wireGBps)}});
  return {{"by_size", by}};
}

Json stragglersJson(const StragglerResult& s) {
  Json per = Json::array(), counts = Json::object();
  for (const StragglerStep& st : s.perStep)
    per.push_back({{"step", st.step},
                   {"skew_ms", num(st.skewMs)},
                   {"straggler", st.straggler},
                   {"wait_ms", num(st.waitMs)}});
  for (const auto& [rank, n] : s.stragglerCounts) counts[std::to_string(rank)] = n;
  return {{"mean_skew_ms", num(s.meanSkewMs)},
          {"slowest_rank", s.slowestRank >= 0 ? Json(s.slowestRank) : Json(nullptr)},
          {"straggler_counts", counts},
          {"per_step", per}};
}

Json discoJson(const std::vector<DiscoLayer>& layers, const std::vector<DiscoInferencePoint>& inference) {
  Json out = Json::array();
  for (const DiscoLayer& d : layers) {
    Json pts = Json::array();
    for (const DiscoPoint& p : d.bySparsity)
      pts.push_back({{"sparsity", p.sparsity},
                     {"samples", p.samples},
                     {"l_comm_ms", num(p.lCommMs)},
                     {"l_comp_ms", num(p.lCompMs)},
                     {"l_overlap_ms", num(p.lOverlapMs)},
                     {"bytes", num(p.bytes)},
                     {"accuracy", num(p.accuracy)}});
    out.push_back({{"layer", d.layer},
                   {"nodes", d.nodes},
                   {"sparsity", d.sparsity},
                   {"l_comm_ms", num(d.lCommMs)},
                   {"l_comp_ms", num(d.lCompMs)},
                   {"l_overlap_ms", num(d.lOverlapMs)},
                   {"bytes", num(d.bytes)},
                   {"bandwidth_gbps", num(d.bandwidthGBps)},
                   {"comm_dense_ms", num(d.commDenseMs)},
                   {"comp_dense_ms", num(d.compDenseMs)},
                   {"ratio_a", num(d.ratioA)},
                   {"equilibrium_sparsity", num(d.equilibriumSparsity)},
                   {"comm_bound", d.commBound},
                   {"by_sparsity", pts}});
  }
  Json inf = Json::array();
  for (const DiscoInferencePoint& p : inference)
    inf.push_back({{"sparsity", p.sparsity},
                   {"independent", p.independent},
                   {"bytes", num(p.bytes)},
                   {"latency_pipelined_ms", num(p.latencyPipelinedMs)},
                   {"latency_wait_ms", num(p.latencyWaitMs)},
                   {"accuracy", num(p.accuracy)}});
  return {{"layers", out}, {"inference", inf}};
}

Json criticalJson(const std::vector<CriticalPathStep>& steps) {
  Json per = Json::array(), segs = Json::array();
  for (const CriticalPathStep& c : steps) {
    Json ranks = Json::object();
    for (const auto& [rank, ms] : c.perRankMs) ranks[std::to_string(rank)] = num(ms);
    per.push_back({{"step", c.step},
                   {"length_ms", num(c.lengthMs)},
                   {"compute_ms", num(c.computeMs)},
                   {"comm_ms", num(c.commMs)},
                   {"wait_ms", num(c.waitMs)},
                   {"per_rank_ms", ranks},
                   {"segments", c.segments.size()}});
  }
  if (!steps.empty())
    for (const CriticalSegment& s : steps.back().segments)
      segs.push_back({{"rank", s.rank},
                      {"kind", eventKindName(s.kind)},
                      {"name", s.name},
                      {"start_ns", s.startNs},
                      {"end_ns", s.endNs}});
  return {{"per_step", per}, {"last_step_segments", segs}};
}

}  // namespace

Json opt(const std::optional<double>& v) {
  return v ? num(*v) : Json(nullptr);
}

// HTA 0.5's names and units (microseconds, a percentage), docs/ANALYSIS.md "hta".
Json htaJson(const HtaResult& h) {
  Json per = Json::array();
  for (const HtaRank& r : h.perRank)
    per.push_back({{"rank", r.rank},
                   {"kernels", r.kernels},
                   {"comp_comm_overlap_pctg", opt(r.overlapPctg)},
                   {"idle_time_us", opt(r.idleUs)},
                   {"compute_time_us", opt(r.computeUs)},
                   {"non_compute_time_us", opt(r.nonComputeUs)},
                   {"kernel_time_us", opt(r.kernelUs)}});
  return {{"per_rank", per}};
}

std::string analysisToJson(const AnalysisResult& r, int indent) {
  Json knobs = Json::array();
  for (const KnobChangeEntry& k : r.knobChanges)
    knobs.push_back({{"step", k.step}, {"time_ns", k.timeNs}, {"values", k.values}});
  Json doc = {{"ranks", r.ranks},
              {"steps", stepsJson(r.steps)},
              {"knob_changes", knobs},
              {"breakdown", breakdownJson(r.breakdown)},
              {"pipeline", pipelineJson(r.pipeline)},
              {"data_parallel", dataParallelJson(r.dataParallel)},
              {"collectives", collectivesJson(r.collectives)},
              {"stragglers", stragglersJson(r.stragglers)},
              {"disco", discoJson(r.disco, r.discoInference)},
              {"critical_path", criticalJson(r.criticalPath)},
              {"hta", htaJson(r.hta)}};
  return doc.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace trainscope::core
