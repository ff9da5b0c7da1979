// Running the real trainscope-cli from a test: exit code, stdout and stderr, with a timeout
// that kills the process (a hung command fails the test instead of hanging the suite).
#pragma once

#include <QDir>
#include <QFile>
#include <QProcess>
#include <QString>
#include <QStringList>
#include <QThread>

#include <csignal>
#include <cstdlib>
#include <unistd.h>

namespace trainscope::test {

// Pids of the processes (other than this one) whose environment holds `var=value` exactly, e.g.
// the private TRAINSCOPE_RUNTIME_DIR a test gave its jobs: every launcher, mpirun and rank it
// started inherits it, whatever process group or session they put themselves in.
inline QList<qint64> processesWithEnv(const QByteArray& var, const QByteArray& value) {
  QList<qint64> out;
  const QByteArray want = var + "=" + value;
  for (const QString& name : QDir("/proc").entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
    bool ok = false;
    const qint64 pid = name.toLongLong(&ok);
    if (!ok || pid == ::getpid()) continue;
    QFile f("/proc/" + name + "/environ");
    if (!f.open(QIODevice::ReadOnly)) continue;  // gone, or not ours
    if (f.readAll().split('\0').contains(want)) out << pid;
  }
  return out;
}

// SIGCONT (a stopped rank acts on nothing else), SIGTERM, up to graceMs for them to go, then
// SIGKILL: no process with `var=value` in its environment outlives the call. Returns how many
// were still there at the start.
inline int killProcessesWithEnv(const QByteArray& var, const QByteArray& value, int graceMs = 3000) {
  const QList<qint64> pids = processesWithEnv(var, value);
  for (qint64 p : pids) {
    ::kill(static_cast<pid_t>(p), SIGCONT);
    ::kill(static_cast<pid_t>(p), SIGTERM);
  }
  for (int waited = 0; waited < graceMs && !processesWithEnv(var, value).isEmpty(); waited += 50) QThread::msleep(50);
  for (qint64 p : processesWithEnv(var, value)) ::kill(static_cast<pid_t>(p), SIGKILL);
  return static_cast<int>(pids.size());
}

// Every job a test starts inherits its private TRAINSCOPE_RUNTIME_DIR (usePrivateRuntimeDir):
// at the test's exit -- also after a failed QVERIFY, which returns early, and after a failed
// stop -- whatever still runs with it is ended. (A crashed test is left to the suite's final
// check, tests/check_leftovers.sh.)
inline void killJobsAtExit(const QByteArray& runtimeDir) {
  static QByteArray dir;
  static bool registered = false;
  dir = runtimeDir;
  if (registered) return;
  registered = true;
  std::atexit([] {
    if (!dir.isEmpty()) killProcessesWithEnv("TRAINSCOPE_RUNTIME_DIR", dir);
  });
}

struct CliRun {
  int code = -1;  // exit code; -2 when it crashed, -1 when it timed out
  QString out, err;
};

// Runs a program to completion (killed after timeoutMs: a hung program fails the test instead of
// Set by tests/CMakeLists.txt from TRAINSCOPE_TEST_TIMEOUT_FACTOR (3 or 4 in the sanitizer
// presets): how many times slower than a normal build the tests' programs may run.
#ifndef TRAINSCOPE_TEST_SLOWDOWN
#define TRAINSCOPE_TEST_SLOWDOWN 1
#endif
// True in the ASan and TSan builds, where timing-derived assertions (bubbles against theory,
// what-if tolerances, the tuner's pick) give way to weaker ones: a sanitizer-built rank's
// instrumented work is not what those models and comparisons describe.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizerBuild = true;
#else
inline constexpr bool kSanitizerBuild = false;
#endif

// hanging the suite); env empty = inherit.
inline CliRun runProgram(const QString& program, const QStringList& args, int timeoutMs,
                         const QProcessEnvironment& env = QProcessEnvironment()) {
  QProcess p;
  if (!env.isEmpty()) p.setProcessEnvironment(env);
  p.start(program, args);
  CliRun r;
  // Sanitizer builds run several times slower: their presets scale every deadline here.
  if (!p.waitForFinished(timeoutMs * TRAINSCOPE_TEST_SLOWDOWN)) {
    p.kill();
    p.waitForFinished();
    r.err = "timed out: " + program + " " + args.join(' ');
    return r;
  }
  r.code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2;
  r.out = QString::fromUtf8(p.readAllStandardOutput());
  r.err = QString::fromUtf8(p.readAllStandardError());
  return r;
}

inline CliRun runCli(const QStringList& args, int timeoutMs = 60000) {
  return runProgram(QString(TRAINSCOPE_BIN_DIR) + "/trainscope-cli", args, timeoutMs);
}

}  // namespace trainscope::test
