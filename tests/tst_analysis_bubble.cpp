// End to end (issue 8): record the reference pipeline job, analyse it, and check the measured
// bubble fraction against the schedule's formula.
//
// A 2-stage 1F1B `trainscope-train` (`demo --mode pp`, equal 512-wide layers, 4 per stage, 1024 samples per step) runs
// with pp.microbatches = 2 (theory (p-1)/(m+p-1) = 1/3), then is switched live to 8 (theory 1/9)
// while `record` runs. `analyze --json` gives per step and stage the measured fraction and the
// theory in force. Stated tolerance, for a 2-core machine running only this test (RUN_SERIAL),
// on the median over the steps of each phase: measured - theory in [-0.05, +0.15] for both
// micro-batch counts; quiet runs measured -0.02 to +0.03 at m = 2 and +0.06 at m = 8, a loaded
// one +0.14 (docs/BENCHMARKS.md: the residual is stage imbalance, about +0.02, and per-op jitter
// and hand-off latency on shared cores). Going from 2 to 8 micro-batches removes at least 0.1
// of the 0.22 the formula removes, and the simulated fraction (the schedule with the measured op
// times, no communication) lies within 0.1 of the formula.
#include <QJsonArray>
#include <QJsonObject>
#include <QtTest>
#include <algorithm>
#include <array>
#include <map>
#include <vector>

#include "live_test_support.h"

using namespace live_test;

namespace {

// Per step: the mean over the stages of the measured, simulated and theoretical fractions; the
// phase's value is the median over its steps (a step that a burst of other work on the machine
// stretched does not move it).
struct Acc {
  std::map<int64_t, std::array<double, 4>> steps;  // step -> sums (measured, theory, simulated), n
  void add(int64_t step, const QJsonObject& s) {
    auto& a = steps[step];
    a[0] += s["bubble_fraction"].toDouble();
    a[1] += s["bubble_fraction_theory"].toDouble();
    a[2] += s["bubble_fraction_simulated"].toDouble();
    a[3] += 1;
  }
  double median(size_t k) const {
    std::vector<double> v;
    for (const auto& [step, a] : steps) v.push_back(a[k] / a[3]);
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  }
  int n() const { return static_cast<int>(steps.size()); }
  double m() const { return median(0); }
  double t() const { return median(1); }
  double sim() const { return median(2); }
};

}  // namespace

class TstAnalysisBubble : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  DemoJob job_;

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    if (!QFileInfo::exists(bin("trainscope-train"))) QSKIP("trainscope-train not built (MPI or OpenBLAS missing)");
    usePrivateRuntimeDir(dir_);
  }

  void balancedPipelineBubbleMatchesTheory() {
    job_ = startDemo({"--ranks", "2", "--mode", "pp", "--steps", "100000", "--", "--layers", "7", "--input-dim",
                      "512", "--width", "512", "--classes", "512", "--batch", "1024", "--microbatches", "2",
                      "--schedule", "1f1b", "--eval-every", "0"},
                     "pp.microbatches");
    QVERIFY2(job_.error.isEmpty(), qPrintable(job_.error));

    const QString file = dir_.filePath("pp.tsdb");
    const auto [stepOf, error, refused] = recordWhileSetting(job_.id, file, 6, {"pp.microbatches=8"}, 3000, 0);
    QVERIFY(refused.empty());
    QVERIFY2(error.isEmpty(), qPrintable(error));
    const int64_t switched = stepOf.at("pp.microbatches=8");
    QVERIFY2(stopDemo(job_), "the demo job did not stop after SIGTERM to its launcher");

    const Run a = cli({"analyze", file, "--json"});
    QVERIFY2(a.code == 0, qPrintable(a.err));
    const QJsonObject p = json(a).object()["pipeline"].toObject();
    QCOMPARE(p["schedule"].toString(), QString("1f1b"));
    QCOMPARE(p["stages"].toInt(), 2);
    Acc two, eight;
    std::map<int64_t, int> stagesAt;  // steps the recording caught on both stages, whole
    for (const auto& sv : p["per_stage"].toArray())
      for (const auto& st : sv.toObject()["per_step"].toArray()) ++stagesAt[st.toObject()["step"].toInteger()];
    const int64_t firstStep = stagesAt.empty() ? 0 : stagesAt.begin()->first;
    const int64_t lastStep = stagesAt.empty() ? 0 : stagesAt.rbegin()->first;
    for (const auto& sv : p["per_stage"].toArray())
      for (const auto& stv : sv.toObject()["per_step"].toArray()) {
        const QJsonObject st = stv.toObject();
        const int64_t step = st["step"].toInteger();
        // cut by the recording's start or end, or the step of the switch
        if (step <= firstStep || step >= lastStep || step == switched || stagesAt[step] != 2) continue;
        (step < switched ? two : eight).add(step, st);
      }
    QVERIFY2(two.n() >= 6 && eight.n() >= 6, qPrintable(QString("%1 steps at m=2, %2 at m=8").arg(two.n()).arg(eight.n())));
    const QString numbers = QString("m=2: measured %1 simulated %2 theory %3; m=8: measured %4 simulated %5 theory %6")
                                .arg(two.m()).arg(two.sim()).arg(two.t()).arg(eight.m()).arg(eight.sim()).arg(eight.t());
    qInfo("%s", qPrintable(numbers));
    QVERIFY2(std::fabs(two.t() - 1.0 / 3.0) < 1e-9, qPrintable(numbers));  // the formula in force, per step
    QVERIFY2(std::fabs(eight.t() - 1.0 / 9.0) < 1e-9, qPrintable(numbers));
    for (const Acc* acc : {&two, &eight}) QVERIFY2(std::fabs(acc->sim() - acc->t()) <= 0.1, qPrintable(numbers));
    if (trainscope::test::kSanitizerBuild) {
      // A sanitizer-built rank spends much of each step in instrumented per-op work (sends,
      // receives, the agent) that the theory's compute-only model leaves out: measured bubbles of
      // 0.43 and 0.35 against 0.33 and 0.11 in the ASan run. The measured-against-theory checks
      // belong to the normal build; here the run, the formula and the simulation are checked.
      qInfo("sanitizer build: measured bubbles not compared with the theory");
      return;
    }
    for (const Acc* acc : {&two, &eight})
      QVERIFY2(acc->m() >= acc->t() - 0.05 && acc->m() <= acc->t() + 0.15, qPrintable(numbers));
    QVERIFY2(two.m() - eight.m() >= 0.1, qPrintable(numbers));
  }

  void cleanupTestCase() { QVERIFY(stopDemo(job_)); }
};

QTEST_GUILESS_MAIN(TstAnalysisBubble)
#include "tst_analysis_bubble.moc"
