// Issue #17 end to end on real 4-rank trainscope-train jobs (docs/TUNING.md):
//  - export: a recorded session's settings in force at the end (set live while recording) as a
//    tuned configuration, and the same from the live job (--job); `trainscope-train --config`
//    starts a new job with every one of those settings (its knob list); `set --from` applies a
//    configuration (a knob the job lacks is named and skipped; a bad value is refused and the
//    job keeps its settings);
//  - what-if: a job recorded at two bucket sizes; the model built from the second setting's
//    steps predicts the first setting's step time within a tolerance wide enough for a loaded
//    2-core machine;
//  - tune: from a tiny bucket (one allreduce per layer of a 16-layer MLP), autotune picks another
//    bucket size, measured faster, and leaves the job running it.
// Every job is stopped through its launcher's process group, also when a test fails.
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QtTest>
#include <cmath>
#include <csignal>

#include "live_test_support.h"
#include "trainscope/core/session/tsdb.h"

using namespace trainscope::core;
using namespace live_test;

namespace {

QJsonObject knobValues(const QString& job) {
  const Run k = cli({"knobs", "--job", job, "--json"});
  QJsonObject out;
  const QJsonDocument d = QJsonDocument::fromJson(k.out.toUtf8());
  const QJsonArray list = d.isArray() ? d.array() : d.object()["knobs"].toArray();
  for (const auto& v : list) {
    const QJsonObject o = v.toObject();
    out[o["name"].toString()] = o.contains("value") ? o["value"] : o["current"];
  }
  return out;
}

QString text(const QJsonValue& v) {
  if (v.isString()) return v.toString();
  if (v.isDouble()) return QString::number(v.toDouble(), 'g', 17);
  return QString::fromUtf8(QJsonDocument(QJsonArray{v}).toJson(QJsonDocument::Compact));
}

bool sameValue(const QJsonValue& a, const QJsonValue& b) {
  bool okA = false, okB = false;
  const double x = text(a).toDouble(&okA), y = text(b).toDouble(&okB);
  if (okA && okB) return x == y;
  return text(a) == text(b);
}

QJsonObject readJson(const QString& path) {
  QFile f(path);
  f.open(QIODevice::ReadOnly);
  return QJsonDocument::fromJson(f.readAll()).object();
}

void writeJson(const QString& path, const QJsonObject& o) {
  QFile f(path);
  f.open(QIODevice::WriteOnly | QIODevice::Truncate);
  f.write(QJsonDocument(o).toJson());
}

// Mean over steps [from, to] of the mean over ranks of the step window (ms): what `analyze`
// and the configuration call the step time.
double meanStepMs(TraceStore& s, int64_t from, int64_t to) {
  std::map<int64_t, std::vector<double>> per;
  for (TrackId t = 0; t < s.trackCount(); ++t) {
    const TrackEvents& ev = s.events(t);
    for (size_t i = 0; i < ev.size(); ++i)
      if (ev.kind(i) == EventKind::Step && ev.end(i) > ev.start(i))
        if (const Attr* a = ev.findAttr(i, AttrKey::Step); a && a->asInt() >= from && a->asInt() <= to)
          per[a->asInt()].push_back(static_cast<double>(ev.end(i) - ev.start(i)) / 1e6);
  }
  double sum = 0;
  int n = 0;
  for (const auto& [step, v] : per) {
    double m = 0;
    for (double x : v) m += x;
    sum += m / static_cast<double>(v.size());
    ++n;
  }
  return n ? sum / n : -1;
}

// 48 hidden layers of 16: at a 64-byte bucket every layer is its own bucket (49 reductions per
// step, each completing only at progress points), at 64 MiB one bucket holds them all.
constexpr const char* kModel[] = {"--layers", "48", "--width", "16", "--step-delay-ms", "1"};

}  // namespace

class TstTuneLive : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  std::vector<DemoJob> jobs_;

  DemoJob start(const QStringList& trainerArgs) {
    QStringList args{"--ranks", "4", "--steps", "1000000", "--"};
    for (const char* a : kModel) args << a;
    DemoJob j = startDemo(args + trainerArgs, "dp.bucket_bytes");
    jobs_.push_back(j);
    return j;
  }
  // SIGTERM to the launcher's whole process group (demo makes it a session leader), then wait.
  static void stop(DemoJob& j) {
    if (j.launcher > 0) ::kill(-static_cast<pid_t>(j.launcher), SIGTERM);
    stopDemo(j);
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    if (!QFileInfo::exists(bin("trainscope-train")))
      QSKIP("trainscope-train not built (MPI or OpenBLAS missing)");
    usePrivateRuntimeDir(dir_);
  }

  void cleanupTestCase() {
    for (auto& j : jobs_) stop(j);
  }

  void exportAndApplyBack() {
    DemoJob a = start({});
    QVERIFY2(a.error.isEmpty(), qPrintable(a.error));
    const QString file = dir_.filePath("a.tsdb");
    const QStringList changes{"dp.bucket_bytes=32768", "dp.algorithm=ring", "dp.compression=topk-ef",
                              "dp.topk_ratio=0.05"};
    const RecordedChanges rec = recordWhileSetting(a.id, file, 5, changes, 800, 300);
    QVERIFY2(rec.error.isEmpty(), qPrintable(rec.error));
    const QString cfg = dir_.filePath("a.json");
    const Run ex = cli({"export", file, "--format", "config", "--out", cfg});
    QVERIFY2(ex.code == 0, qPrintable(ex.out + ex.err));
    const QJsonObject c = readJson(cfg);
    QCOMPARE(c["schema"].toString(), QString("trainscope.tuned-config"));
    QCOMPARE(c["schema_version"].toInt(), 1);
    const QJsonObject k = c["knobs"].toObject();
    QCOMPARE(k["dp.bucket_bytes"].toInteger(), 32768);
    QCOMPARE(k["dp.algorithm"].toString(), QString("ring"));
    QCOMPARE(k["dp.compression"].toString(), QString("topk-ef"));
    QCOMPARE(k["dp.topk_ratio"].toDouble(), 0.05);
    QCOMPARE(c["job"].toObject()["world_size"].toInt(), 4);
    QCOMPARE(c["job"].toObject()["mode"].toString(), QString("dp"));
    QCOMPARE(c["job"].toObject()["model_layers"].toInt(), 49);  // 48 hidden + the output layer
    // Measured from the last change's acknowledged step on, as the steps themselves say.
    const QJsonObject m = c["measurements"].toObject();
    const int64_t last = rec.stepOf.at("dp.topk_ratio=0.05");
    QCOMPARE(m["from_step"].toInteger(), last);
    auto store = loadSession(file.toStdString());
    QVERIFY(store.isOk());
    const double hand = meanStepMs(store.value(), last, m["to_step"].toInteger());
    QVERIFY2(std::abs(m["step_time_ms"].toDouble() - hand) < 1e-9,
             qPrintable(QString("%1 vs %2").arg(m["step_time_ms"].toDouble()).arg(hand)));
    QVERIFY(m["steps"].toInt() >= 3);

    // From the live job: the same knob values.
    const QString live = dir_.filePath("live.json");
    const Run exLive =
        cli({"export", "--job", a.id, "--format", "config", "--seconds", "1.5", "--out", live});
    QVERIFY2(exLive.code == 0, qPrintable(exLive.out + exLive.err));
    const QJsonObject kl = readJson(live)["knobs"].toObject();
    for (const QString& name : k.keys()) QVERIFY2(sameValue(kl[name], k[name]), qPrintable(name));
    QVERIFY(readJson(live)["measurements"].toObject()["step_time_ms"].toDouble() > 0);
    // train-args names every knob's option.
    const QString args = dir_.filePath("a.args");
    QCOMPARE(cli({"export", cfg, "--format", "train-args", "--out", args}).code, 0);
    QFile af(args);
    QVERIFY(af.open(QIODevice::ReadOnly));
    const QString argLine = QString::fromUtf8(af.readLine()).trimmed();
    QCOMPARE(argLine, QString("--algorithm ring --bucket-bytes 32768 --compression topk-ef --topk-ratio 0.05"));
    stop(a);

    // trainscope-train --config reproduces every setting.
    DemoJob b = start({"--config", cfg});
    QVERIFY2(b.error.isEmpty(), qPrintable(b.error));
    const QJsonObject kb = knobValues(b.id);
    for (const QString& name : k.keys())
      QVERIFY2(sameValue(kb[name], k[name]),
               qPrintable(name + ": " + text(kb[name]) + " vs " + text(k[name])));

    // set --from: the knobs the job has, a missing one named and skipped.
    QJsonObject other = c;
    QJsonObject ok = k;
    ok["dp.bucket_bytes"] = 1048576;
    ok["dp.algorithm"] = "allreduce";
    ok["dp.compression"] = "none";
    ok["pp.schedule"] = "1f1b";
    other["knobs"] = ok;
    writeJson(dir_.filePath("b.json"), other);
    const Run set = cli({"set", "--job", b.id, "--from", dir_.filePath("b.json"), "--json"});
    QVERIFY2(set.code == 0, qPrintable(set.out + set.err));
    QVERIFY2(set.err.contains("pp.schedule = 1f1b skipped"), qPrintable(set.err));
    const QJsonArray acks = QJsonDocument::fromJson(set.out.toUtf8()).array();
    QCOMPARE(acks.size(), 3);
    for (const auto& x : acks) QVERIFY(x.toObject()["same_step"].toBool());
    const QJsonObject kb2 = knobValues(b.id);
    QVERIFY(sameValue(kb2["dp.bucket_bytes"], 1048576));
    QCOMPARE(text(kb2["dp.algorithm"]), QString("allreduce"));
    QCOMPARE(text(kb2["dp.compression"]), QString("none"));
    // A refused value leaves the job unchanged (all of the file's changes, not only that one).
    ok["dp.bucket_bytes"] = 4096;
    ok["dp.compression"] = "zip";
    other["knobs"] = ok;
    writeJson(dir_.filePath("bad.json"), other);
    const Run bad = cli({"set", "--job", b.id, "--from", dir_.filePath("bad.json")});
    QCOMPARE(bad.code, 1);
    const QJsonObject kb3 = knobValues(b.id);
    QVERIFY(sameValue(kb3["dp.bucket_bytes"], 1048576));
    QCOMPARE(text(kb3["dp.compression"]), QString("none"));
    bJob_ = b;
  }

  // With our ring allreduce, recorded at one big bucket (64 MiB: one reduction after the
  // backward) and then at a tiny one (64 B: one per layer, three payload sizes, so the fit can
  // tell latency from bandwidth); the model from the tiny bucket's steps (the default window:
  // after the last change) predicts the big bucket's step time.
  void whatIfPredictsTheOtherSetting() {
    QVERIFY2(!bJob_.id.isEmpty(), "needs the job of exportAndApplyBack");
    QCOMPARE(cli({"set", "--job", bJob_.id, "dp.algorithm=ring"}).code, 0);
    const QString file = dir_.filePath("w.tsdb");
    const RecordedChanges rec =
        recordWhileSetting(bJob_.id, file, 9, {"dp.bucket_bytes=67108864", "dp.bucket_bytes=64"}, 700, 4000);
    QVERIFY2(rec.error.isEmpty(), qPrintable(rec.error));
    const int64_t sBig = rec.stepOf.at("dp.bucket_bytes=67108864"),
                  sTiny = rec.stepOf.at("dp.bucket_bytes=64");
    QVERIFY(sTiny - sBig >= 10);
    const Run w = cli({"whatif", file, "--json", "--set", "dp.bucket_bytes=67108864"});
    QVERIFY2(w.code == 0, qPrintable(w.out + w.err));
    const QJsonObject j = QJsonDocument::fromJson(w.out.toUtf8()).object();
    QCOMPARE(j["from_step"].toInteger(), sTiny);
    const double predicted = j["predictions"].toArray()[0].toObject()["step_time_ms"].toDouble();
    const double replay = j["replay"].toObject()["step_time_ms"].toDouble();
    const double measuredTiny = j["measured"].toObject()["step_time_ms"].toDouble();
    // The big bucket's steps, measured (2 warm-up steps left out).
    const Run wb = cli({"whatif", file, "--json", "--from-step", QString::number(sBig + 2), "--to-step",
                        QString::number(sTiny - 1)});
    QVERIFY2(wb.code == 0, qPrintable(wb.out + wb.err));
    const double measuredBig =
        QJsonDocument::fromJson(wb.out.toUtf8()).object()["measured"].toObject()["step_time_ms"].toDouble();
    qInfo(
        "what-if: tiny bucket measured %.3f ms, replay %.3f ms; big bucket measured %.3f ms, predicted %.3f "
        "ms",
        measuredTiny, replay, measuredBig, predicted);
    QVERIFY(measuredTiny > 0 && measuredBig > 0);
    QVERIFY2(std::abs(replay - measuredTiny) / measuredTiny < 0.35, "replay off by more than 35 %");
    // Sanitizer-built ranks pay instrumented per-bucket work that the model's costs do not scale
    // the same way (ASan run, 24 Nov: 6.5 ms measured, 13.7 ms predicted): there only the direction
    // is checked; the tolerance belongs to the normal build (and the accuracy to BENCHMARKS.md).
    if (trainscope::test::kSanitizerBuild)
      QVERIFY2(predicted < measuredTiny, "the big bucket not predicted faster than the tiny one");
    else
      QVERIFY2(std::abs(predicted - measuredBig) / measuredBig < 0.5, "prediction off by more than 50 %");
    // The job calibrated its three centralized algorithms at each change, and each codec on them
    // (docs/TUNING.md): the model has an isolated time for each, growing with the payload.
    const Run d = cli({"whatif", file, "--describe"});
    QVERIFY2(d.code == 0, qPrintable(d.err));
    const QJsonArray cal = QJsonDocument::fromJson(d.out.toUtf8()).object()["calibration"].toArray();
    QStringList calibrated;
    for (const auto& c : cal) {
      calibrated << c.toObject()["algorithm"].toString();
      QVERIFY(c.toObject()["alpha_ms"].toDouble() >= 0 && c.toObject()["ms_per_mb_payload"].toDouble() >= 0);
    }
    for (const char* k : {"allreduce", "recursive-doubling", "ring", "ring+fp16", "scatter-reduce+int8",
                          "recursive-doubling+topk-ef", "ring+onebit-ef"})
      QVERIFY2(calibrated.contains(k), qPrintable(calibrated.join(',')));
    QCOMPARE(calibrated.size(), 3 + 3 * 4);
    // And the ranks' own work on each of them (what the backward's cost per bucket moves by; the
    // codecs' since Nov 25).
    const QJsonArray work = QJsonDocument::fromJson(d.out.toUtf8()).object()["calibration_work"].toArray();
    QStringList worked;
    for (const auto& c : work) {
      worked << c.toObject()["algorithm"].toString();
      QVERIFY(c.toObject()["alpha_ms"].toDouble() >= 0 && c.toObject()["ms_per_mb_payload"].toDouble() >= 0);
    }
    worked.sort();
    calibrated.sort();
    QCOMPARE(worked, calibrated);
    // And the backward's compute alone, every layer on every rank ("calibrate dp B|W" kernels):
    // a positive time per layer, summing to less than the measured tiny-bucket step.
    const QJsonObject dj = QJsonDocument::fromJson(d.out.toUtf8()).object();
    QVERIFY2(dj["backward_compute_calibrated"].toBool(), qPrintable(d.out.left(400)));
    const QJsonArray layerMs = dj["layer_backward_ms"].toArray();
    QCOMPARE(layerMs.size(), 49);  // 48 hidden layers and the output layer
    for (const auto& v : layerMs) QVERIFY(v.toDouble() > 0);
    QVERIFY(dj["backward_compute_ms"].toDouble() > 0 && dj["backward_compute_ms"].toDouble() < measuredTiny);
    // A grid gives one row per combination.
    const Run g = cli({"whatif", file, "--json", "--grid", "dp.bucket_bytes=64,65536,67108864", "--grid",
                       "dp.algorithm=allreduce,ring"});
    QVERIFY2(g.code == 0, qPrintable(g.err));
    QCOMPARE(QJsonDocument::fromJson(g.out.toUtf8()).object()["predictions"].toArray().size(), 6);
  }

  void tuneFindsTheBestBucketSize() {
    QVERIFY2(!bJob_.id.isEmpty(), "needs the job of exportAndApplyBack");
    QCOMPARE(cli({"set", "--job", bJob_.id, "dp.bucket_bytes=64"}).code, 0);
    const QString out = dir_.filePath("tuned.json");
    const Run t = cli({"tune", "--job", bJob_.id, "--knobs", "dp.bucket_bytes", "--values",
                       "dp.bucket_bytes=64,16384,67108864", "--warmup-steps", "3", "--measure-steps", "30",
                       "--budget-steps", "300", "--out", out, "--json"},
                      240000);
    QVERIFY2(t.code == 0, qPrintable(t.out + t.err));
    qInfo("%s", qPrintable(t.err));
    const QJsonObject r = QJsonDocument::fromJson(t.out.toUtf8()).object();
    const QString best = text(r["best"].toObject()["dp.bucket_bytes"]);
    // Under a sanitizer the steps are slow and spread widely (TSan run, 24 Nov: 22-83 ms steps for
    // the tiny bucket), and the tuner's noise-aware comparison may rightly keep the incumbent: then
    // it must say it changed nothing. Finding the best value is checked in the normal build.
    if (!trainscope::test::kSanitizerBuild || best != "64") {
      QVERIFY2(best != "64", qPrintable(t.out));
      QVERIFY(r["changed"].toBool());
      QVERIFY(r["best_step_time_ms"].toDouble() < r["initial_step_time_ms"].toDouble());
    } else {
      QVERIFY(!r["changed"].toBool());
      qInfo("sanitizer build: the tuner kept dp.bucket_bytes=64 (no significant improvement at this noise)");
    }
    QVERIFY(r["steps_used"].toInt() <= 300);
    // The win carries its confidence (issue 39): the verdict names the interval, the comparison
    // has one, and an accepted decision's interval lies above zero; every measured trial shows
    // its prediction beside the measurement.
    const QString verdict = r["verdict"].toString();
    QVERIFY2(verdict.contains("95%"), qPrintable(verdict));
    const QJsonObject win = r["win"].toObject();
    QCOMPARE(win["method"].toString(), QString("welch-t"));
    QCOMPARE(win["gain_ci_ms"].toArray().size(), 2);
    if (r["changed"].toBool()) {
      QVERIFY(win["better"].toBool() && win["gain_ci_ms"].toArray()[0].toDouble() > 0);
      QVERIFY2(verdict.startsWith("best "), qPrintable(verdict));
    } else {
      QVERIFY2(verdict.startsWith("no setting is better than the current one beyond the measured noise"),
               qPrintable(verdict));
    }
    const QJsonArray decisions = r["decisions"].toArray();
    QVERIFY(!decisions.isEmpty());
    for (const auto& d : decisions) {
      const QJsonObject c = d.toObject()["comparison"].toObject();
      QVERIFY(c["baseline_steps"].toInt() >= 2 && c["candidate_steps"].toInt() >= 2);
      if (d.toObject()["accepted"].toBool())
        QVERIFY(c["better"].toBool() && d.toObject()["interleaved"].toBool());
    }
    // The configuration carries the chosen setting's measurements: the step time with its
    // interval, and overlap, exposed communication and bytes from the analysis of its steps.
    const QJsonObject m = readJson(out)["measurements"].toObject();
    for (const char* k : {"step_time_ms", "step_time_stderr_ms", "exposed_comm_ms", "overlap_ratio",
                          "wire_bytes_per_step", "bucket_payload_bytes_max"})
      QVERIFY2(m[k].isDouble(), qPrintable(QString(k) + " in " + QJsonDocument(m).toJson()));
    QCOMPARE(m["step_time_ci95_ms"].toArray().size(), 2);
    QVERIFY(m["step_time_ci95_ms"].toArray()[0].toDouble() <= m["step_time_ms"].toDouble());
    QVERIFY(m["steps"].toInt() >= 2);
    // The job runs the best value, and the configuration names it.
    QVERIFY(sameValue(knobValues(bJob_.id)["dp.bucket_bytes"], best.toDouble()));
    QVERIFY(sameValue(readJson(out)["knobs"].toObject()["dp.bucket_bytes"], best.toDouble()));
    QCOMPARE(readJson(out)["schema"].toString(), QString("trainscope.tuned-config"));
  }

  // An undecided comparison is measured again (TuneOptions::repeats): with a critical value no
  // difference can pass (--z 1e6 in place of Student's t), the clearly faster 64 MiB bucket stays
  // "within the noise", so the tuner measures it and the incumbent once more (--repeats 1),
  // pools, and keeps the incumbent: trials incumbent, candidate, incumbent, candidate, incumbent,
  // and says that nothing was better beyond the noise.
  void undecidedCandidateIsMeasuredAgain() {
    QVERIFY2(!bJob_.id.isEmpty(), "needs the job of exportAndApplyBack");
    QCOMPARE(cli({"set", "--job", bJob_.id, "dp.bucket_bytes=64"}).code, 0);
    const Run t = cli({"tune", "--job", bJob_.id, "--knobs", "dp.bucket_bytes", "--values",
                       "dp.bucket_bytes=64,67108864", "--measure-steps", "6", "--z", "1e6", "--repeats", "1",
                       "--budget-steps", "200", "--no-simulator", "--out", dir_.filePath("undecided.json"), "--json"},
                      240000);
    QVERIFY2(t.code == 0, qPrintable(t.out + t.err));
    QVERIFY2(t.err.contains("undecided") && t.err.contains("measuring both again"), qPrintable(t.err));
    const QJsonObject r = QJsonDocument::fromJson(t.out.toUtf8()).object();
    const QJsonArray trials = r["trials"].toArray();
    QStringList who;
    for (const auto& x : trials) who << (x.toObject()["incumbent"].toBool() ? "inc" : "cand");
    QCOMPARE(who, (QStringList{"inc", "cand", "inc", "cand", "inc"}));
    QVERIFY(!r["changed"].toBool());
    QVERIFY2(r["verdict"].toString().startsWith("no setting is better than the current one beyond the measured noise"),
             qPrintable(r["verdict"].toString()));
    QCOMPARE(r["win"].toObject()["method"].toString(), QString("z"));
    QVERIFY(sameValue(knobValues(bJob_.id)["dp.bucket_bytes"], 64));
  }

 private:
  DemoJob bJob_;
};

QTEST_GUILESS_MAIN(TstTuneLive)
#include "tst_tune_live.moc"
