// Issue #16 through the real CLI and real PyTorch (Debian's python3-torch 1.13, gloo, CPU):
// `trainscope-cli demo --mode torch-ddp` starts 2 DDP ranks with the trainscope package and its
// communication hook; `jobs` lists both, `knobs` offers dp.compression and dp.topk_ratio but not
// dp.bucket_bytes; refused values (dp.compression=zip, dp.bucket_bytes=...) leave the job
// unchanged; `record` captures both ranks while `set dp.compression=fp16` is applied at the same
// step on both, from which step every bucket's bytes halve exactly and the Algorithm attribute
// switches, while the held-out loss still falls. `launch --ranks 2 -- python3 -m
// trainscope.demo_ddp` starts ranks torch-style and ends with the job. Skipped when
// /usr/bin/python3 cannot import torch.distributed.
#include <algorithm>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QtTest>
#include <cmath>
#include <csignal>
#include <map>

#include "live_test_support.h"
#include "trainscope/core/session/tsdb.h"

using namespace trainscope::core;
using namespace live_test;

namespace {

constexpr int kRanks = 2;
const char* const kPython = "/usr/bin/python3";

struct RankView {
  std::map<int64_t, std::pair<int64_t, int64_t>> steps;          // step -> window
  std::map<int64_t, std::pair<double, double>> tcp;              // step -> (tcp_sent, tcp_recv)
  std::map<int64_t, std::map<int64_t, int64_t>> bucketBytes;     // step -> bucket -> bytes
  std::map<int64_t, std::map<int64_t, std::string>> bucketAlgo;  // step -> bucket -> algorithm
  std::vector<std::pair<int64_t, double>> evalLoss;              // (time -> step, held-out loss)
};

std::map<RankId, RankView> view(TraceStore& s) {
  std::map<RankId, RankView> out;
  struct Comm {
    int64_t t, bucket, bytes;
    std::string algo;
  };
  std::map<RankId, std::vector<Comm>> comms;
  struct Count {
    int64_t t;
    std::string name;
    double value;
  };
  std::map<RankId, std::vector<Count>> counts;
  for (TrackId t = 0; t < s.trackCount(); ++t) {
    const TrackEvents& ev = s.events(t);
    const RankId rank = s.track(t).rank;
    RankView& v = out[rank];
    for (size_t i = 0; i < ev.size(); ++i) {
      if (ev.kind(i) == EventKind::Step) {
        if (const Attr* a = ev.findAttr(i, AttrKey::Step)) v.steps[a->asInt()] = {ev.start(i), ev.end(i)};
      } else if (ev.kind(i) == EventKind::Counter && s.str(ev.name(i)) == "eval_loss") {
        v.evalLoss.emplace_back(ev.start(i), ev.findAttr(i, AttrKey::Value)->asDouble());
      } else if (ev.kind(i) == EventKind::Counter) {
        counts[rank].push_back({ev.start(i), std::string(s.str(ev.name(i))), ev.findAttr(i, AttrKey::Value)->asDouble()});
      } else if (ev.kind(i) == EventKind::Collective && ev.findAttr(i, AttrKey::Bucket)) {
        const Attr* a = ev.findAttr(i, AttrKey::Algorithm);
        comms[rank].push_back({ev.start(i), ev.findAttr(i, AttrKey::Bucket)->asInt(),
                               ev.findAttr(i, AttrKey::Bytes)->asInt(),
                               a ? std::string(s.str(a->asString())) : ""});
      }
    }
  }
  for (auto& [r, v] : out) {
    auto stepAt = [&v](int64_t t) {
      for (const auto& [k, w] : v.steps)
        if (t >= w.first && t <= w.second) return k;
      return int64_t{-1};
    };
    for (const auto& c : comms[r]) {
      const int64_t st = stepAt(c.t);
      if (st < 0) continue;
      v.bucketBytes[st][c.bucket] = c.bytes;
      v.bucketAlgo[st][c.bucket] = c.algo;
    }
    for (auto& e : v.evalLoss) e.first = stepAt(e.first);
    for (const Count& c : counts[r]) {
      const int64_t st = stepAt(c.t);
      if (st < 0) continue;
      if (c.name == "tcp_sent_bytes") v.tcp[st].first = c.value;
      if (c.name == "tcp_recv_bytes") v.tcp[st].second = c.value;
    }
  }
  return out;
}

bool torchAvailable(QString* why) {
  if (!QFileInfo::exists(kPython)) {
    *why = "no /usr/bin/python3";
    return false;
  }
  QProcess p;
  p.start(kPython, {"-c", "import torch, torch.distributed as d; assert d.is_available()"});
  if (!p.waitForFinished(120000) || p.exitCode() != 0) {
    *why = "/usr/bin/python3 cannot import torch.distributed (apt-get install python3-torch): " +
           QString::fromUtf8(p.readAllStandardError()).right(300);
    return false;
  }
  return true;
}

}  // namespace

class TstTorchLive : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  DemoJob job_;

  // The launcher is a session leader (setsid): its process group holds every rank. SIGTERM to
  // the launcher (forwarded to the ranks), then to the group, then SIGKILL: nothing outlives
  // the test, also when it failed.
  // `trainscope-cli launch --ranks 2 -- cmd`: true when it finished within 3 minutes with exit
  // code 0; *out gets everything it printed. On a time-out the launcher is stopped (it forwards
  // the stop to the ranks).
  static bool launchTwoRanks(const QStringList& cmd, QString* out) {
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(bin("trainscope-cli"), QStringList{"launch", "--ranks", "2", "--"} + cmd);
    if (!p.waitForStarted()) return false;
    const bool finished = p.waitForFinished(180000);
    if (!finished) {
      ::kill(static_cast<pid_t>(p.processId()), SIGTERM);
      p.waitForFinished(10000);
    }
    *out = QString::fromUtf8(p.readAll());
    return finished && p.exitCode() == 0;
  }

  void stopJob() {
    const qint64 pgid = job_.launcher;
    const bool gone = stopDemo(job_);
    if (pgid > 0) {
      ::kill(-static_cast<pid_t>(pgid), SIGTERM);
      QTest::qWait(gone ? 0 : 2000);
      ::kill(-static_cast<pid_t>(pgid), SIGKILL);
    }
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    QString why;
    if (!torchAvailable(&why)) QSKIP(qPrintable(why));
    QVERIFY2(QFileInfo::exists(QString(TRAINSCOPE_BINARY_DIR) + "/python/trainscope/__init__.py"),
             "build/python/trainscope missing (target trainscope_python)");
    live_test::usePrivateRuntimeDir(dir_);
  }

  void demoStartsTwoTorchRanks() {
    job_ = startDemo({"--mode", "torch-ddp", "--steps", "100000", "--", "--step-delay-ms", "20"},
                     "dp.compression");
    QVERIFY2(job_.error.isEmpty(), qPrintable(job_.error));
    const Run jobs = cli({"jobs", "--json"});
    bool listed = false;
    for (const auto& j : QJsonDocument::fromJson(jobs.out.toUtf8()).object()["jobs"].toArray())
      listed |= j.toObject()["job_id"].toString() == job_.id && j.toObject()["ranks_found"].toInt() == kRanks;
    QVERIFY2(listed, qPrintable(jobs.out));
  }

  void onlyKnobsThatActAreOffered() {
    QVERIFY(!job_.id.isEmpty());
    const Run k = cli({"knobs", "--job", job_.id, "--json"});
    QVERIFY2(k.code == 0, qPrintable(k.err));
    QVERIFY(k.out.contains("dp.compression") && k.out.contains("dp.topk_ratio"));
    QVERIFY2(!k.out.contains("dp.bucket_bytes"),
             "DDP fixes its buckets: dp.bucket_bytes must not be offered");
    for (const QString& bad : {QString("dp.compression=zip"), QString("dp.bucket_bytes=1000000"),
                               QString("dp.compression=onebit-ef"), QString("dp.topk_ratio=2")}) {
      const Run r = cli({"set", "--job", job_.id, bad});
      QVERIFY2(r.code == 1, qPrintable(bad + ": " + r.out + r.err));
      QVERIFY(!r.err.trimmed().isEmpty());
    }
    const Run after = cli({"knobs", "--job", job_.id, "--json"});
    QVERIFY2(after.out.contains("\"none\""), qPrintable(after.out));
  }

  void fp16HalvesTheBucketBytesAtTheAgreedStep() {
    QVERIFY(!job_.id.isEmpty());
    const QString file = dir_.filePath("torch.tsdb");
    const RecordedChanges rc = recordWhileSetting(job_.id, file, 8, {"dp.compression=fp16"}, 3000, 0);
    QVERIFY2(rc.error.isEmpty(), qPrintable(rc.error));
    const int64_t k = rc.stepOf.at("dp.compression=fp16");

    auto session = loadSession(file.toStdString());
    QVERIFY2(session.isOk(), session.status().message().c_str());
    TraceStore& s = session.value();
    const auto changes = knobChanges(s, "dp.compression");
    QCOMPARE(int(changes.size()), kRanks);
    for (const auto& [rank, c] : changes) QCOMPARE(c, std::make_pair(std::string("fp16"), k));

    const auto ranks = view(s);
    QCOMPARE(int(ranks.size()), kRanks);
    for (const auto& [rank, v] : ranks) {
      const QString who = QString("rank %1, fp16 at step %2: ").arg(rank).arg(k);
      QVERIFY2(v.bucketBytes.count(k - 1) && v.bucketBytes.count(k) && v.bucketBytes.count(k + 1),
               qPrintable(who + "steps around the change missing"));
      const auto& before = v.bucketBytes.at(k - 1);
      QVERIFY2(before.size() >= 2, qPrintable(who + "expected several DDP buckets"));
      // Every step from the change on: each bucket exactly half of what it sent before, as
      // allreduce+fp16; every step before it: the fp32 bytes, as allreduce.
      int after = 0;
      for (const auto& [step, buckets] : v.bucketBytes) {
        if (step < 1 || buckets.size() != before.size()) continue;  // step 0 has DDP's initial buckets
        for (const auto& [b, bytes] : buckets) {
          QVERIFY2(before.count(b), qPrintable(who + QString("bucket %1 unknown").arg(b)));
          const int64_t want = step < k ? before.at(b) : before.at(b) / 2;
          QVERIFY2(
              bytes == want,
              qPrintable(
                  who +
                  QString("step %1 bucket %2: %3 bytes, want %4").arg(step).arg(b).arg(bytes).arg(want)));
          QCOMPARE(v.bucketAlgo.at(step).at(b), std::string(step < k ? "allreduce" : "allreduce+fp16"));
        }
        after += step >= k;
      }
      QVERIFY2(after >= 3, qPrintable(who + "fewer than 3 fp16 steps recorded"));
      // The held-out loss (fixed set, no batch noise) still falls under fp16: the last value
      // recorded is below the last one before the change and below the first one recorded.
      double first = -1, beforeChange = -1, last = -1;
      int64_t lastStep = -1;
      for (const auto& [step, value] : v.evalLoss) {
        if (step < 0) continue;
        if (first < 0) first = value;
        if (step < k) beforeChange = value;
        last = value;
        lastStep = step;
      }
      QVERIFY2(first > 0 && beforeChange > 0 && lastStep > k, qPrintable(who + "held-out losses missing"));
      QVERIFY2(last < beforeChange && last < first,
               qPrintable(who + QString("held-out loss %1 first, %2 before, %3 at step %4")
                                    .arg(first)
                                    .arg(beforeChange)
                                    .arg(last)
                                    .arg(lastStep)));
    }
    // The job's own log: both ranks applied fp16 at that step.
    QFile log(job_.log);
    QVERIFY2(log.open(QIODevice::ReadOnly), qPrintable(job_.log));
    const QString text = QString::fromUtf8(log.readAll());
    QRegularExpression applied("rank (\\d) applied dp.compression=fp16 at step (\\d+)");
    int lines = 0;
    for (auto it = applied.globalMatch(text); it.hasNext(); ++lines)
      QCOMPARE(it.next().captured(2).toLongLong(), k);
    QCOMPARE(lines, kRanks);
  }

  // Every other value of dp.compression, and dp.topk_ratio, acts in the real job from the
  // acknowledged step on both ranks: the bytes of every bucket are what that scheme sends for
  // it (N = fp32 values of the bucket), the Algorithm attribute names it, and the ranks stay
  // replicas (bitwise equal held-out loss: every rank decompresses the same data in rank order).
  void everyCompressionActs() {
    QVERIFY(!job_.id.isEmpty());
    const QString file = dir_.filePath("torch-all.tsdb");
    const QStringList changes = {"dp.compression=int8", "dp.compression=topk-ef", "dp.topk_ratio=0.05",
                                 "dp.compression=bf16", "dp.compression=none"};
    const RecordedChanges rc = recordWhileSetting(job_.id, file, 14, changes, 1500, 1800);
    QVERIFY2(rc.error.isEmpty(), qPrintable(rc.error));
    std::vector<std::pair<int64_t, QString>> at;  // (step, change) in order
    for (const QString& c : changes) at.emplace_back(rc.stepOf.at(c), c);
    for (size_t i = 1; i < at.size(); ++i) QVERIFY2(at[i - 1].first < at[i].first, "changes not in order");

    auto session = loadSession(file.toStdString());
    QVERIFY2(session.isOk(), session.status().message().c_str());
    TraceStore& s = session.value();
    for (const char* knob : {"dp.compression", "dp.topk_ratio"})
      for (const auto& [rank, c] : knobChanges(s, knob)) {
        const QString last =
            std::string(knob) == "dp.topk_ratio" ? "dp.topk_ratio=0.05" : "dp.compression=none";
        QCOMPARE(c.second, rc.stepOf.at(last));
      }
    const auto ranks = view(s);
    QCOMPARE(int(ranks.size()), kRanks);
    std::map<int64_t, std::map<RankId, double>> evalLoss;
    for (const auto& [rank, v] : ranks) {
      const QString who = QString("rank %1: ").arg(rank);
      QVERIFY2(v.bucketBytes.count(at.front().first - 1),
               qPrintable(who + "no step before the first change"));
      const auto& fp32 = v.bucketBytes.at(at.front().first - 1);  // fp16 from the previous test function
      std::map<QString, int> seen;
      for (const auto& [step, buckets] : v.bucketBytes) {
        if (step < at.front().first || buckets.size() != fp32.size()) continue;
        QString mode = "dp.compression=fp16";
        double ratio = 0.01;
        for (const auto& [st, c] : at) {
          if (st > step) break;
          if (c.startsWith("dp.topk_ratio"))
            ratio = 0.05;
          else
            mode = c;
        }
        ++seen[mode + (mode.endsWith("topk-ef") ? QString::number(ratio) : QString())];
        for (const auto& [b, bytes] : buckets) {
          const int64_t n = fp32.at(b) / 2;  // fp16 bytes = 2N; N fp32 values
          int64_t want = 0;
          std::string algo;
          if (mode.endsWith("=int8")) {
            want = n + 4;
            algo = "allgather+int8";
          } else if (mode.endsWith("=topk-ef")) {
            want = 8 * static_cast<int64_t>(std::ceil(ratio * static_cast<double>(n)));
            algo = "allgather+topk-ef";
          } else if (mode.endsWith("=bf16")) {
            want = 2 * n;
            algo = "allgather+bf16";
          } else if (mode.endsWith("=none")) {
            want = 4 * n;
            algo = "allreduce";
          } else {
            want = 2 * n;
            algo = "allreduce+fp16";
          }
          QVERIFY2(bytes == want && v.bucketAlgo.at(step).at(b) == algo,
                   qPrintable(who + QString("step %1 (%2) bucket %3: %4 bytes by %5, want %6 by %7")
                                        .arg(step)
                                        .arg(mode)
                                        .arg(b)
                                        .arg(bytes)
                                        .arg(QString::fromStdString(v.bucketAlgo.at(step).at(b)))
                                        .arg(want)
                                        .arg(QString::fromStdString(algo))));
        }
      }
      for (const char* m : {"dp.compression=int8", "dp.compression=topk-ef0.01", "dp.compression=topk-ef0.05",
                            "dp.compression=bf16", "dp.compression=none"})
        QVERIFY2(seen[m] >= 1, qPrintable(who + "no step recorded with " + m));
      for (const auto& [step, value] : v.evalLoss)
        if (step >= 0) evalLoss[step][rank] = value;
    }
    int compared = 0;
    for (const auto& [step, perRank] : evalLoss) {
      if (int(perRank.size()) != kRanks) continue;
      ++compared;
      for (const auto& [rank, value] : perRank)
        QVERIFY2(value == perRank.begin()->second,
                 qPrintable(QString("step %1: rank %2 held-out loss %3, rank 0 %4")
                                .arg(step)
                                .arg(rank)
                                .arg(value)
                                .arg(perRank.begin()->second)));
    }
    QVERIFY2(compared >= 5, "too few held-out evaluations on both ranks");
  }

  void demoStops() {
    QVERIFY2(stopDemo(job_), "the torch-ddp job did not stop after SIGTERM to its launcher");
  }

  // attach_ddp(hook="on-demand"): while dp.compression is none DDP runs its own allreduce (no
  // bucket events), and `set dp.compression=fp16` registers the hook at the agreed step on both
  // ranks: bucket events (allreduce+fp16) from that step on, none before. The kernel's TCP byte
  // counts per step (tcp_sent_bytes / tcp_recv_bytes, measured, not computed) show the same
  // change: before it, every full step moves at least the fp32 gradients' ring-allreduce bytes
  // (4 N, N = 662 026 parameters, 2 ranks) and at most 16 KiB more (the previous step end's
  // agreement allreduce, gloo's framing); from step k on (the counter is read at the step's end,
  // after its fp16 buckets) at least 2 N and at most 2 N + 16 KiB. The job agrees at every step
  // (--agree-every 1; the agreement is pipelined, so the collective a step end starts completes
  // during the next step and its few bytes are counted there).
  void onDemandHookAndMeasuredBytes() {
    DemoJob job = startDemo({"--mode", "torch-ddp", "--steps", "100000", "--", "--step-delay-ms", "20",
                             "--hook", "on-demand", "--agree-every", "1"},
                            "dp.compression");
    QVERIFY2(job.error.isEmpty(), qPrintable(job.error));
    const QString file = dir_.filePath("torch-on-demand.tsdb");
    const RecordedChanges rc = recordWhileSetting(job.id, file, 7, {"dp.compression=fp16"}, 3000, 0);
    const bool stopped = stopDemo(job);
    if (job.launcher > 0) ::kill(-static_cast<pid_t>(job.launcher), SIGKILL);
    QVERIFY2(rc.error.isEmpty(), qPrintable(rc.error));
    QVERIFY(stopped);
    const int64_t k = rc.stepOf.at("dp.compression=fp16");
    auto session = loadSession(file.toStdString());
    QVERIFY2(session.isOk(), session.status().message().c_str());
    const auto ranks = view(session.value());
    QCOMPARE(int(ranks.size()), kRanks);
    constexpr double kFp32 = 4.0 * 662026, kSlack = 16384;
    for (const auto& [rank, v] : ranks) {
      const QString who = QString("rank %1, fp16 at step %2: ").arg(rank).arg(k);
      for (const auto& [step, buckets] : v.bucketAlgo) {
        QVERIFY2(step >= k, qPrintable(who + QString("a bucket event at step %1, before the hook").arg(step)));
        for (const auto& [b, algo] : buckets) QCOMPARE(algo, std::string("allreduce+fp16"));
      }
      QVERIFY2(v.bucketAlgo.count(k) && v.bucketAlgo.count(k + 1), qPrintable(who + "no bucket events after"));
      // Per step the counts are the kernel's, read at the step's end: under load a chunk still
      // in a socket queue then is counted in the next step (seen once in make test: 2.45 MB at
      // one fp32 step, 197 KB short). So every step is checked coarsely (within half of the
      // formula either way) and the median step of each side exactly.
      std::vector<double> before, after;
      for (const auto& [step, sr] : v.tcp) {
        if (step < 1 || !v.steps.count(step)) continue;
        const double want = step < k ? kFp32 : kFp32 / 2;
        for (double x : {sr.first, sr.second}) {
          QVERIFY2(x >= 0.5 * want && x <= 1.5 * want + kSlack,
                   qPrintable(who + QString("step %1: %2 bytes on TCP, want about %3").arg(step).arg(x).arg(want)));
          (step < k ? before : after).push_back(x);
        }
      }
      QVERIFY2(before.size() >= 6 && after.size() >= 6,
               qPrintable(who + QString("%1 / %2 counts").arg(before.size()).arg(after.size())));
      for (auto* side : {&before, &after}) {
        std::sort(side->begin(), side->end());
        const double median = (*side)[side->size() / 2], want = side == &before ? kFp32 : kFp32 / 2;
        QVERIFY2(median >= want && median <= want + kSlack,
                 qPrintable(who + QString("median %1 bytes on TCP per step, want %2 + < %3").arg(median).arg(want).arg(kSlack)));
      }
    }
  }

  // doctor on the torch-ddp demo (issue #36): a straggler injected into rank 1 (30 ms of Python
  // spinning in a range "inject straggler" every step) is the rank that arrives last at DDP's
  // bucket allreduces -- host time, since the package traces no compute on CPU; a hang injected
  // into rank 1 at step 20 is named with its collective (rank 0 waits in step 20's bucket
  // allreduce) and rank 1 inside "inject hang".
  void doctorNamesStragglerAndHang() {
    {
      DemoJob job = startDemo({"--mode", "torch-ddp", "--steps", "100000", "--", "--inject",
                               "straggler:rank=1,ms=30"},
                              "dp.compression");
      QVERIFY2(job.error.isEmpty(), qPrintable(job.error));
      const Run doc = cli({"doctor", "--job", job.id, "--seconds", "3", "--json"});
      QVERIFY(stopDemo(job));
      QVERIFY2(doc.code == 0, qPrintable(doc.out + doc.err));
      const QJsonObject j = QJsonDocument::fromJson(doc.out.toUtf8()).object();
      const QJsonArray st = j["stragglers"].toArray();
      QVERIFY2(!st.isEmpty(), qPrintable(doc.out));
      const QJsonObject top = st[0].toObject();
      QVERIFY2(top["rank"].toInt(-1) == 1 && top["cause"].toString() == "host" &&
                   top["what"].toString() == "inject straggler" && top["late_ms"].toDouble() >= 15,
               qPrintable(doc.out));
      QVERIFY2(j["hang"].isNull(), qPrintable(doc.out));
    }
    DemoJob job = startDemo({"--mode", "torch-ddp", "--steps", "100000", "--", "--inject", "hang:rank=1,step=20"},
                            "dp.compression");
    QVERIFY2(job.error.isEmpty(), qPrintable(job.error));
    auto logText = [&] {
      QFile f(job.log);
      return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString();
    };
    QTRY_VERIFY_WITH_TIMEOUT(logText().contains("rank 1 hangs before step 20"), 120000);
    const Run doc = cli({"doctor", "--job", job.id, "--seconds", "2", "--hang-after", "1", "--json"});
    QVERIFY(stopDemo(job));
    QVERIFY2(doc.code == 0, qPrintable(doc.out + doc.err));
    const QJsonObject hang = QJsonDocument::fromJson(doc.out.toUtf8()).object()["hang"].toObject();
    QCOMPARE(hang["missing_ranks"].toArray(), QJsonArray({1}));
    QCOMPARE(hang["waiting_ranks"].toArray(), QJsonArray({0}));
    QVERIFY2(hang["op"].toString().startsWith("bucket allreduce") && hang["step"].toInt(-1) == 20,
             qPrintable(doc.out));
    const QJsonArray ranks = hang["ranks"].toArray();
    QVERIFY2(ranks.size() == 1 && QJsonDocument(ranks[0].toObject()["stacks"].toArray()).toJson().contains("inject hang"),
             qPrintable(doc.out));
  }

  // `launch` starts a Python command torch-style (no mpirun): both ranks rendezvous, train with
  // the agent and exit 0, and launch returns 0.
  void launchStartsPythonRanksTorchStyle() {
    QString out;
    QVERIFY2(launchTwoRanks({kPython, "-m", "trainscope.demo_ddp", "--steps", "20", "--log-every", "0"}, &out),
             qPrintable(out));
    QVERIFY2(out.contains("torch-style"), qPrintable(out));
    QVERIFY2(out.contains("rank 0 done steps=20") && out.contains("rank 1 done steps=20"), qPrintable(out));
  }

  // The package's pipelined step agreement (docs/PYTHON.md, Step agreement) on two real gloo
  // ranks, called as the agent calls it: the first call of each step end answers with the
  // previous agreement's allreduce-MIN (after AGREE_SYNC_FIRST blocking ones, and 0 at the first
  // pipelined one), and a second call in the same step end (the agent's digest check) blocks and
  // answers with this step's MIN. Each rank checks every answer against the hand-computed one
  // and prints them; the two ranks' lines must be equal.
  void pipelinedAgreementAnswersAlikeOnEveryRank() {
    const char* script =
        "import datetime, os, sys\n"
        "import torch.distributed as dist\n"
        "import trainscope as t\n"
        "dist.init_process_group('gloo', timeout=datetime.timedelta(seconds=60))\n"
        "r = dist.get_rank()\n"
        "t._auto, t._agree_every = False, 1\n"
        "got, bad = [], []\n"
        "for s in range(12):\n"
        "    t._step = s\n"
        "    t._end_serial += 1\n"
        "    a = t._agree(100 * (r + 1) + s, None)\n"
        "    want = 100 + s if s < t.AGREE_SYNC_FIRST else (0 if s == t.AGREE_SYNC_FIRST else 100 + s - 1)\n"
        "    if a != want: bad.append('step %d: %d, want %d' % (s, a, want))\n"
        "    got.append(a)\n"
        "    if s % 3 == 0:\n"
        "        d = t._agree(1000 - 10 * r + s, None)\n"
        "        if d != 990 + s: bad.append('digest at step %d: %d, want %d' % (s, d, 990 + s))\n"
        "        got.append(d)\n"
        "sys.stdout.write('rank %d answers %s bad %s\\n' % (r, got, bad))\n"  // one write: the ranks share the pipe
        "sys.stdout.flush()\n"
        "dist.barrier()\n"
        "os._exit(1 if bad else 0)\n";
    QString out;
    QVERIFY2(launchTwoRanks({kPython, "-c", script}, &out), qPrintable(out));
    const QRegularExpression line("rank (\\d) answers (\\[[^\\]]*\\]) bad \\[\\]");
    QMap<QString, QString> answers;
    for (auto it = line.globalMatch(out); it.hasNext();) {
      const auto m = it.next();
      answers[m.captured(1)] = m.captured(2);
    }
    QVERIFY2(answers.size() == 2 && answers["0"] == answers["1"], qPrintable(out));
  }

  // Without the agent library the package is a no-op and says why once; the script runs on.
  void packageIsANoOpWithoutTheAgent() {
    QTemporaryDir copy;
    QVERIFY(copy.isValid());
    QDir().mkpath(copy.filePath("trainscope"));
    for (const QString& f : QDir(QString(TRAINSCOPE_BINARY_DIR) + "/python/trainscope").entryList({"*.py"}))
      QVERIFY(QFile::copy(QString(TRAINSCOPE_BINARY_DIR) + "/python/trainscope/" + f,
                          copy.filePath("trainscope/" + f)));
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("PYTHONPATH", copy.path());
    env.insert("TRAINSCOPE_AGENT_LIB", copy.filePath("missing.so"));
    env.remove("LD_PRELOAD");
    p.setProcessEnvironment(env);
    p.start(kPython, {"-c",
                      "import trainscope as t\n"
                      "k = t.knob_enum('dp.compression', ['none', 'fp16'], 'fp16')\n"
                      "rc = t.init()\n"
                      "with t.step(0):\n  t.counter('loss', 1.0)\n"
                      "print('rc', rc, 'value', k.value, 'active', t.is_active())\n"});
    QVERIFY(p.waitForFinished(60000));
    const QString out = QString::fromUtf8(p.readAllStandardOutput()),
                  err = QString::fromUtf8(p.readAllStandardError());
    QVERIFY2(p.exitCode() == 0 && out.contains("rc -1 value fp16 active False"), qPrintable(out + err));
    QVERIFY2(err.contains("libtrainscope_agent.so not found"), qPrintable(err));
  }

  void cleanupTestCase() { stopJob(); }
};

QTEST_GUILESS_MAIN(TstTorchLive)
#include "tst_torch_live.moc"
