// Running the real trainscope-cli from a test: exit code, stdout and stderr, with a timeout
// that kills the process (a hung command fails the test instead of hanging the suite).
#pragma once

#include <QProcess>
#include <QString>
#include <QStringList>

namespace trainscope::test {

struct CliRun {
  int code = -1;  // exit code; -2 when it crashed, -1 when it timed out
  QString out, err;
};

// Runs a program to completion (killed after timeoutMs: a hung program fails the test instead of
// hanging the suite); env empty = inherit.
inline CliRun runProgram(const QString& program, const QStringList& args, int timeoutMs,
                         const QProcessEnvironment& env = QProcessEnvironment()) {
  QProcess p;
  if (!env.isEmpty()) p.setProcessEnvironment(env);
  p.start(program, args);
  CliRun r;
  if (!p.waitForFinished(timeoutMs)) {
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
