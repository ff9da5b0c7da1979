// Issue 5's "done when" for pipelines through the real CLI: `trainscope-cli demo --mode pp
// --ranks 4` starts the pipeline job; `record` captures it while `set` switches pp.schedule
// (1f1b -> zb-h1 -> interleaved-1f1b with pp.virtual_stages=2) and tries an invalid
// pp.microbatches. In the .tsdb every switch shows at the acknowledged step on all 4 ranks and
// not before: W ops appear with zb-h1, chunk 1 ops with interleaved; the invalid micro-batch
// count never shows (the job keeps its schedule and says so). The job is stopped with the pid
// `demo` printed. Then `demo --mode disco`: disco.sparsity=0.5 halves the bytes of the `disco
// exchange` events (all ranks together) from the acknowledged step on, disco.sparsity.2=1
// silences layer 2's exchange from its step on, disco.mode=wait moves layer 1's compute after
// its receives, and `analyze --json` lists the DISCO layers.
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>
#include <cmath>
#include <set>
#include <csignal>
#include <tuple>

#include "live_test_support.h"
#include "trainscope/core/session/tsdb.h"

using namespace live_test;

namespace {

constexpr int kRanks = 4;

struct Op {
  int64_t step = -1;
  EventKind kind = EventKind::MicroBatchF;
  int64_t microBatch = 0, chunk = 0, stage = 0;
};

// Pipeline ops per rank, each with the step whose window holds it.
std::map<RankId, std::vector<Op>> pipelineOps(TraceStore& s) {
  std::map<RankId, std::map<int64_t, std::pair<int64_t, int64_t>>> windows;
  std::map<RankId, std::vector<std::pair<int64_t, Op>>> raw;
  for (TrackId t = 0; t < s.trackCount(); ++t) {
    const TrackEvents& ev = s.events(t);
    const RankId r = s.track(t).rank;
    for (size_t i = 0; i < ev.size(); ++i) {
      const EventKind k = ev.kind(i);
      if (k == EventKind::Step) {
        if (const Attr* a = ev.findAttr(i, AttrKey::Step)) windows[r][a->asInt()] = {ev.start(i), ev.end(i)};
      } else if (k == EventKind::MicroBatchF || k == EventKind::MicroBatchB || k == EventKind::MicroBatchW) {
        Op op;
        op.kind = k;
        if (const Attr* a = ev.findAttr(i, AttrKey::MicroBatch)) op.microBatch = a->asInt();
        if (const Attr* a = ev.findAttr(i, AttrKey::Chunk)) op.chunk = a->asInt();
        if (const Attr* a = ev.findAttr(i, AttrKey::Stage)) op.stage = a->asInt();
        raw[r].emplace_back(ev.start(i), op);
      }
    }
  }
  std::map<RankId, std::vector<Op>> out;
  for (auto& [r, ops] : raw)
    for (auto& [t, op] : ops) {
      for (const auto& [step, w] : windows[r])
        if (t >= w.first && t <= w.second) op.step = step;
      if (op.step >= 0) out[r].push_back(op);
    }
  return out;
}

// Per rank: (step, algorithm) of every gradient collective inside a step window.
std::map<RankId, std::vector<std::pair<int64_t, std::string>>> collectiveAlgorithms(TraceStore& s) {
  const auto starts = stepsByStart(s);
  std::map<RankId, std::vector<std::pair<int64_t, std::string>>> out;
  for (TrackId t = 0; t < s.trackCount(); ++t) {
    const TrackEvents& ev = s.events(t);
    const RankId r = s.track(t).rank;
    if (!starts.count(r)) continue;
    for (size_t i = 0; i < ev.size(); ++i) {
      const Attr* a = ev.findAttr(i, AttrKey::Algorithm);
      // Gradient buckets only (the what-if calibration's collectives carry no Bucket).
      if (ev.kind(i) != EventKind::Collective || !a || !ev.findAttr(i, AttrKey::Bucket)) continue;
      if (const int64_t step = stepAt(starts.at(r), ev.start(i)); step >= 0)
        out[r].emplace_back(step, std::string(s.str(a->asString())));
    }
  }
  return out;
}

}  // namespace

class TstTrainPpLive : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  DemoJob job_;

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    if (!QFileInfo::exists(bin("trainscope-train"))) QSKIP("trainscope-train not built (MPI or OpenBLAS missing)");
    usePrivateRuntimeDir(dir_);
  }

  // Knobs only where they act (issue 18): one pipeline has nothing to average, so no dp.*.
  void demoStartsAPipeline() {
    start("pp", "pp.virtual_stages");
    const QStringList names = knobNames();
    QVERIFY2(names.contains("pp.schedule"), qPrintable(names.join(' ')));
    QVERIFY2(names.filter(QRegularExpression("^dp\\.")).isEmpty(), qPrintable(names.join(' ')));
    const Run set = cli({"set", "--job", job_.id, "dp.compression=int8"});
    QCOMPARE(set.code, 1);
    QVERIFY2(set.err.contains("unknown knob"), qPrintable(set.out + set.err));
  }

  void scheduleSwitchesAtTheAckedStep() {
    QVERIFY(!job_.id.isEmpty());
    const QString file = dir_.filePath("pp.tsdb");
    auto [stepOf, error, refused] = recordWhileSetting(job_.id, file, 5,
                                              {"pp.schedule=zb-h1", "pp.virtual_stages=2",
                                               "pp.schedule=interleaved-1f1b", "pp.microbatches=5"},
                                              800, 700);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    auto session = loadSession(file.toStdString());
    QVERIFY2(session.isOk(), session.status().message().c_str());
    const auto ops = pipelineOps(session.value());
    QCOMPARE(int(ops.size()), kRanks);
    const int64_t zb = stepOf["pp.schedule=zb-h1"], il = stepOf["pp.schedule=interleaved-1f1b"],
                  bad = stepOf["pp.microbatches=5"];
    QVERIFY(zb < il && il < bad);
    for (const auto& [rank, list] : ops) {
      int64_t firstW = -1, lastW = -1, firstChunk1 = -1, maxMb = 0, stagesSeen = -1;
      bool before = false;
      for (const Op& op : list) {
        before |= op.step < zb;
        if (op.kind == EventKind::MicroBatchW) {
          if (firstW < 0) firstW = op.step;
          lastW = op.step;
        }
        if (op.chunk == 1 && firstChunk1 < 0) firstChunk1 = op.step;
        if (op.step >= il) maxMb = std::max(maxMb, op.microBatch);
        stagesSeen = op.stage;
      }
      QVERIFY2(before, "the recording starts before the first switch");
      QCOMPARE(firstW, zb);             // W ops exist from the acked step on, not before
      QCOMPARE(lastW, il - 1);          // and stop when interleaved (no split backward) starts
      QCOMPARE(firstChunk1, il);        // two chunks per stage from that step on
      QCOMPARE(maxMb, int64_t{3});      // 4 micro-batches throughout: 5 was refused
      QCOMPARE(stagesSeen, int64_t(rank));
    }
    QFile log(job_.log);
    QVERIFY(log.open(QIODevice::ReadOnly));
    const QString text = QString::fromUtf8(log.readAll());
    QVERIFY2(text.contains(QString("refused pp.schedule=interleaved-1f1b pp.microbatches=5")), qPrintable(text.right(2000)));
    QVERIFY(text.contains(QString("rank 3 applied pp.schedule=zb-h1 pp.microbatches=4 pp.virtual_stages=1 at step %1").arg(zb)));
    // The refused change was put back (ts_knob_restore): the knobs list what runs, on every rank,
    // and the recording holds the restore as a knob change at the refused step.
    const Run knobs = cli({"knobs", "--job", job_.id, "--json"});
    QVERIFY2(knobs.code == 0, qPrintable(knobs.out + knobs.err));
    const QJsonValue root = json(knobs).isArray() ? QJsonValue(json(knobs).array()) : json(knobs).object()["knobs"];
    QString mb;
    for (const auto& k : root.toArray())
      if (k.toObject()["name"].toString() == "pp.microbatches") mb = k.toObject()["current"].toString();
    QCOMPARE(mb, QString("4"));
    QVERIFY2(!json(knobs).isObject() || !json(knobs).object().contains("differing") ||
                 !json(knobs).object()["differing"].toObject().contains("pp.microbatches"),
             qPrintable(knobs.out));
    const auto changes = knobChanges(session.value(), "pp.microbatches");  // the last per rank
    QCOMPARE(int(changes.size()), kRanks);
    for (const auto& [rank, change] : changes) {
      QCOMPARE(QString::fromStdString(change.first), QString("4"));
      QCOMPARE(change.second, bad);
    }
    // What-if's kernel calibration: every stage timed its layers alone at the micro-batch sizes
    // after each applied change ("calibrate pp F|B|W <samples>"), and the model reads them: per
    // stage F, B and W times at several sizes, growing with the samples.
    const Run d = cli({"whatif", file, "--describe"});
    QVERIFY2(d.code == 0, qPrintable(d.out + d.err));
    const QJsonArray cal = json(d).object()["kernel_calibration_ms"].toArray();
    QCOMPARE(int(cal.size()), kRanks);
    for (const auto& st : cal)
      for (const char* k : {"f", "b", "w"}) {
        const QJsonObject bySize = st.toObject()[k].toObject();
        QVERIFY2(bySize.size() >= 2, qPrintable(QJsonDocument(cal).toJson()));
        std::vector<std::pair<int, double>> v;
        for (auto it = bySize.begin(); it != bySize.end(); ++it) v.push_back({it.key().toInt(), it.value().toDouble()});
        std::sort(v.begin(), v.end());
        QVERIFY2(v.front().second > 0 && v.back().second > v.front().second, qPrintable(QJsonDocument(cal).toJson()));
      }
  }

  void stopPipeline() { stop(); }

  // Hybrid DP x PP (2 stages x 2 replicas): pipeline and data-parallel knobs switched live on the
  // same job, each from its acknowledged step on every rank: 1f1b -> zb-h1 (W ops appear), the
  // ring allreduce, gpipe (no W, every F of a step before its first B), seq1f1b (2 segments:
  // twice the forward ops per step).
  void hybridSwitchesScheduleAndAlgorithm() {
    start("hybrid", "pp.schedule");
    QVERIFY(!job_.id.isEmpty());
    const QStringList names = knobNames();  // 2 replicas per stage: the dp.* knobs act
    for (const char* k : {"dp.bucket_bytes", "dp.algorithm", "dp.compression", "dp.topk_ratio"})
      QVERIFY2(names.contains(k), qPrintable(names.join(' ')));
    const QString file = dir_.filePath("hybrid.tsdb");
    auto [stepOf, error, refused] = recordWhileSetting(
        job_.id, file, 5, {"pp.schedule=zb-h1", "dp.algorithm=ring", "pp.schedule=gpipe", "pp.schedule=seq1f1b"},
        800, 800);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    stop();
    auto session = loadSession(file.toStdString());
    QVERIFY2(session.isOk(), session.status().message().c_str());
    const int64_t zb = stepOf["pp.schedule=zb-h1"], ring = stepOf["dp.algorithm=ring"],
                  gpipe = stepOf["pp.schedule=gpipe"], seq = stepOf["pp.schedule=seq1f1b"];
    QVERIFY(zb < ring && ring < gpipe && gpipe < seq);
    const auto ops = pipelineOps(session.value());
    QCOMPARE(int(ops.size()), kRanks);
    for (const auto& [rank, list] : ops) {
      int64_t firstW = -1, firstStep = INT64_MAX;
      std::set<int64_t> stages;
      for (const Op& op : list) {
        stages.insert(op.stage);
        firstStep = std::min(firstStep, op.step);
        if (op.kind == EventKind::MicroBatchW && firstW < 0) firstW = op.step;
      }
      QVERIFY(firstStep < zb);
      QCOMPARE(firstW, zb);  // split backward (W ops) from the acknowledged step on, not before
      QCOMPARE(stages, (std::set<int64_t>{rank % 2}));  // rank = replica * 2 + stage
      std::map<int64_t, std::vector<Op>> bySteps;
      for (const Op& op : list) bySteps[op.step].push_back(op);
      bySteps.erase(bySteps.begin());  // cut by the recording's start and end
      bySteps.erase(std::prev(bySteps.end()));
      int gpipeForwards = -1;
      for (const auto& [step, stepOps] : bySteps) {
        int fs = 0, ws = 0;
        bool bSeen = false, fAfterB = false;
        for (const Op& op : stepOps) {
          fs += op.kind == EventKind::MicroBatchF;
          ws += op.kind == EventKind::MicroBatchW;
          fAfterB |= bSeen && op.kind == EventKind::MicroBatchF;
          bSeen |= op.kind == EventKind::MicroBatchB;
        }
        const QString where = QString("rank %1 step %2").arg(rank).arg(step);
        if (step >= zb && step < gpipe) QVERIFY2(ws > 0, qPrintable(where + ": zb-h1 without W"));
        if (step >= gpipe) QVERIFY2(ws == 0, qPrintable(where + ": W ops after zb-h1 ended"));
        if (step >= gpipe && step < seq) {
          QVERIFY2(!fAfterB, qPrintable(where + ": gpipe ran a forward after a backward"));
          gpipeForwards = fs;
        }
        if (step >= seq) QVERIFY2(fs == 2 * gpipeForwards, qPrintable(where + QString(": %1 forwards, gpipe %2").arg(fs).arg(gpipeForwards)));
      }
      QVERIFY(gpipeForwards > 0 && bySteps.rbegin()->first >= seq);
    }
    const auto algos = collectiveAlgorithms(session.value());
    QCOMPARE(int(algos.size()), kRanks);
    for (const auto& [rank, list] : algos) {
      bool before = false, after = false;
      for (const auto& [step, algo] : list) {
        QVERIFY2(algo == (step < ring ? "allreduce" : "ring"),
                 qPrintable(QString("rank %1 step %2: %3 (ring from %4)").arg(rank).arg(step).arg(algo.c_str()).arg(ring)));
        (step < ring ? before : after) = true;
      }
      QVERIFY(before && after);
    }
  }

  void discoSparsityLive() {
    start("disco", "disco.sparsity");
    QVERIFY(!job_.id.isEmpty());
    const QStringList names = knobNames();  // no gradient is synchronised: no dp.*
    QVERIFY2(names.contains("disco.sparsity"), qPrintable(names.join(' ')));
    QVERIFY2(names.filter(QRegularExpression("^dp\\.")).isEmpty(), qPrintable(names.join(' ')));
    const QString file = dir_.filePath("disco.tsdb");
    auto [stepOf, error, refused] = recordWhileSetting(job_.id, file, 4,
                                              {"disco.sparsity=0.5", "disco.sparsity.2=1", "disco.mode=wait"}, 800, 800);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    auto session = loadSession(file.toStdString());
    QVERIFY2(session.isOk(), session.status().message().c_str());
    TraceStore& s = session.value();
    // Bytes sent per (step, layer), all ranks together.
    std::map<std::pair<int64_t, int64_t>, int64_t> bytes;
    std::map<RankId, std::map<int64_t, int64_t>> stepAt;  // start -> step
    int64_t first = INT64_MIN, last = INT64_MAX;  // steps every rank recorded in full
    for (const auto& [rank, m] : stepStarts(s)) {
      for (const auto& [step, start] : m) stepAt[rank][start] = step;
      first = std::max(first, m.begin()->first);
      last = std::min(last, m.rbegin()->first);
    }
    for (TrackId t = 0; t < s.trackCount(); ++t) {
      const TrackEvents& ev = s.events(t);
      const auto& st = stepAt[s.track(t).rank];
      for (size_t i = 0; i < ev.size(); ++i) {
        if (ev.kind(i) != EventKind::P2PSend || s.str(ev.name(i)) != "disco exchange") continue;
        auto it = st.upper_bound(ev.start(i));
        if (it == st.begin()) continue;
        bytes[{std::prev(it)->second, ev.findAttr(i, AttrKey::Layer)->asInt()}] += ev.findAttr(i, AttrKey::Bytes)->asInt();
      }
    }
    const int64_t half = stepOf["disco.sparsity=0.5"], off2 = stepOf["disco.sparsity.2=1"];
    // Dense: 4 ranks x 3 peers x 32 features x 64 samples x 4 bytes x 2 directions per layer.
    const int64_t dense = 4 * 3 * 32 * 64 * 4 * 2;
    QVERIFY(!bytes.empty());
    // disco.mode: per rank, step and layer 1, the local block's F kernel starts before the first
    // forward receive (pipelined) or after it ended (wait).
    const int64_t waitStep = stepOf["disco.mode=wait"];
    std::map<std::tuple<RankId, int64_t>, std::pair<int64_t, int64_t>> recv1;  // first recv of layer 1
    std::map<std::tuple<RankId, int64_t>, int64_t> kernel1;                     // first F kernel of layer 1
    for (TrackId t = 0; t < s.trackCount(); ++t) {
      const TrackEvents& ev = s.events(t);
      const RankId rank = s.track(t).rank;
      const auto& st = stepAt[rank];
      for (size_t i = 0; i < ev.size(); ++i) {
        const Attr* layer = ev.findAttr(i, AttrKey::Layer);
        if (!layer || layer->asInt() != 1) continue;
        auto it = st.upper_bound(ev.start(i));
        if (it == st.begin()) continue;
        const auto key = std::make_tuple(rank, std::prev(it)->second);
        // (not the what-if calibration's passes at a change: "calibrate disco exchange")
        if (ev.kind(i) == EventKind::P2PRecv && s.str(ev.name(i)) == "disco exchange" && !recv1.count(key))
          recv1[key] = {ev.start(i), ev.end(i)};
        if (ev.kind(i) == EventKind::Kernel && s.str(ev.name(i)) == "F disco linear" && !kernel1.count(key))
          kernel1[key] = ev.start(i);
      }
    }
    int pipelinedSeen = 0, waitSeen = 0;
    for (const auto& [key, r] : recv1) {
      const int64_t step = std::get<1>(key);
      if (step <= first || step >= last || !kernel1.count(key)) continue;
      if (step < waitStep) {
        QVERIFY2(kernel1[key] < r.first, "pipelined: the local block is computed before waiting");
        ++pipelinedSeen;
      } else {
        QVERIFY2(kernel1[key] >= r.second, "wait: the layer computes after its features arrived");
        ++waitSeen;
      }
    }
    QVERIFY(pipelinedSeen > 0 && waitSeen > 0);
    bool sawDense = false;
    for (const auto& [key, b] : bytes) {
      const auto [step, layer] = key;
      // The first may be cut by the recording's start; after a rank's last Step event (the
      // recording ends at different steps per rank) its exchanges count to that step.
      if (step <= first || step >= last) continue;
      QVERIFY2(!(layer == 2 && step >= off2), "layer 2 sends nothing at sparsity 1");
      QVERIFY2(b == (step < half ? dense : dense / 2),
               qPrintable(QString("step %1 layer %2: %3 bytes (sparsity 0.5 from step %4, layer 2 off from %5)")
                              .arg(step).arg(layer).arg(b).arg(half).arg(off2)));
      sawDense |= step < half;
    }
    QVERIFY(sawDense && first < half && off2 < last);
    const Run a = cli({"analyze", file, "--json"});
    QVERIFY2(a.code == 0, qPrintable(a.err));
    const QJsonArray layers = json(a).object()["disco"].toObject()["layers"].toArray();
    QCOMPARE(layers.size(), 3);  // the split layers 1..3
    QCOMPARE(layers[0].toObject()["sparsity"].toDouble(), 0.5);
    std::map<double, double> perSparsity;  // layer 1: mean bytes per rank and step
    for (const auto& p : layers[0].toObject()["by_sparsity"].toArray())
      perSparsity[p.toObject()["sparsity"].toDouble()] = p.toObject()["bytes"].toDouble();
    QVERIFY2(perSparsity.count(0.0) && perSparsity.count(0.5), qPrintable(a.out.left(3000)));
    QVERIFY(std::fabs(perSparsity[0.0] / perSparsity[0.5] - 2.0) < 0.1);
  }

  void cleanupTestCase() { stop(); }

 private:
  QStringList knobNames() {
    const Run knobs = cli({"knobs", "--job", job_.id, "--json"});
    if (knobs.code != 0) return {};
    const QJsonDocument d = QJsonDocument::fromJson(knobs.out.toUtf8());
    const QJsonArray list = d.isArray() ? d.array() : d.object()["knobs"].toArray();
    QStringList out;
    for (const auto& k : list) out << k.toObject()["name"].toString();
    return out;
  }

  void start(const QString& mode, const QString& knob) {
    job_ = startDemo({"--ranks", QString::number(kRanks), "--mode", mode, "--steps", "100000", "--",
                      "--step-delay-ms", "2", "--eval-every", "0"},
                     knob);
    QVERIFY2(job_.error.isEmpty(), qPrintable(job_.error));
  }

  void stop() { QVERIFY2(stopDemo(job_), "the demo job did not stop after SIGTERM to its launcher"); }
};

QTEST_GUILESS_MAIN(TstTrainPpLive)
#include "tst_train_pp_live.moc"
