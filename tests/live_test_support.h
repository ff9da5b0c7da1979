// Helpers for tests that drive the real CLI against live jobs (tst_cli_live, tst_clock_resync).
#pragma once

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QProcess>
#include <QRegularExpression>
#include <QThread>
#include <QString>
#include <QTest>
#include <QStringList>

#include <algorithm>
#include <csignal>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "cli_test_support.h"
#include "trainscope/core/model/trace_store.h"

namespace live_test {

using namespace trainscope::core;

// Agents and clients of this test use a private runtime directory (mode 0700, as the agent
// requires), so no other job on the machine interferes.
inline void usePrivateRuntimeDir(const QTemporaryDir& dir) {
  QDir().mkpath(dir.filePath("run"));
  QFile::setPermissions(dir.filePath("run"), QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
  qputenv("TRAINSCOPE_RUNTIME_DIR", dir.filePath("run").toUtf8());
  trainscope::test::killJobsAtExit(dir.filePath("run").toUtf8());
}

inline QString bin(const QString& name) { return QString(TRAINSCOPE_BIN_DIR) + "/" + name; }

// `trainscope-cli demo ARGS`: the job id and the launcher pid it prints (-1 when it did not say);
// an empty id and the demo's output in *error when it failed.
struct Demo {
  QString jobId;
  qint64 launcher = -1;
};
inline Demo startDemo(const QStringList& args, QString* error) {
  Demo d;
  QProcess demo;
  demo.start(bin("trainscope-cli"), QStringList{"demo"} + args);
  demo.waitForFinished(150000);  // longer than the demo's own wait for its ranks (90 s for torch)
  const QString out = QString::fromUtf8(demo.readAllStandardOutput());
  const QString err = QString::fromUtf8(demo.readAllStandardError());
  const auto pid = QRegularExpression("launcher pid (\\d+)").match(err);
  if (pid.hasMatch()) d.launcher = pid.captured(1).toLongLong();
  const auto job = QRegularExpression("job (\\S+)").match(out);
  if (demo.exitCode() == 0 && job.hasMatch()) d.jobId = job.captured(1);
  else if (error) *error = out + err;
  return d;
}

using Run = trainscope::test::CliRun;
inline Run cli(const QStringList& args, int timeoutMs = 60000) { return trainscope::test::runCli(args, timeoutMs); }

inline QJsonDocument json(const Run& r) { return QJsonDocument::fromJson(r.out.toUtf8()); }

// KnobChange events of one knob in a session: rank -> (value, step).
inline std::map<RankId, std::pair<std::string, int64_t>> knobChanges(TraceStore& s, const std::string& knob) {
  std::map<RankId, std::pair<std::string, int64_t>> out;
  for (TrackId t = 0; t < s.trackCount(); ++t) {
    const TrackEvents& ev = s.events(t);
    for (size_t i = 0; i < ev.size(); ++i) {
      if (ev.kind(i) != EventKind::KnobChange) continue;
      const Attr* k = ev.findAttr(i, AttrKey::Knob);
      const Attr* v = ev.findAttr(i, AttrKey::KnobValue);
      const Attr* st = ev.findAttr(i, AttrKey::Step);
      if (k && v && st && s.str(k->asString()) == knob)
        out[s.track(t).rank] = {std::string(s.str(v->asString())), st->asInt()};
    }
  }
  return out;
}

// Step windows per rank: step number -> start.
inline std::map<RankId, std::map<int64_t, int64_t>> stepStarts(TraceStore& s) {
  std::map<RankId, std::map<int64_t, int64_t>> out;
  for (TrackId t = 0; t < s.trackCount(); ++t) {
    const TrackEvents& ev = s.events(t);
    for (size_t i = 0; i < ev.size(); ++i) {
      if (ev.kind(i) != EventKind::Step) continue;
      if (const Attr* st = ev.findAttr(i, AttrKey::Step)) out[s.track(t).rank][st->asInt()] = ev.start(i);
    }
  }
  return out;
}

// A job started with `trainscope-cli demo`: its id, log file and launcher pid; `error` says why
// starting it failed (empty when it is up and lists the awaited knob).
struct DemoJob {
  QString id, log, error;
  qint64 launcher = -1;
};

// Starts `trainscope-cli demo <args>` and waits up to 20 s for the job to list `knob`.
// The job runs at the demo's nice 0 unless args say otherwise: the suite's assertions on steps and
// bytes per second of a job were written for a job that competes as any job (the demo's default,
// nice 10, yields to a GUI on the same machine and makes a job under make test's load slower).
inline DemoJob startDemo(const QStringList& args, const QString& knob) {
  DemoJob job;
  const QStringList nice = args.contains("--nice") ? QStringList{} : QStringList{"--nice", "0"};
  // Longer than the demo's own wait for its ranks (90 s for torch modes, it says when they do not
  // come up): the harness must not cut that wait short on a loaded machine.
  const Run r = cli(QStringList{"demo"} + nice + args, 150000);
  job.id = QRegularExpression("job (\\S+)").match(r.out).captured(1);
  job.log = QRegularExpression("log (\\S+)").match(r.err).captured(1);
  const auto pid = QRegularExpression("launcher pid (\\d+)").match(r.err);
  if (pid.hasMatch()) job.launcher = pid.captured(1).toLongLong();
  if (r.code != 0 || job.id.isEmpty() || job.launcher <= 0) {
    job.error = "demo did not start: " + r.out + r.err;
    return job;
  }
  for (int i = 0; i < 200; ++i) {
    const Run k = cli({"knobs", "--job", job.id, "--json"});
    if (k.code == 0 && k.out.contains(knob)) return job;
    QThread::msleep(100);
  }
  job.error = "job " + job.id + " never listed " + knob;
  return job;
}

// SIGTERM to the launcher (it forwards it to mpirun; never SIGKILL first, which orphans the
// ranks); true once the job is gone from `jobs` (at most 10 s). A job never started counts as
// gone. One that is not gone by then is ended anyway (SIGKILL to every process of the test's
// runtime directory), so that a failed stop leaves nothing running -- it still returns false.
inline bool stopDemo(DemoJob& job) {
  if (job.launcher <= 0) return true;
  ::kill(static_cast<pid_t>(job.launcher), SIGTERM);
  job.launcher = -1;
  for (int i = 0; i < 100; ++i) {
    if (!cli({"jobs", "--json"}).out.contains(job.id)) return true;
    QThread::msleep(100);
  }
  const QByteArray dir = qgetenv("TRAINSCOPE_RUNTIME_DIR");
  if (!dir.isEmpty()) trainscope::test::killProcessesWithEnv("TRAINSCOPE_RUNTIME_DIR", dir);
  return false;
}

// Records `job` into `file` while setting each of `changes` in turn with
// `trainscope-cli set --json`: the first `leadMs` after the recorder has attached every rank,
// then `gapMs` apart. The recording lasts `seconds` from the attach, and in any case until the
// time planned after the last change (seconds - lead - changes x gap, at least 1 s) has passed
// since it was acknowledged: when `set` is slow (a loaded machine, a sanitizer build) the
// recording still covers every change and what follows it. The recorder is then stopped with
// SIGINT, which saves the file as its --seconds deadline would.
// stepOf: each change's acknowledged step; error: what failed (a set that exited non-zero, a
// change not applied at the same step on every rank, the recorder failing), empty otherwise.
// refused: the changes every rank applied at one step and the job then refused there (restored
// the old value): `set` exits 1 for them and says so; they are not errors here -- a test that
// sends one checks it is in this set.
struct RecordedChanges {
  std::map<QString, int64_t> stepOf;
  QString error;
  std::set<QString> refused;
};
inline RecordedChanges recordWhileSetting(const QString& job, const QString& file, int seconds,
                                          const QStringList& changes, int leadMs, int gapMs) {
  RecordedChanges out;
  QProcess rec;
  rec.setProcessChannelMode(QProcess::SeparateChannels);
  rec.start(bin("trainscope-cli"), {"record", "--job", job, "--out", file});
  if (!rec.waitForStarted()) return {{}, "the recorder did not start"};
  QByteArray recErr;
  QElapsedTimer attach;
  attach.start();
  while (!recErr.contains("recording job") && rec.state() == QProcess::Running && attach.elapsed() < 60000) {
    rec.waitForReadyRead(100);
    recErr += rec.readAllStandardError();
  }
  if (!recErr.contains("recording job")) {
    rec.kill();
    rec.waitForFinished(5000);
    return {{}, "the recorder never attached every rank: " + QString::fromUtf8(recErr + rec.readAllStandardError())};
  }
  QElapsedTimer t;
  t.start();
  // Sanitizer builds step several times slower: the lead, the gaps and the tail last as many times
  // longer, so that each holds about as many steps as in a normal build.
  QTest::qWait(leadMs * TRAINSCOPE_TEST_SLOWDOWN);
  for (const QString& kv : changes) {
    const Run set = cli({"set", "--job", job, kv, "--json"});
    const QJsonObject a = json(set).array().first().toObject();
    const bool refusedByJob = set.code == 1 && a.contains("kept") && !a["kept"].toBool();
    if (refusedByJob) out.refused.insert(kv);
    if ((set.code != 0 && !refusedByJob) || !a["same_step"].toBool()) out.error += kv + ": " + set.out + set.err + "\n";
    out.stepOf[kv] = a["step"].toInteger();
    QTest::qWait(gapMs * TRAINSCOPE_TEST_SLOWDOWN);
  }
  const qint64 lastDone = t.elapsed();
  const qint64 tail = TRAINSCOPE_TEST_SLOWDOWN *
                      std::max<qint64>(1000, qint64(seconds) * 1000 - leadMs - qint64(changes.size()) * gapMs);
  while ((t.elapsed() < qint64(seconds) * 1000 || t.elapsed() - lastDone < tail) && rec.state() == QProcess::Running)
    QTest::qWait(50);
  if (rec.state() == QProcess::Running) ::kill(static_cast<pid_t>(rec.processId()), SIGINT);
  const bool ended = rec.state() == QProcess::NotRunning || rec.waitForFinished(60000);
  if (!ended || rec.exitCode() != 0)
    out.error += "record: " + QString::fromUtf8(recErr + rec.readAllStandardError());
  return out;
}

// Per rank: step start time -> step, and the step an instant falls in (-1: before every step).
inline std::map<RankId, std::map<int64_t, int64_t>> stepsByStart(TraceStore& s) {
  std::map<RankId, std::map<int64_t, int64_t>> out;
  for (const auto& [rank, steps] : stepStarts(s))
    for (const auto& [step, t] : steps) out[rank][t] = step;
  return out;
}
inline int64_t stepAt(const std::map<int64_t, int64_t>& byStart, int64_t t) {
  auto it = byStart.upper_bound(t);
  return it == byStart.begin() ? -1 : std::prev(it)->second;
}

}  // namespace live_test
