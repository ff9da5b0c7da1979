// End to end: a real 2-rank MPI job (trainscope-testjob with the agent, started by
// `trainscope-cli launch`) is recorded while a knob is changed live, then analysed by
// `trainscope-cli analyze --json` and, in process, by a live Analyzer fed from the session.
// Timings are never asserted; what must hold whatever the machine does is: the breakdown sums to
// the step time on every rank and step, the knob change is at the acknowledged step, the job's
// 4 KiB MPI allreduce is one size class over n = 2 ranks with busbw = algbw x 2(n-1)/n, and the
// live result equals the whole one.
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QtTest>

#include "trainscope/core/analysis/analysis.h"
#include "live_test_support.h"
#include "trainscope/core/session/tsdb.h"

using namespace trainscope::core;
using namespace live_test;

class TstAnalysisLive : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  QProcess job_;

 private slots:
  void recordSetAnalyze() {
    if (!QFileInfo::exists(bin("trainscope-testjob"))) QSKIP("trainscope-testjob not built (no MPI)");
    live_test::usePrivateRuntimeDir(dir_);
    const QString jobId = QString("analysis-%1").arg(QCoreApplication::applicationPid());
    job_.start(bin("trainscope-cli"),
               {"launch", "--ranks", "2", "--job-id", jobId, "--", bin("trainscope-testjob"), "--steps",
                "3000", "--step-ms", "1", "--work-us", "300"});
    QVERIFY(job_.waitForStarted());
    bool found = false;
    for (int i = 0; i < 300 && !found; ++i) {
      const Run r = cli({"jobs", "--json"});
      for (const auto& j : QJsonDocument::fromJson(r.out.toUtf8()).object()["jobs"].toArray())
        found =
            found || (j.toObject()["job_id"].toString() == jobId && j.toObject()["ranks_found"].toInt() == 2);
      if (!found) QTest::qWait(100);
    }
    QVERIFY2(found, "the job never showed 2 ranks");

    const QString file = dir_.filePath("live.tsdb");
    QProcess rec;
    rec.start(bin("trainscope-cli"), {"record", "--job", jobId, "--seconds", "2", "--out", file});
    QVERIFY(rec.waitForStarted());
    QTest::qWait(700);
    const Run set = cli({"set", "--job", jobId, "test.work_us=600", "--json"});
    QVERIFY2(set.code == 0, qPrintable(set.out + set.err));
    const int64_t step =
        QJsonDocument::fromJson(set.out.toUtf8()).array().first().toObject()["step"].toInteger();
    QVERIFY(rec.waitForFinished(60000));
    QVERIFY2(rec.exitCode() == 0, qPrintable(rec.readAllStandardError()));
    job_.kill();
    job_.waitForFinished(5000);

    const Run an = cli({"analyze", file, "--json"});
    QVERIFY2(an.code == 0, qPrintable(an.err));
    const QJsonObject d = QJsonDocument::fromJson(an.out.toUtf8()).object();
    QVERIFY(d["steps"].toObject()["count"].toInt() >= 10);
    const QJsonArray ranks = d["breakdown"].toObject()["per_rank"].toArray();
    QCOMPARE(ranks.size(), 2);
    for (const auto& rv : ranks) {
      const QJsonObject r = rv.toObject();
      QVERIFY(r["steps"].toInt() >= 10);
      QVERIFY(r["compute_ms"].toDouble() > 0);
      for (const auto& sv : r["per_step"].toArray()) {
        const QJsonObject s = sv.toObject();
        const double sum = s["compute_ms"].toDouble() + s["overlapped_comm_ms"].toDouble() +
                           s["exposed_comm_ms"].toDouble() + s["idle_ms"].toDouble();
        QVERIFY2(std::abs(sum - s["step_ms"].toDouble()) <= 1e-6 * s["step_ms"].toDouble(),
                 qPrintable(QString("rank %1 step %2: %3 != %4")
                                .arg(r["rank"].toInt())
                                .arg(s["step"].toInt())
                                .arg(sum)
                                .arg(s["step_ms"].toDouble())));
      }
    }
    // The knob change, at the step the agents acknowledged.
    bool knobSeen = false;
    for (const auto& kv : d["knob_changes"].toArray()) {
      const QJsonObject k = kv.toObject();
      if (k["values"].toObject()["test.work_us"].toString() == "600") {
        QCOMPARE(k["step"].toInteger(), step);
        knobSeen = true;
      }
    }
    QVERIFY(knobSeen);
    // The job's allreduce of 1024 floats over MPI: class 4096 B, n = 2, busbw = algbw x 1.
    bool allreduce = false;
    for (const auto& bv : d["collectives"].toObject()["by_size"].toArray()) {
      const QJsonObject b = bv.toObject();
      if (b["collective"].toString() != "allreduce") continue;
      allreduce = true;
      QCOMPARE(b["size_class_bytes"].toInteger(), 4096);
      QCOMPARE(b["ranks"].toInt(), 2);
      QVERIFY(std::abs(b["busbw_gbps"].toDouble() - b["algbw_gbps"].toDouble()) <=
              1e-9 * b["algbw_gbps"].toDouble());
    }
    QVERIFY(allreduce);

    // Live: feed the recorded session to an Analyzer one step's worth at a time.
    auto session = loadSession(file.toStdString());
    QVERIFY(session.isOk());
    TraceStore& whole = session.value();
    const std::string want = analysisToJson(analyzeStore(whole));
    TraceStore live;
    for (const auto& [r, info] : whole.ranks()) live.setRank(info);
    live.metadata() = whole.metadata();
    std::vector<std::pair<int64_t, std::pair<TrackId, size_t>>> order;
    for (TrackId t = 0; t < whole.trackCount(); ++t) {
      live.addTrack(whole.track(t));
      for (size_t i = 0; i < whole.events(t).size(); ++i) order.push_back({whole.events(t).start(i), {t, i}});
    }
    std::sort(order.begin(), order.end());
    Analyzer a;
    int analysedLive = 0;
    for (size_t k = 0; k < order.size(); ++k) {
      const auto [t, i] = order[k].second;
      const TrackEvents& ev = whole.events(t);
      std::vector<Attr> attrs(ev.attrs(i).begin(), ev.attrs(i).end());
      for (Attr& at : attrs)
        if (at.type == AttrType::String) at.bits = live.intern(whole.str(at.asString()));
      live.append(t, {ev.start(i), ev.end(i), live.intern(whole.str(ev.name(i))), ev.kind(i)}, attrs);
      if (k % 50 == 49) analysedLive += a.update(live);
    }
    const int steps = d["steps"].toObject()["count"].toInt();
    QVERIFY2(
        analysedLive >= steps / 2,
        qPrintable(
            QString("only %1 of %2 steps analysed while the session grew").arg(analysedLive).arg(steps)));
    (void)a.finish(live);
    QCOMPARE(analysisToJson(a.result(live)), want);
  }

  void cleanupTestCase() {
    if (job_.state() != QProcess::NotRunning) {
      job_.kill();
      job_.waitForFinished(5000);
    }
  }
};

QTEST_GUILESS_MAIN(TstAnalysisLive)
#include "tst_analysis_live.moc"
