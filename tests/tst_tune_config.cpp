// Tuned configurations (core/tune/config.h, docs/FORMATS.md, docs/TUNING.md) without a job:
// every export format of two configurations against golden files in tests/data/tune (numbers
// checked by hand in the comments below), the JSON round trip, the schema checks, the settings
// in force at the end of a constructed session (initial metadata, changes, a refused change and
// its restore) with its measurements by hand arithmetic, the what-if model of a constructed
// data-parallel step against a hand computation, Kendall's tau, and trainscope-train --config
// refusing what it cannot apply.
//
// TRAINSCOPE_UPDATE_GOLDEN=1 rewrites the golden files (then read the diff).
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>
#include <cmath>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <set>

#include "cli_test_support.h"
#include "trainscope/core/tune/tuner.h"
#include "trainscope/core/interop/chrome_trace.h"
#include "trainscope/core/analysis/analysis.h"
#include "trainscope/core/tune/compare.h"
#include "trainscope/core/session/tsdb.h"
#include "trainscope/core/tune/config.h"
#include "trainscope/core/sched/schedule.h"
#include "trainscope/core/sched/schedule_sim.h"
#include "trainscope/core/tune/whatif.h"

using namespace trainscope::core;

namespace {

TunedConfig dpConfig() {
  TunedConfig c;
  c.knobs = {{"dp.bucket_bytes", "65536"},
             {"dp.algorithm", "ring"},
             {"dp.compression", "int8"},
             {"dp.topk_ratio", "0.01"}};
  c.job = {"job-dp", 4, "dp", 1, 5};
  c.measured.method = "analysis of run.tsdb";
  c.measured.steps = 40;
  c.measured.fromStep = 60;
  c.measured.toStep = 99;
  c.measured.stepTimeMs = 12.5;
  c.measured.stepTimeP50Ms = 12.25;
  c.measured.exposedCommMs = 1.5;
  c.measured.overlapRatio = 0.75;
  c.measured.wireBytesPerStep = 98304;
  c.measured.bucketPayloadMin = 16640;
  c.measured.bucketPayloadMax = 66560;
  c.source = "run.tsdb";
  c.createdBy = "trainscope-cli export 0.1.0";
  c.createdAt = "2026-11-23T22:00:00Z";
  return c;
}

TunedConfig hybridConfig() {
  TunedConfig c;
  c.knobs = {{"pp.schedule", "interleaved-1f1b"}, {"pp.microbatches", "4"},
             {"pp.virtual_stages", "2"},          {"pp.segments", "1"},
             {"dp.bucket_bytes", "1048576"},      {"dp.algorithm", "allreduce"},
             {"dp.compression", "bf16"},          {"nccl.algorithm", "Tree"},
             {"nccl.protocol", "LL128"},          {"nccl.channels", "4"}};
  c.job = {"job-hy", 4, "hybrid", 2, 8};
  c.measured.method = "tune: 9 trials";
  c.measured.steps = 6;
  c.measured.stepTimeMs = 30;
  c.source = "job job-hy";
  c.createdBy = "trainscope-cli tune 0.1.0";
  c.createdAt = "2026-11-23T22:00:00Z";
  return c;
}

QString readAll(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return {};
  return QString::fromUtf8(f.readAll());
}

struct Builder {
  TraceStore s;
  std::map<RankId, TrackId> main;
  TrackId track(RankId r) {
    if (!main.count(r)) {
      s.setRank({r});
      main[r] = s.addTrack({r, TrackKind::CpuThread, "main", r});
    }
    return main[r];
  }
  void ev(RankId r, EventKind k, const char* name, int64_t a, int64_t b, std::vector<Attr> attrs = {}) {
    s.append(track(r), {a, b, s.intern(name), k}, attrs);
  }
  // Steps 0-2 of 10 ms, then 3-5 of 20 ms, back to back from 0.
  void stepsTenThenTwenty(RankId r) {
    int64_t t = 0;
    for (int step = 0; step < 6; ++step) {
      const int64_t len = (step < 3 ? 10 : 20) * 1'000'000;
      ev(r, EventKind::Step, "step", t, t + len, {Attr::ofInt(AttrKey::Step, step)});
      t += len;
    }
  }
  void knob(RankId r, int64_t t, int64_t step, const char* k, const char* v) {
    ev(r, EventKind::KnobChange, k, t, t,
       {Attr::ofString(AttrKey::Knob, s.intern(k)), Attr::ofString(AttrKey::KnobValue, s.intern(v)),
        Attr::ofInt(AttrKey::Step, step)});
  }
};

constexpr int64_t kMs = 1'000'000;

}  // namespace

class TstTuneConfig : public QObject {
  Q_OBJECT

 private slots:
  // The tuner leaves a trial's periodic steps out (trainscope-train's held-out evaluation every
  // 10 steps took 6.6 ms against 1.4): by hand, the lower median of these six is 1.42, and only
  // 6.6 > 2 x 1.42; 2.8 would stay (not over twice).
  void tunerLeavesPeriodicStepsOut() {
    std::vector<double> kept;
    QCOMPARE(dropPeriodicSteps({1.40, 1.45, 6.60, 1.42, 1.41, 2.80}, kept), 1);
    QCOMPARE(kept, (std::vector<double>{1.40, 1.45, 1.42, 1.41, 2.80}));
    QCOMPARE(dropPeriodicSteps({1.0, 1.0, 1.0}, kept), 0);
    QCOMPARE(kept.size(), size_t{3});
    QCOMPARE(dropPeriodicSteps({}, kept), 0);
    QVERIFY(kept.empty());
  }

  void formatsMatchGoldenFiles_data() {
    QTest::addColumn<QString>("which");
    QTest::addColumn<QString>("format");
    QTest::addColumn<QString>("golden");
    for (const char* f : {"config", "ddp", "deepspeed", "megatron", "nccl-tuner", "train-args"}) {
      const QString ext =
          QString(f) == "config" || QString(f) == "ddp" || QString(f) == "deepspeed" ? "json" : "txt";
      QTest::newRow(qPrintable(QString("dp-") + f)) << "dp" << f << QString("dp.%1.%2").arg(f, ext);
      QTest::newRow(qPrintable(QString("hybrid-") + f))
          << "hybrid" << f << QString("hybrid.%1.%2").arg(f, ext);
    }
  }
  void formatsMatchGoldenFiles() {
    QFETCH(QString, which);
    QFETCH(QString, format);
    QFETCH(QString, golden);
    ExportParams p;
    if (which == "hybrid") {
      p.dtypeBytes = 2;
      p.dtypeName = "bf16";
      p.globalBatch = 64;
    }
    auto text = exportConfig(which == "dp" ? dpConfig() : hybridConfig(), format.toStdString(), p);
    QVERIFY2(text.isOk(), text.status().message().c_str());
    const QString path = QString(TRAINSCOPE_TEST_DATA) + "/tune/" + golden;
    if (qEnvironmentVariableIsSet("TRAINSCOPE_UPDATE_GOLDEN")) {
      QFile f(path);
      QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
      f.write(QByteArray::fromStdString(text.value()));
    }
    QCOMPARE(QString::fromStdString(text.value()), readAll(path));
  }

  // The numbers in the golden files, by hand.
  void translationsByHand() {
    const TunedConfig dp = dpConfig();
    const std::string ddp = exportConfig(dp, "ddp").value();
    QVERIFY(ddp.find("\"bucket_cap_mb\": 0.0625") != std::string::npos);  // 65536 / 2^20 MiB
    QVERIFY(ddp.find("\"NCCL_ALGO\": \"Ring\"") != std::string::npos);
    QVERIFY(ddp.find("\"dp.compression\": \"int8: DDP has built-in hooks for fp16 and bf16 only") !=
            std::string::npos);
    QVERIFY(ddp.find("\"dp.topk_ratio\"") != std::string::npos);  // listed as unsupported
    const std::string ds = exportConfig(dp, "deepspeed").value();
    QVERIFY(ds.find("\"reduce_bucket_size\": 16384") != std::string::npos);  // 65536 B / 4 B (fp32)
    QVERIFY(ds.find("\"allgather_bucket_size\": 16384") != std::string::npos);
    QVERIFY(ds.find("\"overlap_comm\": true") != std::string::npos);
    ExportParams bf16{2, "bf16", 0};
    QVERIFY(exportConfig(dp, "deepspeed", bf16).value().find("\"reduce_bucket_size\": 32768") !=
            std::string::npos);
    const std::string meg = exportConfig(dp, "megatron").value();
    QVERIFY(meg.find("--ddp-bucket-size 16384\n") != std::string::npos);
    QVERIFY(meg.find("--overlap-grad-reduce\n") != std::string::npos);
    QVERIFY(meg.find("# unsupported: dp.compression=int8") != std::string::npos);
    QVERIFY(meg.find("# unsupported: dp.algorithm=ring") != std::string::npos);
    const std::string nccl = exportConfig(dp, "nccl-tuner").value();
    QVERIFY(nccl.find("\nallreduce,0,66560,ring,simple,-1,-1,4,-1,-1\n") != std::string::npos);
    QCOMPARE(QString::fromStdString(exportConfig(dp, "train-args").value()).split('\n').first(),
             QString("--algorithm ring --bucket-bytes 65536 --compression int8 --topk-ratio 0.01"));

    const TunedConfig hy = hybridConfig();
    const std::string hm = exportConfig(hy, "megatron", {2, "bf16", 64}).value();
    QVERIFY(hm.find("--ddp-bucket-size 524288\n") != std::string::npos);  // 1 MiB / 2 B (bf16)
    QVERIFY(hm.find("--pipeline-model-parallel-size 2\n") != std::string::npos);
    QVERIFY(hm.find("--num-layers-per-virtual-pipeline-stage 2\n") != std::string::npos);  // 8 / (2 x 2)
    QVERIFY(hm.find("--micro-batch-size 8\n") != std::string::npos);  // 64 / (2 replicas x 4 micro-batches)
    QVERIFY(hm.find("--grad-reduce-in-bf16\n") != std::string::npos);
    QVERIFY(hm.find("# unsupported: pp.segments") == std::string::npos);  // 1 = off: not a setting
    const std::string hn = exportConfig(hy, "nccl-tuner").value();
    QVERIFY(hn.find("\nallreduce,0,18446744073709551615,tree,ll128,4,-1,4,-1,-1\n") != std::string::npos);
    const std::string hds = exportConfig(hy, "deepspeed", {2, "bf16", 64}).value();
    QVERIFY(hds.find("\"gradient_accumulation_steps\": 4") != std::string::npos);
    QVERIFY(hds.find("\"train_micro_batch_size_per_gpu\": 8") != std::string::npos);
    QVERIFY(hds.find("\"communication_data_type\": \"bf16\"") != std::string::npos);
    QVERIFY(hds.find("\"pp.schedule\": \"interleaved-1f1b: DeepSpeed's pipeline engine runs 1f1b only\"") !=
            std::string::npos);
    // Every knob appears in every format: used, or named as unsupported.
    for (const TunedConfig& c : {dp, hy})
      for (const char* f : {"ddp", "deepspeed", "megatron", "nccl-tuner", "train-args"}) {
        const std::string t = exportConfig(c, f, {2, "bf16", 64}).value();
        for (const auto& [k, v] : c.knobs) {
          if (k == "pp.segments" || (k == "pp.virtual_stages" && v == "1")) continue;
          const bool named = t.find(k) != std::string::npos;
          const bool used = t.find("unsupported") == std::string::npos || !named;
          QVERIFY2(named || used, qPrintable(QString("%1: %2").arg(f, k.c_str())));
        }
      }
  }

  void jsonRoundTrip() {
    for (const TunedConfig& c : {dpConfig(), hybridConfig()}) {
      auto back = configFromJson(configToJson(c), "x.json");
      QVERIFY2(back.isOk(), back.status().message().c_str());
      QCOMPARE(back->knobs, c.knobs);
      QCOMPARE(back->job.mode, c.job.mode);
      QCOMPARE(back->job.worldSize, c.job.worldSize);
      QCOMPARE(back->measured.stepTimeMs, c.measured.stepTimeMs);
      QCOMPARE(back->measured.bucketPayloadMax, c.measured.bucketPayloadMax);
      QCOMPARE(configToJson(back.value()), configToJson(c));
    }
    QVERIFY(!configFromJson("{\"knobs\": {}}", "a.json").isOk());
    QVERIFY(!configFromJson("[1]", "a.json").isOk());
    auto v2 = configFromJson("{\"schema\":\"trainscope.tuned-config\",\"schema_version\":2,\"knobs\":{}}",
                             "b.json");
    QVERIFY(!v2.isOk());
    QVERIFY(v2.status().message().find("schema_version") != std::string::npos);
    auto bad = configFromJson(
        "{\"schema\":\"trainscope.tuned-config\",\"schema_version\":1,\"knobs\":{\"a\":[1]}}", "c.json");
    QVERIFY(!bad.isOk());
    QVERIFY(!exportConfig(dpConfig(), "yaml").isOk());
  }

  // Found by fuzz_config: a knob text that only looks like a number ("0x0" was written as 0.0,
  // read back as "0", then written as 0) changed on every save. Now only a number's own text
  // becomes a JSON number; knob texts survive a round trip, and a second save is the same file.
  void knobTextsSurviveRoundTrips() {
    TunedConfig c;
    c.knobs = {{"a", "0x0"}, {"b", " 5"}, {"c", "1e5"}, {"d", "1048576"}, {"e", "0.01"}, {"f", "1.0"},
               {"g", "-0"}, {"h", "ring"}, {"i", "99999999999999999999"}};
    const std::string once = configToJson(c);
    auto back = configFromJson(once, "once.json");
    QVERIFY2(back.isOk(), back.status().message().c_str());
    QCOMPARE(back->knobs, c.knobs);
    QCOMPARE(configToJson(back.value()), once);
    const auto doc = nlohmann::json::parse(once);
    QVERIFY(doc["knobs"]["d"].is_number_integer());
    QVERIFY(doc["knobs"]["e"].is_number_float());
    QVERIFY(doc["knobs"]["a"].is_string());
    QVERIFY(doc["knobs"]["i"].is_string());
    // A float where an integer belongs is read as one when it fits, else as the default.
    auto big = configFromJson(R"({"schema":"trainscope.tuned-config","schema_version":1,"knobs":{},
      "job":{"world_size":1e300,"pp_stages":2.0}})", "big.json");
    QVERIFY2(big.isOk(), big.status().message().c_str());
    QCOMPARE(big->job.worldSize, 0);
    QCOMPARE(big->job.ppStages, 2);
  }

  // Found by fuzz_config: values read from a file that the translations divide or add by.
  // pp.virtual_stages 0 with interleaved-1f1b divided by zero in the Megatron export; a bucket
  // of INT64_MAX bytes overflowed while rounding up to elements.
  void translationsSurviveHostileCounts() {
    const std::string text = R"({"schema":"trainscope.tuned-config","schema_version":1,
      "knobs":{"pp.schedule":"interleaved-1f1b","pp.virtual_stages":0,"dp.bucket_bytes":9223372036854775807},
      "job":{"job_id":"j","world_size":4,"mode":"hybrid","pp_stages":2,"model_layers":8}})";
    auto c = configFromJson(text, "hostile.json");
    QVERIFY2(c.isOk(), c.status().message().c_str());
    for (std::string_view format : kConfigFormats) {
      auto out = exportConfig(c.value(), format);
      QVERIFY2(out.isOk(), std::string(format).c_str());
    }
    auto megatron = exportConfig(c.value(), "megatron");
    QVERIFY(megatron->find("--num-layers-per-virtual-pipeline-stage = layers / (2 stages x 0 virtual stages)") !=
            std::string::npos);
    QVERIFY(megatron->find("--ddp-bucket-size 2305843009213693952") != std::string::npos);  // ceil(2^63-1 / 4)
    c.value().knobs["pp.virtual_stages"] = "-3";
    QVERIFY(exportConfig(c.value(), "megatron").isOk());
  }

  // Settings at the end and measurements: 2 ranks, 6 steps of 10 ms (steps 0-2) then 20 ms
  // (3-5) after dp.bucket_bytes changes at step 3; a refused dp.algorithm change and its
  // restore at step 4 leave ring.
  void settingsAtTheEndOfASession() {
    Builder b;
    b.s.metadata()["knob.dp.bucket_bytes"] = "65536";
    b.s.metadata()["knob.dp.algorithm"] = "ring";
    b.s.metadata()["world_size"] = "2";
    b.s.metadata()["job_id"] = "j1";
    for (RankId r = 0; r < 2; ++r) {
      b.stepsTenThenTwenty(r);
      b.knob(r, 30 * kMs, 3, "dp.bucket_bytes", "4096");
      b.knob(r, 50 * kMs, 4, "dp.algorithm", "decentralized");
      b.knob(r, 50 * kMs + 1, 4, "dp.algorithm", "ring");
    }
    auto c = configFromSession(b.s, "s.tsdb");
    QVERIFY2(c.isOk(), c.status().message().c_str());
    QCOMPARE(c->knobs.at("dp.bucket_bytes"), std::string("4096"));
    QCOMPARE(c->knobs.at("dp.algorithm"), std::string("ring"));
    QCOMPARE(c->job.worldSize, 2);
    QCOMPARE(c->job.mode, std::string("dp"));
    QCOMPARE(c->job.jobId, std::string("j1"));
    // The last change that changed a value is at step 3: steps 3, 4, 5, each 20 ms.
    QCOMPARE(c->measured.fromStep, int64_t{3});
    QCOMPARE(c->measured.toStep, int64_t{5});
    QCOMPARE(c->measured.steps, 3);
    QCOMPARE(c->measured.stepTimeMs, 20.0);
    QVERIFY(!configFromSession(*std::make_unique<TraceStore>(), "empty.tsdb").isOk());
  }

  // A recording started after a change: its metadata already holds the new value, and the
  // flight recorder's history holds the steps before the change. The change still ends the
  // old setting's steps (before Nov 24 they were measured with the new value's: 15 ms here).
  void measuredWindowStartsAtAChangeTheMetadataAlreadyHolds() {
    Builder b;
    b.s.metadata()["knob.dp.bucket_bytes"] = "4096";
    b.s.metadata()["world_size"] = "2";
    for (RankId r = 0; r < 2; ++r) {
      b.stepsTenThenTwenty(r);
      b.knob(r, 30 * kMs, 3, "dp.bucket_bytes", "4096");
    }
    auto c = configFromSession(b.s, "s.tsdb");
    QVERIFY2(c.isOk(), c.status().message().c_str());
    QCOMPARE(c->measured.fromStep, int64_t{3});
    QCOMPARE(c->measured.stepTimeMs, 20.0);
  }

  // The simulated makespan of 2-stage 1F1B with mb micro-batches, F ops of f ms and B ops of b.
  static double makespan1f1b(int mb, double f, double b) {
    ScheduleParams sp;
    sp.kind = ScheduleKind::OneFOneB;
    sp.stages = 2;
    sp.microBatches = mb;
    auto sched = generateSchedule(sp);
    auto sim = simulateSchedule(*sched, OpDurations{}, [&](int, const PipeOp& op) {
      return op.kind == OpKind::Forward ? f : b;
    });
    return sim->makespan;
  }

  // A Chrome trace document (a test recording with events added) written to a file, imported,
  // and its what-if model built (the model keeps no reference to the store).
  static Result<WhatIfModel> modelOfDocument(const nlohmann::json& doc) {
    QTemporaryDir dir;
    const std::string path = dir.filePath("trace.json").toStdString();
    std::ofstream(path) << doc.dump();
    auto store = importChromeTraceFile(path);
    if (!store) return store.status();
    return WhatIfModel::fromSession(store.value());
  }

  // The constructed data-parallel session of whatIfByHand (world 2, rank 0's events, 3 layers,
  // 4 steps), with layer 0's W and everything after it `late` ms later (whatIfBackwardCostPerBucket:
  // 1 ms while bucket 1 reduces).
  static void buildHandDpSession(Builder& b, double late, double bucket1End = 8, double fwdEnd = 3) {
    b.s.metadata()["knob.dp.bucket_bytes"] = "1";
    b.s.metadata()["knob.dp.algorithm"] = "allreduce";
    b.s.metadata()["knob.dp.compression"] = "none";
    b.s.metadata()["world_size"] = "2";
    const double len = 12 + late;
    for (int step = 0; step < 4; ++step) {
      const int64_t o = step * static_cast<int64_t>(len * kMs);
      auto at = [&](double ms) { return o + static_cast<int64_t>(ms * kMs); };
      b.ev(0, EventKind::Step, "step", at(0), at(len), {Attr::ofInt(AttrKey::Step, step)});
      b.ev(0, EventKind::Phase, "forward", at(1), at(fwdEnd));
      b.ev(0, EventKind::Phase, "backward", at(3), at(9 + late));
      b.ev(0, EventKind::Kernel, "B linear", at(3), at(4), {Attr::ofInt(AttrKey::Layer, 2)});
      b.ev(0, EventKind::Kernel, "W linear", at(4), at(5), {Attr::ofInt(AttrKey::Layer, 2)});
      b.ev(0, EventKind::Kernel, "B linear", at(5), at(6), {Attr::ofInt(AttrKey::Layer, 1)});
      b.ev(0, EventKind::Kernel, "W linear", at(6), at(7), {Attr::ofInt(AttrKey::Layer, 1)});
      b.ev(0, EventKind::Kernel, "W linear", at(7 + late), at(9 + late), {Attr::ofInt(AttrKey::Layer, 0)});
      const double ready[3] = {5, 7, 9 + late}, end[3] = {6, bucket1End, 10.5 + late};
      for (int k = 0; k < 3; ++k) {
        b.ev(0, EventKind::Bucket, "bucket", at(ready[k]), at(end[k]),
             {Attr::ofInt(AttrKey::Bucket, k), Attr::ofInt(AttrKey::Bytes, 1000)});
        b.ev(0, EventKind::Collective, "bucket allreduce", at(ready[k]), at(end[k]),
             {Attr::ofInt(AttrKey::Bucket, k), Attr::ofInt(AttrKey::Bytes, 1000),
              Attr::ofString(AttrKey::Algorithm, b.s.intern("allreduce"))});
      }
      b.ev(0, EventKind::Range, "wait gradients", at(9 + late), at(10.5 + late));
      b.ev(0, EventKind::Phase, "optimizer", at(10.5 + late), at(11.5 + late));
    }
  }

  // trainscope-train's calibration as what-if reads it: a "calibrate" collective (latency: its
  // span) and a "calibrate work" collective followed by the counter with the work in ms.
  static void addLatency(Builder& b, const char* algo, int64_t bytes, double ms) {
    b.ev(0, EventKind::Collective, "calibrate", 100'000, 100'000 + static_cast<int64_t>(ms * kMs),
         {Attr::ofString(AttrKey::Algorithm, b.s.intern(algo)), Attr::ofInt(AttrKey::Bytes, bytes)});
  }
  static void addWork(Builder& b, int64_t& t, const char* algo, int64_t bytes, double ms) {
    b.ev(0, EventKind::Collective, "calibrate work", t, t + 50'000,
         {Attr::ofString(AttrKey::Algorithm, b.s.intern(algo)), Attr::ofInt(AttrKey::Bytes, bytes)});
    b.ev(0, EventKind::Counter, "calibrate work", t + 51'000, t + 51'000, {Attr::ofDouble(AttrKey::Value, ms)});
    t += 100'000;
  }

  // The calibrated path by hand: whatIfByHand's session with bucket 1 reduced until 9.5 (past the
  // backward's end at 9: one early bucket per step still reducing then) and trainscope-train's
  // calibration collectives at 1000 and 3000 payload bytes (one of each; the fit goes through
  // both): allreduce 0.5 / 0.7 ms (0.4 + 1e-4 per byte), ring 0.3 / 0.4 (0.25 + 5e-5),
  // scatter-reduce+fp16 (allreduce with a codec) 0.9 / 1.5 (0.6 + 3e-4). Measured: step 12,
  // rest 1.5, forward 2, backward 6 (compute only: kappa 0), tail 1.5 = the last reduction's own
  // time (min(1.5, mean reduction (1 + 2.5 + 1.5) / 3)) and no queue; optimizer 1. Each cost
  // moves by the new pair's calibrated time at the new size less the window's at its size.
  void whatIfCalibratedDifferencesByHand() {
    Builder b;
    buildHandDpSession(b, 0, 9.5);
    auto cal = [&](const char* algo, int64_t bytes, double ms) { addLatency(b, algo, bytes, ms); };
    cal("allreduce", 1000, 0.5), cal("allreduce", 3000, 0.7);
    cal("ring", 1000, 0.3), cal("ring", 3000, 0.4);
    cal("scatter-reduce+fp16", 1000, 0.9), cal("scatter-reduce+fp16", 3000, 1.5);
    auto m = WhatIfModel::fromSession(b.s);
    QVERIFY2(m.isOk(), m.status().message().c_str());
    const auto d = nlohmann::json::parse(m->describeJson());
    QCOMPARE(d["tail_buckets_per_step"].get<double>(), 1.0);
    QVERIFY(std::abs(d["tail_last_reduction_ms"].get<double>() - 1.5) < 1e-9);
    QVERIFY(std::abs(d["tail_queue_ms"].get<double>()) < 1e-9);
    auto replay = m->predict({});
    QVERIFY(replay.isOk());
    QVERIFY(std::abs(replay->stepTimeMs - 12.0) < 1e-6);
    // ring: 0.3 - 0.5 = -0.2 per bucket: kappa max(0, 0 - 0.2) = 0; the queue max(0, 0 + 1 x
    // -0.2) = 0; the last reduction 1.5 - 0.2 = 1.3. Step 1.5 + 2 + 6 + 1.3 + 1 = 11.8.
    auto ring = m->predict({{"dp.algorithm", "ring"}});
    QVERIFY(ring.isOk());
    QVERIFY2(std::abs(ring->stepTimeMs - 11.8) < 1e-6, std::to_string(ring->stepTimeMs).c_str());
    QVERIFY(std::abs(ring->exposedCommMs - 1.3) < 1e-6);
    // fp16 on allreduce: 0.9 - 0.5 = +0.4 per bucket: kappa 0.4 after layers 2 and 1 (backward
    // 6.8), the queue (0 + 1 x 0.4) x 2 / 2 = 0.4, the last reduction 1.5 + 0.4 = 1.9: tail 2.3.
    // Step 1.5 + 2 + 6.8 + 2.3 + 1 = 13.6.
    auto fp16 = m->predict({{"dp.compression", "fp16"}});
    QVERIFY(fp16.isOk());
    QVERIFY2(std::abs(fp16->stepTimeMs - 13.6) < 1e-6, std::to_string(fp16->stepTimeMs).c_str());
    QVERIFY(std::abs(fp16->exposedCommMs - 2.3) < 1e-6);
    // One bucket of 3000 bytes: no early bucket (no kappa, no queue); the last reduction
    // 1.5 + 0.7 - 0.5 = 1.7. Step 1.5 + 2 + 6 + 1.7 + 1 = 12.2.
    auto big = m->predict({{"dp.bucket_bytes", "100000"}});
    QVERIFY(big.isOk());
    QCOMPARE(big->buckets, 1);
    QVERIFY2(std::abs(big->stepTimeMs - 12.2) < 1e-6, std::to_string(big->stepTimeMs).c_str());
    // A third calibrated size for ring, 2000 bytes at 0.32: linear between neighbouring sizes,
    // not on the line through the smallest and largest. One bucket of 3000 bytes on ring: the
    // last reduction 1.5 + 0.4 - 0.5 = 1.4 (step 11.9), as before (3000 is calibrated); two
    // buckets at bucket_bytes 2000 (layers 2+1, then layer 0: 2000 and 1000 bytes): the early
    // bucket's kappa max(0, 0 + 0.32 - 0.5) = 0, the queue max(0, 0 + 1 x (0.32 - 0.5)) = 0,
    // the last (1000 bytes) 1.5 + 0.3 - 0.5 = 1.3: step 1.5 + 2 + 6 + 1.3 + 1 = 11.8 (a third
    // size leaves the calibrated ends where they were; the next test tells the two rules apart).
    cal("ring", 2000, 0.32);
    auto m3 = WhatIfModel::fromSession(b.s);
    QVERIFY(m3.isOk());
    auto ringBig = m3->predict({{"dp.algorithm", "ring"}, {"dp.bucket_bytes", "100000"}});
    QVERIFY(ringBig.isOk());
    QVERIFY2(std::abs(ringBig->stepTimeMs - 11.9) < 1e-6, std::to_string(ringBig->stepTimeMs).c_str());
    auto ringTwo = m3->predict({{"dp.algorithm", "ring"}, {"dp.bucket_bytes", "2000"}});
    QVERIFY(ringTwo.isOk());
    QCOMPARE(ringTwo->buckets, 2);
    QVERIFY2(std::abs(ringTwo->stepTimeMs - 11.8) < 1e-6, std::to_string(ringTwo->stepTimeMs).c_str());
  }

  // The calibrated time between calibrated sizes is linear between the two around it: work
  // calibrated for allreduce at 1000 / 2000 / 3000 bytes as 0.2 / 0.8 / 0.9 ms (a line through
  // the ends would say 0.55 at 2000) and ring at 1000 / 3000 as 0.2 / 0.3. whatIfBackwardCost-
  // PerBucket's session (allreduce, kappa 0.5 over 2 early buckets of 1000 bytes) at
  // bucket_bytes 2000: one early bucket of 2000 bytes, kappa 0.5 + 0.8 - 0.2 = 1.1 (the line:
  // 0.85). Latency (both algorithms 0.5 / 0.7 at 1000 / 3000: allreduce itself, no change): the
  // queue (1.5 - c) / 2 x 1 early bucket, the last bucket (1000 bytes) c. Step 1.5 + 2 + 6 +
  // 1.1 + (1.5 - c) / 2 + c + 1.
  void whatIfCalibrationIsLinearBetweenNeighbouringSizes() {
    Builder b;
    buildHandDpSession(b, 1);
    addLatency(b, "allreduce", 1000, 0.5), addLatency(b, "allreduce", 3000, 0.7);
    int64_t t = 200'000;
    auto work = [&](int64_t bytes, double ms) { addWork(b, t, "allreduce", bytes, ms); };
    work(1000, 0.2), work(2000, 0.8), work(3000, 0.9);
    auto m = WhatIfModel::fromSession(b.s);
    QVERIFY2(m.isOk(), m.status().message().c_str());
    auto two = m->predict({{"dp.bucket_bytes", "2000"}});
    QVERIFY(two.isOk());
    QCOMPARE(two->buckets, 2);
    const double c = 3.5 / 3;
    const double want = 1.5 + 2 + 6 + 1.1 + (1.5 - c) / 2 + c + 1;
    QVERIFY2(std::abs(two->stepTimeMs - want) < 1e-6,
             (std::to_string(two->stepTimeMs) + " against " + std::to_string(want)).c_str());
  }

  // A codec's work beyond the compressed reductions' largest calibrated size: the bend of its own
  // time ("calibrate codec", taken at a larger size too) away from the slope it had there.
  // whatIfCalibratedDifferencesByHand's session (allreduce, the last reduction's own time 1.5
  // at 1000 bytes); calibrated: allreduce 0.5 / 0.6 and scatter-reduce+fp16 0.9 / 1.2 ms at
  // 1000 / 2000 bytes; fp16 alone 0.1 / 0.2 / 0.6 ms at 1000 / 2000 / 4000. One fp16 bucket of
  // 3000 bytes: its reduction's line at 3000 says 1.5, the last reduction 1.5 + 1.5 - 0.5 = 2.5
  // (step 1.5 + 2 + 6 + 2.5 + 1 = 13.0); the codec alone at 3000 is 0.4, its line through 1000
  // and 2000 says 0.3: bend 0.1, step 13.1. Without the third codec size, 13.0.
  void whatIfCodecBendBeyondCalibratedSizes() {
    Builder b;
    buildHandDpSession(b, 0, 9.5);
    addLatency(b, "allreduce", 1000, 0.5), addLatency(b, "allreduce", 2000, 0.6);
    addLatency(b, "scatter-reduce+fp16", 1000, 0.9), addLatency(b, "scatter-reduce+fp16", 2000, 1.2);
    addLatency(b, "scatter-reduce+int8", 1000, 0.9), addLatency(b, "scatter-reduce+int8", 3000, 1.5);
    int64_t t = 300'000;
    auto codec = [&](const char* name, int64_t bytes, double ms) {
      b.ev(0, EventKind::Collective, "calibrate codec", t, t + static_cast<int64_t>(ms * kMs),
           {Attr::ofString(AttrKey::Algorithm, b.s.intern(name)), Attr::ofInt(AttrKey::Bytes, bytes)});
      t += 1'000'000;
    };
    codec("fp16", 1000, 0.1), codec("fp16", 2000, 0.2);
    codec("int8", 1000, 0.1), codec("int8", 2000, 0.12), codec("int8", 3000, 0.3);
    auto two = WhatIfModel::fromSession(b.s);
    QVERIFY2(two.isOk(), two.status().message().c_str());
    const std::map<std::string, std::string> fp16Big = {{"dp.compression", "fp16"}, {"dp.bucket_bytes", "100000"}};
    auto before = two->predict(fp16Big);
    QVERIFY(before.isOk());
    QCOMPARE(before->buckets, 1);
    QVERIFY2(std::abs(before->stepTimeMs - 13.0) < 1e-6, std::to_string(before->stepTimeMs).c_str());
    codec("fp16", 4000, 0.6);
    auto three = WhatIfModel::fromSession(b.s);
    QVERIFY(three.isOk());
    auto bent = three->predict(fp16Big);
    QVERIFY(bent.isOk());
    QVERIFY2(std::abs(bent->stepTimeMs - 13.1) < 1e-6, std::to_string(bent->stepTimeMs).c_str());
    // int8's reductions calibrated at 1000 and 3000 (0.9 / 1.5), the codec alone at 1000 / 2000 /
    // 3000 (0.1 / 0.12 / 0.3). One bucket of 3000 bytes: a calibrated size, no bend (13.0). At
    // bucket_bytes 2000 (buckets of 2000 and 1000 bytes): the reduction's line says 1.2 at 2000,
    // the codec lies 0.2 - 0.12 = 0.08 below its line there: 1.12. The early bucket's kappa
    // 0 + 1.12 - 0.5 = 0.62 (backward 6.62), the queue (0 + 1 x 0.62) x 1 / 2 = 0.31, the last
    // reduction (1000 bytes) 1.5 + 0.9 - 0.5 = 1.9: step 1.5 + 2 + 6.62 + 0.31 + 1.9 + 1 = 13.33
    // (on the line, 13.45).
    auto int8 = three->predict({{"dp.compression", "int8"}, {"dp.bucket_bytes", "100000"}});
    QVERIFY(int8.isOk());
    QVERIFY2(std::abs(int8->stepTimeMs - 13.0) < 1e-6, std::to_string(int8->stepTimeMs).c_str());
    auto int8Two = three->predict({{"dp.compression", "int8"}, {"dp.bucket_bytes", "2000"}});
    QVERIFY(int8Two.isOk());
    QCOMPARE(int8Two->buckets, 2);
    QVERIFY2(std::abs(int8Two->stepTimeMs - 13.33) < 1e-6, std::to_string(int8Two->stepTimeMs).c_str());
    // Within the calibrated sizes nothing bends: fp16 with a bucket per layer (1000 bytes) as
    // without the third size.
    auto small2 = two->predict({{"dp.compression", "fp16"}}), small3 = three->predict({{"dp.compression", "fp16"}});
    QVERIFY(small2.isOk() && small3.isOk());
    QVERIFY(std::abs(small2->stepTimeMs - small3->stepTimeMs) < 1e-9);
  }

  // A constructed data-parallel step (world 2, rank 0's events, 3 layers) and the model's
  // prediction by hand. Per step (ms from the step start): forward [1, 3]; backward [3, 9]:
  // layer 2 B [3,4] W [4,5], layer 1 B [5,6] W [6,7], layer 0 W [7,9]; at the measured 1-byte
  // bucket size one bucket per layer, 1000 payload bytes each (250 floats; allreduce over 2
  // ranks puts 2(2-1)/2 x 4 x 250 = 1000 bytes on the wire), ready at 5, 7, 9, reduced
  // [5,6], [7,8], [9,10.5]; wait gradients [9, 10.5]; optimizer [10.5, 11.5]; step [0, 12].
  void whatIfByHand() {
    Builder b;
    buildHandDpSession(b, 0);
    auto m = WhatIfModel::fromSession(b.s);
    QVERIFY2(m.isOk(), m.status().message().c_str());
    // Measured: step 12, exposed 10.5 - 9 = 1.5, overlap |comm in [3, 9]| / |comm| = 2 / 3.5.
    QCOMPARE(m->measured().stepTimeMs, 12.0);
    QVERIFY(std::abs(m->measured().exposedCommMs - 1.5) < 1e-9);
    QVERIFY(std::abs(m->measured().overlapRatio - 2 / 3.5) < 1e-9);
    QCOMPARE(m->measured().bytes, 3000.0);
    // Layers take 2 ms each (no kernel ever ran without communication, so no slowdown is
    // measurable: 0); the backward (6) is all compute: no gaps, so the cost per bucket reduced
    // during it is (6 - 6) / 2 early buckets = 0. Reductions 1, 1, 1.5 ms at 1000 bytes each
    // (one size: split by the 64 KiB prior; each c = 3.5 / 3 at 1000 bytes). The tail 1.5 =
    // the last reduction's own time (no calibration: the mean reduction, c) + a queue of
    // 1.5 - c over 2 early buckets. Replay: buckets from the backward's start [2, 2 + c],
    // [4, 4 + c], [6, 7.5]; exposed 1.5; step = rest (1 + 0.5) + forward 2 + backward 6 +
    // exposed 1.5 + optimizer 1 = 12, as measured.
    const double c = 3.5 / 3;
    auto replay = m->predict({});
    QVERIFY(replay.isOk());
    QCOMPARE(replay->buckets, 3);
    QVERIFY(std::abs(replay->stepTimeMs - 12.0) < 1e-6);
    QVERIFY(std::abs(replay->exposedCommMs - 1.5) < 1e-6);
    QVERIFY(std::abs(replay->overlapRatio - 2 * c / (2 * c + 1.5)) < 1e-6);
    QVERIFY(std::abs(replay->bytes - 3000) < 1e-6);
    // One big bucket: 3000 payload bytes after the backward, no queue (no early bucket), its
    // own time c scaled by the prior: c (65536 + 3000) / (65536 + 1000); all exposed.
    const double own = c * (65536.0 + 3000) / (65536.0 + 1000);
    auto big = m->predict({{"dp.bucket_bytes", "100000"}});
    QVERIFY(big.isOk());
    QCOMPARE(big->buckets, 1);
    QVERIFY(std::abs(big->stepTimeMs - (10.5 + own)) < 1e-6);
    QCOMPARE(big->overlapRatio, 0.0);
    // int8 never ran: extrapolated (the payload formula: 2 (2-1) x (4 + 375) bytes per bucket
    // of 750 floats split in 2 chunks of 375 = 758 bytes) and flagged.
    auto int8 = m->predict({{"dp.bucket_bytes", "100000"}, {"dp.compression", "int8"}});
    QVERIFY(int8.isOk());
    QVERIFY(int8->extrapolated);
    QVERIFY(std::abs(int8->bytes - 758) < 1e-6);
    QVERIFY(!m->predict({{"pp.schedule", "1f1b"}}).isOk());  // not a knob of this session

    // The ghost timeline of the replay, by hand (ms from the step start): the forward after the
    // 1 ms preamble [1, 3]; B+W per layer from the backward's start at 3 (no gaps between
    // kernels in this session): layer 2 [3, 5], 1 [5, 7], 0 [7, 9]; each bucket from its
    // layer's end for 3.5/3 ms: [5, 6.1667], [7, 8.1667], [9, 10.1667]; the optimizer after the
    // exposed part (no wait overhead): [10.5, 11.5]; the last bucket ends with the tail, 10.5.
    auto find = [](const std::vector<StepOp>& ops, const std::string& label) -> const StepOp* {
      for (const auto& op : ops)
        if (op.label == label) return &op;
      return nullptr;
    };
    auto at = [&](const std::vector<StepOp>& ops, const std::string& label, double a, double e) {
      const StepOp* op = find(ops, label);
      return op && std::abs(op->startMs - a) < 1e-6 && std::abs(op->endMs - e) < 1e-6;
    };
    QCOMPARE(replay->timeline.size(), size_t{8});
    QVERIFY(at(replay->timeline, "forward", 1, 3));
    QVERIFY(at(replay->timeline, "B+W 2", 3, 5) && at(replay->timeline, "B+W 1", 5, 7) &&
            at(replay->timeline, "B+W 0", 7, 9));
    QVERIFY(at(replay->timeline, "bucket 0", 5, 5 + c) && at(replay->timeline, "bucket 1", 7, 7 + c) &&
            at(replay->timeline, "bucket 2", 9, 10.5));
    QVERIFY(at(replay->timeline, "optimizer", 10.5, 11.5));
    QCOMPARE(find(replay->timeline, "bucket 0")->lane, std::string("gradient sync"));
    QVERIFY(find(replay->timeline, "bucket 0")->kind == StepOp::Kind::Communication);
    // The measured step drawn with the same lanes: every step here is the same, so any of them.
    const auto& ms = m->measuredTimeline();
    QCOMPARE(ms.size(), size_t{10});  // forward, 5 kernels, 3 buckets, optimizer
    QVERIFY(m->measuredTimelineStep() >= 0 && m->measuredTimelineStep() <= 3);
    QVERIFY(at(ms, "forward", 1, 3) && at(ms, "B 2", 3, 4) && at(ms, "W 0", 7, 9));
    QVERIFY(at(ms, "bucket 2", 9, 10.5) && at(ms, "optimizer", 10.5, 11.5));
    // One big bucket: its reduction starts when the backward ends, at 9.
    QVERIFY(at(big->timeline, "bucket 0", 9, 9 + own));
  }

  // The time between the forward's end and the backward's start (trainscope-train zeroes the
  // gradients and prepares the step's buckets there) is part of the step: whatIfByHand's session
  // with the forward ending at 2.75, 0.25 ms before the backward starts at 3. Rest = 1 before +
  // 0.25 between + 0.5 after = 1.75, forward 1.75: the replay is the measured 12 (it was 11.75
  // when the rest left the gap out), one big bucket 10.5 + own as in whatIfByHand, and the ghost
  // draws the forward [1, 2.75] and the backward from 3.
  void whatIfRestIncludesForwardToBackward() {
    Builder b;
    buildHandDpSession(b, 0, 8, 2.75);
    auto m = WhatIfModel::fromSession(b.s);
    QVERIFY2(m.isOk(), m.status().message().c_str());
    QCOMPARE(m->measured().stepTimeMs, 12.0);
    auto replay = m->predict({});
    QVERIFY(replay.isOk());
    QVERIFY2(std::abs(replay->stepTimeMs - 12.0) < 1e-6, std::to_string(replay->stepTimeMs).c_str());
    const double c = 3.5 / 3, own = c * (65536.0 + 3000) / (65536.0 + 1000);
    auto big = m->predict({{"dp.bucket_bytes", "100000"}});
    QVERIFY(big.isOk());
    QVERIFY(std::abs(big->stepTimeMs - (10.5 + own)) < 1e-6);
    auto find = [&](const std::string& label) -> const StepOp* {
      for (const auto& op : replay->timeline)
        if (op.label == label) return &op;
      return nullptr;
    };
    QVERIFY(find("forward") && std::abs(find("forward")->startMs - 1) < 1e-6 &&
            std::abs(find("forward")->endMs - 2.75) < 1e-6);
    QVERIFY(find("B+W 2") && std::abs(find("B+W 2")->startMs - 3) < 1e-6);
    QVERIFY(std::abs(nlohmann::json::parse(m->describeJson())["forward_to_backward_ms"].get<double>() - 0.25) < 1e-9);
  }

  // The backward's cost per bucket (kappa) by hand: the session of whatIfByHand with layer 0's
  // W one ms later ([8, 10]) while bucket 1 reduces [7, 8]: backward [3, 10] = 7 ms, compute 6,
  // no idle gap, so kappa = (7 - 6) / 2 early buckets = 0.5 ms. Replay: layer 2 [0, 2], bucket
  // 0 starts at 2, +0.5; layer 1 [2.5, 4.5], bucket 1, +0.5; layer 0 [5, 7]: backward 7 as
  // measured. One big bucket has no early bucket: backward 6, a ms less than the replay's.
  void whatIfBackwardCostPerBucket() {
    Builder b;
    buildHandDpSession(b, 1);
    auto m = WhatIfModel::fromSession(b.s);
    QVERIFY2(m.isOk(), m.status().message().c_str());
    auto replay = m->predict({});
    QVERIFY(replay.isOk());
    QVERIFY(std::abs(replay->stepTimeMs - 13.0) < 1e-6);  // 1.5 + 2 + 7 + 1.5 + 1
    auto big = m->predict({{"dp.bucket_bytes", "100000"}});
    QVERIFY(big.isOk());
    const double c = 3.5 / 3, own = c * (65536.0 + 3000) / (65536.0 + 1000);
    QVERIFY(std::abs(big->stepTimeMs - (1.5 + 2 + 6 + own + 1)) < 1e-6);
    // Two layers per bucket (2000 bytes each at bucket_bytes 2000: layers 2+1, then 0): one
    // early bucket of twice the window's payload, kappa x (65536 + 2000) / (65536 + 1000).
    auto two = m->predict({{"dp.bucket_bytes", "2000"}});
    QVERIFY(two.isOk());
    QCOMPARE(two->buckets, 2);
    const double kappa2 = 0.5 * (65536.0 + 2000) / (65536.0 + 1000);
    const double queue = (1.5 - c) * 1 / 2;  // the window's queue per early bucket, one early bucket
    const double own1 = c;                   // the last bucket (layer 0) has the window's size
    QVERIFY2(std::abs(two->stepTimeMs - (1.5 + 2 + 6 + kappa2 + queue + own1 + 1)) < 1e-6,
             std::to_string(two->stepTimeMs).c_str());
  }

  // The backward's compute from trainscope-train's calibration ("calibrate dp B|W" kernels, each
  // pass with no reduction in flight), by hand: whatIfBackwardCostPerBucket's session (backward
  // [3, 10]: B2 [3, 4], W2 [4, 5], B1 [5, 6] while bucket 0 reduces [5, 6], W1 [6, 7], W0 [8, 10];
  // reductions [5, 6], [7, 8], [10, 11.5]) and three calibration passes before it, B2, W2, W1
  // 0.8 ms, B1 0.4, W0 1.6 (the median of 0.7, 0.8 and 0.9, and so on). B1 never ran alone in the
  // window, so the window cannot tell its slowdown (0) and takes 6 ms of compute; the
  // calibration says B1 is half the others. Its level: the kernels that ran alone (B2, W2, W1, W0:
  // 5 ms) over their calibration (4 ms) = 1.25, so the compute is 1.25 x 4.4 = 5.5 and kappa
  // (7 - 5.5) / 2 = 0.75. The replay stays the measured 13; one big bucket (no early bucket)
  // has a backward of 5.5, half a ms below the window's estimate. A calibration that misses a
  // layer's weight gradient, or runs after the window, is not used.
  void whatIfBackwardComputeFromCalibration() {
    auto calibrate = [](Builder& b, int64_t t0, bool withW0) {
      const double ms[5] = {0.8, 0.8, 0.4, 0.8, 1.6};  // B2, W2, B1, W1, W0
      const char* names[5] = {"calibrate dp B", "calibrate dp W", "calibrate dp B", "calibrate dp W", "calibrate dp W"};
      const int layers[5] = {2, 2, 1, 1, 0};
      int64_t t = t0;
      for (double f : {0.875, 1.0, 1.125})  // 0.7, 0.8, 0.9 for 0.8: the median is the middle
        for (int k = 0; k < (withW0 ? 5 : 4); ++k) {
          const auto d = static_cast<int64_t>(ms[k] * f * kMs);
          b.ev(0, EventKind::Kernel, names[k], t, t + d, {Attr::ofInt(AttrKey::Layer, layers[k])});
          t += d;
        }
    };
    const double c = 3.5 / 3, own = c * (65536.0 + 3000) / (65536.0 + 1000);
    Builder b;
    buildHandDpSession(b, 1);
    calibrate(b, 1000, true);  // inside step 0, before everything it measures: not a step kernel
    auto m = WhatIfModel::fromSession(b.s);
    QVERIFY2(m.isOk(), m.status().message().c_str());
    const auto d = nlohmann::json::parse(m->describeJson());
    QVERIFY(d["backward_compute_calibrated"].get<bool>());
    QVERIFY(std::abs(d["backward_compute_ms"].get<double>() - 5.5) < 1e-6);
    QVERIFY(std::abs(d["backward_compute_window_ms"].get<double>() - 6.0) < 1e-6);
    QVERIFY(std::abs(d["backward_ms_per_bucket"].get<double>() - 0.75) < 1e-6);
    QVERIFY(std::abs(d["overlap_slowdown"].get<double>() - (6.0 / 5.5 - 1)) < 1e-6);
    auto replay = m->predict({});
    QVERIFY(replay.isOk());
    QVERIFY2(std::abs(replay->stepTimeMs - 13.0) < 1e-6, std::to_string(replay->stepTimeMs).c_str());
    auto big = m->predict({{"dp.bucket_bytes", "100000"}});
    QVERIFY(big.isOk());
    QVERIFY2(std::abs(big->stepTimeMs - (1.5 + 2 + 5.5 + own + 1)) < 1e-6, std::to_string(big->stepTimeMs).c_str());
    // Not used: W0 missing; or the passes after the window's last step (4 steps of 13 ms).
    for (const auto& [t0, withW0] : {std::pair<int64_t, bool>{1000, false}, {60 * kMs, true}}) {
      Builder x;
      buildHandDpSession(x, 1);
      calibrate(x, t0, withW0);
      auto mx = WhatIfModel::fromSession(x.s);
      QVERIFY(mx.isOk());
      QVERIFY(!nlohmann::json::parse(mx->describeJson())["backward_compute_calibrated"].get<bool>());
      auto bx = mx->predict({{"dp.bucket_bytes", "100000"}});
      QVERIFY(bx.isOk());
      QVERIFY(std::abs(bx->stepTimeMs - (1.5 + 2 + 6 + own + 1)) < 1e-6);
    }
  }

  // The observer's CPU where it shared the ranks' cores (session metadata observer_*): the hand
  // session's 3 buckets a step each leave a Bucket and a Collective event (2 per bucket, one
  // rank); the recorder took 10 us per event (0.01 s for 1000 events) on the ranks' host with 1
  // CPU for 1 rank. One big bucket: 2 buckets fewer, 4 events fewer a step, 0.04 ms off the
  // uncalibrated prediction 1.5 + 2 + 6 + own + 1 (whatIfBackwardComputeFromCalibration). The
  // replay stays 13. With a spare CPU (2 for 1 rank) or on another host, no term.
  void whatIfObserverSharesTheCores() {
    const double c = 3.5 / 3, own = c * (65536.0 + 3000) / (65536.0 + 1000);
    auto build = [](Builder& b, const char* host, const char* cpus) {
      buildHandDpSession(b, 1);
      RankInfo r;
      r.rank = 0;
      r.host = "vm";
      b.s.setRank(r);
      b.s.metadata()["observer_cpu_seconds"] = "0.01";
      b.s.metadata()["observer_events"] = "1000";
      b.s.metadata()["observer_host"] = host;
      b.s.metadata()["observer_cpus"] = cpus;
    };
    Builder b;
    build(b, "vm", "1");
    auto m = WhatIfModel::fromSession(b.s);
    QVERIFY2(m.isOk(), m.status().message().c_str());
    const auto d = nlohmann::json::parse(m->describeJson());
    QVERIFY(d["observer_shares_cores"].get<bool>());
    QVERIFY(std::abs(d["observer_us_per_event"].get<double>() - 10) < 1e-9);
    QVERIFY(std::abs(d["bucket_events_per_bucket"].get<double>() - 2) < 1e-9);
    QVERIFY(std::abs(d["buckets_per_step"].get<double>() - 3) < 1e-9);
    QCOMPARE(d["observer_ranks_on_host"].get<int>(), 1);
    auto replay = m->predict({});
    QVERIFY(replay.isOk());
    QVERIFY2(std::abs(replay->stepTimeMs - 13.0) < 1e-6, std::to_string(replay->stepTimeMs).c_str());
    auto big = m->predict({{"dp.bucket_bytes", "100000"}});
    QVERIFY(big.isOk());
    QVERIFY2(std::abs(big->stepTimeMs - (1.5 + 2 + 6 + own + 1 - 0.04)) < 1e-6, std::to_string(big->stepTimeMs).c_str());
    QVERIFY(std::any_of(big->notes.begin(), big->notes.end(),
                        [](const std::string& n) { return n.find("recorder shared") != std::string::npos; }));
    for (const auto& [host, cpus] : {std::pair{"vm", "2"}, std::pair{"elsewhere", "1"}}) {
      Builder x;
      build(x, host, cpus);
      auto mx = WhatIfModel::fromSession(x.s);
      QVERIFY(mx.isOk());
      QVERIFY(!nlohmann::json::parse(mx->describeJson())["observer_shares_cores"].get<bool>());
      auto bx = mx->predict({{"dp.bucket_bytes", "100000"}});
      QVERIFY(bx.isOk());
      QVERIFY2(std::abs(bx->stepTimeMs - (1.5 + 2 + 6 + own + 1)) < 1e-6, std::to_string(bx->stepTimeMs).c_str());
    }
  }

  // The backward's cost per bucket moved by the ranks' own work ("calibrate work": a collective
  // and right after it a counter with the work in ms), the reductions by their latency
  // ("calibrate"). whatIfBackwardCostPerBucket's session (kappa 0.5 over 2 early buckets;
  // reductions 1, 1, 1.5 ms: the last one's own time the mean 3.5 / 3, a queue of 1.5 - 3.5 / 3,
  // no bucket still reducing when the backward ended) with latency allreduce 0.5 / 0.7 ms and
  // ring 0.3 / 0.4 at 1000 / 3000 bytes, and work allreduce 0.2 / 0.3 and ring 0.5 / 0.6.
  // Ring: kappa 0.5 + (0.5 - 0.2) = 0.8 (backward 6 + 2 x 0.8 = 7.6); the queue stays 1.5 - c;
  // the last reduction c + (0.3 - 0.5); step 1.5 + 2 + 7.6 + 1.5 - 0.2 + 1 = 13.4. By latency
  // alone kappa would fall to 0.3 (step 12.4): the work says ring costs the backward more.
  void whatIfBackwardCostMovesByCalibratedWork() {
    Builder b;
    buildHandDpSession(b, 1);
    auto latency = [](Builder& x) {
      addLatency(x, "allreduce", 1000, 0.5), addLatency(x, "allreduce", 3000, 0.7);
      addLatency(x, "ring", 1000, 0.3), addLatency(x, "ring", 3000, 0.4);
    };
    latency(b);
    int64_t t = 200'000;
    auto work = [&](const char* algo, int64_t bytes, double ms) { addWork(b, t, algo, bytes, ms); };
    work("allreduce", 1000, 0.2), work("allreduce", 3000, 0.3);
    work("ring", 1000, 0.5), work("ring", 3000, 0.6);
    auto m = WhatIfModel::fromSession(b.s);
    QVERIFY2(m.isOk(), m.status().message().c_str());
    const auto d = nlohmann::json::parse(m->describeJson());
    QCOMPARE(d["calibration_work"].size(), size_t{2});
    QVERIFY(std::abs(d["calibration_work"][1]["alpha_ms"].get<double>() - 0.45) < 1e-9);  // ring
    auto replay = m->predict({});
    QVERIFY(replay.isOk());
    QVERIFY2(std::abs(replay->stepTimeMs - 13.0) < 1e-6, std::to_string(replay->stepTimeMs).c_str());
    auto ring = m->predict({{"dp.algorithm", "ring"}});
    QVERIFY(ring.isOk());
    QVERIFY2(std::abs(ring->stepTimeMs - 13.4) < 1e-6, std::to_string(ring->stepTimeMs).c_str());
    QVERIFY(std::any_of(ring->notes.begin(), ring->notes.end(),
                        [](const std::string& n) { return n.find("own work") != std::string::npos; }));
    // A work counter that follows no collective within 1 ms pairs with nothing: without ring's
    // work the prediction falls back to the latency difference.
    Builder c;
    buildHandDpSession(c, 1);
    latency(c);
    c.ev(0, EventKind::Collective, "calibrate work", 200'000, 250'000,
         {Attr::ofString(AttrKey::Algorithm, c.s.intern("ring")), Attr::ofInt(AttrKey::Bytes, 1000)});
    c.ev(0, EventKind::Counter, "calibrate work", 2'000'000, 2'000'000, {Attr::ofDouble(AttrKey::Value, 0.5)});
    auto m2 = WhatIfModel::fromSession(c.s);
    QVERIFY(m2.isOk());
    auto ring2 = m2->predict({{"dp.algorithm", "ring"}});
    QVERIFY(ring2.isOk());
    QVERIFY2(std::abs(ring2->stepTimeMs - 12.4) < 1e-6, std::to_string(ring2->stepTimeMs).c_str());
  }

  // Before/after windows by hand: 4 steps of 12 ms, 3 x 1000 collective bytes per step, loss
  // 1.0, 0.9, 0.8, 0.7 (slope -0.1 per step). trainscope-train's what-if calibration in step 0
  // (a "calibrate" and a "calibrate work" collective, a "calibrate disco exchange" send) is the
  // tool's traffic: not in the bytes.
  void windowMetricsByHand() {
    Builder b;
    for (const char* n : {"calibrate", "calibrate work"})
      b.ev(0, EventKind::Collective, n, 11 * kMs, 11 * kMs + 10'000,
           {Attr::ofInt(AttrKey::Bytes, 5000), Attr::ofString(AttrKey::Algorithm, b.s.intern("ring"))});
    b.ev(0, EventKind::P2PSend, "calibrate disco exchange", 11 * kMs, 11 * kMs + 10'000,
         {Attr::ofInt(AttrKey::Bytes, 7000)});
    for (int step = 0; step < 4; ++step) {
      const int64_t o = step * 12 * kMs;
      b.ev(0, EventKind::Step, "step", o, o + 12 * kMs, {Attr::ofInt(AttrKey::Step, step)});
      b.ev(0, EventKind::Kernel, "B linear", o + 1 * kMs, o + 5 * kMs);
      for (int k = 0; k < 3; ++k)
        b.ev(0, EventKind::Collective, "bucket allreduce", o + (4 + 2 * k) * kMs, o + (5 + 2 * k) * kMs,
             {Attr::ofInt(AttrKey::Bucket, k), Attr::ofInt(AttrKey::Bytes, 1000)});
      b.ev(0, EventKind::Counter, "loss", o + 11 * kMs, o + 11 * kMs,
           {Attr::ofDouble(AttrKey::Value, 1.0 - 0.1 * step), Attr::ofInt(AttrKey::Step, step)});
    }
    const AnalysisResult a = analyzeStore(b.s);
    auto w = measureWindow(a, b.s, 0, 3);
    QCOMPARE(w.steps, 4);
    QVERIFY(std::abs(w.stepMs.mean - 12) < 1e-9 && std::abs(w.stepMs.sd) < 1e-9);
    QVERIFY(std::abs(w.bytes.mean - 3000) < 1e-9);
    QVERIFY(std::abs(w.loss.mean - 0.85) < 1e-9);
    // sd of 1.0, 0.9, 0.8, 0.7: sqrt(0.05 / 3)
    QVERIFY(std::abs(w.loss.sd - std::sqrt(0.05 / 3)) < 1e-9);
    QVERIFY(std::abs(w.lossSlopePerStep + 0.1) < 1e-9);
    QVERIFY(std::isnan(w.bubbleFraction.mean));  // no pipeline
    auto part = measureWindow(a, b.s, 1, 2);
    QCOMPARE(part.steps, 2);
    QVERIFY(std::abs(part.loss.mean - 0.85) < 1e-9 && std::abs(part.lossSlopePerStep + 0.1) < 1e-9);
    QCOMPARE(measureWindow(a, b.s, 10, 20).steps, 0);

    // The same through `trainscope-cli compare` on the saved session: steps 0..1 against 2..3.
    QTemporaryDir dir;
    const std::string path = dir.filePath("w.tsdb").toStdString();
    QVERIFY(saveSession(b.s, path).isOk());
    const auto r = trainscope::test::runCli(
        {"compare", QString::fromStdString(path), "--steps", "0:1", "--vs", "2:3", "--json"});
    QVERIFY2(r.code == 0, qPrintable(r.err));
    const QJsonObject o = QJsonDocument::fromJson(r.out.toUtf8()).object();
    QCOMPARE(o["a"].toObject()["steps"].toInt(), 2);
    QVERIFY(std::abs(o["a"].toObject()["loss"].toObject()["mean"].toDouble() - 0.95) < 1e-9);
    QVERIFY(std::abs(o["b"].toObject()["loss"].toObject()["mean"].toDouble() - 0.75) < 1e-9);
    QVERIFY(std::abs(o["difference"].toObject()["loss"].toDouble() + 0.2) < 1e-9);
    QCOMPARE(o["difference"].toObject()["step_time_ms"].toDouble(), 0.0);
    QVERIFY(o["difference"].toObject()["bubble_fraction"].isNull());
    // One file without windows needs a knob change to split at; a bad window is a usage error.
    QCOMPARE(trainscope::test::runCli({"compare", QString::fromStdString(path)}).code, 1);
    QCOMPARE(trainscope::test::runCli({"compare", QString::fromStdString(path), "--steps", "3:1", "--vs", "0:1"}).code, 2);
  }

  // Pipelines: the constructed balanced 1F1B session (tests/data/pp_1f1b_balanced: p = 4,
  // m = 4, F = 1 ms, B = 2 ms per micro-batch, no hand-off time) predicted by the schedule
  // simulator. By hand: 1f1b/gpipe m = 4: (m + p - 1)(F + B) = 21 ms, bubble 3/7; m = 8: ops
  // take 4/8 as long, (8 + 3) x 1.5 = 16.5 ms, bubble 3/11; zb-h1 m = 4 (B and W halves of the
  // measured B: 1 ms each): bubble time (p-1)(F+B) - (min(m,p)-1) min(F,W) = 6 - 3 = 3 ms,
  // step 4 x 3 + 3 = 15 ms, bubble 3/15.
  void whatIfPipelineByHand() {
    auto store = importChromeTraceFile(std::string(TRAINSCOPE_TEST_DATA) + "/pp_1f1b_balanced/trace.json");
    QVERIFY2(store.isOk(), store.status().message().c_str());
    auto m = WhatIfModel::fromSession(store.value());
    QVERIFY2(m.isOk(), m.status().message().c_str());
    auto near = [](double a, double b) { return std::abs(a - b) < 1e-6; };
    auto replay = m->predict({});
    QVERIFY(replay.isOk() && near(replay->stepTimeMs, 21) && near(replay->bubbleFraction, 3.0 / 7));
    auto m8 = m->predict({{"pp.microbatches", "8"}});
    QVERIFY(m8.isOk() && near(m8->stepTimeMs, 16.5) && near(m8->bubbleFraction, 3.0 / 11));
    auto zb = m->predict({{"pp.schedule", "zb-h1"}});
    QVERIFY(zb.isOk() && near(zb->stepTimeMs, 15) && near(zb->bubbleFraction, 0.2) && zb->extrapolated);
    auto gp = m->predict({{"pp.schedule", "gpipe"}});
    QVERIFY(gp.isOk() && near(gp->stepTimeMs, 21));
    QVERIFY(!m->predict({{"pp.microbatches", "0"}}).isOk());  // invalid: refused with the reason
    // Ghost timelines: 4 stages x (4 F + 4 B) compute ops, the replay's last op ends at 21 ms.
    int compute = 0;
    double end = 0;
    for (const auto& op : replay->timeline)
      if (op.kind == StepOp::Kind::Compute) ++compute, end = std::max(end, op.endMs);
    QCOMPARE(compute, 32);
    QVERIFY(near(end, 21));
    int measuredCompute = 0;
    std::set<std::string> lanes;
    for (const auto& op : m->measuredTimeline())
      if (op.kind == StepOp::Kind::Compute) ++measuredCompute, lanes.insert(op.lane);
    QCOMPARE(measuredCompute, 32);
    QCOMPARE(lanes.size(), size_t{4});
  }

  // No observer term in a pipeline (its ranks wait in their bubbles, where the observer's CPU
  // need not delay the critical path; measured: the term made the grid's m = 8 cells 3 % worse):
  // whatIfPipelineByHand's session recorded by an observer that shared the ranks' 4 CPUs at
  // 10 us per event still predicts m = 8 at the schedule's 16.5 ms.
  void whatIfPipelineNoObserverTerm() {
    auto store = importChromeTraceFile(std::string(TRAINSCOPE_TEST_DATA) + "/pp_1f1b_balanced/trace.json");
    QVERIFY2(store.isOk(), store.status().message().c_str());
    for (auto [r, info] : std::map<RankId, RankInfo>(store->ranks())) {
      info.host = "vm";
      store->setRank(info);
    }
    store->metadata()["observer_cpu_seconds"] = "0.01";
    store->metadata()["observer_events"] = "1000";
    store->metadata()["observer_host"] = "vm";
    store->metadata()["observer_cpus"] = "4";
    auto m = WhatIfModel::fromSession(store.value());
    QVERIFY2(m.isOk(), m.status().message().c_str());
    auto m8 = m->predict({{"pp.microbatches", "8"}});
    QVERIFY(m8.isOk());
    QVERIFY2(std::abs(m8->stepTimeMs - 16.5) < 1e-6, qPrintable(QString::number(m8->stepTimeMs)));
  }

  // A recording that ran two settings (tests/data/pp_1f1b_two_settings: m = 4 with F 1, B 2 ms,
  // then m = 8 with micro-batches half the size): each window's model takes its own op times.
  // Whole-session means (the model before Nov 25) replay the m = 8 window with F 0.67, B 1.33
  // and predict m = 4 from it at 22.5 ms instead of 21.
  void whatIfPipelineWindowOwnOpTimes() {
    auto store = importChromeTraceFile(std::string(TRAINSCOPE_TEST_DATA) + "/pp_1f1b_two_settings/trace.json");
    QVERIFY2(store.isOk(), store.status().message().c_str());
    auto near = [](double a, double b) { return std::abs(a - b) < 1e-6; };
    // The default window: the steps after the last change (2, 3: m = 8, 16.5 ms).
    auto late = WhatIfModel::fromSession(store.value());
    QVERIFY2(late.isOk(), late.status().message().c_str());
    QCOMPARE(late->fromStep(), int64_t{2});
    auto replay = late->predict({});
    QVERIFY2(replay.isOk() && near(replay->stepTimeMs, 16.5), qPrintable(QString::number(replay->stepTimeMs)));
    auto m4 = late->predict({{"pp.microbatches", "4"}});  // (4 + 3) x (1 + 2)
    QVERIFY2(m4.isOk() && near(m4->stepTimeMs, 21), qPrintable(QString::number(m4->stepTimeMs)));
    QVERIFY(near(m4->bubbleFraction, 3.0 / 7));
    // The first window (steps 0, 1: m = 4, 21 ms) predicts m = 8 at (8 + 3) x 1.5.
    auto early = WhatIfModel::fromSession(store.value(), {.fromStep = 0, .toStep = 1});
    QVERIFY2(early.isOk(), early.status().message().c_str());
    QCOMPARE(early->baseKnobs().at("pp.microbatches"), std::string("4"));
    QVERIFY(near(early->measured().stepTimeMs, 21));
    auto m8 = early->predict({{"pp.microbatches", "8"}});
    QVERIFY2(m8.isOk() && near(m8->stepTimeMs, 16.5), qPrintable(QString::number(m8->stepTimeMs)));
    QVERIFY(near(m8->bubbleFraction, 3.0 / 11));
  }

  // Hand-offs that take time (tests/data/pp_1f1b_handoff: p = 2, m = 4, F 1, B 2 ms, each hand-off
  // arriving 0.5 ms after its producer ends; the generator's comment has the hand arithmetic):
  // the model takes the measured hand-off latency (0.5) into the simulated schedule, so it
  // replays 1F1B's 17 ms with no rest and predicts GPipe at 16 ms (both 15 ms without it: the
  // model before Nov 25 put 2 ms of rest in the replay and predicted GPipe at 17).
  void whatIfPipelineHandoffLatency() {
    auto store = importChromeTraceFile(std::string(TRAINSCOPE_TEST_DATA) + "/pp_1f1b_handoff/trace.json");
    QVERIFY2(store.isOk(), store.status().message().c_str());
    auto m = WhatIfModel::fromSession(store.value());
    QVERIFY2(m.isOk(), m.status().message().c_str());
    // Within 0.01 ms: the generator's 1 us sends and receives aside (1F1B 17.001, GPipe 16.006).
    auto near = [](double a, double b) { return std::abs(a - b) < 0.01; };
    const auto d = nlohmann::json::parse(m->describeJson());
    QVERIFY2(std::abs(d["send_latency_ms"].get<double>() + d["send_cost_ms"].get<double>() - 0.5) < 1e-6,
             d.dump().c_str());
    QVERIFY2(near(d["rest_ms"].get<double>(), 0), d.dump().c_str());
    auto replay = m->predict({});
    QVERIFY2(replay.isOk() && near(replay->stepTimeMs, 17), qPrintable(QString::number(replay->stepTimeMs)));
    auto gp = m->predict({{"pp.schedule", "gpipe"}});
    QVERIFY2(gp.isOk() && near(gp->stepTimeMs, 16), qPrintable(QString::number(gp->stepTimeMs)));
  }

  // DISCO (tests/data/disco, 2 ranks; the default window is step 3: layer 0 at sparsity 0.5 with
  // L_comp 1.5, L_comm 2 ms, 4 MB; layer 1 at 0.25 with 3 and 1 ms, 1 MB; step 10 ms, pipelined).
  // By hand with background.md 1 (N = 2): dense comm 4 and 1.333, dense comp 2 and 3.429 ms.
  // Layer 0's exchange ran beside its kernel (1.5 ms of overlap = all of the shorter: share 1,
  // the paper's max), layer 1's after it (share 0: comm + comp). Measured layer times 2 and 4,
  // so the rest is 4 ms.
  void whatIfDiscoByHand() {
    auto store = importChromeTraceFile(std::string(TRAINSCOPE_TEST_DATA) + "/disco/trace.json");
    QVERIFY2(store.isOk(), store.status().message().c_str());
    auto m = WhatIfModel::fromSession(store.value());
    QVERIFY2(m.isOk(), m.status().message().c_str());
    auto near = [](double a, double b) { return std::abs(a - b) < 1e-6; };
    auto step = [&](std::map<std::string, std::string> c) {
      auto p = m->predict(c);
      return p.isOk() ? p->stepTimeMs : -1.0;
    };
    QVERIFY(near(step({}), 10));
    const auto d = nlohmann::json::parse(m->describeJson());
    QVERIFY2(near(d["disco_layers"][0]["overlap_share"].get<double>(), 1) &&
                 near(d["disco_layers"][1]["overlap_share"].get<double>(), 0) && near(d["rest_ms"].get<double>(), 4),
             d.dump().c_str());
    // Dense everywhere: max(4, 2) + (1.333 + 3.429) + 4; bytes 4 MB / 0.5 + 1 MB / 0.75.
    auto dense = m->predict({{"disco.sparsity", "0"}});
    QVERIFY2(dense.isOk() && near(dense->stepTimeMs, 4 + 4 + 4.0 / 3 + 24.0 / 7),
             qPrintable(QString::number(dense->stepTimeMs)));
    QVERIFY(near(dense->bytes, 8e6 + 4e6 / 3));
    // Layer 1 independent: its compute halves (1 - S/2 of the dense), nothing sent: 4 + 2 + 12/7.
    QVERIFY(near(step({{"disco.sparsity.1", "1"}}), 4 + 2 + 12.0 / 7));
    // The per-layer value wins over disco.sparsity for its layer, as in the job: 4 + 2 + 4/3 + 24/7.
    QVERIFY(near(step({{"disco.sparsity", "0.5"}, {"disco.sparsity.1", "0"}}), 4 + 2 + 4.0 / 3 + 24.0 / 7));
    // wait: every layer comm + comp, nothing hidden: 4 + 3.5 + 4.
    QVERIFY(near(step({{"disco.mode", "wait"}}), 4 + 3.5 + 4));
    // The old model (the paper's max on every layer, whatever the window hid) put layer 1 at 3 ms
    // and the rest at 5: dense would be 5 + 4 + 24/7 = 12.43 instead of 12.76.
    QVERIFY(std::abs((4 + 4 + 4.0 / 3 + 24.0 / 7) - (5 + 4 + 24.0 / 7)) > 0.3);
    // The measured step drawn beside the ghost: rank 0's step 3, each layer's kernel and exchange.
    std::set<std::string> lanes;
    int exchanges = 0;
    for (const auto& op : m->measuredTimeline()) lanes.insert(op.lane), exchanges += op.kind == StepOp::Kind::Communication;
    QCOMPARE(m->measuredTimelineStep(), int64_t{3});
    QCOMPARE(lanes, (std::set<std::string>{"layer 0", "layer 1"}));
    QCOMPARE(exchanges, 2);
    QVERIFY(!m->predict({{"disco.sparsity", "1.5"}}).isOk());  // refused with the reason
    QVERIFY(!m->predict({{"disco.sparsity", "x"}}).isOk());
    QVERIFY(!m->predict({{"disco.sparsity.1", "-0.1"}}).isOk());
  }

  // A chosen window that spans knob changes (tests/data/disco: disco.sparsity 0 -> 0.5 and layer 1
  // 0.25 -> 0.5 at step 2, layer 1 back to 0.25 at step 3) is modelled with its first step's knobs,
  // and every prediction says which changes its steps ran (a two-knob `set` that applied over two
  // steps once put the next cell's first step into tune_bench's base window, BENCHMARKS.md).
  void whatIfWindowSpanningAChangeIsNamed() {
    auto store = importChromeTraceFile(std::string(TRAINSCOPE_TEST_DATA) + "/disco/trace.json");
    QVERIFY2(store.isOk(), store.status().message().c_str());
    WhatIfOptions wo;
    wo.fromStep = 1;
    wo.toStep = 3;
    auto m = WhatIfModel::fromSession(store.value(), wo);
    QVERIFY2(m.isOk(), m.status().message().c_str());
    QCOMPARE(m->windowChanges(), (std::vector<std::string>{"disco.sparsity=0.5 at step 2", "disco.sparsity.1=0.5 at step 2",
                                                           "disco.sparsity.1=0.25 at step 3"}));
    QCOMPARE(m->baseKnobs().at("disco.sparsity"), std::string("0"));
    auto p = m->predict({{"disco.sparsity", "1"}});
    QVERIFY2(p.isOk() && !p->notes.empty() && p->notes.front().find("disco.sparsity.1=0.25 at step 3") != std::string::npos,
             p.isOk() && !p->notes.empty() ? p->notes.front().c_str() : "no note");
    QVERIFY(nlohmann::json::parse(m->describeJson())["changes_in_window"].size() == 3);
    wo.fromStep = 3;  // within one setting: nothing to say
    auto one = WhatIfModel::fromSession(store.value(), wo);
    QVERIFY2(one.isOk() && one->windowChanges().empty(), one.isOk() ? "changes listed" : one.status().message().c_str());
    auto def = WhatIfModel::fromSession(store.value());  // the default window: after the last change
    QVERIFY(def.isOk() && def->windowChanges().empty());
  }

  // whatIfDiscoByHand's recording with trainscope-train's calibration added on both ranks
  // ("calibrate disco <S>" passes between the steps, each holding its layers' "calibrate disco
  // F|B" kernels and "calibrate disco exchange" events). Per pass (compute, exchange) ms: layer 0
  // 0.2/0.1 at S = 0, 0.15/0.06 at 0.5, 0.1/0 at 1; layer 1 0.3/0.05, 0.25/0.03, 0.2/0. Each
  // measured cost moves by the calibrated difference (layer 1's window ran 0.25: interpolated
  // 0.275/0.04). Dense: layer 0 max(1.5 + 0.05, 2 + 0.04) = 2.04 (share 1), layer 1 (3 + 0.025) +
  // (1 + 0.01) = 4.035 (share 0): 4 + 2.04 + 4.035. S = 1: no exchange is left (waiting included):
  // 4 + 1.45 + 2.925.
  void whatIfDiscoFromCalibration() {
    std::ifstream in(std::string(TRAINSCOPE_TEST_DATA) + "/disco/trace.json");
    nlohmann::json doc = nlohmann::json::parse(in);
    auto& ev = doc.is_object() ? doc["traceEvents"] : doc;
    struct Cal {
      double sparsity, start;  // the pass's start (us)
      double comp[2], comm[2];
    };
    const std::vector<Cal> cal = {{0, 10000, {0.2, 0.3}, {0.1, 0.05}},
                                  {0.5, 11000, {0.15, 0.25}, {0.06, 0.03}},
                                  {1, 22200, {0.1, 0.2}, {0, 0}}};
    for (int pid : {0, 1})
      for (const Cal& c : cal) {
        std::ostringstream name;
        name << "calibrate disco " << c.sparsity;
        ev.push_back({{"ts", c.start}, {"dur", 900}, {"ph", "X"}, {"pid", pid}, {"tid", 2}, {"name", name.str()},
                      {"cat", "range"}, {"args", {{"kind", "range"}}}});
        double t = c.start + 10;
        for (int layer : {0, 1}) {  // each layer's compute as an F and a B kernel, then its exchange
          for (const char* k : {"calibrate disco F", "calibrate disco B"}) {
            ev.push_back({{"ts", t}, {"dur", c.comp[layer] * 500}, {"ph", "X"}, {"pid", pid}, {"tid", 3},
                          {"name", k}, {"cat", "kernel"}, {"args", {{"kind", "kernel"}, {"layer", layer}}}});
            t += c.comp[layer] * 500;
          }
          if (c.comm[layer] > 0)
            ev.push_back({{"ts", t}, {"dur", c.comm[layer] * 1000}, {"ph", "X"}, {"pid", pid}, {"tid", 4},
                          {"name", "calibrate disco exchange"}, {"cat", "collective"},
                          {"args", {{"kind", "collective"}, {"layer", layer}, {"bytes", 1000}}}});
          t += c.comm[layer] * 1000;
        }
      }
    auto m = modelOfDocument(doc);
    QVERIFY2(m.isOk(), m.status().message().c_str());
    auto near = [](double a, double b) { return std::abs(a - b) < 1e-6; };
    const auto d = nlohmann::json::parse(m->describeJson());
    QVERIFY2(d["disco_layers"][0]["calibration"].size() == 3 &&
                 near(d["disco_layers"][1]["calibration"][1]["comp_ms"].get<double>(), 0.25) &&
                 near(d["disco_layers"][0]["calibration"][1]["comm_ms"].get<double>(), 0.06) &&
                 near(d["disco_layers"][0]["l_comp_ms"].get<double>(), 1.5),  // the passes are not the layer's work
             d.dump().c_str());
    auto step = [&](std::map<std::string, std::string> c) {
      auto p = m->predict(c);
      return p.isOk() ? p->stepTimeMs : -1.0;
    };
    QVERIFY(near(step({}), 10));
    QVERIFY2(near(step({{"disco.sparsity", "0"}}), 4 + 2.04 + 4.035), qPrintable(QString::number(step({{"disco.sparsity", "0"}}))));
    QVERIFY2(near(step({{"disco.sparsity", "1"}}), 4 + 1.45 + 2.925), qPrintable(QString::number(step({{"disco.sparsity", "1"}}))));
    // Layer 1 alone to 0.75 (interpolated 0.225/0.015): (3 - 0.05) + (1 - 0.025); layer 0 stays 2.
    QVERIFY(near(step({{"disco.sparsity.1", "0.75"}}), 4 + 2 + 2.95 + 0.975));
    // Without the calibration (whatIfDiscoByHand) the paper's scaling gives 12.76 for dense.
    QVERIFY(std::abs(step({{"disco.sparsity", "0"}}) - (4 + 4 + 4.0 / 3 + 24.0 / 7)) > 2);
  }

  // A split schedule predicted from an unsplit session whose kernels name the halves of the
  // backward (tests/data/pp_1f1b_kernels: B 2 ms = "B 0" 1.5 + "W 0" 0.5): zb-h1's B and W are
  // 1.5 and 0.5 ms (measured, so not flagged), not halves of B. The expected makespan is the
  // schedule simulator's on those op times, and differs from the halves'.
  void whatIfSplitFromTracedKernels() {
    auto store = importChromeTraceFile(std::string(TRAINSCOPE_TEST_DATA) + "/pp_1f1b_kernels/trace.json");
    QVERIFY2(store.isOk(), store.status().message().c_str());
    auto m = WhatIfModel::fromSession(store.value());
    QVERIFY2(m.isOk(), m.status().message().c_str());
    const auto d = nlohmann::json::parse(m->describeJson());
    QVERIFY2(d["w_share"].size() == 2 && std::abs(d["w_share"][0].get<double>() - 0.25) < 1e-9 &&
                 std::abs(d["w_share"][1].get<double>() - 0.25) < 1e-9,
             d.dump().c_str());
    auto zb = m->predict({{"pp.schedule", "zb-h1"}});
    QVERIFY2(zb.isOk(), zb.status().message().c_str());
    QVERIFY(!zb->extrapolated);
    auto makespan = [](double b, double w) {
      ScheduleParams sp;
      sp.kind = ScheduleKind::ZbH1;
      sp.stages = 2;
      sp.microBatches = 4;
      auto sched = generateSchedule(sp);
      auto sim = simulateSchedule(*sched, OpDurations{}, [&](int, const PipeOp& op) {
        return op.kind == OpKind::Forward ? 1.0 : op.kind == OpKind::Backward ? b : w;
      });
      return sim->makespan;
    };
    QVERIFY2(std::abs(zb->stepTimeMs - makespan(1.5, 0.5)) < 1e-6,
             qPrintable(QString("%1 vs %2").arg(zb->stepTimeMs).arg(makespan(1.5, 0.5))));
    QVERIFY(std::abs(makespan(1.5, 0.5) - makespan(1, 1)) > 0.1);
    const auto ks = d["kernel_share"];
    QVERIFY2(ks.size() == 2 && std::abs(ks[0]["f"].get<double>() - 0.6) < 1e-9 &&
                 std::abs(ks[0]["b"].get<double>() - 1.0) < 1e-9,
             ks.dump().c_str());
    // m = 8: the kernels halve, the rest of each op stays: F = 0.4 + 0.6 / 2 = 0.7, B = 2 / 2 = 1
    // (all kernels); scaling the whole op (F 0.5) would be 1 ms faster over 16 forwards' path.
    auto m8 = m->predict({{"pp.microbatches", "8"}});
    QVERIFY2(m8.isOk(), m8.status().message().c_str());
    QVERIFY2(std::abs(m8->stepTimeMs - makespan1f1b(8, 0.7, 1.0)) < 1e-6,
             qPrintable(QString("%1 vs %2").arg(m8->stepTimeMs).arg(makespan1f1b(8, 0.7, 1.0))));
    QVERIFY(std::abs(makespan1f1b(8, 0.7, 1.0) - makespan1f1b(8, 0.5, 1.0)) > 0.5);
  }

  // The same recording with trainscope-train's kernel calibration added ("calibrate pp F|B|W
  // <samples>" kernels of layer 0 on every rank, between steps 0 and 1; batch 16, so m = 4 is 4
  // samples and m = 8 is 2): F 1.0 / 0.4 / 0.3 ms at 16 / 4 / 2 samples, B 2.0 / 0.8 / 0.5, W 1.0 /
  // 0.4 / 0.3. At m = 8 the traced kernels move by the calibrated ratio instead of halving: F =
  // 0.4 + 0.6 x 0.3 / 0.4 = 0.85; the unsplit B op (its kernels B and W) = 2 x (0.5 + 0.3) /
  // (0.8 + 0.4) = 4 / 3. At m = 3 (5.33 samples, between 4 and 16, interpolated): F = 0.4 + 0.6 x
  // (0.4 + (5.333 - 4) / 12 x 0.6) / 0.4 = 1.1.
  void whatIfPipelineKernelsFromCalibration() {
    std::ifstream in(std::string(TRAINSCOPE_TEST_DATA) + "/pp_1f1b_kernels/trace.json");
    nlohmann::json doc = nlohmann::json::parse(in);
    auto& ev = doc.is_object() ? doc["traceEvents"] : doc;
    std::map<int, int> kernelTid;  // pid -> the tid of its F kernels
    for (const auto& e : ev)
      if (e.value("name", "").rfind("F ", 0) == 0) kernelTid[e["pid"].get<int>()] = e["tid"].get<int>();
    QCOMPARE(int(kernelTid.size()), 2);
    const std::vector<std::tuple<const char*, int, double>> cal = {
        {"F", 16, 1.0}, {"F", 4, 0.4}, {"F", 2, 0.3}, {"B", 16, 2.0}, {"B", 4, 0.8},
        {"B", 2, 0.5},  {"W", 16, 1.0}, {"W", 4, 0.4}, {"W", 2, 0.3}};
    for (const auto& [pid, tid] : kernelTid) {
      double ts = 16000;
      for (const auto& [op, samples, ms] : cal) {
        ev.push_back({{"ts", ts}, {"dur", ms * 1000}, {"ph", "X"}, {"pid", pid}, {"tid", tid},
                      {"name", std::string("calibrate pp ") + op + " " + std::to_string(samples)},
                      {"cat", "kernel"}, {"args", {{"kind", "kernel"}, {"layer", 0}}}});
        ts += ms * 1000 + 10;
      }
    }
    auto m = modelOfDocument(doc);
    QVERIFY2(m.isOk(), m.status().message().c_str());
    const auto d = nlohmann::json::parse(m->describeJson());
    QVERIFY2(std::abs(d["kernel_calibration_ms"][0]["f"]["4"].get<double>() - 0.4) < 1e-9, d.dump().c_str());
    auto replay = m->predict({});
    QVERIFY(replay.isOk());
    QVERIFY(std::abs(replay->stepTimeMs - m->measured().stepTimeMs) < 1e-6);
    auto m8 = m->predict({{"pp.microbatches", "8"}});
    QVERIFY2(m8.isOk(), m8.status().message().c_str());
    const double want = makespan1f1b(8, 0.85, 4.0 / 3) - makespan1f1b(4, 1.0, 2.0) + replay->stepTimeMs;
    QVERIFY2(std::abs(m8->stepTimeMs - want) < 1e-6, qPrintable(QString("%1 vs %2").arg(m8->stepTimeMs).arg(want)));
    auto m3 = m->predict({{"pp.microbatches", "3"}});
    QVERIFY2(m3.isOk(), m3.status().message().c_str());
    const double bw3 = 2.0 * ((0.8 + (16.0 / 3 - 4) / 12 * 1.2) + (0.4 + (16.0 / 3 - 4) / 12 * 0.6)) / 1.2;
    const double want3 = makespan1f1b(3, 1.1, bw3) - makespan1f1b(4, 1.0, 2.0) + replay->stepTimeMs;
    QVERIFY2(std::abs(m3->stepTimeMs - want3) < 1e-6, qPrintable(QString("%1 vs %2").arg(m3->stepTimeMs).arg(want3)));
    // pp.segments acts under seq1f1b only: a 1F1B job that reports pp.segments=2 (the demo's
    // default) ran k = 1 and keeps the calibration (until Nov 25 it fell to the sample ratio).
    doc["otherData"]["trainscope_metadata"]["knob.pp.segments"] = "2";
    auto seg = modelOfDocument(doc);
    QVERIFY2(seg.isOk(), seg.status().message().c_str());
    auto seg8 = seg->predict({{"pp.microbatches", "8"}});
    QVERIFY2(seg8.isOk() && std::abs(seg8->stepTimeMs - want) < 1e-6, qPrintable(QString::number(seg8->stepTimeMs)));
    // A split schedule's W deferred ("calibrate pp D": 0.6 ms at 4 samples where W right after
    // its B took 0.4): zb-h1 at m = 4 from this 1F1B window takes each W's kernels from the fused
    // B's traced share as before, moved by D / W = 1.5. Per stage a W op is b x share x ((1 - k)
    // + k x 1.5) against b x share x 1 without D (k: the stage's kernel share of B).
    auto zb = m->predict({{"pp.schedule", "zb-h1"}});
    QVERIFY2(zb.isOk(), zb.status().message().c_str());
    for (const auto& [pid, tid] : kernelTid)
      for (const auto& [samples, ms] : {std::pair{16, 1.5}, std::pair{4, 0.6}, std::pair{2, 0.45}})
        ev.push_back({{"ts", 17000.0 + samples}, {"dur", ms * 1000}, {"ph", "X"}, {"pid", pid}, {"tid", tid},
                      {"name", "calibrate pp D " + std::to_string(samples)},
                      {"cat", "kernel"}, {"args", {{"kind", "kernel"}, {"layer", 0}}}});
    auto mD = modelOfDocument(doc);
    QVERIFY2(mD.isOk(), mD.status().message().c_str());
    const auto dD = nlohmann::json::parse(mD->describeJson());
    QVERIFY2(std::abs(dD["kernel_calibration_ms"][0]["w_deferred"]["4"].get<double>() - 0.6) < 1e-9, dD.dump().c_str());
    auto zbD = mD->predict({{"pp.schedule", "zb-h1"}});
    QVERIFY2(zbD.isOk(), zbD.status().message().c_str());
    auto wOps = [](const WhatIfPrediction& p) {
      std::vector<std::pair<std::string, double>> w;
      for (const auto& op : p.timeline)
        if (op.label.rfind("W", 0) == 0) w.push_back({op.lane, op.endMs - op.startMs});
      return w;
    };
    const auto w0 = wOps(*zb), w1 = wOps(*zbD);
    QCOMPARE(w0.size(), w1.size());
    QVERIFY(!w0.empty());
    for (size_t i = 0; i < w0.size(); ++i) {
      const int stage = std::atoi(w0[i].first.substr(6).c_str());
      const double k = dD["kernel_share"][stage]["b"].get<double>();
      QVERIFY2(std::abs(w1[i].second / w0[i].second - ((1 - k) + k * 1.5)) < 1e-6,
               qPrintable(QString("%1: %2 / %3, k %4").arg(QString::fromStdString(w0[i].first)).arg(w1[i].second)
                              .arg(w0[i].second).arg(k)));
    }
    QVERIFY(zbD->stepTimeMs > zb->stepTimeMs);
  }

  // Work outside the pipeline ops (tests/data/pp_1f1b_optimizer: 1F1B makespan 15 ms, then a 4 ms
  // optimizer phase the analysis counts as busy; bubble 3/19). The rest stays busy in every
  // prediction: the replay's bubble is the measured 3/19 (counting the rest idle gave 7/19), and
  // m = 8 (ops halved, makespan 13.5, idle 1.5 per stage) is 1.5 / 17.5.
  void whatIfPipelineBusyRestIsNotBubble() {
    auto store = importChromeTraceFile(std::string(TRAINSCOPE_TEST_DATA) + "/pp_1f1b_optimizer/trace.json");
    QVERIFY2(store.isOk(), store.status().message().c_str());
    auto m = WhatIfModel::fromSession(store.value());
    QVERIFY2(m.isOk(), m.status().message().c_str());
    auto near = [](double a, double b) { return std::abs(a - b) < 1e-6; };
    QVERIFY(near(m->measured().bubbleFraction, 3.0 / 19));
    auto replay = m->predict({});
    QVERIFY2(replay.isOk() && near(replay->stepTimeMs, 19) && near(replay->bubbleFraction, 3.0 / 19),
             qPrintable(QString::number(replay->bubbleFraction)));
    auto m8 = m->predict({{"pp.microbatches", "8"}});
    QVERIFY2(m8.isOk() && near(m8->stepTimeMs, 17.5) && near(m8->bubbleFraction, 1.5 / 17.5),
             qPrintable(QString("%1 ms, bubble %2").arg(m8->stepTimeMs).arg(m8->bubbleFraction)));
  }

  // A recording of PyTorch's ZBV (tests/data/pp_zbv: p = 2, m = 3, two chunks per rank in a V,
  // every op 1 ms): the what-if model replays it with zbv's V and 2 chunks (bubble 1/19, as
  // tst_schedule draws it) and predicts interleaved-zb with the 2 chunks the session ran (no
  // pp.virtual_stages knob in PyTorch jobs), not with 1.
  void whatIfTorchZeroBubble() {
    auto store = importChromeTraceFile(std::string(TRAINSCOPE_TEST_DATA) + "/pp_zbv/trace.json");
    QVERIFY2(store.isOk(), store.status().message().c_str());
    auto m = WhatIfModel::fromSession(store.value());
    QVERIFY2(m.isOk(), m.status().message().c_str());
    auto replay = m->predict({});
    QVERIFY2(replay.isOk(), replay.status().message().c_str());
    QVERIFY2(std::abs(replay->bubbleFraction - 1.0 / 19) < 1e-9, qPrintable(QString::number(replay->bubbleFraction)));
    auto izb = m->predict({{"pp.schedule", "interleaved-zb"}});
    QVERIFY2(izb.isOk(), izb.status().message().c_str());
    int chunk1 = 0;
    for (const auto& op : izb->timeline) chunk1 += op.kind == StepOp::Kind::Compute && op.label.find("c1") != std::string::npos;
    QCOMPARE(chunk1, 2 * 3 * 3);  // 2 stages x 3 micro-batches x F, B, W of chunk 1
  }

  void kendall() {
    QCOMPARE(kendallTau({1, 2, 3, 4}, {10, 20, 30, 40}), 1.0);
    QCOMPARE(kendallTau({1, 2, 3, 4}, {40, 30, 20, 10}), -1.0);
    // One discordant pair of six: (5 - 1) / 6.
    QVERIFY(std::abs(kendallTau({1, 2, 3, 4}, {1, 2, 4, 3}) - 4.0 / 6.0) < 1e-12);
  }

  // trainscope-train --config with a tuned configuration: what it cannot apply is refused
  // before MPI starts (exit 2, the reason).
  void trainerRefusesWhatItCannotApply() {
    const QString train = QString(TRAINSCOPE_BIN_DIR) + "/trainscope-train";
    if (!QFileInfo::exists(train)) QSKIP("trainscope-train not built");
    QTemporaryDir dir;
    auto write = [&](const char* name, const QByteArray& body) {
      QFile f(dir.filePath(name));
      f.open(QIODevice::WriteOnly);
      f.write(body);
      return dir.filePath(name);
    };
    const QString unknown =
        write("u.json", R"({"schema":"trainscope.tuned-config","schema_version":1,"knobs":{"x.y":1}})");
    auto r = trainscope::test::runProgram(train, {"--config", unknown, "--no-agent", "--steps", "0"}, 60000);
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains("knob x.y is not a trainscope-train knob"), qPrintable(r.err));
    const QString perLayer = write("p.json", R"({"schema":"trainscope.tuned-config","schema_version":1,
        "knobs":{"disco.sparsity":0.5,"disco.sparsity.2":1}})");
    r = trainscope::test::runProgram(train, {"--config", perLayer, "--no-agent", "--steps", "0"}, 60000);
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains("differs from disco.sparsity"), qPrintable(r.err));
    const QString badValue = write("b.json", R"({"schema":"trainscope.tuned-config","schema_version":1,
        "knobs":{"dp.compression":"zip"}})");
    r = trainscope::test::runProgram(train, {"--config", badValue, "--no-agent", "--steps", "0"}, 60000);
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains("--compression must be one of"), qPrintable(r.err));
  }
};

QTEST_GUILESS_MAIN(TstTuneConfig)
#include "tst_tune_config.moc"
