// trainscope: the GUI.
//   trainscope [FILE]                       open a .tsdb session or Chrome/PyTorch JSON trace
//   trainscope --attach JOBID | --attach-first [--wait S]   attach live to a running job
//   --screenshot OUT.png                    save the window once loaded / all ranks arrived, then quit
//   --window-ms A:B  --search NAME  --color-by kind|micro-batch|phase   initial view (for screenshots)
//   --chart SLUG  --overlays bubble,exposed,critical|none  --metric KEY   the Analysis dock's chart,
//                                           the overlays shown, a metric's events selected
#include <QApplication>
#include <QCommandLineParser>
#include <QThread>
#include <QTimer>
#include <cstdio>

#include "analysis_dock.h"
#include "main_window.h"
#include "trainscope/core/live/live_session.h"
#include "session_view.h"
#include "trainscope/plots/analysis_panel.h"

namespace {

// Applies the view options to the current tab once its data is there.
void applyView(trainscope::app::MainWindow& w, const QCommandLineParser& p) {
  auto* v = w.currentView();
  if (!v) return;
  auto* t = v->timeline();
  const QString mode = p.value("color-by");
  if (mode == "micro-batch") w.setColorMode(static_cast<int>(trainscope::plots::ColorMode::MicroBatch));
  if (mode == "phase") w.setColorMode(static_cast<int>(trainscope::plots::ColorMode::Phase));
  const QStringList win = p.value("window-ms").split(':');
  if (win.size() == 2) {
    const int64_t origin = t->zoom().traceStart();
    t->setFollow(false);
    t->zoom().setWindow(origin + static_cast<int64_t>(win[0].toDouble() * 1e6),
                        origin + static_cast<int64_t>(win[1].toDouble() * 1e6));
  }
  if (!p.value("search").isEmpty()) t->search(p.value("search"), true);
  if (p.isSet("overlays")) {
    int mask = 0;
    for (const QString& k : p.value("overlays").split(',')) {
      if (k == "bubble") mask |= trainscope::plots::TimelineWidget::BubbleOverlay;
      if (k == "exposed") mask |= trainscope::plots::TimelineWidget::ExposedCommOverlay;
      if (k == "critical") mask |= trainscope::plots::TimelineWidget::CriticalPathOverlay;
    }
    w.setOverlayMask(mask);
  }
  auto* panel = w.analysisDock()->panel();
  if (auto* chart = panel->chart(p.value("chart"))) panel->setCurrentWidget(chart);
  t->update();
}

}  // namespace

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setOrganizationName("Trainscope");
  QApplication::setApplicationName("Trainscope");
  QApplication::setApplicationVersion(TRAINSCOPE_VERSION);

  QCommandLineParser parser;
  parser.setApplicationDescription("Trainscope: see and tune distributed training while it runs.");
  parser.addHelpOption();
  parser.addVersionOption();
  parser.addPositionalArgument("file",
                               "Session to open (.tsdb), or trace files to import as one session (Chrome / "
                               "PyTorch .json, .json.gz, Nsight Systems .sqlite; one per rank)",
                               "[file...]");
  parser.addOption({"screenshot",
                    "Save a PNG of the window once the file is open (or, attached, once every rank "
                    "sent events), then quit.",
                    "png"});
  parser.addOption({"attach",
                    "Attach live to the running job with this id; JOB@HOST:PORT reaches a job on many machines "
                    "through one of its relays (docs/RELAY.md).",
                    "job"});
  parser.addOption({"secret-file", "With --attach JOB@HOST:PORT: the job's secret (default: "
                                   "$TRAINSCOPE_SECRET_FILE).", "file"});
  parser.addOption({"attach-first", "Attach live to the first running job found on this machine."});
  parser.addOption(
      {"wait", "Seconds to wait for a job to appear with --attach-first (default 30).", "s", "30"});
  parser.addOption({"window-ms", "Initial view, in ms from the trace start.", "a:b"});
  parser.addOption({"search", "Select the first event whose name contains this.", "name"});
  parser.addOption({"color-by", "kind, micro-batch or phase.", "mode"});
  parser.addOption({"chart", "Analysis chart to show: step_time, breakdown, bubbles, ...", "slug"});
  parser.addOption(
      {"metric", "Select the events of this metric key, as a click in the Analysis dock.", "key"});
  parser.addOption({"overlays", "Timeline overlays: bubble,exposed,critical or none.", "kinds"});
  parser.addOption({"live-seconds",
                    "With --screenshot when attached: keep streaming this long first (default 2).", "s",
                    "2"});
  parser.addOption({"save-session",
                    "When attached: record every event the tab receives into this .tsdb (also those "
                    "--live-window lets go); once every rank sent events, stream --live-seconds more, "
                    "detach, close the file and quit.",
                    "tsdb"});
  parser.addOption({"live-window",
                    "Live tabs keep the last SECONDS of events in memory (default 600; 0 keeps "
                    "everything). Older events leave memory; --save-session still records them all.",
                    "seconds", "600"});
  parser.process(app);

  trainscope::app::MainWindow window;
  {
    bool ok = false;
    const double w = parser.value("live-window").toDouble(&ok);
    if (!ok || w < 0) {
      std::fprintf(stderr, "trainscope: --live-window wants seconds >= 0, not '%s'\n",
                   parser.value("live-window").toUtf8().constData());
      return 2;
    }
    window.setLiveWindowSeconds(w);
  }
  // --save-session records the attached tab from the start (every event, also those the live
  // window lets go), as `trainscope-cli record` does.
  if (parser.isSet("save-session")) window.setRecordPathForNextAttach(parser.value("save-session"));
  // A batch run never waits for a click: errors go to stderr and the exit code (issue 40).
  window.setNonInteractive(parser.isSet("screenshot") || parser.isSet("save-session"));
  window.show();
  const QStringList files = parser.positionalArguments();
  const QString shotPath = parser.value("screenshot");
  auto shoot = [&window, &parser, shotPath](int delayMs) {
    applyView(window, parser);
    QTimer::singleShot(delayMs, &window, [&window, &parser, shotPath] {
      // Waits (a little) for the analysis, so that its dock and overlays are in the picture.
      for (int i = 0; i < 200; ++i) {
        auto* v = window.currentView();
        if (!v || (v->analysis() && !v->isAnalyzing())) break;
        if (v->isLive()) v->analyzeNow();
        QThread::msleep(25);
        QCoreApplication::processEvents();
      }
      applyView(window, parser);
      if (parser.isSet("metric")) window.activateMetric(parser.value("metric"));
      QTimer::singleShot(300, &window, [&window, shotPath] {
        if (shotPath.isEmpty()) return;
        window.refreshStatus();
        const bool ok = window.grab().save(shotPath);
        QCoreApplication::exit(ok ? 0 : 1);
      });
    });
  };
  QObject::connect(&window, &trainscope::app::MainWindow::loaded, &window, [&shoot] { shoot(0); });
  QObject::connect(&window, &trainscope::app::MainWindow::liveReady, &window,
                   [&](int ranks, qulonglong events) {
                     std::printf("live: events from %d ranks (%llu events)\n", ranks, events);
                     std::fflush(stdout);
                     const int liveMs = static_cast<int>(parser.value("live-seconds").toDouble() * 1000);
                     if (!shotPath.isEmpty()) shoot(liveMs);
                     if (parser.isSet("save-session"))
                       QTimer::singleShot(liveMs, &window, [&window, &parser] {
                         auto* v = window.currentView();
                         if (!v) QCoreApplication::exit(1);
                         QObject::connect(v, &trainscope::app::SessionView::saved, &window, [](const QString& path) {
                           std::printf("saved %s\n", path.toUtf8().constData());
                           std::fflush(stdout);
                           QCoreApplication::exit(0);
                         });
                         QObject::connect(v, &trainscope::app::SessionView::failed, &window,
                                          [](const QString&, const QString& msg) {
                                            std::fprintf(stderr, "trainscope: %s\n", msg.toUtf8().constData());
                                            QCoreApplication::exit(1);
                                          });
                         v->finishRecording();  // closes the recording: saved() or failed()
                       });
                   });
  const bool batch = window.nonInteractive();
  if (batch)  // a file that does not load, no job to attach to: say so and exit 1
    QObject::connect(&window, &trainscope::app::MainWindow::failed, &window,
                     [](const QString&, const QString& msg) {
                       std::fprintf(stderr, "trainscope: %s\n", msg.toUtf8().constData());
                       QCoreApplication::exit(1);
                     });
  if (parser.isSet("attach")) {
    QString error;
    QString job = parser.value("attach");
    if (const int at = job.lastIndexOf('@'); at > 0) {
      trainscope::core::LiveSession::useRelay(job.mid(at + 1).toStdString(),
                                              parser.value("secret-file").toStdString());
      job = job.left(at);
    }
    if (!window.attachJob(job, &error)) {
      std::fprintf(stderr, "trainscope: %s\n", error.toUtf8().constData());
      if (batch) return 1;
    }
  } else if (parser.isSet("attach-first")) {
    window.attachFirst(static_cast<int>(parser.value("wait").toDouble() * 1000));
  } else if (!files.isEmpty()) {
    window.openFiles(files);  // several: one trace per rank, one session
  } else if (!shotPath.isEmpty()) {
    shoot(0);
  }
  return QApplication::exec();
}
