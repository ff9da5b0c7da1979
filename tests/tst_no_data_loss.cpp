// Issue 40, "nothing lost while reporting success": the real programs on inputs made here.
//  - an --out that is an input, or any existing file, is refused without --force (and with it,
//    replaced only once the output is complete);
//  - a configuration nested 70,000 deep is refused by every reader (it crashed them: SIGSEGV);
//  - trainscope-train --batch 1000000000 is a usage error (it died of std::bad_alloc);
//  - a session holding INT64_MIN..INT64_MAX or an event ending before it starts exports no
//    negative duration;
//  - the GUI's --screenshot under a real X server exits 1 on a load error (a modal dialog waited
//    for a click forever).
#include <QtTest>

#include <QCryptographicHash>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <cstdint>
#include <limits>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "cli_test_support.h"
#include "train_test_support.h"
#include "trainscope/core/base/json_depth.h"
#include "trainscope/core/model/trace_store.h"
#include "trainscope/core/session/tsdb.h"
#include "trainscope/core/synth/synth.h"

using trainscope::test::CliRun;
using trainscope::test::runCli;
using trainscope::test::runProgram;
namespace core = trainscope::core;

namespace {

QByteArray sha(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return {};
  return QCryptographicHash::hash(f.readAll(), QCryptographicHash::Sha256);
}

bool writeFile(const QString& path, const QByteArray& bytes) {
  QFile f(path);
  return f.open(QIODevice::WriteOnly | QIODevice::Truncate) && f.write(bytes) == bytes.size();
}

QString describe(const CliRun& r) {
  return QString("exit %1\nstdout: %2\nstderr: %3").arg(r.code).arg(r.out, r.err);
}

// A tuned configuration whose "notes" hold arrays nested `depth` deep (~2 bytes a level).
QByteArray deepConfig(int depth) {
  QByteArray s = R"({"schema":"trainscope.tuned-config","schema_version":1,"knobs":{"dp.bucket_bytes":65536},"notes":{"x":)";
  s += QByteArray(depth, '[');
  s += QByteArray(depth, ']');
  s += "}}";
  return s;
}

}  // namespace

class TstNoDataLoss : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  QString session_;

  QString path(const QString& name) const { return dir_.filePath(name); }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    session_ = path("S.tsdb");
    const CliRun r = runCli({"synth", "--ranks", "2", "--steps", "3", "--kernels", "4", "--out", session_});
    QVERIFY2(r.code == 0, qPrintable(describe(r)));
  }

  // export S.tsdb --out S.tsdb (each format), also through another name for the same file.
  void exportOverItsInputIsRefused_data() {
    QTest::addColumn<QString>("format");
    QTest::addColumn<QString>("how");
    for (const char* f : {"chrome", "config", "ddp", "deepspeed", "megatron", "nccl-tuner", "train-args"})
      QTest::newRow(f) << f << "same";
    QTest::newRow("config via ./") << "config" << "dot";
    QTest::newRow("chrome via a hard link") << "chrome" << "hardlink";
    QTest::newRow("config via a symlink") << "config" << "symlink";
  }
  void exportOverItsInputIsRefused() {
    QFETCH(QString, format);
    QFETCH(QString, how);
    const QByteArray before = sha(session_);
    QString out = session_;
    if (how == "dot") {
      out = dir_.path() + "/./S.tsdb";
    } else if (how == "hardlink") {
      out = path("hard.tsdb");
      QFile::remove(out);
      QVERIFY(::link(session_.toLocal8Bit().constData(), out.toLocal8Bit().constData()) == 0);
    } else if (how == "symlink") {
      out = path("sym.tsdb");
      QFile::remove(out);
      QVERIFY(QFile::link(session_, out));
    }
    const CliRun r = runCli({"export", session_, "--format", format, "--out", out});
    QVERIFY2(r.code == 1, qPrintable(describe(r)));
    QVERIFY2(r.err.startsWith("trainscope-cli: invalid-argument: ") && r.err.contains("is also an input"),
             qPrintable(r.err));
    QCOMPARE(sha(session_), before);
    if (how != "same" && how != "dot") QFile::remove(out);
  }

  // With --force the same export is safe: the input is read whole, the output renamed over it.
  void forceReplacesOnlyWhenComplete() {
    const QString copy = path("copy.tsdb");
    QVERIFY(QFile::copy(session_, copy));
    const CliRun r = runCli({"export", copy, "--format", "chrome", "--out", copy, "--force"});
    QVERIFY2(r.code == 0, qPrintable(describe(r)));
    QFile f(copy);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const auto doc = nlohmann::json::parse(f.readAll().toStdString(), nullptr, false);
    QVERIFY(doc.is_object() && doc.contains("traceEvents") && !doc["traceEvents"].empty());
    // No temporary file is left behind.
    for (const QString& n : QDir(dir_.path()).entryList(QDir::Files)) QVERIFY2(!n.contains(".writing-"), qPrintable(n));
    // A failed export with --force (the input is not a session) leaves the old file as it was.
    const QString target = path("keep.json");
    QVERIFY(writeFile(target, "precious"));
    QVERIFY(writeFile(path("garbage.tsdb"), "not a session"));
    const CliRun bad = runCli({"export", path("garbage.tsdb"), "--format", "chrome", "--out", target, "--force"});
    QCOMPARE(bad.code, 1);
    QFile k(target);
    QVERIFY(k.open(QIODevice::ReadOnly));
    QCOMPARE(k.readAll(), QByteArray("precious"));
  }

  // import X.json --out X.json, and import/synth/record/tune/export over an existing file.
  void existingOutputsAreRefused() {
    const QString json = path("X.json");
    CliRun r = runCli({"export", session_, "--format", "chrome", "--out", json});
    QVERIFY2(r.code == 0, qPrintable(describe(r)));
    const QByteArray jsonBefore = sha(json);
    r = runCli({"import", json, "--out", json});
    QVERIFY2(r.code == 1 && r.err.contains("is also an input"), qPrintable(describe(r)));
    QCOMPARE(sha(json), jsonBefore);

    const QString existing = path("existing.tsdb");
    QVERIFY(QFile::copy(session_, existing));
    const QByteArray before = sha(existing);
    const QList<QStringList> commands = {
        {"import", json, "--out", existing},
        {"synth", "--ranks", "1", "--steps", "1", "--out", existing},
        {"export", session_, "--format", "config", "--out", existing},
        {"export", session_, "--format", "chrome", "--out", existing},
        // Refused before looking for the job (which does not exist).
        {"record", "--job", "no-such-job", "--seconds", "1", "--out", existing},
        {"tune", "--job", "no-such-job", "--knobs", "dp.algorithm", "--budget-steps", "1", "--out", existing},
    };
    for (const QStringList& c : commands) {
      r = runCli(c);
      QVERIFY2(r.code == 1 && r.err.contains("already exists; pass --force"), qPrintable(c.join(' ') + "\n" + describe(r)));
      QCOMPARE(sha(existing), before);
    }
    // --force: import replaces its own input with the session made from it.
    r = runCli({"import", json, "--out", json, "--force"});
    QVERIFY2(r.code == 0, qPrintable(describe(r)));
    auto back = core::loadSession(json.toStdString());
    QVERIFY2(back.isOk(), back.status().message().c_str());
    QVERIFY(back->eventCount() > 0);
    r = runCli({"synth", "--ranks", "1", "--steps", "1", "--out", existing, "--force"});
    QVERIFY2(r.code == 0, qPrintable(describe(r)));
    QVERIFY(sha(existing) != before);
  }

  void nestingScanner() {
    using core::jsonNestedDeeperThan;
    const std::string ok256 = std::string(256, '[') + std::string(256, ']');
    QVERIFY(!jsonNestedDeeperThan(ok256));
    QVERIFY(jsonNestedDeeperThan("[" + ok256 + "]"));
    // Brackets inside strings (escaped quotes and backslashes included) do not count.
    const std::string inString = "{\"a\":\"" + std::string(1000, '[') + "\\\"" + std::string(1000, '{') + "\\\\\"}";
    QVERIFY(!jsonNestedDeeperThan(inString));
    QVERIFY(jsonNestedDeeperThan("[\"\\\\\"," + std::string(300, '['), 256));
    QVERIFY(!jsonNestedDeeperThan("[\"\\\"" + std::string(300, '[') + "\"]", 256));
  }

  // A 140 KB configuration nested 70,000 deep: every reader refuses it (SIGSEGV before).
  void deepConfigIsRefused() {
    const QString deep = path("deep.json");
    QVERIFY(writeFile(deep, deepConfig(70'000)));
    const QString want = deep + ": JSON nested deeper than 256 levels";
    for (const char* f : {"config", "ddp", "deepspeed", "megatron", "nccl-tuner", "train-args"}) {
      const CliRun r = runCli({"export", deep, "--format", f, "--out", path(QString("deep-out.") + f)});
      QVERIFY2(r.code == 1 && r.err.contains(want), qPrintable(QString(f) + ": " + describe(r)));
    }
    // As a trace (chrome): the importer's own depth limit (no crash either).
    CliRun r = runCli({"export", deep, "--format", "chrome", "--out", path("deep-out.chrome")});
    QVERIFY2(r.code == 1 && r.err.contains("nested deeper than"), qPrintable(describe(r)));
    // set --from reads the file before it looks for the job.
    r = runCli({"set", "--job", "no-such-job", "--from", deep});
    QVERIFY2(r.code == 1 && r.err.contains(want), qPrintable(describe(r)));
  }

  void deepConfigIsRefusedByTheTrainer() {
    if (!QFileInfo::exists(train_test::trainer())) QSKIP("trainscope-train is not built (MPI or OpenBLAS missing)");
    const QString deep = path("deep.json");
    QVERIFY(writeFile(deep, deepConfig(70'000)));
    CliRun r;
    // With a tuned configuration and with a plain options file.
    const QString plain = path("deep-options.json");
    QVERIFY(writeFile(plain, "{\"steps\":" + QByteArray(70'000, '[') + QByteArray(70'000, ']') + "}"));
    for (const QString& cfg : {deep, plain}) {
      r = train_test::runTrainer({"--config", cfg, "--no-agent"});
      QVERIFY2(r.code == 2 && r.err.contains(cfg + ": JSON nested deeper than 256 levels"), qPrintable(describe(r)));
    }
    // 256 levels are still read (the file is then judged on its content).
    QVERIFY(writeFile(plain, "{\"steps\":" + QByteArray(255, '[') + QByteArray(255, ']') + "}"));
    r = train_test::runTrainer({"--config", plain, "--no-agent"});
    QVERIFY2(r.code == 2 && r.err.contains("must be a number, string or boolean"), qPrintable(describe(r)));
  }

  // Sizes that would allocate many GiB are usage errors, before MPI starts.
  void hugeSizesAreUsageErrors_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("message");
    QTest::newRow("batch") << QStringList{"--batch", "1000000000"} << "--batch must be in 1..16777216";
    QTest::newRow("held-out") << QStringList{"--held-out", "2000000000"} << "--held-out must be in";
    QTest::newRow("input-dim x batch") << QStringList{"--batch", "1048576", "--input-dim", "65536"} << "sizes too large";
    QTest::newRow("transformer") << QStringList{"--model", "transformer", "--seq-len", "16384", "--batch", "4096"}
                                 << "sizes too large";
  }
  void hugeSizesAreUsageErrors() {
    if (!QFileInfo::exists(train_test::trainer())) QSKIP("trainscope-train is not built (MPI or OpenBLAS missing)");
    QFETCH(QStringList, args);
    QFETCH(QString, message);
    const CliRun r = train_test::runTrainer(args + QStringList{"--steps", "1", "--no-agent"});
    QVERIFY2(r.code == 2 && r.err.contains("trainscope-train: ") && r.err.contains(message), qPrintable(describe(r)));
  }

  // Sizes within the bounds that still do not fit (here: a 2.5 GB address-space limit): the
  // std::bad_alloc is caught, said and exit 1 -- not an abort.
  void outOfMemoryIsAnError() {
    if (!QFileInfo::exists(train_test::trainer())) QSKIP("trainscope-train is not built (MPI or OpenBLAS missing)");
    if (trainscope::test::kSanitizerBuild) QSKIP("the sanitizers reserve more address space than the limit");
    const QString cmd = "ulimit -v 2500000 && exec \"$0\" --batch 1048576 --input-dim 256 --width 256 --steps 1 "
                        "--eval-every 0 --held-out 16 --no-agent";
    const CliRun r = runProgram("/bin/sh", {"-c", cmd, train_test::trainer()}, 60000, train_test::mpiEnv());
    if (!r.out.contains("rank(s), model")) QSKIP(qPrintable("MPI did not start under the limit: " + describe(r)));
    QVERIFY2(r.code == 1 && r.err.contains("out of memory (std::bad_alloc)"), qPrintable(describe(r)));
  }

  // INT64_MIN..INT64_MAX and end < start: no negative "dur", no negative "ts", and a note.
  void extremeIntervalsExportNoNegativeDuration() {
    core::TraceStore s;
    const auto t = s.findOrAddTrack(0, core::TrackKind::CpuThread, 1, "main");
    constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
    s.append(t, {kMin, kMax, s.intern("everything"), core::EventKind::Range});
    s.append(t, {1000, 10, s.intern("backwards"), core::EventKind::Range});
    s.append(t, {kMax - 5, kMin + 5, s.intern("backwards far"), core::EventKind::Range});
    s.append(t, {0, kMax, s.intern("to the end"), core::EventKind::Range});
    s.flush();
    const QString file = path("extremes.tsdb");
    QVERIFY(core::saveSession(s, file.toStdString()).isOk());
    const QString out = path("extremes.json");
    const CliRun r = runCli({"export", file, "--format", "chrome", "--out", out});
    QVERIFY2(r.code == 0, qPrintable(describe(r)));
    QVERIFY2(r.err.contains("note: 2 events") && r.err.contains("end before they start"), qPrintable(describe(r)));
    QFile f(out);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const auto doc = nlohmann::json::parse(f.readAll().toStdString(), nullptr, false);
    QVERIFY(doc.is_object() && doc["traceEvents"].is_array());
    int named = 0;
    for (const auto& e : doc["traceEvents"]) {
      if (e.contains("dur")) QVERIFY2(e["dur"].get<double>() >= 0, e.dump().c_str());
      if (e.contains("ts") && e.value("ph", "") != "M") QVERIFY2(e["ts"].get<double>() >= 0, e.dump().c_str());
      if (e.contains("name") && e["name"].is_string() && e.value("ph", "") != "M") ++named;
    }
    QCOMPARE(named, 4);
  }

  // --screenshot under a real X server: a file that does not load exits 1 at once.
  void screenshotNeverWaitsForAClick() {
    const QString gui = QStringLiteral(TRAINSCOPE_BIN_DIR "/trainscope");
    const QString xvfb = QStandardPaths::findExecutable("xvfb-run");
    if (!QFileInfo::exists(gui)) QSKIP("the GUI is not built");
    if (xvfb.isEmpty()) QSKIP("xvfb-run is not installed");
    const QString bad = path("not-a-session.tsdb");
    QVERIFY(writeFile(bad, "this is not a session"));
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove("QT_QPA_PLATFORM");  // the real xcb platform, as a person's X server
    const CliRun r = runProgram(xvfb, {"-a", gui, "--screenshot", path("shot.png"), bad}, 60000, env);
    QVERIFY2(r.code == 1, qPrintable(describe(r)));
    QVERIFY2(r.err.contains("trainscope: "), qPrintable(describe(r)));
    QVERIFY(!QFileInfo::exists(path("shot.png")));
  }
};

QTEST_GUILESS_MAIN(TstNoDataLoss)
#include "tst_no_data_loss.moc"
