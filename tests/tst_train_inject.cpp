// Faults injected into real trainscope-train ranks (issue #36, item 4; docs/TRAINER.md, "Faults to
// inject"): a bad --inject is a clear usage error; a straggler on rank 2 of 4 (20 ms of compute
// every step) is in the recording as compute on rank 2 only; a hang on rank 3 of 4
// stops the job before that step while every rank's agent still answers. Timings are never
// asserted.
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QtTest>

#include <csignal>
#include <map>

#include "live_test_support.h"
#include "trainscope/core/live/live_session.h"
#include "trainscope/core/session/tsdb.h"

using namespace live_test;

class TstTrainInject : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    if (!QFileInfo::exists(bin("trainscope-train"))) QSKIP("trainscope-train not built (MPI or OpenBLAS missing)");
    live_test::usePrivateRuntimeDir(dir_);
    qputenv("OMPI_ALLOW_RUN_AS_ROOT", "1");
    qputenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
  }

  void badSpecIsAUsageError() {
    struct Case {
      const char* spec;
      const char* says;
    } cases[] = {
        {"straggler:rank=1", "ms=X (> 0) is required"},
        {"hang:rank=1", "step=S is required"},
        {"slow:rank=1,ms=3", "the kind must be straggler, hang or slow-loader"},
        {"straggler:rank=x,ms=3", "'rank' must be a whole number"},
        {"hang:rank=1,step=3,ms=2", "unknown key 'ms' for hang"},
    };
    for (const Case& c : cases) {
      QProcess p;
      p.start(bin("trainscope-train"), {"--no-agent", "--steps", "1", "--inject", c.spec});
      QVERIFY(p.waitForFinished(60000));
      const QString err = QString::fromUtf8(p.readAllStandardError());
      QVERIFY2(p.exitCode() == 2 && err.contains(c.says) && err.contains(c.spec),
               qPrintable(QString("%1: exit %2: %3").arg(c.spec).arg(p.exitCode()).arg(err)));
    }
  }

  // What must hold at any load: the injected compute is in the recording, on rank 2 only, at
  // every step, each at least 20 ms. Which rank the analysis names is reported, not asserted:
  // the offline attribution ("the rank with the most compute") counts wall time, so on 2 cores
  // with 4 ranks a descheduled rank's compute looks long too -- it named rank 2 on 78 % of the
  // steps alone, and rank 1 as the slowest once under make test's load. Naming the straggler
  // right is issue #36's last-arrival attribution, not this test.
  void stragglerIsRecorded() {
    DemoJob job = startDemo({"--ranks", "4", "--steps", "1000000", "--", "--inject", "straggler:rank=2,ms=20"},
                            "dp.bucket_bytes");
    QVERIFY2(job.error.isEmpty(), qPrintable(job.error));
    const QString file = dir_.filePath("straggler.tsdb");
    const Run rec = cli({"record", "--job", job.id, "--seconds", "3", "--out", file});
    QVERIFY(stopDemo(job));
    QVERIFY2(rec.code == 0, qPrintable(rec.out + rec.err));
    auto session = trainscope::core::loadSession(file.toStdString());
    QVERIFY2(session.isOk(), session.status().message().c_str());
    const trainscope::core::TraceStore& st = session.value();
    std::map<int, int> perRank;
    int64_t shortest = INT64_MAX;
    for (size_t t = 0; t < st.trackCount(); ++t) {
      const auto& ev = st.rawEvents(static_cast<trainscope::core::TrackId>(t));
      for (size_t i = 0; i < ev.size(); ++i)
        if (st.str(ev.name(i)) == "inject straggler") {
          ++perRank[static_cast<int>(st.track(static_cast<trainscope::core::TrackId>(t)).rank)];
          shortest = std::min(shortest, ev.end(i) - ev.start(i));
        }
    }
    // At least two: 3 s hold ~100 steps here, but a loaded machine may run few (no speed assumed).
    QVERIFY2(perRank.size() == 1 && perRank.count(2) && perRank[2] >= 2,
             qPrintable(QString("injected compute on %1 rank(s), %2 event(s) on rank 2").arg(perRank.size()).arg(perRank[2])));
    QVERIFY2(shortest >= 20'000'000, qPrintable(QString("shortest injected compute %1 ns").arg(shortest)));
    const Run an = cli({"analyze", file, "--json"});
    QVERIFY2(an.code == 0, qPrintable(an.err));
    const QJsonObject s = QJsonDocument::fromJson(an.out.toUtf8()).object()["stragglers"].toObject();
    int steps = 0, named = 0;
    for (const auto& v : s["per_step"].toArray()) {
      ++steps;
      named += v.toObject()["straggler"].toInt(-1) == 2;
    }
    qInfo("analyze: slowest rank %d; %d of %d steps name rank 2", s["slowest_rank"].toInt(-1), named, steps);
    // Last-arrival attribution on the same recording (offline): rank 2, its compute.
    const QJsonObject at = s["attribution"].toObject();
    const QJsonArray offline = at["stragglers"].toArray();
    QVERIFY2(!offline.isEmpty() && offline[0].toObject()["rank"].toInt(-1) == 2 &&
                 offline[0].toObject()["cause"].toString() == "compute",
             qPrintable(QJsonDocument(at).toJson()));
  }

  // `doctor` on the live job: the rank that arrives last at the collectives is rank 2, late by
  // about the injected 20 ms, and the cause is its compute ("inject straggler"). Which rank and
  // why must hold at any load; the lateness is only bounded below loosely (a rank descheduled
  // on 2 cores may add to it, never take the 20 ms away).
  void doctorNamesTheStraggler() {
    DemoJob job = startDemo({"--ranks", "4", "--steps", "1000000", "--", "--inject", "straggler:rank=2,ms=20"},
                            "dp.bucket_bytes");
    QVERIFY2(job.error.isEmpty(), qPrintable(job.error));
    const Run doc = cli({"doctor", "--job", job.id, "--seconds", "3", "--collectives", "5", "--json"});
    const Run text = cli({"doctor", "--job", job.id, "--seconds", "1"});
    QVERIFY(stopDemo(job));
    QVERIFY2(doc.code == 0, qPrintable(doc.out + doc.err));
    const QJsonObject j = QJsonDocument::fromJson(doc.out.toUtf8()).object();
    const QJsonObject sum = j["straggler_summary"].toObject();
    qInfo("doctor: %d steps, threshold %.3f ms (noise floor %.3f ms), median step %.3f ms", sum["steps"].toInt(),
          sum["threshold_ms"].toDouble(), sum["noise_ms"].toDouble(), sum["median_step_ms"].toDouble());
    const QJsonArray stragglers = j["stragglers"].toArray();
    QVERIFY2(!stragglers.isEmpty(), qPrintable(doc.out));
    const QJsonObject top = stragglers[0].toObject();
    QVERIFY2(top["rank"].toInt(-1) == 2 && top["cause"].toString() == "compute" &&
                 top["what"].toString() == "inject straggler" && top["late_ms"].toDouble() >= 10 &&
                 !top["steps"].toArray().isEmpty(),
             qPrintable(doc.out));
    // Most steps of the window name rank 2 (each step with a late arrival names one rank).
    int named = 0, steps = 0;
    for (const auto& v : j["per_step"].toArray()) {
      ++steps;
      named += v.toObject()["rank"].toInt(-1) == 2;
    }
    QVERIFY2(steps > 0 && named * 2 > steps, qPrintable(QString("%1 of %2 steps name rank 2").arg(named).arg(steps)));
    QVERIFY2(j["hang"].isNull(), qPrintable(doc.out));
    // Item 1: per collective, when each rank entered and left it.
    const QJsonArray colls = j["collectives"].toArray();
    QVERIFY2(colls.size() == 5, qPrintable(doc.out));
    for (const auto& c : colls) {
      const QJsonArray rs = c.toObject()["ranks"].toArray();
      QVERIFY2(rs.size() == 4, qPrintable(doc.out));
      for (const auto& r : rs)
        QVERIFY(r.toObject()["leave_ms"].toDouble() >= r.toObject()["enter_ms"].toDouble());
    }
    QVERIFY2(text.code == 0 && text.out.contains("rank 2") && text.out.contains("hang: none"),
             qPrintable(text.out + text.err));
  }

  // Issue 40: a recorder that stops reading (SIGSTOP) while the agents' client queues are small
  // (1 MB) misses batches the agents drop for it. The recording says so -- `record`'s summary
  // and warning, the file's not_received_* metadata, `info` -- instead of "dropped by agents: 0".
  void aStoppedRecorderSaysWhatItMissed() {
    qputenv("TRAINSCOPE_CLIENT_QUEUE_MB", "1");
    DemoJob job = startDemo({"--ranks", "2", "--steps", "1000000"}, "dp.bucket_bytes");
    qunsetenv("TRAINSCOPE_CLIENT_QUEUE_MB");
    QVERIFY2(job.error.isEmpty(), qPrintable(job.error));
    struct Stop {
      DemoJob& j;
      ~Stop() { stopDemo(j); }
    } stop{job};
    const QString file = dir_.filePath("stopped.tsdb");
    QProcess rec;
    rec.start(bin("trainscope-cli"), {"record", "--job", job.id, "--out", file});
    QVERIFY(rec.waitForStarted());
    QByteArray err;
    QTRY_VERIFY_WITH_TIMEOUT((err += rec.readAllStandardError()).contains("recording job"), 60000);
    ::kill(static_cast<pid_t>(rec.processId()), SIGSTOP);
    // Stopped until an agent has dropped batches for it (its Stats say so): how long that takes
    // depends on the job's speed, which no test may assume.
    auto entries = trainscope::core::LiveSession::entriesOf(job.id.toStdString(), false);
    QVERIFY2(entries.isOk(), entries.status().message().c_str());
    auto agent = trainscope::core::AgentClient::connect(entries.value().front().endpoint);
    QVERIFY2(agent.isOk(), agent.status().message().c_str());
    auto droppedForSlow = [&] {
      auto st = agent.value()->stats();
      return st.isOk() && st.value().batchesDroppedForSlowClients > 0;
    };
    QTRY_VERIFY_WITH_TIMEOUT(droppedForSlow(), 300000);
    ::kill(static_cast<pid_t>(rec.processId()), SIGCONT);
    // Resumed, it reads what the agents kept for it (at most 1 MB each) and then the batches after
    // the gap, which is where the gap shows: milliseconds of work; 3 s is a wide margin, not a
    // rate. SIGINT then saves, as --seconds would.
    QTest::qWait(3000 * TRAINSCOPE_TEST_SLOWDOWN);
    ::kill(static_cast<pid_t>(rec.processId()), SIGINT);
    QVERIFY(rec.waitForFinished(120000));
    const QString out = QString::fromUtf8(rec.readAllStandardOutput());
    err += rec.readAllStandardError();
    QVERIFY2(rec.exitCode() == 0, qPrintable(out + err));
    const auto m = QRegularExpression("not received: ([\\d,]+)").match(out);
    QVERIFY2(m.hasMatch() && m.captured(1) != "0", qPrintable(out + err));
    QVERIFY2(err.contains("never received"), err.constData());
    auto reader = trainscope::core::loadSession(file.toStdString());
    QVERIFY2(reader.isOk(), reader.status().message().c_str());
    uint64_t missed = 0;
    for (const auto& [k, v] : reader.value().metadata())
      if (k.rfind("not_received_events.", 0) == 0) missed += std::stoull(v);
    QCOMPARE(QString::number(missed), QString(m.captured(1)).remove(','));
    const Run info = cli({"info", file});
    QVERIFY2(info.code == 0 && info.out.contains("NOT RECEIVED"), qPrintable(info.out + info.err));
  }

  void hangStopsTheJobAndTheAgentsAnswer() {
    DemoJob job = startDemo({"--ranks", "4", "--steps", "1000000", "--", "--inject", "hang:rank=3,step=30"},
                            "dp.bucket_bytes");
    QVERIFY2(job.error.isEmpty(), qPrintable(job.error));
    auto logText = [&] {
      QFile f(job.log);
      return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString();
    };
    QTRY_VERIFY_WITH_TIMEOUT(logText().contains("rank 3 hangs before step 30"), 60000);
    // Hung, and every rank's agent still lists the knobs (the hung rank's too).
    const Run knobs = cli({"knobs", "--job", job.id, "--json"});
    // doctor: the collective of step 30 that ranks 0-2 wait in, rank 3 never entered it, and
    // rank 3's thread is in the range "inject hang".
    const Run doc = cli({"doctor", "--job", job.id, "--seconds", "2", "--hang-after", "1", "--json"});
    const bool stopped = stopDemo(job);
    QVERIFY2(knobs.code == 0 && knobs.out.contains("dp.bucket_bytes"), qPrintable(knobs.out + knobs.err));
    QVERIFY(stopped);
    QVERIFY2(doc.code == 0, qPrintable(doc.out + doc.err));
    const QJsonObject hang = QJsonDocument::fromJson(doc.out.toUtf8()).object()["hang"].toObject();
    QVERIFY2(!hang.isEmpty(), qPrintable(doc.out));
    QCOMPARE(hang["missing_ranks"].toArray(), QJsonArray({3}));
    QCOMPARE(hang["waiting_ranks"].toArray(), QJsonArray({0, 1, 2}));
    QVERIFY2(hang["op"].toString().startsWith("bucket allreduce") && hang["step"].toInt(-1) == 30 &&
                 hang["seq"].toInt(-1) >= 0,
             qPrintable(doc.out));
    const QJsonArray ranks = hang["ranks"].toArray();
    QVERIFY2(ranks.size() == 1 && ranks[0].toObject()["rank"].toInt(-1) == 3, qPrintable(doc.out));
    const QJsonObject r3 = ranks[0].toObject();
    const QString stacks = QJsonDocument(r3["stacks"].toArray()).toJson();
    QVERIFY2(stacks.contains("inject hang") && stacks.contains("step 30"), qPrintable(doc.out));
    QVERIFY2(!r3["last_events"].toArray().isEmpty(), qPrintable(doc.out));
  }
};

QTEST_MAIN(TstTrainInject)
#include "tst_train_inject.moc"
