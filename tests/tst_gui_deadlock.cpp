// The scenario of the freeze in issue #34: Qt's global thread pool limited to two threads (what a
// 2-core machine gives), the real main window attached live to a real 4-rank pipeline demo
// (`trainscope-cli demo --mode pp`), What-if and the knob poll started again and again while the
// timeline repaints a large frame all the time. The backtrace in the issue: the painter held the
// store's shared lock while the raster engine's fill waited on the global pool; both pool threads
// were blocked -- What-if waiting for the exclusive lock, the knob poll waiting for the engine's
// worker -- and the worker waited for the write lock. Now no lock is held while painting, the
// GUI's work runs on its own pool, readers never take the exclusive lock and the engine never
// waits for one.
//
// A watchdog thread fails the test when the GUI thread stops answering for 30 s: that is a hang,
// not a slow frame (no timing is asserted; frame and latency figures are bench_gui_responsiveness's).
#include <QSignalSpy>
#include <QThreadPool>
#include <QTimer>
#include <QtTest>
#include <atomic>
#include <csignal>
#include <thread>
#include <unistd.h>

#include "knobs_dock.h"
#include "live_test_support.h"
#include "main_window.h"
#include "session_view.h"

using namespace trainscope;
using live_test::bin;

namespace {
int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

class TstGuiDeadlock : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  QString jobId_;
  qint64 launcher_ = -1;

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    if (!QFileInfo::exists(bin("trainscope-train")))
      QSKIP("trainscope-train not built (MPI or OpenBLAS missing)");
    qputenv("XDG_CONFIG_HOME", dir_.filePath("config").toUtf8());
    live_test::usePrivateRuntimeDir(dir_);
    QString error;
    // A few ms between steps: the freeze needs no load, and the suite shares two cores.
    const auto demo = live_test::startDemo({"--ranks", "4", "--mode", "pp", "--steps", "1000000", "--",
                                            "--step-delay-ms", "5"},
                                           &error);
    launcher_ = demo.launcher;
    QVERIFY2(!demo.jobId.isEmpty(), qPrintable(error));
    jobId_ = demo.jobId;
  }

  void whatIfAndKnobPollWhilePaintingNeverHang() {
    QThreadPool::globalInstance()->setMaxThreadCount(2);
    app::MainWindow w;
    w.setLiveWindowSeconds(30);
    w.resize(1800, 1100);
    w.show();
    app::KnobsDock* dock = w.knobsDock();
    QSignalSpy listed(dock, &app::KnobsDock::listed);
    QSignalSpy predicted(dock, &app::KnobsDock::predicted);
    QString error;
    QVERIFY2(w.attachJob(jobId_, &error), qPrintable(error));
    QTRY_VERIFY_WITH_TIMEOUT(!listed.isEmpty() && listed.last().at(0).toInt() > 0, 30000);
    QTRY_VERIFY_WITH_TIMEOUT(w.currentView()->analysis() && !w.currentView()->analysis()->steps.perStep.empty(),
                             60000);

    // The GUI thread's heartbeat, and a watchdog that ends the test (and the job) when it stops.
    std::atomic<int64_t> beat{nowMs()};
    std::atomic<bool> done{false};
    QTimer heartbeat;
    connect(&heartbeat, &QTimer::timeout, [&] { beat = nowMs(); });
    heartbeat.start(50);
    const QByteArray runDir = qgetenv("TRAINSCOPE_RUNTIME_DIR");
    std::thread watchdog([&] {
      while (!done) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        if (nowMs() - beat.load() > 30000) {
          std::fprintf(stderr, "FAIL: the GUI thread did not answer for 30 s (deadlock); its threads:\n");
          // Where every thread waits, for the log (gdb, where installed).
          const std::string bt = "gdb -p " + std::to_string(::getpid()) +
                                 " -batch -ex 'thread apply all bt 16' 2>/dev/null | grep -E '^(Thread|#)' >&2";
          (void)std::system(bt.c_str());
          trainscope::test::killProcessesWithEnv("TRAINSCOPE_RUNTIME_DIR", runDir);
          ::_exit(1);
        }
      }
    });

    // Paint all the time (a synchronous repaint of a large frame), and keep What-if and the knob
    // poll going on the pool until each has completed a number of times.
    auto* timeline = w.currentView()->timeline();
    QTimer painter;
    connect(&painter, &QTimer::timeout, [&] { timeline->repaint(); });
    painter.start(16);  // a 60 Hz display
    const int wantPredictions = 3, wantLists = 3;
    const qsizetype listedBefore = listed.size();
    QTimer driver;
    connect(&driver, &QTimer::timeout, [&] {
      dock->whatIf();        // ignored while one runs
      dock->refresh(false);  // the 3 s knob poll, much more often
    });
    driver.start(20);
    QTimer report;  // progress in the log, for a run that takes long on a loaded machine
    connect(&report, &QTimer::timeout, [&] {
      qInfo("what-if results %lld, knob lists %lld, live events %llu, longest publish wait %.0f ms, analysis %.0f ms",
            static_cast<long long>(predicted.size()), static_cast<long long>(listed.size() - listedBefore),
            static_cast<unsigned long long>(w.currentView()->liveStats().events),
            w.currentView()->liveSession()->takeMaxPublishGapMs(), w.currentView()->lastAnalysisMs());
    });
    report.start(5000);
    QTRY_VERIFY_WITH_TIMEOUT(predicted.size() >= wantPredictions && listed.size() - listedBefore >= wantLists,
                             150000);
    driver.stop();
    painter.stop();
    done = true;
    watchdog.join();
    for (const auto& p : predicted) QVERIFY2(p.at(0).toBool(), qPrintable(p.at(1).toString()));
    // The engine kept ingesting all along: the job's events still arrive.
    const auto before = w.currentView()->liveStats().events;
    QTRY_VERIFY_WITH_TIMEOUT(w.currentView()->liveStats().events > before, 10000);
  }

  void cleanupTestCase() {
    if (launcher_ > 0) ::kill(static_cast<pid_t>(launcher_), SIGTERM);
  }
};

QTEST_MAIN(TstGuiDeadlock)
#include "tst_gui_deadlock.moc"
