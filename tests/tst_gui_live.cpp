// The real GUI binary, offscreen, attached to a real 4-rank MPI job (trainscope-testjob with the
// agent, started by `trainscope-cli launch`): events from every rank must arrive, the window
// renders, and the job keeps running after the GUI detaches (attaching never restarts it).
// A job id that is not running gives a clear error and exit 1.
#include <QImage>
#include <QProcess>
#include <QtTest>

#include "live_test_support.h"

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
                "20000", "--step-ms", "1", "--ranges", "2"});
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
