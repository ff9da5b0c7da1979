// The real GUI binary, offscreen, attached to a real 4-rank MPI job (trainscope-testjob with the
// agent, started by `trainscope-cli launch`): events from every rank must arrive, the window
// renders, and the job keeps running after the GUI detaches (attaching never restarts it).
// A job id that is not running gives a clear error and exit 1.
#include <QImage>
#include <QProcess>
#include <QtTest>

#include <algorithm>
#include <map>
#include <vector>

#include "live_test_support.h"
#include "trainscope/core/session/tsdb.h"

using live_test::bin;

class TstGuiLive : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  QProcess job_;
  QString jobId_;

  struct Run {
    int code = -1;
    QString out, err;
  };
  Run gui(const QStringList& args) {
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("QT_QPA_PLATFORM", "offscreen");
    env.insert("XDG_CONFIG_HOME", dir_.filePath("config"));
    p.setProcessEnvironment(env);
    p.start(bin("trainscope"), args);
    Run r;
    if (!p.waitForFinished(60000)) {
      p.kill();
      p.waitForFinished();
      return r;
    }
    r.code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2;
    r.out = QString::fromUtf8(p.readAllStandardOutput());
    r.err = QString::fromUtf8(p.readAllStandardError());
    return r;
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    if (!QFileInfo::exists(bin("trainscope-testjob"))) QSKIP("trainscope-testjob not built (no MPI)");
    live_test::usePrivateRuntimeDir(dir_);
    qputenv("OMPI_ALLOW_RUN_AS_ROOT", "1");
    qputenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    jobId_ = QString("gui-%1").arg(QCoreApplication::applicationPid());
    job_.start(bin("trainscope-cli"),
               {"launch", "--ranks", "4", "--job-id", jobId_, "--", bin("trainscope-testjob"), "--steps",
                "60000", "--step-ms", "1", "--ranges", "2"});
    QVERIFY(job_.waitForStarted());
    // Wait until all four ranks are discoverable.
    bool all = false;
    for (int i = 0; i < 300 && !all; ++i) {
      QProcess jobs;
      jobs.start(bin("trainscope-cli"), {"jobs"});
      jobs.waitForFinished(10000);
      all = QString::fromUtf8(jobs.readAllStandardOutput()).contains("job " + jobId_ + "  ranks 4/4");
      if (!all) QTest::qWait(100);
    }
    QVERIFY2(all, "the job never showed 4 ranks");
  }

  void attachSeesEveryRankAndLeavesTheJobRunning() {
    const QString png = dir_.filePath("live.png");
    const Run r = gui({"--attach", jobId_, "--screenshot", png, "--live-seconds", "1"});
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    QVERIFY2(r.out.contains("live: events from 4 ranks"), qPrintable(r.out + r.err));
    const QImage img(png);
    QVERIFY(!img.isNull());
    QVERIFY(img.width() >= 800 && img.height() >= 500);
    // The GUI detached on exit; the job goes on and can be attached again.
    QCOMPARE(job_.state(), QProcess::Running);
    const Run again =
        gui({"--attach-first", "--screenshot", dir_.filePath("again.png"), "--live-seconds", "0.2"});
    QVERIFY2(again.code == 0 && again.out.contains("from 4 ranks"), qPrintable(again.out + again.err));
    QCOMPARE(job_.state(), QProcess::Running);
  }

  // The GUI's live tab and `record` drive the same engine: a session saved from the GUI carries
  // the same metadata keys as one recorded by the CLI from the same job, and the same events per
  // rank over the window both saw.
  void guiAndRecordSaveTheSameSession() {
    const QString cliFile = dir_.filePath("cli.tsdb"), guiFile = dir_.filePath("gui.tsdb");
    QProcess rec;
    rec.start(bin("trainscope-cli"), {"record", "--job", jobId_, "--seconds", "4", "--out", cliFile});
    QVERIFY(rec.waitForStarted());
    const Run r = gui({"--attach", jobId_, "--live-seconds", "2.5", "--save-session", guiFile});
    QVERIFY2(r.code == 0 && r.out.contains("saved"), qPrintable(r.out + r.err));
    QVERIFY(rec.waitForFinished(60000));
    QVERIFY2(rec.exitCode() == 0, rec.readAllStandardError().constData());
    auto a = trainscope::core::loadSession(cliFile.toStdString());
    auto b = trainscope::core::loadSession(guiFile.toStdString());
    QVERIFY2(a.isOk(), a.status().toString().c_str());
    QVERIFY2(b.isOk(), b.status().toString().c_str());
    QStringList ka, kb;
    for (const auto& [k, v] : a->metadata()) ka << QString::fromStdString(k);
    for (const auto& [k, v] : b->metadata()) kb << QString::fromStdString(k);
    QCOMPARE(kb, ka);
    for (const char* k : {"knob.test.work_us", "clock_offset_ns.3", "clock_offset_updates.0", "clock_sync_error_ns.2",
                          "dropped_events.1", "clock_drift_ns.0", "record_seconds"})
      QVERIFY2(ka.contains(k), k);
    QVERIFY(QString::fromStdString(b->metadata().at("created_by")).startsWith("trainscope (live attach)"));
    QVERIFY(QString::fromStdString(a->metadata().at("created_by")).startsWith("trainscope-cli record"));
    // The window both saw: from the later first event to the earlier last one, with a margin at
    // each end for what the flight recorder evicted and what was still in flight at detach.
    auto span = [](trainscope::core::TraceStore& s) {
      int64_t lo = INT64_MAX, hi = INT64_MIN;
      for (trainscope::core::TrackId t = 0; t < s.trackCount(); ++t) {
        const auto& ev = s.events(t);
        for (size_t i = 0; i < ev.size(); ++i) {
          lo = std::min(lo, ev.start(i));
          hi = std::max(hi, ev.start(i));
        }
      }
      return std::make_pair(lo, hi);
    };
    const auto [alo, ahi] = span(*a);
    const auto [blo, bhi] = span(*b);
    const int64_t lo = std::max(alo, blo) + 300'000'000, hi = std::min(ahi, bhi) - 300'000'000;
    QVERIFY2(hi - lo > 1'000'000'000, "the two recordings overlap by less than a second");
    // Each session estimates the clock offsets itself, so the same event lands a few hundred ns
    // apart in the two files (measured: 100-400 ns on one host). Per rank, both window ends are
    // moved into a gap of at least 2*kSlack between event starts, where such a shift cannot carry
    // an event across the end.
    constexpr int64_t kSlack = 20'000;
    auto startsOf = [](trainscope::core::TraceStore& s) {
      std::map<int, std::vector<int64_t>> st;
      for (trainscope::core::TrackId t = 0; t < s.trackCount(); ++t) {
        const auto& ev = s.events(t);
        for (size_t i = 0; i < ev.size(); ++i) st[s.track(t).rank].push_back(ev.start(i));
      }
      for (auto& [rank, v] : st) std::sort(v.begin(), v.end());
      return st;
    };
    // The first point at or after `from` with no start within kSlack of it.
    auto gapAfter = [](const std::vector<int64_t>& v, int64_t from) {
      auto it = std::lower_bound(v.begin(), v.end(), from - kSlack);
      int64_t p = from;
      for (; it != v.end() && *it <= p + kSlack; ++it)
        if (*it >= p - kSlack) p = std::max(p, *it + kSlack + 1);
      return p;
    };
    const auto sa = startsOf(*a), sb = startsOf(*b);
    QCOMPARE(sa.size(), size_t(4));
    for (const auto& [rank, v] : sa) {
      const int64_t rlo = gapAfter(v, lo), rhi = gapAfter(v, hi - 50'000'000);
      QVERIFY(rhi > rlo + 500'000'000);
      auto count = [&](const std::vector<int64_t>& w) {
        return std::upper_bound(w.begin(), w.end(), rhi) - std::lower_bound(w.begin(), w.end(), rlo);
      };
      QVERIFY(sb.count(rank));
      const auto n = count(v);
      QVERIFY(n > 100);
      QCOMPARE(count(sb.at(rank)), n);
    }
  }

  void unknownJobIsAClearError() {
    const Run r = gui({"--attach", "no-such-job", "--screenshot", dir_.filePath("never.png")});
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("no running job"), qPrintable(r.err));
    QVERIFY(!QFileInfo::exists(dir_.filePath("never.png")));
  }

  void cleanupTestCase() {
    if (job_.state() != QProcess::NotRunning) {
      job_.terminate();  // launch forwards SIGTERM to mpirun and the ranks: nothing is orphaned
      if (!job_.waitForFinished(10000)) job_.kill();
      job_.waitForFinished(5000);
    }
  }
};

QTEST_GUILESS_MAIN(TstGuiLive)
#include "tst_gui_live.moc"
