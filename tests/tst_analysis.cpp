// Analysis against hand-computed answers. Every case is a constructed trace in
// tests/data/<case>/trace.json written by tests/data/gen/gen_analysis_cases.cpp; the comments
// give the arithmetic. Times in ms; tolerance 1e-6 relative.
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QtTest>
#include <cmath>
#include <map>
#include <set>

#include "trainscope/core/analysis/analysis.h"
#include "trainscope/core/interop/chrome_trace.h"
#include "trainscope/core/synth/synth.h"

using namespace trainscope::core;

namespace {

bool near(double got, double want) {
  if (std::isnan(want)) return std::isnan(got);
  return std::fabs(got - want) <= 1e-6 * std::max(1.0, std::fabs(want));
}

#define NEAR(got, want)         \
  QVERIFY2(near((got), (want)), \
           qPrintable(          \
               QStringLiteral("%1 = %2, want %3").arg(#got).arg((got), 0, 'g', 12).arg((want), 0, 'g', 12)))

TraceStore load(const char* name) {
  auto r = importChromeTraceFile(std::string(TRAINSCOPE_TEST_DATA) + "/" + name + "/trace.json");
  if (!r) qFatal("%s", r.status().toString().c_str());
  return std::move(r).value();
}

AnalysisResult analyse(const char* name) {
  TraceStore s = load(name);
  return analyzeStore(s);
}

const StageResult& stage(const AnalysisResult& r, int s) {
  return r.pipeline.perStage.at(static_cast<size_t>(s));
}

double waitFor(const StageResult& s, RankId peer) {
  for (const BubbleWait& w : s.waits)
    if (w.peer == peer) return w.ms;
  return 0;
}

}  // namespace

class TstAnalysis : public QObject {
  Q_OBJECT

 private slots:
  void intervals() {
    // [0,2) ∪ [1,3) ∪ [3,4) ∪ [6,7) = [0,4) ∪ [6,7) (touching intervals merge), empty dropped
    const IntervalList u = unionOf({{1, 3}, {0, 2}, {6, 7}, {3, 4}, {5, 5}});
    QCOMPARE(u, (IntervalList{{0, 4}, {6, 7}}));
    QCOMPARE(totalLength(u), int64_t{5});
    const IntervalList b{{2, 6}};
    QCOMPARE(intersect(u, b), (IntervalList{{2, 4}}));
    QCOMPARE(subtract(u, b), (IntervalList{{0, 2}, {6, 7}}));
    QCOMPARE(subtract(b, u), (IntervalList{{4, 6}}));
    QCOMPARE(complementIn(u, {-1, 8}), (IntervalList{{-1, 0}, {4, 6}, {7, 8}}));
    QCOMPARE(clip(u, {3, 10}), (IntervalList{{3, 4}, {6, 7}}));
    QCOMPARE(unionOf(u, IntervalList{{4, 6}}), (IntervalList{{0, 7}}));
  }

  void theoryFormulas() {
    NEAR(bubbleFractionTheory("gpipe", 4, 4, 1), 3.0 / 7);  // (p-1)/(m+p-1)
    NEAR(bubbleFractionTheory("1f1b", 4, 8, 1), 3.0 / 11);
    NEAR(bubbleFractionTheory("interleaved-1f1b", 2, 2, 2), 1.0 / 5);  // (p-1)/(vm+p-1)
    NEAR(bubbleFractionTheory("interleaved-1f1b", 4, 8, 2), 3.0 / 19);
    NEAR(bubbleFractionTheory("zb-h1", 2, 2, 1, 1, 1, 1), 1.0 / 7);  // (p-1)(F+B-W) / (that + m(F+B+W))
    NEAR(bubbleFractionTheory("zb-h1", 4, 4, 1, 1, 2, 1), 3.0 * 2 / (3.0 * 2 + 4 * 4));
    NEAR(bubbleFractionTheory("seq1f1b", 4, 8, 1), 3.0 / 11);  // m counts segments
    QVERIFY(std::isnan(bubbleFractionTheory("nonsense", 4, 4, 1)));
    QVERIFY(std::isnan(bubbleFractionTheory("1f1b", 4, 0, 1)));
    // NCCL bus bandwidth factors
    NEAR(busBandwidthFactor("allreduce", 4), 1.5);
    NEAR(busBandwidthFactor("allgather", 4), 0.75);
    NEAR(busBandwidthFactor("reducescatter", 8), 7.0 / 8);
    NEAR(busBandwidthFactor("broadcast", 8), 1.0);
    NEAR(busBandwidthFactor("sendrecv", 2), 1.0);
    QCOMPARE(collectiveType(EventKind::Collective, "ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
             std::string("allreduce"));
    QCOMPARE(collectiveType(EventKind::Collective, "nccl:all_gather"), std::string("allgather"));
    QCOMPARE(collectiveType(EventKind::Collective, "ReduceScatter"), std::string("reducescatter"));
    QCOMPARE(collectiveType(EventKind::P2PRecv, "recv"), std::string("sendrecv"));
    // DISCO: A = 2, N = 2 -> (4-2)/(4-2+1) = 2/3; A < 1 -> 0
    NEAR(discoEquilibriumSparsity(2, 2), 2.0 / 3);
    NEAR(discoEquilibriumSparsity(0.5, 4), 0.0);
    NEAR(discoEquilibriumSparsity(1, 4), 0.0);
  }

  // p = 4 stages (rank = stage), m = 4, F = 1 ms, B = 2 ms, two identical steps of 21 ms.
  // Schedule (from the generator's list scheduler; start-end in ms):
  //   stage 0: F0 0-1 F1 1-2 F2 2-3 F3 3-4 | B0 10-12 B1 13-15 B2 16-18 B3 19-21
  //   stage 1: F0 1-2 F1 2-3 F2 3-4 B0 8-10 F3 10-11 B1 11-13 B2 14-16 B3 17-19
  //   stage 2: F0 2-3 F1 3-4 B0 6-8 F2 8-9 B1 9-11 F3 11-12 B2 12-14 B3 15-17
  //   stage 3: F0 3-4 B0 4-6 F1 6-7 B1 7-9 F2 9-10 B2 10-12 F3 12-13 B3 13-15
  // Busy 4*1 + 4*2 = 12 per stage, bubble 9/21 = 3/7 = theory (p-1)/(m+p-1) = 3/7.
  // Stage 0 gaps: 4-10 (before the first B at 10: warm-up 6), 12-13, 15-16, 18-19 (after the
  // last F ended at 4: cool-down 3); each ends with a receive from rank 1.
  // Stage 1 gaps: 0-1 (recv from 0), 4-8 (from 2) warm-up 5; 13-14, 16-17 (from 2), 19-21
  // (end of step, no peer) cool-down 4.  Stage 2: 0-2 (from 1), 4-6 (from 3) warm-up 4;
  // 14-15 (from 3), 17-21 (no peer) cool-down 5.  Stage 3: 0-3 (from 2) warm-up 3, 15-21 cool-down 6.
  void pipeline1f1bBalanced() {
    const AnalysisResult r = analyse("pp_1f1b_balanced");
    QVERIFY(r.pipeline.present);
    QCOMPARE(r.pipeline.schedule, std::string("1f1b"));
    QCOMPARE(r.pipeline.scheduleSource, std::string("metadata"));
    QCOMPARE(r.pipeline.stages, 4);
    QCOMPARE(stage(r, 2).perStep.size(), size_t{2});  // two steps of rank 2
    QCOMPARE(stage(r, 2).perStep[1].step, int64_t{1});
    NEAR(stage(r, 2).perStep[1].bubbleFraction, 9.0 / 21);
    QCOMPARE(r.pipeline.microbatches, 4);
    NEAR(r.pipeline.bubbleFraction, 3.0 / 7);
    NEAR(r.pipeline.bubbleFractionTheory, 3.0 / 7);
    // The schedule simulated with the measured F = 1, B = 2 and no communication is this trace.
    NEAR(r.pipeline.bubbleFractionSimulated, 3.0 / 7);
    NEAR(stage(r, 2).perStep[1].bubbleFractionSimulated, 9.0 / 21);
    const double warm[4] = {6, 5, 4, 3}, cool[4] = {3, 4, 5, 6};
    for (int s = 0; s < 4; ++s) {
      const StageResult& st = stage(r, s);
      QCOMPARE(st.samples, 2);
      NEAR(st.bubbleFraction, 9.0 / 21);
      NEAR(st.bubbleFractionTheory, 3.0 / 7);
      NEAR(st.bubbleMs, 9.0);
      NEAR(st.warmupMs, warm[s]);
      NEAR(st.steadyMs, 0.0);
      NEAR(st.cooldownMs, cool[s]);
      NEAR(st.fMs, 1.0);
      NEAR(st.bMs, 2.0);
      QVERIFY(std::isnan(st.wMs));
      QCOMPARE(st.microBatches.size(), size_t{4});
      NEAR(st.microBatches[2].fMs, 1.0);
      NEAR(st.microBatches[2].bMs, 2.0);
    }
    NEAR(waitFor(stage(r, 0), 1), 9.0);
    NEAR(waitFor(stage(r, 1), 0), 1.0);
    NEAR(waitFor(stage(r, 1), 2), 6.0);
    NEAR(waitFor(stage(r, 1), -1), 2.0);
    NEAR(waitFor(stage(r, 2), 1), 2.0);
    NEAR(waitFor(stage(r, 2), 3), 3.0);
    NEAR(waitFor(stage(r, 2), -1), 4.0);
    NEAR(waitFor(stage(r, 3), 2), 3.0);
    NEAR(waitFor(stage(r, 3), -1), 6.0);
    // Breakdown: the waits closed by a receive are exposed communication, the rest idle.
    // rank 0: compute 12, exposed 9, idle 0; rank 1: 12, 7, 2; rank 2: 12, 5, 4; rank 3: 12, 3, 6.
    const double exposed[4] = {9, 7, 5, 3};
    for (int k = 0; k < 4; ++k) {
      const RankBreakdown& b = r.breakdown.at(static_cast<size_t>(k));
      NEAR(b.stepMs, 21.0);
      NEAR(b.computeMs, 12.0);
      NEAR(b.overlappedCommMs, 0.0);
      NEAR(b.exposedCommMs, exposed[k]);
      NEAR(b.idleMs, 9.0 - exposed[k]);
    }
    // Bubble overlays: per step, stage 0 has 4 gaps, 1: 5, 2: 4, 3: 2 -> 15 per step, 30.
    int bubbles = 0;
    for (const Overlay& o : r.overlays) bubbles += o.kind == OverlayKind::Bubble;
    QCOMPARE(bubbles, 30);
    // Critical path: F0 through the stages (4 x 1), stage 3's 1F1B (B0 F1 B1 F2 B2 F3 B3 =
    // 2+1+2+1+2+1+2 = 11 minus... its F0 already counted: 3 F + 4 B = 11), then B3 back through
    // stages 2, 1, 0 (3 x 2): 4 + 11 + 6 = 21 = the step, all compute; rank 3 holds 12 of it.
    QCOMPARE(r.criticalPath.size(), size_t{2});
    const CriticalPathStep& cp = r.criticalPath[1];
    NEAR(cp.lengthMs, 21.0);
    NEAR(cp.computeMs, 21.0);
    NEAR(cp.commMs, 0.0);
    NEAR(cp.waitMs, 0.0);
    NEAR(cp.perRankMs.at(3), 12.0);
    NEAR(cp.perRankMs.at(0), 3.0);
    QCOMPARE(cp.segments.size(), size_t{14});
    QCOMPARE(cp.segments.front().rank, 0);
    QCOMPARE(cp.segments.back().rank, 0);
    QCOMPARE(cp.segments.back().kind, EventKind::MicroBatchB);
  }

  // p = 2, m = 4, stage 0 F = B = 1 ms, stage 1 twice as slow (2 ms); window 0-18.
  //   stage 0: F0 0-1 F1 1-2 B0 5-6 F2 6-7 B1 9-10 F3 10-11 B2 13-14 B3 17-18
  //   stage 1: F0 1-3 B0 3-5 F1 5-7 B1 7-9 F2 9-11 B2 11-13 F3 13-15 B3 15-17
  // Stage 0: busy 8, bubble 10/18; gaps 2-5 (warm-up: ends at the first B), 7-9 (steady: after
  // the first B began, before the last F ended at 11), 11-13 and 14-17 (cool-down 5); all wait
  // for rank 1.  Stage 1: busy 16, bubble 2/18: 0-1 warm-up (rank 0), 17-18 cool-down.
  // Mean over stages (10/18 + 2/18)/2 = 1/3; theory (p-1)/(m+p-1) = 1/5 whatever the imbalance.
  void pipeline1f1bUnbalanced() {
    const AnalysisResult r = analyse("pp_1f1b_unbalanced");
    NEAR(r.pipeline.bubbleFraction, 1.0 / 3);
    NEAR(r.pipeline.bubbleFractionTheory, 0.2);
    // Simulated with each stage's own measured times, the imbalance is in it: 10/18 and 2/18.
    NEAR(r.pipeline.bubbleFractionSimulated, 1.0 / 3);
    NEAR(stage(r, 0).bubbleFractionSimulated, 10.0 / 18);
    NEAR(stage(r, 1).bubbleFractionSimulated, 2.0 / 18);
    NEAR(stage(r, 0).bubbleFraction, 10.0 / 18);
    NEAR(stage(r, 1).bubbleFraction, 2.0 / 18);
    NEAR(stage(r, 0).warmupMs, 3.0);
    NEAR(stage(r, 0).steadyMs, 2.0);
    NEAR(stage(r, 0).cooldownMs, 5.0);
    NEAR(waitFor(stage(r, 0), 1), 10.0);
    NEAR(stage(r, 1).warmupMs, 1.0);
    NEAR(stage(r, 1).cooldownMs, 1.0);
    NEAR(stage(r, 1).fMs, 2.0);
    NEAR(stage(r, 0).fMs, 1.0);
    // Stragglers: compute 8 vs 16 -> skew 8, rank 1 is the one rank 0 waits for.
    QCOMPARE(r.stragglers.perStep.size(), size_t{1});
    NEAR(r.stragglers.perStep[0].skewMs, 8.0);
    QCOMPARE(r.stragglers.perStep[0].straggler, 1);
    QCOMPARE(r.stragglers.slowestRank, 1);
  }

  // Same shape as the balanced 1F1B case, all forwards first: 21 ms, 9 ms bubble per stage.
  // No schedule knob: inferred as gpipe (stage 0's first B starts after its last F ended).
  // Stage 0: F 0-4, gap 4-13 (before the first B: warm-up 9), B 13-21.  Stage 3: gap 0-3
  // warm-up, F 3-7, B 7-15, gap 15-21 cool-down 6.
  void pipelineGpipe() {
    const AnalysisResult r = analyse("pp_gpipe");
    QCOMPARE(r.pipeline.schedule, std::string("gpipe"));
    QCOMPARE(r.pipeline.scheduleSource, std::string("inferred"));
    NEAR(r.pipeline.bubbleFraction, 3.0 / 7);
    NEAR(r.pipeline.bubbleFractionTheory, 3.0 / 7);
    NEAR(stage(r, 0).warmupMs, 9.0);
    NEAR(stage(r, 0).cooldownMs, 0.0);
    NEAR(stage(r, 1).warmupMs, 7.0);  // 0-1 and 5-11
    NEAR(stage(r, 1).cooldownMs, 2.0);
    NEAR(stage(r, 3).warmupMs, 3.0);
    NEAR(stage(r, 3).cooldownMs, 6.0);
  }

  // GPipe, p = 2, m = 2, stage 0 F = B = 1 ms, stage 1 F = B = 2 ms; window 0-10:
  //   stage 0: F0 0-1 F1 1-2 | B0 7-8 B1 9-10;   stage 1: F0 1-3 F1 3-5 B0 5-7 B1 7-9
  // Stage 0 bubble 6/10: 2-7 warm-up 5 (before its first B), 8-9 cool-down 1; stage 1 2/10:
  // 0-1 warm-up, 9-10 cool-down. Mean 0.4; theory (p-1)/(m+p-1) = 1/3.
  void pipelineGpipeUnbalanced() {
    const AnalysisResult r = analyse("pp_gpipe_unbalanced");
    QCOMPARE(r.pipeline.schedule, std::string("gpipe"));
    NEAR(r.pipeline.bubbleFraction, 0.4);
    NEAR(r.pipeline.bubbleFractionTheory, 1.0 / 3);
    NEAR(stage(r, 0).bubbleFractionSimulated, 0.6);
    NEAR(stage(r, 1).bubbleFractionSimulated, 0.2);
    NEAR(stage(r, 0).bubbleFraction, 0.6);
    NEAR(stage(r, 0).warmupMs, 5.0);
    NEAR(stage(r, 0).cooldownMs, 1.0);
    NEAR(stage(r, 1).bubbleFraction, 0.2);
    NEAR(stage(r, 1).bMs, 2.0);
  }

  // Seq1F1B, p = 2, pp.microbatches = 1 cut into 2 segments, F = B = 1 ms:
  //   stage 0: S0f 0-1 S1f 1-2 S0b 3-4 S1b 5-6; stage 1: S0f 1-2 S0b 2-3 S1f 3-4 S1b 4-5
  // Busy 4 of 6 per stage -> 1/3 = (p-1)/(m' + p - 1) with m' = 2 pipelined units (the forward
  // ops per stage), not the knob's m = 1 (which would give 1/2).
  void pipelineSeq1f1b() {
    const AnalysisResult r = analyse("pp_seq1f1b");
    QCOMPARE(r.pipeline.schedule, std::string("seq1f1b"));
    QCOMPARE(r.pipeline.microbatches, 2);
    NEAR(r.pipeline.bubbleFraction, 1.0 / 3);
    NEAR(r.pipeline.bubbleFractionTheory, 1.0 / 3);
  }

  // p = 2 ranks, v = 2 chunks (virtual stage = chunk*2 + rank), m = 2, F = B = 1 ms:
  //   rank 0: F0c0 0-1 F1c0 1-2 F0c1 2-3 F1c1 3-4 B0c1 5-6 B1c1 7-8 B0c0 8-9 B1c0 9-10
  //   rank 1: F0c0 1-2 F1c0 2-3 F0c1 3-4 B0c1 4-5 F1c1 5-6 B1c1 6-7 B0c0 7-8 B1c0 8-9
  // busy 8 of 10 -> 0.2 = theory (p-1)/(v*m + p-1) = 1/5.
  // rank 0: 4-5 warm-up (ends at the first B), 6-7 cool-down (after the last F), both for rank 1.
  // rank 1: 0-1 warm-up (rank 0), 9-10 cool-down (end of step).
  void pipelineInterleaved() {
    const AnalysisResult r = analyse("pp_interleaved");
    QCOMPARE(r.pipeline.schedule, std::string("interleaved-1f1b"));
    QCOMPARE(r.pipeline.virtualStages, 2);
    QCOMPARE(r.pipeline.microbatches, 2);
    NEAR(r.pipeline.bubbleFraction, 0.2);
    NEAR(r.pipeline.bubbleFractionTheory, 0.2);
    NEAR(stage(r, 0).warmupMs, 1.0);
    NEAR(stage(r, 0).cooldownMs, 1.0);
    NEAR(waitFor(stage(r, 0), 1), 2.0);
    NEAR(waitFor(stage(r, 1), 0), 1.0);
    NEAR(waitFor(stage(r, 1), -1), 1.0);
    QCOMPARE(stage(r, 0).microBatches.size(), size_t{4});  // (mb, chunk) pairs
  }

  // The interleaved order above with rank 1 twice as slow (rank 0: F = B = 1, rank 1: 2 ms).
  // Virtual stages: rank 0 chunk 0 = vs0, rank 1 chunk 0 = vs1, rank 0 chunk 1 = vs2, rank 1
  // chunk 1 = vs3 (the last). Each op starts when its rank is free and its input exists:
  //   rank 0: F0c0 0-1 F1c0 1-2 F0c1 3-4 F1c1 5-6 B0c1 9-10 B1c1 13-14 B0c0 15-16 B1c0 17-18
  //   rank 1: F0c0 1-3 F1c0 3-5 F0c1 5-7 B0c1 7-9 F1c1 9-11 B1c1 11-13 B0c0 13-15 B1c0 15-17
  // window 0-18. Rank 0 busy 8 -> bubble 10/18, every gap waiting for rank 1 (2-3, 4-5, 6-9,
  // 10-13, 14-15, 16-17). Rank 1 busy 16 (1-17) -> bubble 2/18: 0-1 for rank 0, 17-18 at the
  // end for nobody. Mean (10 + 2) / 36 = 1/3; theory (p-1)/(v*m + p-1) = 1/5 for a balanced run.
  // Stragglers: compute 8 vs 16 -> skew 8 ms, rank 1.
  void pipelineInterleavedUnbalanced() {
    const AnalysisResult r = analyse("pp_interleaved_unbalanced");
    QCOMPARE(r.pipeline.schedule, std::string("interleaved-1f1b"));
    QCOMPARE(r.pipeline.virtualStages, 2);
    NEAR(r.pipeline.bubbleFraction, 1.0 / 3);
    NEAR(r.pipeline.bubbleFractionTheory, 0.2);
    NEAR(stage(r, 0).bubbleFraction, 10.0 / 18);
    NEAR(stage(r, 1).bubbleFraction, 2.0 / 18);
    NEAR(waitFor(stage(r, 0), 1), 10.0);
    NEAR(waitFor(stage(r, 1), 0), 1.0);
    NEAR(waitFor(stage(r, 1), -1), 1.0);
    NEAR(stage(r, 0).fMs, 1.0);
    NEAR(stage(r, 1).fMs, 2.0);
    QCOMPARE(r.stragglers.perStep.size(), size_t{1});
    NEAR(r.stragglers.perStep[0].skewMs, 8.0);
    QCOMPARE(r.stragglers.perStep[0].straggler, 1);
  }

  // ZB-H1, p = 2, m = 2, F = B = W = 1 ms; pp.schedule changed live (KnobChange at step 0):
  //   rank 0: F0 0-1 F1 1-2 B0 3-4 W0 4-5 B1 5-6 W1 6-7     (gap 2-3, waiting for rank 1)
  //   rank 1: F0 1-2 B0 2-3 F1 3-4 B1 4-5 W0 5-6 W1 6-7     (gap 0-1, waiting for rank 0)
  // bubble 1/7 per stage; theory (p-1)(F+B-W) / ((p-1)(F+B-W) + m(F+B+W)) = 1/(1+6) = 1/7.
  void pipelineZbh1() {
    const AnalysisResult r = analyse("pp_zbh1");
    QCOMPARE(r.pipeline.schedule, std::string("zb-h1"));
    QCOMPARE(r.pipeline.scheduleSource, std::string("knob"));
    NEAR(r.pipeline.bubbleFraction, 1.0 / 7);
    NEAR(r.pipeline.bubbleFractionTheory, 1.0 / 7);
    NEAR(stage(r, 0).wMs, 1.0);
    QCOMPARE(stage(r, 1).perStep.size(), size_t{1});
    NEAR(stage(r, 1).perStep[0].bubbleMs, 1.0);
    NEAR(stage(r, 1).perStep[0].bubbleFractionTheory, 1.0 / 7);
    QCOMPARE(r.knobChanges.size(), size_t{1});
    QCOMPARE(r.knobChanges[0].step, int64_t{0});
    QCOMPARE(r.knobChanges[0].values.at("pp.schedule"), std::string("zb-h1"));
  }

  // PyTorch's ZBV (tests/data/pp_zbv), p = 2, m = 3, every op 1 ms, V placement (rank 0 holds
  // virtual stages 0 and 3, rank 1 holds 1 and 2), the order of tst_schedule's handCaseZbvP2M3:
  // rank 0 idles only 18-19 (waiting for nobody, the step ends), rank 1 only 0-1 (for rank 0's
  // F0): bubble 1/19 on both; theory and simulation (balanced, no latency) are the same 1/19.
  void pipelineZbv() {
    const AnalysisResult r = analyse("pp_zbv");
    QCOMPARE(r.pipeline.schedule, std::string("zbv"));
    QCOMPARE(r.pipeline.virtualStages, 2);
    QCOMPARE(r.pipeline.microbatches, 3);
    NEAR(r.pipeline.bubbleFraction, 1.0 / 19);
    NEAR(r.pipeline.bubbleFractionTheory, 1.0 / 19);
    NEAR(stage(r, 0).bubbleFractionSimulated, 1.0 / 19);
    NEAR(stage(r, 1).bubbleFractionSimulated, 1.0 / 19);
    NEAR(stage(r, 0).wMs, 1.0);
    NEAR(waitFor(stage(r, 1), 0), 1.0);
    QCOMPARE(stage(r, 0).microBatches.size(), size_t{6});  // (mb, chunk) pairs
  }

  // PyTorch's interleaved zero bubble (tests/data/pp_interleaved_zb), p = 2, m = 2, v = 2,
  // every op 1 ms, tst_schedule's handCaseInterleavedZbP2M2: rank 0 waits 4-5 for rank 1's
  // B0c1, rank 1 waits 0-1 for rank 0's F0; window 13: bubble 1/13, theory and simulation too.
  void pipelineInterleavedZb() {
    const AnalysisResult r = analyse("pp_interleaved_zb");
    QCOMPARE(r.pipeline.schedule, std::string("interleaved-zb"));
    QCOMPARE(r.pipeline.virtualStages, 2);
    NEAR(r.pipeline.bubbleFraction, 1.0 / 13);
    NEAR(r.pipeline.bubbleFractionTheory, 1.0 / 13);
    NEAR(stage(r, 0).bubbleFractionSimulated, 1.0 / 13);
    NEAR(stage(r, 1).bubbleFractionSimulated, 1.0 / 13);
    NEAR(waitFor(stage(r, 0), 1), 1.0);
    NEAR(waitFor(stage(r, 1), 0), 1.0);
  }

  // Two ranks, one step window of 10 ms each; rank 1 is 0.3 ms later on the session clock
  // (per-rank windows: same answers). Rank 2 has no events. Relative times:
  //   compute  rank 0: 0-6 backward, 9-9.5 optimizer; rank 1: 0-5, 9-9.5
  //   comm     allgather 0.5-1.5 (not gradient); bucket 0 allreduce 2-4; bucket 1 5-7;
  //            bucket 2 6-8 on stream 13 and 7-8.5 on stream 14 (counted once: 6-8.5)
  //   outside  rank 0: kernel -2..-1 and a barrier 10.5-11 -> outside_steps_ms 1.5
  // rank 0: C = 6.5, M = 1 + 2 + 3.5 = 6.5, C∩M = 1 + 2 + 1 = 4
  //   compute 6.5-4 = 2.5, overlapped 4, exposed 6.5-4 = 2.5, idle 10-(6.5+6.5-4) = 1
  // rank 1: C = 5.5, M = 6.5, C∩M = 1 + 2 = 3 -> 2.5, 3, 3.5, idle 10-9 = 1
  // gradient comm G = 2-4 ∪ 5-8.5 = 5.5 on both; hidden rank 0: 2-4, 5-6 = 3 -> 3/5.5;
  //   rank 1: 2-4 = 2 -> 2/5.5; overlap_ratio (6/11 + 4/11)/2 = 5/11; exposed (2.5+3.5)/2 = 3
  // buckets: 0 hidden on both (ratio 1); 1: rank 0 1/2, rank 1 0 -> 0.25, hidden mean 0.5,
  //   exposed 1.5; 2: 6-8.5 = 2.5, nothing hidden, bytes 1 MiB + 1 MiB per step
  void dataParallel() {
    const AnalysisResult r = analyse("dp_buckets");
    QCOMPARE(r.ranks, (std::vector<RankId>{0, 1, 2}));
    QCOMPARE(r.breakdown.size(), size_t{3});
    const RankBreakdown& b0 = r.breakdown[0];
    NEAR(b0.stepMs, 10.0);
    NEAR(b0.computeMs, 2.5);
    NEAR(b0.overlappedCommMs, 4.0);
    NEAR(b0.exposedCommMs, 2.5);
    NEAR(b0.idleMs, 1.0);
    NEAR(b0.computeTotalMs, 6.5);
    NEAR(b0.outsideStepsMs, 1.5);
    const RankBreakdown& b1 = r.breakdown[1];
    NEAR(b1.computeMs, 2.5);
    NEAR(b1.overlappedCommMs, 3.0);
    NEAR(b1.exposedCommMs, 3.5);
    NEAR(b1.idleMs, 1.0);
    NEAR(b1.outsideStepsMs, 0.0);
    QCOMPARE(r.breakdown[2].steps, 0);  // the rank with no events
    QVERIFY(std::isnan(r.breakdown[2].computeMs));
    for (const RankBreakdown& b : r.breakdown)
      if (b.steps) NEAR(b.computeMs + b.overlappedCommMs + b.exposedCommMs + b.idleMs, b.stepMs);

    const DataParallelResult& dp = r.dataParallel;
    QVERIFY(dp.present);
    QCOMPARE(dp.perRank.size(), size_t{2});
    NEAR(dp.perRank[0].overlapRatio, 3.0 / 5.5);
    NEAR(dp.perRank[1].overlapRatio, 2.0 / 5.5);
    NEAR(dp.overlapRatio, 5.0 / 11);
    NEAR(dp.exposedCommMs, 3.0);
    QCOMPARE(dp.perStep.size(), size_t{1});
    NEAR(dp.perStep[0].commMs, 5.5);
    NEAR(dp.perStep[0].exposedCommMs, 3.0);  // (2.5 + 3.5) / 2
    QCOMPARE(dp.buckets.size(), size_t{3});
    NEAR(dp.buckets[0].overlapRatio, 1.0);
    NEAR(dp.buckets[0].readyMs, 2.0);
    NEAR(dp.buckets[0].commStartMs, 2.0);
    NEAR(dp.buckets[0].commEndMs, 4.0);
    NEAR(dp.buckets[0].bytes, 4194304.0);
    NEAR(dp.buckets[1].overlapRatio, 0.25);
    NEAR(dp.buckets[1].hiddenMs, 0.5);
    NEAR(dp.buckets[1].exposedMs, 1.5);
    NEAR(dp.buckets[2].commMs, 2.5);
    NEAR(dp.buckets[2].hiddenMs, 0.0);
    NEAR(dp.buckets[2].overlapRatio, 0.0);
    NEAR(dp.buckets[2].commEndMs, 8.5);
    NEAR(dp.buckets[2].bytes, 2097152.0);
    QCOMPARE(r.sources.at("data_parallel.buckets[2]").size(), size_t{4});  // 2 events x 2 ranks

    // Bandwidth (n = 2 ranks share comm hash 7; rank 2 is not in it):
    //   allgather 8 MiB in 1 ms: algbw 8388608 B / 1e6 ns = 8.388608 GB/s, busbw x (n-1)/n = 4.194304
    //   allreduce [4 MiB, 8 MiB): 4 ops x 4194304 B in 4 x 2 ms = 2.097152 GB/s, busbw x 2(n-1)/n = 1
    //   allreduce [1 MiB, 2 MiB): 4 x 1048576 B in 2+1.5+2+1.5 = 7 ms -> 0.599186 GB/s
    QCOMPARE(r.collectives.size(), size_t{3});
    const BandwidthClass& ag = r.collectives[0];
    QCOMPARE(ag.collective, std::string("allgather"));
    QCOMPARE(ag.ranks, 2);
    NEAR(ag.algbwGBps, 8.388608);
    NEAR(ag.busbwGBps, 4.194304);
    const BandwidthClass& small = r.collectives[1];
    QCOMPARE(small.sizeClassBytes, int64_t{1048576});
    QCOMPARE(small.count, uint64_t{4});
    NEAR(small.algbwGBps, 4.0 * 1048576 / 7e6);
    NEAR(small.timeMs, 1.75);
    NEAR(r.collectives[2].algbwGBps, 2.097152);
    NEAR(r.collectives[2].busbwGBps, 2.097152);

    // Stragglers: compute 6.5 (rank 0) vs 5.5 -> skew 1, rank 0 is waited for.
    NEAR(r.stragglers.perStep.at(0).skewMs, 1.0);
    QCOMPARE(r.stragglers.perStep.at(0).straggler, 0);

    // Critical path: rank 1 ends last (optimizer 9.3-9.8). Back: its bucket-2 allreduce on
    // stream 14 (7.3-8.8, wait 8.8-9.3), bucket 1 (5.3-7.3), backward 0.3-5.3; 0-0.3 waiting
    // for rank 1's clock shift. 9.8 = compute 5 + 0.5, comm 1.5 + 2, wait 0.5 + 0.3.
    const CriticalPathStep& cp = r.criticalPath.at(0);
    NEAR(cp.lengthMs, 9.8);
    NEAR(cp.computeMs, 5.5);
    NEAR(cp.commMs, 3.5);
    NEAR(cp.waitMs, 0.8);
    QCOMPARE(cp.segments.size(), size_t{4});

    // Exposed-communication overlays of rank 0: M \ C = 6-8.5 (relative).
    std::vector<Overlay> exposed;
    for (const Overlay& o : r.overlays)
      if (o.kind == OverlayKind::ExposedComm && o.rank == 0) exposed.push_back(o);
    QCOMPARE(exposed.size(), size_t{1});
    QCOMPARE(exposed[0].endNs - exposed[0].startNs, int64_t{2'500'000});
  }

  // Three ranks, two steps; each computes, then an allreduce (same comm hash and seq) that
  // ends when the slowest has arrived.
  //   step 0 (window 0-10): compute 4, 5, 8 -> skew 4, straggler 2, others wait (4+3)/2 = 3.5
  //   step 1 (window 12-21): compute 4, 7, 6 -> skew 3, straggler 1, wait (3+1)/2 = 2
  // mean skew 3.5; each of ranks 1 and 2 straggles once -> slowest rank 1 (lowest on ties).
  // Steps: 10 and 9 ms -> mean 9.5, p50 (9+10)/2 = 9.5.
  // Bandwidth: 6 allreduces of 3e6 B (class [2 MiB, 4 MiB)) taking 5+4+1 + 4+1+2 = 17 ms:
  //   algbw 18e6 / 17e6 GB/s; busbw x 2(3-1)/3.
  // Critical path of step 0: rank 0's allreduce (4-9) waited for rank 2 (arrived at 8):
  //   rank 2's compute 0-8, then rank 0's allreduce from 8 to 9: 9 ms, compute 8, comm 1;
  //   on the path rank 2 holds 8 ms, rank 0 (whose allreduce ends last, lowest rank) 1 ms.
  void stragglers() {
    const AnalysisResult r = analyse("straggler");
    QCOMPARE(r.steps.count, 2);
    NEAR(r.steps.meanMs, 9.5);
    NEAR(r.steps.p50Ms, 9.5);
    QCOMPARE(r.stragglers.perStep.size(), size_t{2});
    NEAR(r.stragglers.perStep[0].skewMs, 4.0);
    QCOMPARE(r.stragglers.perStep[0].straggler, 2);
    NEAR(r.stragglers.perStep[0].waitMs, 3.5);
    NEAR(r.stragglers.perStep[1].skewMs, 3.0);
    QCOMPARE(r.stragglers.perStep[1].straggler, 1);
    NEAR(r.stragglers.perStep[1].waitMs, 2.0);
    NEAR(r.stragglers.meanSkewMs, 3.5);
    QCOMPARE(r.stragglers.slowestRank, 1);
    QCOMPARE(r.collectives.size(), size_t{1});
    QCOMPARE(r.collectives[0].ranks, 3);
    QCOMPARE(r.collectives[0].sizeClassBytes, int64_t{2097152});
    NEAR(r.collectives[0].algbwGBps, 18.0 / 17);
    NEAR(r.collectives[0].busbwGBps, 18.0 / 17 * 4 / 3);
    const CriticalPathStep& cp = r.criticalPath.at(0);
    NEAR(cp.lengthMs, 9.0);
    NEAR(cp.computeMs, 8.0);
    NEAR(cp.commMs, 1.0);
    NEAR(cp.perRankMs.at(2), 8.0);
    NEAR(cp.perRankMs.at(0), 1.0);
    QCOMPARE(cp.segments.front().rank, 2);
    // Rank 0 breakdown: exposed 5 (step 0: 4-9) and 4 (step 1: 4-8) -> 4.5
    NEAR(r.breakdown[0].exposedCommMs, 4.5);
    NEAR(r.breakdown[0].computeMs, 4.0);
  }

  // Two ranks (N = 2), four steps; disco.sparsity 0 (metadata) then 0.5 from step 2 (knob).
  // Layer 0 dense: L_comp 2, L_comm 4 ms, 8e6 B. At S = 0.5: L_comm 4(1-0.5) = 2,
  //   L_comp 2(1 - (N-1)/N S) = 2 * 0.75 = 1.5, 4e6 B -> B = 4e6 / 2 ms = 2 GB/s.
  //   Dense back: comm 2/(1-0.5) = 4, comp 1.5/0.75 = 2, A = 2, S_eql = (4-2)/(4-2+1) = 2/3.
  // Layer 1: its own knob disco.sparsity.1 rules (docs/TRAINER.md): 0.25 (metadata) in steps
  //   0-1, 0.5 in step 2 (the job set it with disco.sparsity), 0.25 again in step 3 (set on its
  //   own, below the global 0.5: under a max rule it would stay 0.5). L_comm 1, L_comp 3
  //   throughout; at the current S = 0.25: comm dense 1/0.75 = 4/3, comp dense 3/(1 - 0.125) =
  //   24/7, A = 7/18 < 1: not communication-bound, S_eql = 0. Accuracy at 0.25: steps 0, 1, 3
  //   (0.9 + 0.92 + 0.86)/3; at 0.5: step 2, 0.88.
  // Accuracy 0.9, 0.92 (S = 0) and 0.88, 0.86 (S = 0.5) -> 0.91 and 0.87.
  // Benchmark rows (counters after the steps): (0, 3072 B, 0.3 / 0.4 ms, 0.9), (0.5, 1536 B,
  // 0.2 / 0.3, 0.88), independent (1, 0 B, 0.05 / 0.06, 0.8).
  void disco() {
    const AnalysisResult r = analyse("disco");
    QCOMPARE(r.disco.size(), size_t{2});
    const DiscoLayer& l0 = r.disco[0];
    QCOMPARE(l0.nodes, 2);
    NEAR(l0.sparsity, 0.5);
    NEAR(l0.lCommMs, 2.0);
    NEAR(l0.lCompMs, 1.5);
    NEAR(l0.bytes, 4e6);
    NEAR(l0.bandwidthGBps, 2.0);
    NEAR(l0.commDenseMs, 4.0);
    NEAR(l0.compDenseMs, 2.0);
    NEAR(l0.ratioA, 2.0);
    NEAR(l0.equilibriumSparsity, 2.0 / 3);
    QVERIFY(l0.commBound);
    QCOMPARE(l0.bySparsity.size(), size_t{2});
    NEAR(l0.bySparsity[0].sparsity, 0.0);
    NEAR(l0.bySparsity[0].lCommMs, 4.0);
    NEAR(l0.bySparsity[0].lCompMs, 2.0);
    NEAR(l0.bySparsity[0].accuracy, 0.91);
    NEAR(l0.bySparsity[1].accuracy, 0.87);
    QCOMPARE(l0.bySparsity[1].samples, 4);  // 2 steps x 2 ranks
    const DiscoLayer& l1 = r.disco[1];
    NEAR(l1.sparsity, 0.25);
    QCOMPARE(l1.bySparsity.size(), size_t{2});
    NEAR(l1.bySparsity[0].sparsity, 0.25);
    QCOMPARE(l1.bySparsity[0].samples, 6);  // steps 0, 1, 3 x 2 ranks
    NEAR(l1.bySparsity[0].accuracy, (0.9 + 0.92 + 0.86) / 3);
    NEAR(l1.bySparsity[1].sparsity, 0.5);
    NEAR(l1.bySparsity[1].accuracy, 0.88);
    NEAR(l1.commDenseMs, 4.0 / 3);
    NEAR(l1.compDenseMs, 24.0 / 7);
    NEAR(l1.ratioA, 7.0 / 18);
    NEAR(l1.equilibriumSparsity, 0.0);
    QVERIFY(!l1.commBound);
    QCOMPARE(r.knobChanges.size(), size_t{2});
    QCOMPARE(r.knobChanges[0].step, int64_t{2});
    QCOMPARE(r.knobChanges[1].step, int64_t{3});
    // The inference benchmark's counters (rank 0): three rows in order, the last independent.
    QCOMPARE(r.discoInference.size(), size_t{3});
    NEAR(r.discoInference[0].sparsity, 0.0);
    NEAR(r.discoInference[0].bytes, 3072.0);
    NEAR(r.discoInference[0].latencyPipelinedMs, 0.3);
    NEAR(r.discoInference[0].latencyWaitMs, 0.4);
    NEAR(r.discoInference[1].sparsity, 0.5);
    NEAR(r.discoInference[1].accuracy, 0.88);
    QVERIFY(!r.discoInference[1].independent);
    QVERIFY(r.discoInference[2].independent);
    NEAR(r.discoInference[2].sparsity, 1.0);
    NEAR(r.discoInference[2].bytes, 0.0);
    NEAR(r.discoInference[2].accuracy, 0.8);
  }

  // Steps 0 (0-10) and 1 (10-20) complete, step 2 has no end; kernels 1-4, 12-14, a kernel
  // without an end (ignored) and 21-25 outside every complete window.
  void missingEnds() {
    const AnalysisResult r = analyse("missing_end");
    QCOMPARE(r.steps.count, 2);
    QCOMPARE(r.steps.incomplete, 1);
    NEAR(r.breakdown[0].computeMs, 2.5);  // (3 + 2) / 2
    NEAR(r.breakdown[0].idleMs, 7.5);
    NEAR(r.breakdown[0].outsideStepsMs, 4.0);
  }

  // PyTorch profiler trace: ProfilerStep#5 (0-10) and #6 (10-18) on the CPU thread; on the GPU
  // gemm 1-5 with an NCCL kernel 4-7 (overlap 1), gemm 11-15, NCCL 15-16, gemm 19-20 outside.
  //   step 5: compute 3, overlapped 1, exposed 2, idle 4; step 6: 4, 0, 1, 3
  //   means 3.5, 0.5, 1.5, 3.5 over a 9 ms step; outside 1.
  void kinetoProfilerSteps() {
    const AnalysisResult r = analyse("kineto_steps");
    QCOMPARE(r.steps.count, 2);
    QCOMPARE(r.steps.perStep[0].step, int64_t{5});
    NEAR(r.steps.meanMs, 9.0);
    const RankBreakdown& b = r.breakdown.at(0);
    NEAR(b.computeMs, 3.5);
    NEAR(b.overlappedCommMs, 0.5);
    NEAR(b.exposedCommMs, 1.5);
    NEAR(b.idleMs, 3.5);
    NEAR(b.outsideStepsMs, 1.0);
  }

  // Live: events arrive in time order; a step is analysed once every rank has sent events
  // from after it; the final result equals the whole-store analysis.
  void incrementalMatchesWhole() {
    TraceStore whole = load("straggler");
    const std::string want = analysisToJson(analyzeStore(whole));
    TraceStore live;
    for (const auto& [rank, info] : whole.ranks()) live.setRank(info);
    live.metadata() = whole.metadata();
    struct E {
      TrackId t;
      size_t i;
    };
    std::vector<E> all;
    for (TrackId t = 0; t < whole.trackCount(); ++t) {
      live.addTrack(whole.track(t));
      for (size_t i = 0; i < whole.events(t).size(); ++i) all.push_back({t, i});
    }
    std::sort(all.begin(), all.end(), [&](const E& a, const E& b) {
      return whole.events(a.t).start(a.i) < whole.events(b.t).start(b.i);
    });
    Analyzer an;
    const int64_t origin = whole.timeSpan().first;
    auto feedUntil = [&](double ms, size_t& pos) {
      for (; pos < all.size(); ++pos) {
        const TrackEvents& ev = whole.events(all[pos].t);
        if (ev.start(all[pos].i) >= origin + static_cast<int64_t>(ms * 1e6)) break;
        std::vector<Attr> attrs(ev.attrs(all[pos].i).begin(), ev.attrs(all[pos].i).end());
        for (Attr& a : attrs)
          if (a.type == AttrType::String) a.bits = live.intern(whole.str(a.asString()));
        const EventRecord rec = ev.record(all[pos].i);
        live.append(all[pos].t, {rec.startNs, rec.endNs, live.intern(whole.str(rec.name)), rec.kind}, attrs);
      }
    };
    size_t pos = 0;
    feedUntil(9.5, pos);
    QCOMPARE(an.update(live), 0);  // step 0 still open
    feedUntil(12.5, pos);          // step 1 began on every rank
    QCOMPARE(an.update(live), 1);
    QCOMPARE(an.analysedSteps(), 1);
    QCOMPARE(an.result(live).steps.count, 1);
    feedUntil(1e9, pos);
    QCOMPARE(an.update(live), 0);  // nothing after step 1 yet
    QCOMPARE(an.finish(live), 1);
    QCOMPARE(analysisToJson(an.result(live)), want);
  }

  // Live window (docs/RELIABILITY.md "Live memory"): a synthetic 2-rank DP job fed in time order,
  // analysed after each slice and then cut at min(a third into the slice, what the analyser says
  // is safe). The analyser never lets a step be cut before it is analysed; what it keeps is the
  // steps still in memory, each with exactly the whole analysis' numbers; its metric sources
  // point at the right events after every re-base.
  void liveWindowEvictionKeepsTheStepsInMemory() {
    TraceStore src;
    (void)synthesizeTrace(src, {.ranks = 2, .steps = 16, .kernelsPerStep = 8, .buckets = 3});
    src.flush();
    TraceStore ref = src;
    const AnalysisResult whole = analyzeStore(ref);
    std::map<int64_t, std::pair<double, double>> wholeSteps;  // step -> (time, exposed on rank 0)
    for (const StepStat& st : whole.steps.perStep) wholeSteps[st.step].first = st.timeMs;
    for (const BreakdownStep& b : whole.breakdown.front().perStep) wholeSteps[b.step].second = b.exposedCommMs;
    QCOMPARE(whole.steps.count, 16);

    TraceStore live;
    for (const auto& [rank, info] : src.ranks()) live.setRank(info);
    live.metadata() = src.metadata();
    for (TrackId t = 0; t < src.trackCount(); ++t) (void)live.addTrack(src.track(t));
    Analyzer an;
    QCOMPARE(an.safeEvictBeforeNs(), INT64_MIN);  // nothing may go before the first update
    const auto [t0, t1] = src.timeSpan();
    int64_t cutoff = INT64_MIN;
    for (int slice = 1; slice <= 4; ++slice) {
      const int64_t lo = t0 + (t1 - t0) * (slice - 1) / 4, hi = slice == 4 ? INT64_MAX : t0 + (t1 - t0) * slice / 4;
      for (TrackId t = 0; t < src.trackCount(); ++t) {
        const TrackEvents& ev = src.rawEvents(t);
        for (size_t i = 0; i < ev.size(); ++i) {
          if (ev.start(i) < lo || ev.start(i) >= hi) continue;
          std::vector<Attr> attrs(ev.attrs(i).begin(), ev.attrs(i).end());
          for (Attr& a : attrs)
            if (a.type == AttrType::String) a.bits = live.intern(src.str(a.asString()));
          const EventRecord rec = ev.record(i);
          live.append(t, {rec.startNs, rec.endNs, live.intern(src.str(rec.name)), rec.kind}, attrs);
        }
      }
      (void)an.update(live);
      const int64_t safe = an.safeEvictBeforeNs();
      // Every step window that starts at or after `safe` may still be pending; none before it is.
      const AnalysisResult before = an.result(live);
      std::set<int64_t> analysed;
      for (const StepStat& st : before.steps.perStep) analysed.insert(st.step);
      for (const StepStat& st : whole.steps.perStep)
        if (st.startNs + static_cast<int64_t>(st.spanMs * 1e6) <= safe && st.startNs >= cutoff)
          QVERIFY2(analysed.count(st.step), qPrintable(QString("step %1 ended before the safe cut, unanalysed").arg(st.step)));
      cutoff = std::max(cutoff, std::min(lo + (std::min(hi, t1) - lo) / 3, safe));
      const std::vector<size_t> dropped = live.evictBefore(cutoff);
      an.evicted(dropped, cutoff);
      const AnalysisResult r = an.result(live);
      for (const StepStat& st : r.steps.perStep) {
        QVERIFY2(st.startNs + static_cast<int64_t>(st.spanMs * 1e6) >= cutoff - 1000,
                 qPrintable(QString("step %1 ended before the cut but was kept").arg(st.step)));
        QCOMPARE(st.timeMs, wholeSteps.at(st.step).first);
      }
      for (const BreakdownStep& b : r.breakdown.front().perStep)
        QCOMPARE(b.exposedCommMs, wholeSteps.at(b.step).second);
      for (const auto& [key, refs] : r.sources)
        for (const EventRef& e : refs) {
          QVERIFY(e.index < live.rawEvents(e.track).size());
          QVERIFY(live.rawEvents(e.track).start(e.index) >= cutoff);
        }
    }
    QVERIFY(live.evictedEvents() > 0);
    (void)an.finish(live);
    const AnalysisResult end = an.result(live);
    QVERIFY(end.steps.count > 0 && end.steps.count < 16);
    for (const StepStat& st : end.steps.perStep) QCOMPARE(st.timeMs, wholeSteps.at(st.step).first);
    qInfo("%zu events left memory, %zu kept; the live analysis ends with %d of the 16 steps",
          static_cast<size_t>(live.evictedEvents()), live.eventCount(), end.steps.count);
  }

  // The real CLI prints the contract keys.
  void cliAnalyzeJson() {
    QProcess p;
    p.start(QString(TRAINSCOPE_BIN_DIR) + "/trainscope-cli",
            {"analyze", QString(TRAINSCOPE_TEST_DATA) + "/dp_buckets/trace.json", "--json"});
    QVERIFY(p.waitForFinished(60000));
    QCOMPARE(p.exitCode(), 0);
    const QJsonObject d = QJsonDocument::fromJson(p.readAllStandardOutput()).object();
    for (const char* k : {"steps", "knob_changes", "breakdown", "pipeline", "data_parallel", "collectives",
                          "stragglers", "disco", "critical_path"})
      QVERIFY2(d.contains(k), k);
    const QJsonObject steps = d["steps"].toObject();
    QCOMPARE(steps["count"].toInt(), 1);
    QCOMPARE(steps["step_time_ms"].toObject()["mean"].toDouble(), 10.0);
    QVERIFY(steps["step_time_ms"].toObject().contains("p50"));
    const QJsonObject r0 = d["breakdown"].toObject()["per_rank"].toArray()[0].toObject();
    for (const char* k :
         {"compute_ms", "overlapped_comm_ms", "exposed_comm_ms", "idle_ms", "outside_steps_ms"})
      QVERIFY2(r0.contains(k), k);
    QCOMPARE(r0["outside_steps_ms"].toDouble(), 1.5);
    const QJsonObject dp = d["data_parallel"].toObject();
    QVERIFY(near(dp["overlap_ratio"].toDouble(), 5.0 / 11));
    QCOMPARE(dp["exposed_comm_ms"].toDouble(), 3.0);
    QCOMPARE(dp["buckets"].toArray()[1].toObject()["overlap_ratio"].toDouble(), 0.25);
    const QJsonObject pp = d["pipeline"].toObject();
    for (const char* k : {"bubble_fraction", "bubble_fraction_theory", "per_stage"})
      QVERIFY2(pp.contains(k), k);
    QVERIFY(pp["bubble_fraction"].isNull());  // no pipeline in this trace

    QProcess q;
    q.start(QString(TRAINSCOPE_BIN_DIR) + "/trainscope-cli",
            {"analyze", QString(TRAINSCOPE_TEST_DATA) + "/disco/trace.json", "--json"});
    QVERIFY(q.waitForFinished(60000));
    const QJsonObject l0 = QJsonDocument::fromJson(q.readAllStandardOutput())
                               .object()["disco"]
                               .toObject()["layers"]
                               .toArray()[0]
                               .toObject();
    for (const char* k : {"sparsity", "l_comm_ms", "l_comp_ms", "bytes", "equilibrium_sparsity"})
      QVERIFY2(l0.contains(k), k);
    QVERIFY(near(l0["equilibrium_sparsity"].toDouble(), 2.0 / 3));

    QProcess bad;
    bad.start(QString(TRAINSCOPE_BIN_DIR) + "/trainscope-cli", {"analyze", "/nonexistent.tsdb"});
    QVERIFY(bad.waitForFinished(60000));
    QCOMPARE(bad.exitCode(), 1);
    QVERIFY(bad.readAllStandardError().contains("trainscope-cli:"));
  }
  // Issue 38. Rank 0 (CPU, like a gloo job): the main thread's op [0,60) us contains a
  // collective call [20,50) (c10d::allreduce_ inside AccumulateGrad); the gloo worker thread
  // runs the bucket's all-reduce [25,80). The thread inside the call is not computing:
  // C = [0,20) u [50,60) (30), M = [20,80) (60), C & M = [50,60): compute 20, overlapped 10,
  // exposed 50, idle 20; gradient overlap 10 / 55. Rank 1 (GPU, no buckets marked): an NCCL
  // all-reduce recorded as a Kernel (HTA's ^nccl.*Kernel) on stream 13 [40,90), a gemm [0,50)
  // on stream 7: communication, not compute, and the step's gradient communication: compute
  // 40, overlapped 10, exposed 40, idle 10; overlap 10 / 50.
  void collectiveCallsAreNotCompute() {
    TraceStore s;
    const StringId step = s.intern("ProfilerStep#1"), op = s.intern("autograd::engine::evaluate_function: AccumulateGrad"),
                   call = s.intern("c10d::allreduce_"), gloo = s.intern("gloo:all_reduce"),
                   gemm = s.intern("sgemm"), nccl = s.intern("ncclDevKernel_AllReduce_Sum_f32_RING_LL");
    constexpr int64_t us = 1000;
    const Attr stepAttr = Attr::ofInt(AttrKey::Step, 1);
    const Attr bucket = Attr::ofInt(AttrKey::Bucket, 0);
    for (int r = 0; r < 2; ++r) {
      RankInfo ri;
      ri.rank = r;
      s.setRank(ri);
    }
    const TrackId main0 = s.addTrack({0, TrackKind::CpuThread, "main", 1});
    const TrackId worker0 = s.addTrack({0, TrackKind::CpuThread, "gloo", 2});
    s.append(main0, {0, 100 * us, step, EventKind::Step}, std::span(&stepAttr, 1));
    s.append(main0, {0, 60 * us, op, EventKind::Kernel});
    s.append(main0, {20 * us, 50 * us, call, EventKind::Collective});
    s.append(worker0, {25 * us, 80 * us, gloo, EventKind::Collective}, std::span(&bucket, 1));
    const TrackId main1 = s.addTrack({1, TrackKind::CpuThread, "main", 3});
    const TrackId compute1 = s.addTrack({1, TrackKind::CudaStream, "stream 7", 7});
    const TrackId comm1 = s.addTrack({1, TrackKind::CudaStream, "stream 13", 13});
    s.append(main1, {0, 100 * us, step, EventKind::Step}, std::span(&stepAttr, 1));
    s.append(compute1, {0, 50 * us, gemm, EventKind::Kernel});
    s.append(comm1, {40 * us, 90 * us, nccl, EventKind::Kernel});
    s.flush();
    const AnalysisResult a = analyzeStore(s);
    auto near = [](double x, double y) { return std::abs(x - y) < 1e-12; };
    const RankBreakdown& b0 = a.breakdown.at(0);
    QVERIFY2(near(b0.computeMs, 0.020) && near(b0.overlappedCommMs, 0.010) && near(b0.exposedCommMs, 0.050) &&
                 near(b0.idleMs, 0.020),
             qPrintable(QString("%1 %2 %3 %4").arg(b0.computeMs).arg(b0.overlappedCommMs).arg(b0.exposedCommMs).arg(b0.idleMs)));
    const RankBreakdown& b1 = a.breakdown.at(1);
    QVERIFY2(near(b1.computeMs, 0.040) && near(b1.overlappedCommMs, 0.010) && near(b1.exposedCommMs, 0.040) &&
                 near(b1.idleMs, 0.010),
             qPrintable(QString("%1 %2 %3 %4").arg(b1.computeMs).arg(b1.overlappedCommMs).arg(b1.exposedCommMs).arg(b1.idleMs)));
    QVERIFY(a.dataParallel.present);
    QCOMPARE(a.dataParallel.perRank.size(), size_t{2});
    QVERIFY(near(a.dataParallel.overlapRatio, (10.0 / 55.0 + 10.0 / 50.0) / 2));
  }
};

QTEST_GUILESS_MAIN(TstAnalysis)
#include "tst_analysis.moc"
