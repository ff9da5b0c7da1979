// Pipeline bubbles: per (rank, step) window the idle time of the stage (window minus the union
// of its compute), where it lies (warm-up / steady / cool-down) and whose data it waited for;
// per stage the means and the theoretical fraction of the schedule in force.
#include <algorithm>
#include <array>
#include <cmath>
#include <set>

#include "analysis/state.h"
#include "trainscope/core/sched/schedule_sim.h"

namespace trainscope::core {

double bubbleFractionTheory(const std::string& schedule, int p, int m, int v, double tf, double tb,
                            double tw) {
  if (p < 1 || m < 1 || v < 1) return kNaN;
  const double pm1 = p - 1;
  if (schedule == "gpipe" || schedule == "1f1b" || schedule == "seq1f1b") return pm1 / (m + pm1);
  if (schedule == "interleaved-1f1b") return pm1 / (static_cast<double>(v) * m + pm1);
  if (schedule == "zb-h1") {
    // Zero Bubble paper: 1F1B idles (p-1)(F+B+W) per stage, ZB-H1 (p-1)(F+B-W); work m(F+B+W).
    const double idle = pm1 * std::max(0.0, tf + tb - tw);
    const double work = m * (tf + tb + tw);
    return idle + work > 0 ? idle / (idle + work) : kNaN;
  }
  if (schedule == "interleaved-zb" || schedule == "zbv") {
    // PyTorch's zero-bubble schedules: no closed form for every case; the schedule on balanced
    // stages with the measured mean F, B, W (core's theoreticalBubbleFraction).
    OpDurations d;
    d.forward = tf;
    d.backward = tb;
    d.weight = tw;
    const auto th = theoreticalBubbleFraction(schedule, p, m, schedule == "zbv" ? 2 : v, 1, d);
    return th ? th.value() : kNaN;
  }
  return kNaN;
}

void recordPipeline(const WindowEvents& we, RankStepRecord& r) {
  std::map<int64_t, int> stageVotes;
  int64_t firstB = INT64_MAX, lastF = INT64_MIN;
  std::set<int64_t> mbs, chunks;
  for (const WinEvent& e : we.events) {
    if (e.kind != EventKind::MicroBatchF && e.kind != EventKind::MicroBatchB &&
        e.kind != EventKind::MicroBatchW)
      continue;
    if (e.stage >= 0) ++stageVotes[e.stage];
    r.ops.push_back({e.kind, e.microBatch, e.chunk, e.end - e.start});
    r.opRefs.push_back(e.ref);
    chunks.insert(e.chunk);
    if (e.kind == EventKind::MicroBatchF) {
      ++r.fOps;
      mbs.insert(e.microBatch);
      lastF = std::max(lastF, e.end);
    } else if (e.kind == EventKind::MicroBatchB) {
      firstB = std::min(firstB, e.start);
    } else {
      r.wOps = true;
    }
  }
  if (stageVotes.empty()) return;
  r.stage = static_cast<int>(std::max_element(stageVotes.begin(), stageVotes.end(), [](auto& a, auto& b) {
                               return a.second < b.second;
                             })->first);
  r.microBatches = static_cast<int>(mbs.size());
  r.chunks = static_cast<int>(chunks.size());
  r.gpipeOrder = firstB == INT64_MAX || lastF == INT64_MIN || firstB >= lastF;

  const IntervalList gaps = complementIn(we.compute, we.window);
  r.bubble = totalLength(gaps);
  for (const Interval& g : gaps) {
    // A gap before any backward started is warm-up; one after the last forward ended (with a
    // backward already started) is cool-down; the rest is steady state.
    int64_t* phase = &r.steady;
    const char* phaseName = "steady";
    if (g.end <= firstB) {
      phase = &r.warmup;
      phaseName = "warm-up";
    } else if (g.start >= lastF) {
      phase = &r.cooldown;
      phaseName = "cool-down";
    }
    *phase += g.length();
    // Whose data ended the wait: the receive that completed last inside the gap.
    RankId peer = -1;
    int64_t best = INT64_MIN;
    for (const WinEvent& e : we.events) {
      if (e.kind == EventKind::P2PRecv && e.end > g.start && e.end <= g.end && e.end > best) {
        best = e.end;
        peer = static_cast<RankId>(e.peer);
      }
    }
    r.waits[peer] += g.length();
    std::string label = phaseName;
    label += peer >= 0 ? ", waiting for rank " + std::to_string(peer) : "";
    r.overlays.push_back({OverlayKind::Bubble, r.rank, r.stage, r.step, g.start, g.end, std::move(label)});
  }
}

namespace {

struct StageAcc {
  std::set<RankId> ranks;
  int samples = 0;
  double step = 0, bubble = 0, fraction = 0, warm = 0, steady = 0, cool = 0;
  std::map<RankId, double> waits;
  double handoff = 0;  // ms, summed over the samples
  int handoffs = 0;
  double sum[3] = {0, 0, 0};
  int cnt[3] = {0, 0, 0};
  std::map<std::pair<int64_t, int64_t>, std::array<std::pair<double, int>, 3>> mb;
  double theory = 0;
  int theorySteps = 0;
  double simulated = 0;
  int simulatedSteps = 0;
  std::vector<EventRef> refs;
};

int opIndex(EventKind k) {
  return k == EventKind::MicroBatchF ? 0 : k == EventKind::MicroBatchB ? 1 : 2;
}

double mean(double sum, int n) {
  return n > 0 ? sum / n : kNaN;
}

int parsePositive(const std::string& s) {
  try {
    return s.empty() ? 0 : std::max(0, std::stoi(s));
  } catch (...) {
    return 0;
  }
}

// The step's schedule simulated with the step's measured mean op durations, per stage (index in
// the sorted stage ids): NaN where the schedule or the durations do not fit.
std::vector<double> simulatedBubbles(const std::string& schedule, const std::vector<int>& stageIds, int m, int v,
                                     int units, const std::vector<const RankStepRecord*>& recs) {
  const std::vector<double> none(stageIds.size(), kNaN);
  const auto kind = parseSchedule(schedule);
  if (!kind || m < 1) return none;
  ScheduleParams sp;
  sp.kind = kind.value();
  sp.stages = static_cast<int>(stageIds.size());
  sp.microBatches = m;
  sp.virtualStages = sp.kind == ScheduleKind::Interleaved1F1B || sp.kind == ScheduleKind::InterleavedZb ? v
                     : sp.kind == ScheduleKind::Zbv                                                   ? 2
                                                                                                      : 1;
  sp.segments = sp.kind == ScheduleKind::Seq1F1B ? std::max(1, units / m) : 1;
  const auto sched = generateSchedule(sp);
  if (!sched) return none;
  // Mean duration per (stage index, op kind, chunk), falling back to (stage, kind), then kind.
  std::map<std::tuple<int, int, int64_t>, std::pair<double, int>> byChunk;
  std::map<std::pair<int, int>, std::pair<double, int>> byStage;
  std::array<std::pair<double, int>, 3> byKind{};
  for (const RankStepRecord* r : recs) {
    const auto it = std::find(stageIds.begin(), stageIds.end(), r->stage);
    const int si = static_cast<int>(it - stageIds.begin());
    for (const OpRecord& op : r->ops) {
      const int k = opIndex(op.kind);
      const double d = static_cast<double>(op.dur);
      for (auto* acc : {&byChunk[{si, k, op.chunk}], &byStage[{si, k}], &byKind[static_cast<size_t>(k)]}) {
        acc->first += d;
        ++acc->second;
      }
    }
  }
  auto meanOf = [](const std::pair<double, int>& a) { return a.first / a.second; };
  const bool haveW = byKind[2].second > 0;
  const OpDurationFn duration = [&](int stage, const PipeOp& op) -> double {
    int k = op.kind == OpKind::Forward ? 0 : op.kind == OpKind::Backward ? 1 : 2;
    if (k == 2 && !haveW) return 0.0;  // W measured inside B
    if (auto it = byChunk.find({stage, k, op.chunk}); it != byChunk.end()) return meanOf(it->second);
    if (auto it = byStage.find({stage, k}); it != byStage.end()) return meanOf(it->second);
    if (byKind[static_cast<size_t>(k)].second > 0) return meanOf(byKind[static_cast<size_t>(k)]);
    return byKind[0].second > 0 ? meanOf(byKind[0]) : 1.0;
  };
  const auto sim = simulateSchedule(sched.value(), OpDurations{}, duration);
  if (!sim) return none;
  std::vector<double> out;
  for (const StageSimulation& st : sim.value().stages) out.push_back(st.bubbleFraction);
  return out;
}

}  // namespace

void aggregatePipeline(const AnalyzerState& s, AnalysisResult& out) {
  std::map<int, StageAcc> stages;
  std::map<int64_t, std::vector<const RankStepRecord*>> bySteps;
  for (const RankStepRecord& r : s.records) {
    if (r.stage < 0) continue;
    bySteps[r.step].push_back(&r);
    StageAcc& a = stages[r.stage];
    a.ranks.insert(r.rank);
    ++a.samples;
    const double w = static_cast<double>(r.window.length());
    a.step += w / 1e6;
    a.bubble += static_cast<double>(r.bubble) / 1e6;
    a.fraction += w > 0 ? static_cast<double>(r.bubble) / w : 0;
    a.warm += static_cast<double>(r.warmup) / 1e6;
    a.steady += static_cast<double>(r.steady) / 1e6;
    a.cool += static_cast<double>(r.cooldown) / 1e6;
    for (const auto& [peer, ns] : r.waits) a.waits[peer] += static_cast<double>(ns) / 1e6;
    a.handoff += static_cast<double>(r.handoff) / 1e6;
    a.handoffs += r.handoffs;
    for (const OpRecord& op : r.ops) {
      const int k = opIndex(op.kind);
      a.sum[k] += static_cast<double>(op.dur) / 1e6;
      ++a.cnt[k];
      auto& slot = a.mb[{op.microBatch, op.chunk}][k];
      slot.first += static_cast<double>(op.dur) / 1e6;
      ++slot.second;
    }
    a.refs.insert(a.refs.end(), r.opRefs.begin(), r.opRefs.end());
  }
  PipelineResult& p = out.pipeline;
  p.present = !stages.empty();
  if (!p.present) return;

  double theorySum = 0;
  int theorySteps = 0;
  std::map<int64_t, double> theoryAt;
  std::map<std::pair<int64_t, int>, double> simAt;  // (step, stage)
  for (const auto& [step, recs] : bySteps) {
    std::set<int> st;
    int mbMax = 0, chunkMax = 1, fOpsMax = 0;
    bool anyW = false, gpipe = true;
    double opSum[3] = {0, 0, 0};
    int opCnt[3] = {0, 0, 0};
    for (const RankStepRecord* r : recs) st.insert(r->stage);
    for (const RankStepRecord* r : recs) {
      mbMax = std::max(mbMax, r->microBatches);
      chunkMax = std::max(chunkMax, r->chunks);
      fOpsMax = std::max(fOpsMax, r->fOps);
      anyW = anyW || r->wOps;
      if (r->stage == *st.begin()) gpipe = gpipe && r->gpipeOrder;  // the first stage decides
      for (const OpRecord& op : r->ops) {
        opSum[opIndex(op.kind)] += static_cast<double>(op.dur);
        ++opCnt[opIndex(op.kind)];
      }
    }
    const char* source = "";
    std::string schedule = knobAt(s, "pp.schedule", step, &source);
    p.scheduleSource = schedule.empty() ? "inferred" : source;
    if (schedule.empty())
      schedule = anyW ? "zb-h1" : chunkMax > 1 ? "interleaved-1f1b" : gpipe ? "gpipe" : "1f1b";
    int m = parsePositive(knobAt(s, "pp.microbatches", step));
    if (m == 0) m = mbMax;
    int v = parsePositive(knobAt(s, "pp.virtual_stages", step));
    if (v == 0) v = chunkMax;
    // Seq1F1B pipelines sequence segments: every forward op on a chunk is one pipelined unit.
    const int units = schedule == "seq1f1b" ? std::max(m, fOpsMax / std::max(1, v)) : m;
    const double tf = opCnt[0] ? opSum[0] / opCnt[0] : 1, tb = opCnt[1] ? opSum[1] / opCnt[1] : tf;
    const bool split = schedule == "zb-h1" || schedule == "interleaved-zb" || schedule == "zbv";
    const double tw = opCnt[2] ? opSum[2] / opCnt[2] : (split ? tf : 0);
    // p is the pipeline's stage count, also in a step the recording caught on some stages only
    const double th = bubbleFractionTheory(schedule, static_cast<int>(stages.size()), units, v, tf, tb, tw);
    p.schedule = schedule;
    p.microbatches = units;
    p.virtualStages = v;
    theoryAt[step] = th;
    std::vector<int> stageIds;
    for (const auto& [id, acc] : stages) stageIds.push_back(id);
    const std::vector<double> sim = simulatedBubbles(schedule, stageIds, m, v, units, recs);
    for (size_t i = 0; i < stageIds.size(); ++i) {
      if (!st.count(stageIds[i])) continue;
      simAt[{step, stageIds[i]}] = sim[i];
      if (std::isnan(sim[i])) continue;
      stages[stageIds[i]].simulated += sim[i];
      ++stages[stageIds[i]].simulatedSteps;
    }
    if (!std::isnan(th)) {
      theorySum += th;
      ++theorySteps;
      for (int stg : st) {
        stages[stg].theory += th;
        ++stages[stg].theorySteps;
      }
    }
  }
  p.bubbleFractionTheory = mean(theorySum, theorySteps);
  p.stages = static_cast<int>(stages.size());

  double fracSum = 0;
  for (auto& [stage, a] : stages) {
    StageResult r;
    r.stage = stage;
    r.ranks.assign(a.ranks.begin(), a.ranks.end());
    r.samples = a.samples;
    r.stepMs = mean(a.step, a.samples);
    r.bubbleMs = mean(a.bubble, a.samples);
    r.bubbleFraction = mean(a.fraction, a.samples);
    r.bubbleFractionTheory = mean(a.theory, a.theorySteps);
    r.bubbleFractionSimulated = mean(a.simulated, a.simulatedSteps);
    r.warmupMs = mean(a.warm, a.samples);
    r.steadyMs = mean(a.steady, a.samples);
    r.cooldownMs = mean(a.cool, a.samples);
    for (const auto& [peer, ms] : a.waits) r.waits.push_back({peer, ms / a.samples});
    r.handoffMs = mean(a.handoff, a.samples);
    r.handoffsPerStep = mean(static_cast<double>(a.handoffs), a.samples);
    r.handoffLatencyUs = a.handoffs > 0 ? a.handoff * 1e3 / a.handoffs : kNaN;
    r.fMs = mean(a.sum[0], a.cnt[0]);
    r.bMs = mean(a.sum[1], a.cnt[1]);
    r.wMs = mean(a.sum[2], a.cnt[2]);
    for (const auto& [key, slots] : a.mb) {
      r.microBatches.push_back({key.first, key.second, mean(slots[0].first, slots[0].second),
                                mean(slots[1].first, slots[1].second),
                                mean(slots[2].first, slots[2].second)});
    }
    for (const RankStepRecord& rec : s.records) {
      if (rec.stage != stage) continue;
      const double w = static_cast<double>(rec.window.length());
      r.perStep.push_back({rec.step, rec.rank, static_cast<double>(rec.bubble) / 1e6,
                           w > 0 ? static_cast<double>(rec.bubble) / w : kNaN, theoryAt[rec.step],
                           simAt.count({rec.step, stage}) ? simAt[{rec.step, stage}] : kNaN});
    }
    fracSum += r.bubbleFraction;
    out.sources["pipeline.per_stage[" + std::to_string(p.perStage.size()) + "]"] = std::move(a.refs);
    p.perStage.push_back(std::move(r));
  }
  p.bubbleFraction = fracSum / static_cast<double>(p.perStage.size());
  double simSum = 0;
  int simN = 0;
  for (const StageResult& r : p.perStage)
    if (!std::isnan(r.bubbleFractionSimulated)) simSum += r.bubbleFractionSimulated, ++simN;
  p.bubbleFractionSimulated = mean(simSum, simN);
}

}  // namespace trainscope::core
