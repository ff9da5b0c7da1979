// `trainscope-cli schedule` end to end: the real binary's op order, timeline, simulated vs
// theoretical bubble fraction (text and JSON) and its refusals of bad parameters.
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QtTest>

#include "cli_test_support.h"

namespace {

using trainscope::test::CliRun;
CliRun cli(const QStringList& args) {
  return trainscope::test::runCli(QStringList{"schedule"} + args);
}

}  // namespace

class TstCliSchedule : public QObject {
  Q_OBJECT

 private slots:
  // 1F1B, p = 2, m = 2, F = B = 1 and no W (tests/tst_schedule.cpp draws it by hand):
  // makespan 6, bubble 1/3 on both stages.
  void textOutput() {
    const CliRun r = cli({"--schedule", "1f1b", "--stages", "2", "--microbatches", "2", "--weight", "0"});
    QVERIFY2(r.code == 0, qPrintable(r.err));
    QVERIFY(r.out.contains("stage 0: F0 F1 B0 B1\n"));
    QVERIFY(r.out.contains("stage 1: F0 B0 F1 B1\n"));
    QVERIFY(r.out.contains("stage 0 |F0F1..B0..B1|\n"));
    QVERIFY(r.out.contains("stage 1 |..F0B0F1B1..|\n"));
    QVERIFY(r.out.contains("makespan 6\n"));
    QVERIFY(r.out.contains("bubble fraction: simulated 0.3333  theory 0.3333"));
    const CliRun comm = cli({"-s", "1f1b", "-p", "2", "-m", "2", "--comm"});
    QVERIFY(comm.out.contains("stage 1: recv-act F0 <-0, F0, B0, send-grad B0 ->0,"));
  }

  // Every schedule at p = 4, m = 8 (v = 2, k = 2 where they apply), F = B = W = 1: simulated
  // bubble fraction equals the formula; one entry per stage; F, B (, W) per unit.
  void jsonMatchesTheory() {
    struct Case {
      const char* name;
      QStringList extra;
      int opsPerStage;
      double theory;
    };
    const Case cases[] = {
        {"gpipe", {}, 16, 3.0 / 11},
        {"1f1b", {}, 16, 3.0 / 11},
        {"interleaved-1f1b", {"--virtual", "2"}, 32, 3.0 / 19},
        {"zb-h1", {}, 24, 3.0 / 27},
        {"seq1f1b", {"--segments", "2"}, 32, 3.0 / 19},
        // PyTorch's: theory = the balanced simulation (docs/SCHEDULES.md), 1/17 at p = 4, m = 8;
        // zbv takes v = 2 without being told
        {"interleaved-zb", {"--virtual", "2"}, 48, 1.0 / 17},
        {"zbv", {}, 48, 1.0 / 17},
    };
    for (const Case& c : cases) {
      const CliRun r = cli(QStringList{"-s", c.name, "-p", "4", "-m", "8", "--json"} + c.extra);
      QVERIFY2(r.code == 0, qPrintable(r.err));
      const QJsonObject j = QJsonDocument::fromJson(r.out.toUtf8()).object();
      QCOMPARE(j["schedule"].toString(), QString(c.name));
      QVERIFY2(qAbs(j["bubble_fraction"].toDouble() - c.theory) < 1e-9, c.name);
      QVERIFY2(qAbs(j["bubble_fraction_theory"].toDouble() - c.theory) < 1e-9, c.name);
      const QJsonArray stages = j["per_stage"].toArray();
      QCOMPARE(stages.size(), 4);
      for (const auto& s : stages) QCOMPARE(s.toObject()["ops"].toArray().size(), c.opsPerStage);
    }
  }

  void badParametersRefused() {
    CliRun r = cli({"-s", "interleaved-1f1b", "-p", "4", "-m", "6", "-v", "2"});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains("interleaved-1f1b needs micro-batches divisible by stages"), qPrintable(r.err));
    r = cli({"-s", "pipedream"});
    QCOMPARE(r.code, 2);
    QVERIFY(r.err.contains("unknown pipeline schedule 'pipedream' (one of: gpipe, 1f1b, interleaved-1f1b"));
    r = cli({"-s", "1f1b", "-m", "0"});
    QCOMPARE(r.code, 2);
    QVERIFY(r.err.contains("micro-batches must be >= 1"));
    r = cli({"--forward", "-1"});
    QCOMPARE(r.code, 2);
    QVERIFY(r.err.contains("durations must be finite and >= 0"));
    r = cli({"-s", "zbv", "-v", "3"});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains("zbv needs exactly 2 virtual stages per stage (its V), got 3"), qPrintable(r.err));
    r = cli({"--stages", "many"});
    QCOMPARE(r.code, 2);
    QVERIFY(r.out.isEmpty());
  }
};

QTEST_GUILESS_MAIN(TstCliSchedule)
#include "tst_cli_schedule.moc"
