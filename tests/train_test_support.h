// Running trainscope-train under a real mpirun from the trainer's test suites.
#pragma once

#include <QProcess>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>
#include <vector>

#include "cli_test_support.h"

namespace train_test {

using Run = trainscope::test::CliRun;

inline QString trainer() {
  return QStringLiteral(TRAINSCOPE_BIN_DIR "/trainscope-train");
}

inline QProcessEnvironment mpiEnv() {
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.insert("OMPI_ALLOW_RUN_AS_ROOT", "1");
  env.insert("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
  env.insert("OMPI_MCA_btl", "self,vader");
  env.insert("OMPI_MCA_oob_tcp_if_include", "lo");
  env.insert("OMPI_MCA_rmaps_base_oversubscribe", "1");
  env.insert("TRAINSCOPE_DISABLE", "1");  // these runs test the maths, not the agent
  return env;
}

// mpirun -np ranks trainscope-train args...
inline Run mpirunTrainer(int ranks, const QStringList& args, int timeoutMs = 120000) {
  return trainscope::test::runProgram(QStandardPaths::findExecutable("mpirun"),
                                      QStringList{"-np", QString::number(ranks), "--oversubscribe", trainer()} + args,
                                      timeoutMs, mpiEnv());
}

// trainscope-train without mpirun (for what it refuses before starting MPI).
inline Run runTrainer(const QStringList& args) { return trainscope::test::runProgram(trainer(), args, 30000, mpiEnv()); }

inline std::vector<float> readFloats(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return {};
  const QByteArray b = f.readAll();
  std::vector<float> v(static_cast<size_t>(b.size()) / sizeof(float));
  std::memcpy(v.data(), b.constData(), v.size() * sizeof(float));
  return v;
}

// Trains with mpirun -np ranks, dumps the whole model's parameters to dir/name.bin and reads
// them back (empty when the run failed; its output is then printed). out: the run's stdout.
inline std::vector<float> trainedParams(const QTemporaryDir& dir, int ranks, const QStringList& args,
                                        const QString& name, QString* out = nullptr) {
  const QString file = dir.filePath(name + ".bin");
  const Run r = mpirunTrainer(ranks, args + QStringList{"--dump-params", file});
  if (r.code != 0) qWarning("%s", qPrintable(r.out + r.err));
  if (out) *out = r.out;
  return readFloats(file);
}

inline double maxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || a.empty()) return 1e30;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

}  // namespace train_test
