// The pipeline executor (core/pipeline_executor.h) with an in-process stage runner: one thread
// per stage, messages through a shared mailbox. A scalar "model" (virtual stage u multiplies by
// w_u) lets the test compare every stage's accumulated weight gradient with the sequential
// answer: pipelining must not change the mathematics, whatever the schedule.
#include <QtTest>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "trainscope/core/sched/pipeline_executor.h"
#include "trainscope/core/sched/schedule_sim.h"

using namespace trainscope::core;

namespace {

// Messages in flight between stage threads, keyed by (receiving stage, tag).
class Mailbox {
 public:
  void put(int stage, int64_t tag, double value) {
    {
      std::lock_guard lock(mu_);
      if (!box_.emplace(std::make_pair(stage, tag), value).second) duplicate_ = true;
    }
    cv_.notify_all();
  }
  bool take(int stage, int64_t tag, double* value) {
    std::unique_lock lock(mu_);
    const auto key = std::make_pair(stage, tag);
    if (!cv_.wait_for(lock, std::chrono::seconds(10), [&] { return box_.count(key) > 0; })) return false;
    *value = box_[key];
    box_.erase(key);
    return true;
  }
  bool clean() {
    std::lock_guard lock(mu_);
    return box_.empty() && !duplicate_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<int, int64_t>, double> box_;
  bool duplicate_ = false;
};

double weightOf(int virtualStage) {
  return 1.0 + 0.1 * virtualStage;
}
double inputOf(int mb, int segment) {
  return 1.0 + mb + 0.5 * segment;
}

// One stage of the scalar model. Loss = sum of the last virtual stage's outputs, so the
// gradient entering the last stage is 1.
class FakeStage : public StageRunner {
 public:
  FakeStage(const Schedule& s, int stage, Mailbox& box) : s_(s), stage_(stage), box_(box) {}

  Status forward(const PipeOp& op) override {
    const Key k = key(op);
    if (op.segment > 0 && !forwarded_.count(prevSegment(k, -1)))
      return bad("F before the previous segment's F");
    const int u = vs(op);
    double in = inputOf(op.microBatch, op.segment);
    if (u > 0 && !take(inbox_, k, &in)) return bad("F without its activation");
    stash_[k] = in;
    peak_ = std::max(peak_, static_cast<int>(stash_.size()));
    forwarded_.insert(k);
    outbox_[k] = in * weightOf(u);
    return Status::ok();
  }
  Status backward(const PipeOp& op) override {
    const Key k = key(op);
    if (op.segment + 1 < s_.params.segments && !backwarded_.count(prevSegment(k, +1)))
      return bad("B before the next segment's B");
    const int u = vs(op);
    double g = 1.0;
    if (u < last() && !take(gradIn_, k, &g)) return bad("B without its gradient");
    if (!stash_.count(k)) return bad("B without F");
    gradOut_[k] = g * weightOf(u);
    backwarded_.insert(k);
    if (s_.splitBackward) {
      pendingW_[k] = g;
      return Status::ok();
    }
    return accumulate(k, g);
  }
  Status weight(const PipeOp& op) override {
    double g = 0;
    if (!take(pendingW_, key(op), &g)) return bad("W before B");
    return accumulate(key(op), g);
  }
  Status send(const PipeOp& op) override {
    double v = 0;
    auto& from = op.payload == Payload::Activation ? outbox_ : gradOut_;
    if (!take(from, key(op), &v)) return bad("send of data not produced yet");
    box_.put(op.peer, messageTag(s_.params, stage_, op), v);
    ++sent_;
    return Status::ok();
  }
  Status postRecv(const PipeOp& op) override {
    posted_.insert(messageTag(s_.params, stage_, op));
    return Status::ok();
  }
  Status waitRecv(const PipeOp& op) override {
    const int64_t tag = messageTag(s_.params, stage_, op);
    if (!posted_.erase(tag)) return bad("waitRecv without postRecv");
    double v = 0;
    if (!box_.take(stage_, tag, &v)) return bad("timed out waiting for " + opLabel(op));
    (op.payload == Payload::Activation ? inbox_ : gradIn_)[key(op)] = v;
    return Status::ok();
  }
  Status finishSends() override { return Status::ok(); }

  std::map<int, double> grads;  // chunk -> accumulated dL/dw
  int peak() const { return peak_; }
  bool drained() const {
    return stash_.empty() && inbox_.empty() && gradIn_.empty() && pendingW_.empty() && posted_.empty();
  }

 private:
  using Key = std::tuple<int, int, int>;  // micro-batch, chunk, segment
  static Key key(const PipeOp& op) { return {op.microBatch, op.chunk, op.segment}; }
  static Key prevSegment(const Key& k, int d) { return {std::get<0>(k), std::get<1>(k), std::get<2>(k) + d}; }
  static bool take(std::map<Key, double>& m, const Key& k, double* v) {
    auto it = m.find(k);
    if (it == m.end()) return false;
    *v = it->second;
    m.erase(it);
    return true;
  }
  static Status bad(const std::string& m) { return {ErrorCode::InvalidArgument, m}; }
  int vs(const PipeOp& op) const { return virtualStage(stage_, op.chunk, s_.params.stages); }
  int last() const { return s_.params.stages * s_.params.virtualStages - 1; }
  Status accumulate(const Key& k, double g) {
    double x = 0;
    if (!take(stash_, k, &x)) return bad("weight gradient without stashed input");
    grads[std::get<1>(k)] += g * x;
    return Status::ok();
  }

  const Schedule& s_;
  int stage_;
  Mailbox& box_;
  std::map<Key, double> stash_, inbox_, outbox_, gradIn_, gradOut_, pendingW_;
  std::set<Key> forwarded_, backwarded_;
  std::set<int64_t> posted_;
  int peak_ = 0;
  int sent_ = 0;
};

// Sequential answer: dL/dw_u = sum over units of x * prod_{v != u} w_v.
double expectedGrad(const ScheduleParams& sp, int u) {
  const int chain = sp.stages * sp.virtualStages;
  double sum = 0;
  for (int mb = 0; mb < sp.microBatches; ++mb)
    for (int g = 0; g < sp.segments; ++g) {
      double prod = inputOf(mb, g);
      for (int v = 0; v < chain; ++v)
        if (v != u) prod *= weightOf(v);
      sum += prod;
    }
  return sum;
}

}  // namespace

class TstPipelineExecutor : public QObject {
  Q_OBJECT

 private slots:
  void allSchedulesOverThreads() {
    int cases = 0;
    for (ScheduleKind kind : kAllSchedules)
      for (int p = 1; p <= 4; ++p)
        for (int m = 1; m <= 8; ++m)
          for (int v = 1; v <= 2; ++v)
            for (int k = 1; k <= 2; ++k)
              for (int lookahead : {1, 3}) {
                const ScheduleParams sp{kind, p, m, v, k};
                if (!validateSchedule(sp)) continue;
                ++cases;
                runCase(sp, lookahead);
                if (QTest::currentTestFailed()) return;
              }
    QVERIFY(cases > 100);
  }

  void messageTagsUnique() {
    const ScheduleParams sp{ScheduleKind::Interleaved1F1B, 4, 8, 2, 1};
    const Schedule s = generateSchedule(sp).value();
    std::set<int64_t> sendTags, recvTags;
    for (int st = 0; st < sp.stages; ++st)
      for (const PipeOp& op : s.stages[static_cast<size_t>(st)]) {
        if (op.kind == OpKind::Send) QVERIFY(sendTags.insert(messageTag(sp, st, op)).second);
        if (op.kind == OpKind::Recv) QVERIFY(recvTags.insert(messageTag(sp, st, op)).second);
      }
    QCOMPARE(sendTags, recvTags);  // every send's tag is its receive's tag
    QVERIFY(*sendTags.rbegin() < 2 * 8 * 4 * 2);
  }

  void traceKinds() {
    QCOMPARE(traceEventKind(OpKind::Forward), EventKind::MicroBatchF);
    QCOMPARE(traceEventKind(OpKind::Backward), EventKind::MicroBatchB);
    QCOMPARE(traceEventKind(OpKind::Weight), EventKind::MicroBatchW);
    QCOMPARE(traceEventKind(OpKind::Send), EventKind::P2PSend);
    QCOMPARE(traceEventKind(OpKind::Recv), EventKind::P2PRecv);
  }

  void runnerErrorNamesTheOp() {
    struct Failing : StageRunner {
      Status forward(const PipeOp& op) override {
        return op.microBatch == 2 ? Status{ErrorCode::Io, "out of memory"} : Status::ok();
      }
      Status backward(const PipeOp&) override { return Status::ok(); }
      Status weight(const PipeOp&) override { return Status::ok(); }
      Status send(const PipeOp&) override { return Status::ok(); }
      Status postRecv(const PipeOp&) override { return Status::ok(); }
      Status waitRecv(const PipeOp&) override { return Status::ok(); }
      Status finishSends() override { return Status::ok(); }
    } failing;
    const Schedule s = generateSchedule({ScheduleKind::GPipe, 1, 4}).value();
    const Status st = runStage(s, 0, failing);
    QCOMPARE(st.code(), ErrorCode::Io);
    QCOMPARE(st.message(), std::string("stage 0 op 2 (F2): out of memory"));
    QVERIFY(!runStage(s, 1, failing));
    QVERIFY(!runStage(s, 0, failing, {0}));
  }

 private:
  void runCase(const ScheduleParams& sp, int lookahead) {
    const QByteArray name = QString("%1 p=%2 m=%3 v=%4 k=%5 lookahead=%6")
                                .arg(QString::fromUtf8(scheduleName(sp.kind).data()))
                                .arg(sp.stages)
                                .arg(sp.microBatches)
                                .arg(sp.virtualStages)
                                .arg(sp.segments)
                                .arg(lookahead)
                                .toUtf8();
    const Schedule s = generateSchedule(sp).value();
    Mailbox box;
    std::vector<std::unique_ptr<FakeStage>> stages;
    for (int st = 0; st < sp.stages; ++st) stages.push_back(std::make_unique<FakeStage>(s, st, box));
    std::vector<Status> results(static_cast<size_t>(sp.stages));
    std::vector<std::thread> threads;
    for (int st = 0; st < sp.stages; ++st)
      threads.emplace_back([&, st] {
        results[static_cast<size_t>(st)] = runStage(s, st, *stages[static_cast<size_t>(st)], {lookahead});
      });
    for (std::thread& t : threads) t.join();
    const ScheduleSimulation sim = simulateSchedule(s).value();
    for (int st = 0; st < sp.stages; ++st) {
      const Status& r = results[static_cast<size_t>(st)];
      QVERIFY2(r, (name + ": " + r.toString().c_str()).constData());
      FakeStage& f = *stages[static_cast<size_t>(st)];
      QVERIFY2(f.drained(), name.constData());
      // The runner's own count of stashed activations peaks where the simulator says.
      QVERIFY2(f.peak() == sim.stages[static_cast<size_t>(st)].peakInFlight, name.constData());
      for (int c = 0; c < sp.virtualStages; ++c) {
        const double want = expectedGrad(sp, virtualStage(st, c, sp.stages));
        QVERIFY2(qAbs(f.grads[c] - want) <= 1e-12 * want,
                 (name + " chunk " + QByteArray::number(c)).constData());
      }
    }
    QVERIFY2(box.clean(), name.constData());
  }
};

QTEST_GUILESS_MAIN(TstPipelineExecutor)
#include "tst_pipeline_executor.moc"
