// Pipeline schedules (core/schedule.h) and their simulator (core/schedule_sim.h): the op order
// of small cases written out by hand, dependencies, deadlock detection, each micro-batch's ops
// exactly once per stage, peak in-flight activations and bubble fractions against the papers'
// formulas over a grid of (p, m, v, k).
//
// Conventions (docs/SCHEDULES.md): durations are per micro-batch and stage (a chunk or segment
// op takes 1/v or 1/k of it); for gpipe/1f1b/interleaved/seq1f1b the B op includes W
// ("backward" in the papers); bubble fraction = idle time / step time per stage, step time =
// until the last stage finishes.
#include <QtTest>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "trainscope/core/sched/schedule.h"
#include "trainscope/core/sched/schedule_sim.h"

using namespace trainscope::core;

namespace {

Schedule make(ScheduleKind kind, int p, int m, int v = 1, int k = 1) {
  auto s = generateSchedule({kind, p, m, v, k});
  if (!s) qFatal("%s", s.status().toString().c_str());
  return s.value();
}

ScheduleSimulation simulate(const Schedule& s, const OpDurations& d = {}) {
  auto r = simulateSchedule(s, d);
  if (!r) qFatal("%s", r.status().toString().c_str());
  return r.value();
}

// F = 1, B = 1, no separate W: the "unit time" of the GPipe and 1F1B papers.
const OpDurations kUnitFB{1, 1, 0};

std::string chart(const Schedule& s, const OpDurations& d = kUnitFB) {
  return renderTimeline(s, simulate(s, d), 1.0);
}

std::string stageOps(const Schedule& s, int stage) {
  return formatStageOps(s.stages[static_cast<size_t>(stage)], false);
}

PipeOp op(OpKind kind, int mb, Payload payload = Payload::None, int peer = -1) {
  PipeOp o;
  o.kind = kind;
  o.microBatch = mb;
  o.payload = payload;
  o.peer = peer;
  return o;
}

}  // namespace

class TstSchedule : public QObject {
  Q_OBJECT

 private slots:
  void namesRoundTrip() {
    for (ScheduleKind k : kAllSchedules) QCOMPARE(parseSchedule(scheduleName(k)).value(), k);
    for (ScheduleKind k : kTorchSchedules) QCOMPARE(parseSchedule(scheduleName(k)).value(), k);
    QCOMPARE(scheduleNameList(),
             std::string("gpipe, 1f1b, interleaved-1f1b, zb-h1, seq1f1b, interleaved-zb, zbv"));
    QVERIFY(!splitsBackward(ScheduleKind::OneFOneB));
    QVERIFY(splitsBackward(ScheduleKind::ZbH1) && splitsBackward(ScheduleKind::InterleavedZb) &&
            splitsBackward(ScheduleKind::Zbv));
    auto bad = parseSchedule("1F1B");
    QVERIFY(!bad);
    QVERIFY(bad.status().message().find("one of: gpipe, 1f1b") != std::string::npos);
  }

  void invalidParamsRefused_data() {
    QTest::addColumn<int>("kind");
    QTest::addColumn<int>("p");
    QTest::addColumn<int>("m");
    QTest::addColumn<int>("v");
    QTest::addColumn<int>("k");
    QTest::addColumn<QString>("message");
    auto row = [](const char* name, ScheduleKind kind, int p, int m, int v, int k, const char* msg) {
      QTest::newRow(name) << static_cast<int>(kind) << p << m << v << k << QString(msg);
    };
    row("m=0", ScheduleKind::OneFOneB, 4, 0, 1, 1, "micro-batches must be >= 1, got 0");
    row("p=0", ScheduleKind::GPipe, 0, 4, 1, 1, "stages must be >= 1, got 0");
    row("v=0", ScheduleKind::Interleaved1F1B, 2, 4, 0, 1, "virtual stages must be >= 1, got 0");
    row("k=0", ScheduleKind::Seq1F1B, 2, 4, 1, 0, "segments must be >= 1, got 0");
    row("v on 1f1b", ScheduleKind::OneFOneB, 4, 8, 2, 1,
        "virtual stages apply to interleaved-1f1b, interleaved-zb and zbv only; 1f1b needs 1");
    row("zbv v=1", ScheduleKind::Zbv, 2, 4, 1, 1, "zbv needs exactly 2 virtual stages per stage (its V), got 1");
    row("zbv v=3", ScheduleKind::Zbv, 2, 4, 3, 1, "zbv needs exactly 2 virtual stages per stage (its V), got 3");
    row("interleaved-zb rounds", ScheduleKind::InterleavedZb, 4, 9, 2, 1,
        "interleaved-zb needs micro-batches divisible by the rounds max(1, m/p) = 2 (PyTorch's rule), got m=9, p=4");
    row("interleaved v=1", ScheduleKind::Interleaved1F1B, 4, 8, 1, 1, "needs virtual stages >= 2");
    row("interleaved m%p", ScheduleKind::Interleaved1F1B, 4, 6, 2, 1,
        "needs micro-batches divisible by stages (Megatron-LM's rule), got m=6, p=4");
    row("interleaved p=1", ScheduleKind::Interleaved1F1B, 1, 4, 2, 1, "needs at least 2 stages");
    row("segments on zb-h1", ScheduleKind::ZbH1, 4, 8, 1, 2,
        "sequence segments apply to seq1f1b only; zb-h1 needs 1");
    row("too many stages", ScheduleKind::GPipe, kMaxStages + 1, 4, 1, 1, "stages must be <= 1024");
    row("too many units", ScheduleKind::Seq1F1B, 2, 1 << 20, 1, 4, "= 8388608 exceeds 4194304");
  }
  void invalidParamsRefused() {
    QFETCH(int, kind);
    QFETCH(int, p);
    QFETCH(int, m);
    QFETCH(int, v);
    QFETCH(int, k);
    QFETCH(QString, message);
    const ScheduleParams sp{static_cast<ScheduleKind>(kind), p, m, v, k};
    auto s = generateSchedule(sp);
    QVERIFY(!s);
    QCOMPARE(s.status().code(), ErrorCode::InvalidArgument);
    QVERIFY2(QString::fromStdString(s.status().message()).contains(message), s.status().message().c_str());
    QVERIFY(!theoreticalBubbleFraction(sp));
  }

  void layerSplit() {
    QVERIFY(validateLayerSplit({ScheduleKind::OneFOneB, 4, 8}, 6));
    QVERIFY(validateLayerSplit({ScheduleKind::Interleaved1F1B, 2, 4, 2}, 8));
    Status s = validateLayerSplit({ScheduleKind::Interleaved1F1B, 2, 4, 2}, 6);
    QCOMPARE(s.message(),
             std::string("interleaved-1f1b with p=2 v=2 needs the layers divisible by p*v = 4 (equal "
                         "chunks, Megatron-LM's rule), the model has 6"));
    s = validateLayerSplit({ScheduleKind::GPipe, 4, 8}, 3);
    QCOMPARE(s.message(),
             std::string("gpipe with p=4 needs at least 4 layers (one per stage), the model has 3"));
    QVERIFY(!validateLayerSplit({ScheduleKind::GPipe, 4, 0}, 8));  // the schedule's own rules first
  }

  void theoryByName() {
    QCOMPARE(theoreticalBubbleFraction("1f1b", 4, 8).value(), 3.0 / 11);
    QCOMPARE(theoreticalBubbleFraction("interleaved-1f1b", 4, 8, 2).value(), 3.0 / 19);
    QCOMPARE(theoreticalBubbleFraction("seq1f1b", 4, 8, 1, 4).value(), 3.0 / 35);
    QCOMPARE(theoreticalBubbleFraction("zb-h1", 4, 8, 1, 1, {1, 1, 1}).value(), 3.0 / 27);
    QVERIFY(!theoreticalBubbleFraction("pipedream", 4, 8));
    QVERIFY(!theoreticalBubbleFraction("interleaved-1f1b", 4, 6, 2));
  }

  // p = 2, m = 2, F = B = 1 (B includes W). By hand:
  //  GPipe: both stages F0 F1 then B1 B0 (last micro-batch first, as in the paper's figure).
  //   t:      0  1  2  3  4  5  6
  //   stage 0 F0 F1 .  .  B1 B0        stage 0 waits 2 for B1's gradient (stage 1 ends B1 at 4)
  //   stage 1 .  F0 F1 B1 B0 .         makespan 6 = (m+p-1)(F+B); idle 2 per stage: 2/6 = 1/3
  //  1F1B: stage 0 warms up with p-1-0 = 1 forward; stage 1 (last) alternates from the start.
  //   stage 0 F0 F1 .  B0 .  B1        B0's gradient arrives at 3, B1's at 5
  //   stage 1 .  F0 B0 F1 B1 .         makespan 6, bubble 1/3 = (p-1)/(m+p-1), peak 2 and 1
  void handCaseP2M2() {
    const Schedule g = make(ScheduleKind::GPipe, 2, 2);
    QCOMPARE(stageOps(g, 0), std::string("F0 F1 B1 B0"));
    QCOMPARE(stageOps(g, 1), std::string("F0 F1 B1 B0"));
    QCOMPARE(chart(g), std::string("stage 0 |F0F1....B1B0|\n"
                                   "stage 1 |..F0F1B1B0..|\n"));
    const ScheduleSimulation gs = simulate(g, kUnitFB);
    QCOMPARE(gs.makespan, 6.0);
    QCOMPARE(gs.bubbleFraction, 1.0 / 3);
    QCOMPARE(gs.stages[0].idle.size(), size_t{1});
    QCOMPARE(gs.stages[0].idle[0].start, 2.0);
    QCOMPARE(gs.stages[0].idle[0].end, 4.0);
    QCOMPARE(gs.stages[1].idle.size(), size_t{2});

    const Schedule o = make(ScheduleKind::OneFOneB, 2, 2);
    QCOMPARE(stageOps(o, 0), std::string("F0 F1 B0 B1"));
    QCOMPARE(stageOps(o, 1), std::string("F0 B0 F1 B1"));
    // With the communication: Recv right before the consumer, Send right after the producer.
    QCOMPARE(
        formatStageOps(o.stages[0], true),
        std::string("F0, send-act F0 ->1, F1, send-act F1 ->1, recv-grad B0 <-1, B0, recv-grad B1 <-1, B1"));
    QCOMPARE(
        formatStageOps(o.stages[1], true),
        std::string("recv-act F0 <-0, F0, B0, send-grad B0 ->0, recv-act F1 <-0, F1, B1, send-grad B1 ->0"));
    QCOMPARE(chart(o), std::string("stage 0 |F0F1..B0..B1|\n"
                                   "stage 1 |..F0B0F1B1..|\n"));
    const ScheduleSimulation os = simulate(o, kUnitFB);
    QCOMPARE(os.makespan, 6.0);
    QCOMPARE(os.bubbleFraction, 1.0 / 3);
    QCOMPARE(os.stages[0].peakInFlight, 2);
    QCOMPARE(os.stages[1].peakInFlight, 1);
    QCOMPARE(theoreticalBubbleFraction({ScheduleKind::OneFOneB, 2, 2}).value(), 1.0 / 3);
  }

  // ZB-H1, p = 2, m = 2, F = B = W = 1. Stage 1 (s = 1) runs its first s = 1 backward without
  // its W, so B0's input gradient reaches stage 0 one unit earlier than in 1F1B:
  //   t:      0  1  2  3  4  5  6  7
  //   stage 0 F0 F1 .  B0 W0 B1 W1        gradient of B0 arrives at 3, of B1 at 5
  //   stage 1 .  F0 B0 F1 B1 W0 W1
  // makespan 7 = m(F+B+W) + (p-1)(F+B-W); bubble 1/7 per stage. 1F1B with the same work
  // (B op = B+W = 2) takes (m+p-1) 3 = 9, bubble 3/9: ZB-H1's bubble time is a third.
  void handCaseZbH1P2M2() {
    const Schedule z = make(ScheduleKind::ZbH1, 2, 2);
    QVERIFY(z.splitBackward);
    QCOMPARE(stageOps(z, 0), std::string("F0 F1 B0 W0 B1 W1"));
    QCOMPARE(stageOps(z, 1), std::string("F0 B0 F1 B1 W0 W1"));
    const OpDurations unit{1, 1, 1};
    QCOMPARE(chart(z, unit), std::string("stage 0 |F0F1..B0W0B1W1|\n"
                                         "stage 1 |..F0B0F1B1W0W1|\n"));
    const ScheduleSimulation zs = simulate(z, unit);
    QCOMPARE(zs.makespan, 7.0);
    QCOMPARE(zs.bubbleFraction, 1.0 / 7);
    QCOMPARE(theoreticalBubbleFraction({ScheduleKind::ZbH1, 2, 2}, unit).value(), 1.0 / 7);
    const ScheduleSimulation os = simulate(make(ScheduleKind::OneFOneB, 2, 2), unit);
    QCOMPARE(os.makespan, 9.0);
    QCOMPARE((os.makespan - 6) / (zs.makespan - 6), 3.0);  // bubble time 3 vs 1
  }

  // p = 4, m = 8, F = B = 1. 1F1B: stage s warms up with 3-s forwards, alternates, cools down.
  // The first backward starts on stage 3 at 4 and reaches stage 0 at 7; stage 0 then alternates
  // F/B (its F4 waits for nothing, its B's arrive every 2 units) and ends at 22 = (8+3)*2.
  // Every stage idles 6 = (p-1)(F+B): bubble 6/22 = 3/11 = (p-1)/(m+p-1).
  //   stage 0 |F0F1F2F3......B0F4B1F5B2F6B3F7B4..B5..B6..B7|
  //   stage 1 |..F0F1F2....B0F3B1F4B2F5B3F6B4F7B5..B6..B7..|
  //   stage 2 |....F0F1..B0F2B1F3B2F4B3F5B4F6B5F7B6..B7....|
  //   stage 3 |......F0B0F1B1F2B2F3B3F4B4F5B5F6B6F7B7......|
  // Peak in flight: stage s holds p-s micro-batches (4, 3, 2, 1). GPipe holds all 8 on every
  // stage and has the same makespan 22.
  // ZB-H1 with F = B = W = 1: stage s defers its first s W's; the bubble is (p-1)(F+B-W) = 3
  // per stage, makespan 8*3 + 3 = 27, bubble 3/27 = 1/9 (1F1B with the same work: 9/33).
  //   stage 0 |F0F1F2F3......B0W0F4B1W1F5B2W2F6B3W3F7B4W4B5W5B6W6B7W7|
  //   stage 1 |..F0F1F2....B0F3B1W0F4B2W1F5B3W2F6B4W3F7B5W4B6W5B7W6W7|
  //   stage 2 |....F0F1..B0F2B1F3B2W0F4B3W1F5B4W2F6B5W3F7B6W4B7W5W6W7|
  //   stage 3 |......F0B0F1B1F2B2F3B3W0F4B4W1F5B5W2F6B6W3F7B7W4W5W6W7|
  // Its peak (F done, W not yet) is 4 = p on every stage: 1F1B's worst stage.
  void handCaseP4M8() {
    const Schedule o = make(ScheduleKind::OneFOneB, 4, 8);
    QCOMPARE(stageOps(o, 0), std::string("F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7"));
    QCOMPARE(stageOps(o, 3), std::string("F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7"));
    QCOMPARE(chart(o), std::string("stage 0 |F0F1F2F3......B0F4B1F5B2F6B3F7B4..B5..B6..B7|\n"
                                   "stage 1 |..F0F1F2....B0F3B1F4B2F5B3F6B4F7B5..B6..B7..|\n"
                                   "stage 2 |....F0F1..B0F2B1F3B2F4B3F5B4F6B5F7B6..B7....|\n"
                                   "stage 3 |......F0B0F1B1F2B2F3B3F4B4F5B5F6B6F7B7......|\n"));
    const ScheduleSimulation os = simulate(o, kUnitFB);
    QCOMPARE(os.makespan, 22.0);
    for (int s = 0; s < 4; ++s) {
      QCOMPARE(os.stages[static_cast<size_t>(s)].peakInFlight, 4 - s);
      QCOMPARE(os.stages[static_cast<size_t>(s)].bubbleFraction, 3.0 / 11);
    }
    QCOMPARE(simulate(make(ScheduleKind::GPipe, 4, 8), kUnitFB).makespan, 22.0);

    const Schedule z = make(ScheduleKind::ZbH1, 4, 8);
    const OpDurations unit{1, 1, 1};
    QCOMPARE(chart(z, unit),
             std::string("stage 0 |F0F1F2F3......B0W0F4B1W1F5B2W2F6B3W3F7B4W4B5W5B6W6B7W7|\n"
                         "stage 1 |..F0F1F2....B0F3B1W0F4B2W1F5B3W2F6B4W3F7B5W4B6W5B7W6W7|\n"
                         "stage 2 |....F0F1..B0F2B1F3B2W0F4B3W1F5B4W2F6B5W3F7B6W4B7W5W6W7|\n"
                         "stage 3 |......F0B0F1B1F2B2F3B3W0F4B4W1F5B5W2F6B6W3F7B7W4W5W6W7|\n"));
    const ScheduleSimulation zs = simulate(z, unit);
    QCOMPARE(zs.makespan, 27.0);
    QCOMPARE(zs.bubbleFraction, 1.0 / 9);
    for (const StageSimulation& st : zs.stages) QCOMPARE(st.peakInFlight, 4);
  }

  // Every valid (schedule, p, m, v, k) on a grid: simulates without deadlock; every unit's F,
  // B (and W) exactly once on its stage; peak in-flight per stage as the papers state; the
  // unit-time bubble fraction equals theoreticalBubbleFraction.
  void gridAllSchedules() {
    int cases = 0;
    for (ScheduleKind kind : kAllSchedules)
      for (int p = 1; p <= 6; ++p)
        for (int m = 1; m <= 12; ++m)
          for (int v = 1; v <= 3; ++v)
            for (int k = 1; k <= 3; ++k) {
              const ScheduleParams sp{kind, p, m, v, k};
              if (!validateSchedule(sp)) continue;
              ++cases;
              checkGridCase(sp);
              if (QTest::currentTestFailed()) return;
            }
    QCOMPARE(cases,
             3 * 72 + 3 * 72 + 2 * 17);  // gpipe, 1f1b, zb-h1; seq1f1b x k; interleaved (m % p == 0) x v
  }

  // PyTorch's zero-bubble schedules on a grid: valid, every unit once, simulated without
  // deadlock, theory (balanced simulation) == simulation; and never worse than zb-h1 / 1f1b with
  // the same work where the schedules are comparable (F = B = W).
  void gridTorchSchedules() {
    int cases = 0;
    for (ScheduleKind kind : kTorchSchedules)
      for (int p = 1; p <= 6; ++p)
        for (int m = 1; m <= 12; ++m)
          for (int v = 1; v <= 3; ++v) {
            const ScheduleParams sp{kind, p, m, v, 1};
            if (!validateSchedule(sp)) continue;
            ++cases;
            checkGridCase(sp);
            if (QTest::currentTestFailed()) return;
            const OpDurations unit{1, 1, 1};
            const double zb = simulate(make(kind, p, m, v), unit).bubbleFraction;
            const double onef = theoreticalBubbleFraction({ScheduleKind::OneFOneB, p, m}, unit).value();
            QVERIFY2(zb <= onef + 1e-9, qPrintable(QString("%1 p=%2 m=%3 v=%4: %5 > 1f1b %6")
                                                       .arg(scheduleName(kind).data())
                                                       .arg(p)
                                                       .arg(m)
                                                       .arg(v)
                                                       .arg(zb)
                                                       .arg(onef)));
          }
    // interleaved-zb: m % max(1, m/p) == 0 for each v; zbv: every (p, m) with v = 2
    int izb = 0;
    for (int p = 1; p <= 6; ++p)
      for (int m = 1; m <= 12; ++m) izb += m % std::max(1, m / p) == 0;
    QCOMPARE(cases, 3 * izb + 6 * 12);
  }

  // zbv, p = 2, m = 3 by hand (PyTorch's construction, ScheduleZBVZeroBubble). Stage 0 holds
  // virtual stages 0 (chunk 0) and 3 (c1), stage 1 holds 1 (c0) and 2 (c1): the V.
  //  stage 0: 2(p-s)-1 = 3 forwards of c0; p-s = 2 times F B W of c1; stable: B0 W0 F2c1 B2c1
  //           W2c1 (no F0 left); cool-down: p-s = 2 times B W of c0.
  //  stage 1: 1 forward of c0; F0c1 F1; F1c1 B0c1 W0c1; stable: F2 B0 W0 F2c1 B1c1 W1c1;
  //           cool-down: s = 1 time B1 B2c1 (W deferred); B2 W1; then W2c1, W2.
  // F = B = W = 1 per micro-batch and stage, so 1/2 per chunk op (one tick below):
  //   tick    0 1 2 3 4 5 6 7 8 9 ...
  //   stage 0 F0F1F2 F0c1(waits for stage 1's F0c1, done at 3) ...
  //   stage 1 . F0F0c1 F1 F1c1 B0c1(waits for stage 0's B0c1, done at 5) ...
  // Worked through op by op: stage 0 idles only the last tick (ends at 18), stage 1 only the
  // first: makespan 19 ticks = 9.5, each stage busy 18 ticks, bubble 1/19 per stage.
  void handCaseZbvP2M3() {
    const Schedule z = make(ScheduleKind::Zbv, 2, 3, 2);
    QVERIFY(z.splitBackward);
    QCOMPARE(stageOps(z, 0), std::string("F0 F1 F2 F0c1 B0c1 W0c1 F1c1 B1c1 W1c1 B0 W0 F2c1 B2c1 W2c1 B1 W1 B2 W2"));
    QCOMPARE(stageOps(z, 1), std::string("F0 F0c1 F1 F1c1 B0c1 W0c1 F2 B0 W0 F2c1 B1c1 W1c1 B1 B2c1 B2 W1 W2c1 W2"));
    // The V: stage 1 hands virtual stage 1's output to its own virtual stage 2; stage 0's
    // chunk 1 (virtual stage 3, the last) receives from stage 1 and sends no activation.
    QCOMPARE(virtualStage(z.params, 0, 1), 3);
    QCOMPARE(virtualStage(z.params, 1, 1), 2);
    QCOMPARE(stageOfVirtual(z.params, 2).stage, 1);
    QCOMPARE(stageOfVirtual(z.params, 3).chunk, 1);
    const std::string s1 = formatStageOps(z.stages[1], true);
    QVERIFY2(s1.find("F0, send-act F0 ->1, recv-act F0c1 <-1, F0c1, send-act F0c1 ->0") != std::string::npos,
             s1.c_str());
    const OpDurations unit{1, 1, 1};
    const ScheduleSimulation zs = simulate(z, unit);
    QCOMPARE(zs.makespan, 9.5);
    QCOMPARE(zs.stages[0].bubbleFraction, 1.0 / 19);
    QCOMPARE(zs.stages[1].bubbleFraction, 1.0 / 19);
    QCOMPARE(zs.stages[0].idle.front().start, 9.0);  // stage 0: the last tick
    QCOMPARE(zs.stages[1].idle.front().end, 0.5);    // stage 1: the first tick
    QCOMPARE(theoreticalBubbleFraction("zbv", 2, 3, 2, 1, unit).value(), 1.0 / 19);
    // The same work under zb-h1 idles 1 of 10, under 1f1b 3 of 12.
    QCOMPARE(theoreticalBubbleFraction("zb-h1", 2, 3, 1, 1, unit).value(), 1.0 / 10);
  }

  // interleaved-zb, p = 2, m = 2, v = 2 by hand (ScheduleInterleavedZeroBubble, ZB1P): one
  // round of r = 2 micro-batches; stage s warms up with (v-1) r + (p-1-s) forwards (3, 2);
  // forwards run chunk (k / r) mod v, backwards chunk v-1-((k - warm-up) / r) mod v; stage s
  // defers the W of its first s backwards.
  //  stage 0: F0 F1 F0c1 | F1c1 B0c1 W0c1 | B1c1 W1c1 | B0 W0 | B1 W1
  //  stage 1: F0 F1 | F0c1 B0c1 | F1c1 B1c1 W0c1 | B0 W1c1 | B1 W0 | W1
  // Ticks of 1/2 (one chunk op), virtual stages 0 (s0c0), 1 (s1c0), 2 (s0c1), 3 (s1c1):
  //   stage 0 |F0F1F0c1F1c1 . B0c1W0c1B1c1W1c1B0W0B1W1|   idle [4,5]: waits for stage 1's B0c1
  //   stage 1 | . F0F1F0c1B0c1F1c1B1c1W0c1B0W1c1B1W0W1|   idle [0,1]
  // makespan 13 ticks, 12 busy on each stage: bubble 1/13.
  void handCaseInterleavedZbP2M2() {
    const Schedule z = make(ScheduleKind::InterleavedZb, 2, 2, 2);
    QCOMPARE(stageOps(z, 0), std::string("F0 F1 F0c1 F1c1 B0c1 W0c1 B1c1 W1c1 B0 W0 B1 W1"));
    QCOMPARE(stageOps(z, 1), std::string("F0 F1 F0c1 B0c1 F1c1 B1c1 W0c1 B0 W1c1 B1 W0 W1"));
    const OpDurations unit{1, 1, 1};
    const ScheduleSimulation zs = simulate(z, unit);
    QCOMPARE(zs.makespan, 6.5);
    QCOMPARE(zs.bubbleFraction, 1.0 / 13);
    QCOMPARE(zs.stages[0].idle.front().start, 2.0);
    QCOMPARE(zs.stages[0].idle.front().end, 2.5);
    QCOMPARE(theoreticalBubbleFraction("interleaved-zb", 2, 2, 2, 1, unit).value(), 1.0 / 13);
  }

  // The op order PyTorch's own schedule objects produce (tests/data/torch_pp_orders.txt, written
  // by bench/torch_pp_orders.py from ScheduleInterleavedZeroBubble / ScheduleZBVZeroBubble's
  // pipeline_order, idle slots dropped) equals the generator's, for every (schedule, p, m, v)
  // recorded there.
  void torchOrders() {
    QFile f(QString(TRAINSCOPE_TEST_DATA) + "/torch_pp_orders.txt");
    QVERIFY2(f.open(QIODevice::ReadOnly | QIODevice::Text), "tests/data/torch_pp_orders.txt");
    int compared = 0;
    QString header;
    while (!f.atEnd()) {
      const QString line = QString::fromUtf8(f.readLine()).trimmed();
      if (line.isEmpty() || line.startsWith('#')) {
        if (line.startsWith("# torch ")) header = line;
        continue;
      }
      // "<schedule> p=<p> m=<m> v=<v> stage=<s>: <ops>"
      const int colon = line.indexOf(':');
      const QStringList key = line.left(colon).split(' ');
      QCOMPARE(key.size(), 5);
      auto num = [&](int i) { return key[i].section('=', 1).toInt(); };
      const auto kind = parseSchedule(key[0].toStdString());
      QVERIFY(kind);
      const Schedule s = make(kind.value(), num(1), num(2), num(3));
      const std::string expected = line.mid(colon + 1).trimmed().toStdString();
      QCOMPARE(stageOps(s, num(4)), expected);
      ++compared;
    }
    QVERIFY2(compared >= 100, qPrintable(header));
  }

  // Random op durations and a send latency: every op starts only after what it needs.
  void dependenciesRespected() {
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> dist(0.1, 3.0);
    std::vector<ScheduleKind> kinds(std::begin(kAllSchedules), std::end(kAllSchedules));
    kinds.insert(kinds.end(), std::begin(kTorchSchedules), std::end(kTorchSchedules));
    for (ScheduleKind kind : kinds) {
      const bool chunked = kind == ScheduleKind::Interleaved1F1B || kind == ScheduleKind::InterleavedZb ||
                           kind == ScheduleKind::Zbv;
      const ScheduleParams sp{kind, 4, 8, chunked ? 2 : 1, kind == ScheduleKind::Seq1F1B ? 3 : 1};
      const Schedule s = generateSchedule(sp).value();
      std::map<std::tuple<int, int, int, int, int>, double> cost;  // random but fixed per op
      auto fn = [&](int stage, const PipeOp& o) {
        auto [it, fresh] =
            cost.try_emplace({stage, static_cast<int>(o.kind), o.microBatch, o.chunk, o.segment}, 0.0);
        if (fresh) it->second = dist(rng);
        return it->second;
      };
      OpDurations d;
      d.sendLatency = 0.25;
      auto sim = simulateSchedule(s, d, fn);
      QVERIFY2(sim, sim.status().toString().c_str());
      // (stage, kind, mb, chunk, segment) -> [start, end]
      std::map<std::tuple<int, int, int, int, int>, TimeInterval> when;
      for (int st = 0; st < sp.stages; ++st)
        for (size_t i = 0; i < s.stages[static_cast<size_t>(st)].size(); ++i) {
          const PipeOp& o = s.stages[static_cast<size_t>(st)][i];
          if (o.isCompute())
            when[{st, static_cast<int>(o.kind), o.microBatch, o.chunk, o.segment}] =
                sim->stages[static_cast<size_t>(st)].opTimes[i];
        }
      const int last = sp.stages * sp.virtualStages - 1;
      auto at = [&](int u, OpKind k, int mb, int seg) {  // virtual stage u, wherever it lives (zbv: a V)
        const StageChunk sc = stageOfVirtual(sp, u);
        return when.at({sc.stage, static_cast<int>(k), mb, sc.chunk, seg});
      };
      for (int u = 0; u <= last; ++u)
        for (int mb = 0; mb < sp.microBatches; ++mb)
          for (int g = 0; g < sp.segments; ++g) {
            const TimeInterval f = at(u, OpKind::Forward, mb, g), b = at(u, OpKind::Backward, mb, g);
            if (u > 0) QVERIFY(f.start >= at(u - 1, OpKind::Forward, mb, g).end + d.sendLatency - 1e-9);
            if (u < last) QVERIFY(b.start >= at(u + 1, OpKind::Backward, mb, g).end + d.sendLatency - 1e-9);
            QVERIFY(b.start >= f.end - 1e-9);
            if (s.splitBackward) QVERIFY(at(u, OpKind::Weight, mb, g).start >= b.end - 1e-9);
            if (g > 0) QVERIFY(f.start >= at(u, OpKind::Forward, mb, g - 1).end - 1e-9);
            if (g > 0) QVERIFY(at(u, OpKind::Backward, mb, g - 1).start >= b.end - 1e-9);
          }
      // Ops on one stage never overlap.
      for (const StageSimulation& st : sim->stages)
        for (size_t i = 1; i < st.busy.size(); ++i) QVERIFY(st.busy[i].start >= st.busy[i - 1].end);
    }
  }

  // Latency by hand: GPipe p = 2, m = 1, F = B = 1, latency L = 0.5: F0 on stage 0 [0,1],
  // arrives 1.5, F0 on stage 1 [1.5,2.5], B0 [2.5,3.5], arrives 4, B0 on stage 0 [4,5].
  // makespan 5 = 2(F+B) + 2(p-1)L.
  void sendLatency() {
    OpDurations d = kUnitFB;
    d.sendLatency = 0.5;
    const ScheduleSimulation s = simulate(make(ScheduleKind::GPipe, 2, 1), d);
    QCOMPARE(s.makespan, 5.0);
    QCOMPARE(s.stages[0].busy.size(), size_t{2});
    QCOMPARE(s.stages[0].busy[1].start, 4.0);
    QCOMPARE(s.stages[0].bubbleFraction, 3.0 / 5);
  }

  // The bubble formulas of gpipe, 1f1b, interleaved and seq1f1b hold for any F:B ratio; ZB-H1's
  // is the general form checked against the simulator for several F, B, W.
  void formulasHoldForOtherRatios() {
    const OpDurations ratios[] = {{1, 2, 0}, {2, 1, 1},   {1, 2, 1}, {1, 1, 0.5},
                                  {1, 3, 2}, {1, 1, 2.5}, {1, 1, 0}};
    for (const OpDurations& d : ratios)
      for (ScheduleKind kind : kAllSchedules)
        for (int p : {2, 3, 5})
          for (int m : {1, 2, 5, 10}) {
            const ScheduleParams sp{kind, p, kind == ScheduleKind::Interleaved1F1B ? p * m : m,
                                    kind == ScheduleKind::Interleaved1F1B ? 2 : 1,
                                    kind == ScheduleKind::Seq1F1B ? 2 : 1};
            const double sim = simulate(generateSchedule(sp).value(), d).bubbleFraction;
            const double theory = theoreticalBubbleFraction(sp, d).value();
            QVERIFY2(qAbs(sim - theory) < 1e-9,
                     qPrintable(QString("%1 p=%2 m=%3 F=%4 B=%5 W=%6: sim %7 theory %8")
                                    .arg(QString::fromUtf8(scheduleName(kind).data()))
                                    .arg(p)
                                    .arg(sp.microBatches)
                                    .arg(d.forward)
                                    .arg(d.backward)
                                    .arg(d.weight)
                                    .arg(sim)
                                    .arg(theory)));
          }
    // With F = B = W and m >> p, ZB-H1's bubble fraction is about a third of 1F1B's.
    const OpDurations unit{1, 1, 1};
    const double zb = theoreticalBubbleFraction({ScheduleKind::ZbH1, 4, 64}, unit).value();
    const double ofob = theoreticalBubbleFraction({ScheduleKind::OneFOneB, 4, 64}, unit).value();
    QVERIFY(qAbs(zb / ofob - 1.0 / 3) < 0.02);
  }

  // Stage 0 waits for a gradient before sending the activation that would produce it.
  void deadlockDetected() {
    Schedule s;
    s.params = {ScheduleKind::GPipe, 2, 1};
    s.stages = {{op(OpKind::Forward, 0), op(OpKind::Recv, 0, Payload::Gradient, 1), op(OpKind::Backward, 0),
                 op(OpKind::Send, 0, Payload::Activation, 1)},
                {op(OpKind::Recv, 0, Payload::Activation, 0), op(OpKind::Forward, 0), op(OpKind::Backward, 0),
                 op(OpKind::Send, 0, Payload::Gradient, 0)}};
    QVERIFY(checkSchedule(s));
    auto r = simulateSchedule(s);
    QVERIFY(!r);
    QCOMPARE(r.status().message(),
             std::string(
                 "deadlock: stage 0 waits at op 1 recv-grad B0 <-1; stage 1 waits at op 0 recv-act F0 <-0"));
  }

  void badSchedulesRefused() {
    const Schedule good = make(ScheduleKind::OneFOneB, 2, 2);
    auto expectError = [](const Schedule& s, const char* text) {
      const Status st = checkSchedule(s);
      QVERIFY(!st);
      QVERIFY2(st.message().find(text) != std::string::npos, st.message().c_str());
      QVERIFY(!simulateSchedule(s));
    };
    Schedule s = good;
    s.stages[1].erase(s.stages[1].begin() + 2);  // stage 1's B0
    expectError(s, "stage 1: no B after F of micro-batch 0");
    s = good;
    s.stages[0].push_back(s.stages[0][0]);  // F0 twice
    expectError(s, "duplicate of op 0");
    s = good;
    s.stages[0][1].peer = 0;  // send-act F0 to itself
    expectError(s, "peer must be stage 1");
    s = good;
    s.stages.pop_back();
    expectError(s, "2 stages");
    s = make(ScheduleKind::ZbH1, 2, 2);
    s.stages[0].pop_back();  // W1
    expectError(s, "no W after B of micro-batch 1");
    s = good;
    s.stages[0][0].kind = OpKind::Weight;
    expectError(s, "W op in a schedule whose B computes the weight gradient");
    OpDurations negative;
    negative.forward = -1;
    QVERIFY(!simulateSchedule(good, negative));
    auto nanFn = simulateSchedule(good, {}, [](int, const PipeOp&) { return std::nan(""); });
    QVERIFY(!nanFn);
  }

 private:
  void checkGridCase(const ScheduleParams& sp) {
    const QByteArray name = QString("%1 p=%2 m=%3 v=%4 k=%5")
                                .arg(QString::fromUtf8(scheduleName(sp.kind).data()))
                                .arg(sp.stages)
                                .arg(sp.microBatches)
                                .arg(sp.virtualStages)
                                .arg(sp.segments)
                                .toUtf8();
    auto gen = generateSchedule(sp);
    QVERIFY2(gen, name.constData());
    const Schedule& s = gen.value();
    QVERIFY2(checkSchedule(s), name.constData());
    const OpDurations unit{1, 1, 1};
    auto sim = simulateSchedule(s, unit);
    QVERIFY2(sim, (name + ": " + sim.status().toString().c_str()).constData());
    const int p = sp.stages, m = sp.microBatches, v = sp.virtualStages, k = sp.segments;
    // Exactly once: count compute ops per (stage, kind, mb, chunk, segment) on our own.
    std::map<std::tuple<int, int, int, int, int>, int> count;
    for (int st = 0; st < p; ++st)
      for (const PipeOp& o : s.stages[static_cast<size_t>(st)])
        if (o.isCompute()) ++count[{st, static_cast<int>(o.kind), o.microBatch, o.chunk, o.segment}];
    const int kinds = s.splitBackward ? 3 : 2;
    QVERIFY2(static_cast<int>(count.size()) == p * m * v * k * kinds, name.constData());
    for (const auto& [key, n] : count) QVERIFY2(n == 1, name.constData());
    // Peak in-flight activations per stage (units: one micro-batch's chunk / segment).
    int maxPeak = 0;
    for (int st = 0; st < p; ++st) {
      const int peak = sim->stages[static_cast<size_t>(st)].peakInFlight;
      maxPeak = std::max(maxPeak, peak);
      int expected = -1;
      switch (sp.kind) {
        case ScheduleKind::GPipe:
          expected = m;
          break;  // GPipe: all m
        case ScheduleKind::OneFOneB:
          expected = std::min(p - st, m);
          break;  // 1F1B: <= p
        case ScheduleKind::Interleaved1F1B:
          expected = std::min(2 * (p - st - 1) + (v - 1) * p + 1, m * v);
          break;
        case ScheduleKind::Seq1F1B:
          expected = std::min(p - st + k - 1, m * k);
          break;
        case ScheduleKind::ZbH1:
          QVERIFY2(peak <= std::min(p, m), name.constData());
          break;
        case ScheduleKind::InterleavedZb:
        case ScheduleKind::Zbv:
          break;  // PyTorch's orders, checked against its objects in torchOrders()
      }
      if (expected >= 0) QVERIFY2(peak == expected, (name + " stage " + QByteArray::number(st)).constData());
    }
    if (sp.kind == ScheduleKind::ZbH1) QVERIFY2(maxPeak == std::min(p, m), name.constData());  // = 1F1B's
    const double theory = theoreticalBubbleFraction(sp, unit).value();
    QVERIFY2(
        qAbs(sim->bubbleFraction - theory) < 1e-9,
        (name + ": sim " + QByteArray::number(sim->bubbleFraction) + " theory " + QByteArray::number(theory))
            .constData());
    for (const StageSimulation& st : sim->stages) {
      double idle = 0;
      for (const TimeInterval& i : st.idle) idle += i.end - i.start;
      QVERIFY2(qAbs(idle + st.busyTime - sim->makespan) < 1e-9, name.constData());
    }
  }
};

QTEST_GUILESS_MAIN(TstSchedule)
#include "tst_schedule.moc"
