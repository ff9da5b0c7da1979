// bench_gui_responsiveness: the real main window (offscreen), (1) attached to a live 4-rank
// pipeline demo (`trainscope-cli demo --mode pp --ranks 4`, at the demo's default nice 10; --demo-nice 0: full rate) and (2) over a
// 10 M-event session, drives What-if, Apply, Undo, Export Configuration, Compare Sessions and a
// knob `set` (live only) N times each while a 4 ms timer measures how late the GUI's event loop
// runs it. docs/BENCHMARKS.md, "GUI responsiveness".
//
//   build/bin/bench_gui_responsiveness [--json] [--repeats 20] [--events 10000000] [--live-only|--session-only]
//                                      [--demo-nice N] [--stall-stacks]
//
// Keys (--json prints one object): event_loop_p99_ms, event_loop_max_ms (both phases),
// ingest_gap_max_ms (the longest time received events waited to be published into the store
// while a `set` was in flight), dropped_by_client (events the agents dropped because the client
// did not read), hangs (actions that did not finish within 60 s), and per phase and action the
// same figures.
#include <QApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QTimer>
#include <execinfo.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <ctime>
#include <chrono>
#include <csignal>
#include <thread>
#include <cstdio>
#include <map>
#include <vector>

#include "compare_dialog.h"
#include "knobs_dock.h"
#include "main_window.h"
#include "session_view.h"

using namespace trainscope;

namespace {

QString binDir() { return QCoreApplication::applicationDirPath(); }

// --stall-stacks: a watcher thread samples the GUI thread's stack (SIGUSR2 + backtrace()) every
// 100 ms while the event loop has not run for 100 ms, and prints each sample on stderr
// ("stall stack:" and backtrace_symbols lines; addr2line turns the +0x offsets into names).
namespace stall {
std::atomic<int64_t> heartbeatNs{0};
std::atomic<bool> stop{false};
pthread_t gui;
void* frames[64];
std::atomic<int> depth{-1};
int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
void onSignal(int) { depth.store(backtrace(frames, 64)); }
void watch() {
  int64_t lastSample = 0;
  while (!stop.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const int64_t now = nowNs(), beat = heartbeatNs.load();
    if (beat == 0 || now - beat < 100'000'000 || now - lastSample < 100'000'000) continue;
    lastSample = now;
    depth.store(-1);
    pthread_kill(gui, SIGUSR2);
    for (int i = 0; i < 50 && depth.load() < 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const int n = depth.load();
    if (n <= 0) continue;
    std::fprintf(stderr, "stall stack: %lld ms\n", static_cast<long long>((now - beat) / 1'000'000));
    backtrace_symbols_fd(frames, n, 2);
  }
}
}  // namespace stall

// Names the event behind a stall: every event the GUI thread handles for longer than 50 ms is
// printed on stderr with its type and receiver's class, so a figure above comes with its cause.
class TimedApplication : public QApplication {
 public:
  using QApplication::QApplication;
  bool notify(QObject* receiver, QEvent* e) override {
    if (depth_++ > 0) {
      const bool r = QApplication::notify(receiver, e);
      --depth_;
      return r;
    }
    QElapsedTimer t;
    t.start();
    timespec c0{}, c1{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    const int type = e->type();
    const char* cls = receiver ? receiver->metaObject()->className() : "?";
    const QString name = receiver ? receiver->objectName() : QString();
    const bool r = QApplication::notify(receiver, e);
    --depth_;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    const double cpuMs = static_cast<double>(c1.tv_sec - c0.tv_sec) * 1e3 + static_cast<double>(c1.tv_nsec - c0.tv_nsec) / 1e6;
    if (const qint64 ms = t.elapsed(); ms > 50)
      std::fprintf(stderr, "bench_gui_responsiveness: slow event: %lld ms (GUI thread CPU %.0f ms), type %d, receiver %s %s\n",
                   static_cast<long long>(ms), cpuMs, type, cls, qPrintable(name));
    return r;
  }

 private:
  int depth_ = 0;
};

// How late a 4 ms timer fires: the event loop's latency as a user's input would see it.
class LatencyProbe : public QObject {
 public:
  LatencyProbe() {
    timer_.setTimerType(Qt::PreciseTimer);
    connect(&timer_, &QTimer::timeout, this, [this] {
      const qint64 ns = clock_.nsecsElapsed();
      if (last_ > 0) samples_.push_back(std::max<double>(0, static_cast<double>(ns - last_) / 1e6 - kPeriodMs));
      last_ = ns;
    });
    clock_.start();
  }
  void start() {
    samples_.clear();
    last_ = 0;
    timer_.start(kPeriodMs);
  }
  void stop() { timer_.stop(); }
  std::vector<double> take() { return std::exchange(samples_, {}); }

 private:
  static constexpr int kPeriodMs = 4;
  QTimer timer_;
  QElapsedTimer clock_;
  qint64 last_ = 0;
  std::vector<double> samples_;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5))];
}

// Runs the event loop until done() or timeoutMs; false on timeout (a hang).
template <class F>
bool waitUntil(F done, int timeoutMs = 60000) {
  QElapsedTimer t;
  t.start();
  while (!done()) {
    if (t.elapsed() > timeoutMs) return false;
    QCoreApplication::processEvents(QEventLoop::AllEvents, 5);
  }
  return true;
}

struct ActionStats {
  std::vector<double> lateness;
  int runs = 0, hangs = 0;
  double gapMaxMs = 0;
};

struct Phase {
  std::map<QString, ActionStats> actions;
  uint64_t droppedByClient = 0;
  double eventsPerSecond = -1;  // live: events ingested per second over the phase
  QJsonObject json() const {
    QJsonObject o;
    std::vector<double> all;
    int hangs = 0;
    double gap = 0;
    for (const auto& [name, a] : actions) {
      QJsonObject x;
      x["runs"] = a.runs;
      x["hangs"] = a.hangs;
      x["event_loop_p99_ms"] = percentile(a.lateness, 0.99);
      x["event_loop_max_ms"] = a.lateness.empty() ? 0 : *std::max_element(a.lateness.begin(), a.lateness.end());
      if (name == "set") x["ingest_gap_max_ms"] = a.gapMaxMs;
      o[name] = x;
      all.insert(all.end(), a.lateness.begin(), a.lateness.end());
      hangs += a.hangs;
      gap = std::max(gap, a.gapMaxMs);
    }
    o["event_loop_p99_ms"] = percentile(all, 0.99);
    o["event_loop_max_ms"] = all.empty() ? 0 : *std::max_element(all.begin(), all.end());
    o["hangs"] = hangs;
    o["ingest_gap_max_ms"] = gap;
    o["dropped_by_client"] = static_cast<qint64>(droppedByClient);
    if (eventsPerSecond >= 0) o["events_per_s"] = eventsPerSecond;
    return o;
  }
};

// One action, measured: the probe runs from the start until it finished (or hung).
template <class Start, class Done>
void measure(Phase& ph, LatencyProbe& probe, const QString& name, Start start, Done done,
             core::LiveSession* live = nullptr) {
  ActionStats& a = ph.actions[name];
  std::fprintf(stderr, "bench_gui_responsiveness: %s #%d\n", qPrintable(name), a.runs + 1);
  if (live) (void)live->takeMaxPublishGapMs();
  probe.start();
  start();
  const bool ok = waitUntil(done);
  probe.stop();
  const auto s = probe.take();
  a.lateness.insert(a.lateness.end(), s.begin(), s.end());
  ++a.runs;
  if (!ok) {
    ++a.hangs;
    std::fprintf(stderr, "bench_gui_responsiveness: %s #%d did not finish within 60 s\n", qPrintable(name), a.runs);
  }
  if (live) a.gapMaxMs = std::max(a.gapMaxMs, live->takeMaxPublishGapMs());
}

// The actions both phases share: What-if, Export Configuration, Compare Sessions.
void commonActions(app::MainWindow& w, Phase& ph, LatencyProbe& probe, int repeats, const QString& dir) {
  app::KnobsDock* dock = w.knobsDock();
  for (int i = 0; i < repeats; ++i) {
    int predicted = 0;
    auto c = QObject::connect(dock, &app::KnobsDock::predicted, [&](bool, const QString&) { ++predicted; });
    measure(ph, probe, "whatif", [&] { dock->whatIf(); }, [&] { return predicted > 0; });
    QObject::disconnect(c);
  }
  for (int i = 0; i < repeats; ++i) {
    bool exported = false;
    auto c = QObject::connect(&w, &app::MainWindow::configurationExported,
                              [&](const QString&, const QString&) { exported = true; });
    measure(ph, probe, "export_config", [&] { w.startExportConfiguration(dir + "/tuned.json"); },
            [&] { return exported; });
    QObject::disconnect(c);
  }
  for (int i = 0; i < repeats; ++i) {
    app::CompareDialog* d = nullptr;
    bool computed = false;
    measure(ph, probe, "compare",
            [&] {
              d = w.openCompare();
              if (d) QObject::connect(d, &app::CompareDialog::computed, [&] { computed = true; });
              if (d) d->recompute();
            },
            [&] { return !d || computed; });
    if (d) d->deleteLater();
  }
}

Phase livePhase(int repeats, const QString& dir, int demoNice, QString* error) {
  Phase ph;
  QProcess demo;
  QStringList demoArgs = {"demo", "--ranks", "4", "--mode", "pp", "--steps", "1000000"};
  if (demoNice >= 0) demoArgs << "--nice" << QString::number(demoNice);
  demo.start(binDir() + "/trainscope-cli", demoArgs);
  demo.waitForFinished(120000);
  const QString out = QString::fromUtf8(demo.readAllStandardOutput());
  const QString err = QString::fromUtf8(demo.readAllStandardError());
  const auto job = QRegularExpression("job (\\S+)").match(out);
  const auto pid = QRegularExpression("launcher pid (\\d+)").match(err);
  if (!job.hasMatch()) {
    *error = "demo did not start: " + out + err;
    return ph;
  }
  struct Stop {
    qint64 pid;
    ~Stop() {
      if (pid > 0) ::kill(static_cast<pid_t>(pid), SIGTERM);
    }
  } stop{pid.hasMatch() ? pid.captured(1).toLongLong() : -1};

  app::MainWindow w;
  w.setLiveWindowSeconds(60);  // bounds memory at the demo's ~190 k events/s (default: 10 min)
  w.resize(1600, 1000);
  w.show();
  app::KnobsDock* dock = w.knobsDock();
  int listed = 0;
  QObject::connect(dock, &app::KnobsDock::listed, [&](int n) { listed += n > 0; });
  if (!w.attachJob(job.captured(1), error)) return ph;
  if (!waitUntil([&] { return listed > 0 && w.currentView()->analysis() &&
                              !w.currentView()->analysis()->steps.perStep.empty(); },
                 120000)) {
    *error = "the live tab never listed knobs and analysed steps";
    return ph;
  }
  auto live = w.currentView()->liveSession();
  const auto statsBefore = w.currentView()->liveStats();
  const uint64_t droppedBefore = statsBefore.dropped;
  LatencyProbe probe;
  commonActions(w, ph, probe, repeats, dir);
  dock->setConfirmHandler([](const QString&) { return true; });
  const char* schedules[] = {"gpipe", "1f1b"};
  for (int i = 0; i < repeats; ++i) {
    int applied = 0;
    auto c = QObject::connect(dock, &app::KnobsDock::applied, [&](bool, const QString&) { ++applied; });
    measure(ph, probe, "apply",
            [&] {
              // A real change each time: Undo below brings the demo's 1f1b back.
              dock->setEditorValue("pp.schedule", "gpipe");
              dock->apply();
            },
            [&] { return applied > 0; });
    std::fprintf(stderr, "bench_gui_responsiveness: apply: %s\n", qPrintable(dock->statusText()));
    applied = 0;
    measure(ph, probe, "undo", [&] { dock->undo(); }, [&] { return applied > 0 || !dock->canUndo(); });
    std::fprintf(stderr, "bench_gui_responsiveness: undo: %s\n", qPrintable(dock->statusText()));
    QObject::disconnect(c);
  }
  for (int i = 0; i < repeats; ++i) {
    std::shared_ptr<core::KnobCall> call;
    measure(ph, probe, "set",
            [&] { call = live->submitSetKnobs({{"pp.schedule", schedules[i % 2]}}, 20000); },
            [&] { return call->done(); }, live.get());
  }
  const auto statsAfter = w.currentView()->liveStats();
  ph.droppedByClient = statsAfter.dropped - droppedBefore;
  if (statsAfter.seconds > statsBefore.seconds)
    ph.eventsPerSecond = static_cast<double>(statsAfter.events - statsBefore.events) /
                         (statsAfter.seconds - statsBefore.seconds);
  w.currentView()->detach();
  return ph;
}

Phase sessionPhase(int repeats, const QString& dir, qint64 events, QString* error) {
  Phase ph;
  // synth: ~274 events per rank and step at 64 kernels a phase; 8 ranks.
  const int steps = static_cast<int>(std::max<qint64>(1, events / (8 * 274)));
  const QString file = dir + "/big.tsdb";
  QProcess synth;
  synth.start(binDir() + "/trainscope-cli", {"synth", "--ranks", "8", "--steps", QString::number(steps), "--out", file});
  synth.waitForFinished(600000);
  if (synth.exitCode() != 0) {
    *error = "synth failed: " + QString::fromUtf8(synth.readAllStandardError());
    return ph;
  }
  app::MainWindow w;
  w.resize(1600, 1000);
  w.show();
  bool loaded = false;
  QObject::connect(&w, &app::MainWindow::loaded, [&](const QString&) { loaded = true; });
  w.openFile(file);
  if (!waitUntil([&] { return loaded && w.currentView() && w.currentView()->analysis(); }, 600000)) {
    *error = "the session did not load and analyse";
    return ph;
  }
  LatencyProbe probe;
  commonActions(w, ph, probe, repeats, dir);
  return ph;
}

}  // namespace

int main(int argc, char** argv) {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  TimedApplication app(argc, argv);
  const QStringList args = app.arguments();
  std::thread stallWatcher;
  QTimer heartbeat;
  if (args.contains("--stall-stacks")) {
    void* warm[4];
    (void)backtrace(warm, 4);  // loads libgcc's unwinder before any signal needs it
    stall::gui = pthread_self();
    std::signal(SIGUSR2, stall::onSignal);
    QObject::connect(&heartbeat, &QTimer::timeout, [] { stall::heartbeatNs.store(stall::nowNs()); });
    heartbeat.start(5);
    stallWatcher = std::thread(stall::watch);
  }
  struct JoinWatcher {
    std::thread& t;
    ~JoinWatcher() {
      stall::stop.store(true);
      if (t.joinable()) t.join();
    }
  } joinWatcher{stallWatcher};
  const bool json = args.contains("--json");
  int repeats = 20;
  qint64 events = 10'000'000;
  if (int i = args.indexOf("--repeats"); i > 0 && i + 1 < args.size()) repeats = args[i + 1].toInt();
  if (int i = args.indexOf("--events"); i > 0 && i + 1 < args.size()) events = args[i + 1].toLongLong();
  int demoNice = -1;  // -1: the demo's default (trainscope-cli demo --nice, 10)
  if (int i = args.indexOf("--demo-nice"); i > 0 && i + 1 < args.size()) demoNice = args[i + 1].toInt();
  QTemporaryDir dir;
  QDir().mkpath(dir.filePath("run"));
  QFile::setPermissions(dir.filePath("run"), QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
  qputenv("TRAINSCOPE_RUNTIME_DIR", dir.filePath("run").toUtf8());
  qputenv("XDG_CONFIG_HOME", dir.filePath("config").toUtf8());
  qputenv("OMPI_ALLOW_RUN_AS_ROOT", "1");
  qputenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");

  QJsonObject out;
  QString error;
  std::vector<Phase> phases;
  if (!args.contains("--session-only")) {
    Phase p = livePhase(repeats, dir.path(), demoNice, &error);
    out["live"] = p.json();
    std::fprintf(stderr, "live: %s\n", QJsonDocument(out["live"].toObject()).toJson(QJsonDocument::Compact).constData());
    phases.push_back(std::move(p));
  }
  if (error.isEmpty() && !args.contains("--live-only")) {
    Phase p = sessionPhase(repeats, dir.path(), events, &error);
    out["session"] = p.json();
    std::fprintf(stderr, "session: %s\n", QJsonDocument(out["session"].toObject()).toJson(QJsonDocument::Compact).constData());
    out["session_events"] = events;
    phases.push_back(std::move(p));
  }
  double p99 = 0, mx = 0, gap = 0;
  int hangs = 0;
  qint64 dropped = 0;
  for (const auto& p : phases) {
    const QJsonObject j = p.json();
    p99 = std::max(p99, j["event_loop_p99_ms"].toDouble());
    mx = std::max(mx, j["event_loop_max_ms"].toDouble());
    gap = std::max(gap, j["ingest_gap_max_ms"].toDouble());
    hangs += j["hangs"].toInt();
    dropped += j["dropped_by_client"].toInteger();
  }
  out["event_loop_p99_ms"] = p99;
  out["event_loop_max_ms"] = mx;
  out["ingest_gap_max_ms"] = gap;
  out["dropped_by_client"] = dropped;
  out["hangs"] = hangs;
  out["repeats"] = repeats;
  out["demo_nice"] = demoNice < 0 ? 10 : demoNice;
  if (!error.isEmpty()) out["error"] = error;
  const QByteArray text = QJsonDocument(out).toJson(json ? QJsonDocument::Compact : QJsonDocument::Indented);
  std::fwrite(text.constData(), 1, static_cast<size_t>(text.size()), stdout);
  std::fputc('\n', stdout);
  return error.isEmpty() ? 0 : 1;
}
