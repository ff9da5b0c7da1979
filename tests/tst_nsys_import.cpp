// Nsight Systems SQLite exports: files built here with the schema as Nsight Systems 2024.6 writes
// it (tests/data/nsys/schema_3_16_1.sql), rows added per test; what the importer makes of them,
// and what `analyze` computes from them, checked against hand arithmetic. Bad input: an unknown
// schema version, missing tables and columns, wrong-typed values, a truncated file, a .nsys-rep.
#include <sqlite3.h>

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "cli_test_support.h"
#if TRAINSCOPE_TEST_GUI
#include <QSignalSpy>

#include "main_window.h"
#include "session_view.h"
#endif
#include "trainscope/core/analysis/analysis.h"
#include "trainscope/core/interop/nsys/nsys_import.h"
#include "trainscope/core/interop/trace_import.h"

using namespace trainscope::core;
using trainscope::test::runCli;

namespace {

constexpr int64_t U = 1000;  // 1 us in ns: times below are in us
constexpr int64_t kEpoch = 1'700'000'000'000'000'000;

int64_t gtid(int64_t pid, int64_t tid) {
  return (int64_t{1} << 56) | pid << 24 | tid;
}  // hw id in the top bits
int64_t gpid(int64_t pid) {
  return (int64_t{1} << 56) | pid << 24;
}

// An SQLite file with nsys's tables; exec() adds rows.
class NsysFile {
 public:
  // fresh: a new file (with nsys's tables when withSchema); else the existing file, to edit.
  explicit NsysFile(const QString& path, bool withSchema = true, bool fresh = true) : path_(path) {
    if (fresh) QFile::remove(path);
    sqlite3_open(path.toUtf8().constData(), &db_);
    if (withSchema) {
      QFile f(QString(TRAINSCOPE_TEST_DATA) + "/nsys/schema_3_16_1.sql");
      f.open(QIODevice::ReadOnly);
      exec(QString::fromUtf8(f.readAll()));
    }
  }
  ~NsysFile() { close(); }
  void close() {
    if (db_) sqlite3_close(db_);
    db_ = nullptr;
  }
  void exec(const QString& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.toUtf8().constData(), nullptr, nullptr, &err) != SQLITE_OK) {
      qWarning() << "SQL failed:" << err << sql.left(200);
      sqlite3_free(err);
    }
  }
  void string(int64_t id, const QString& v) {
    exec(QString("INSERT INTO StringIds VALUES(%1,'%2')").arg(id).arg(v));
  }
  // The columns nsys always fills; the rest NULL.
  void kernel(int64_t pid, int64_t stream, int64_t start, int64_t end, int64_t nameId, int64_t corr) {
    exec(
        QString("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start,end,deviceId,contextId,streamId,correlationId,"
                "globalPid,demangledName,shortName,registersPerThread,gridX,gridY,gridZ,blockX,blockY,blockZ,"
                "staticSharedMemory,dynamicSharedMemory,localMemoryPerThread,localMemoryTotal,gridId) "
                "VALUES(%1,%2,0,1,%3,%4,%5,%6,%6,32,1,1,1,128,1,1,0,0,0,0,%4)")
            .arg(start)
            .arg(end)
            .arg(stream)
            .arg(corr)
            .arg(gpid(pid))
            .arg(nameId));
  }
  void runtime(int64_t pid, int64_t start, int64_t end, int64_t nameId, int64_t corr) {
    exec(QString(
             "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start,end,eventClass,globalTid,correlationId,nameId,"
             "returnValue) VALUES(%1,%2,1,%3,%4,%5,0)")
             .arg(start)
             .arg(end)
             .arg(gtid(pid, pid))
             .arg(corr)
             .arg(nameId));
  }
  void nvtx(int64_t pid, int64_t start, int64_t end, const QString& text, int type = 59) {
    exec(QString("INSERT INTO NVTX_EVENTS (start,end,eventType,text,globalTid) VALUES(%1,%2,%3,'%4',%5)")
             .arg(start)
             .arg(end)
             .arg(type)
             .arg(text)
             .arg(gtid(pid, pid)));
  }
  void memcpy(int64_t pid, int64_t stream, int64_t start, int64_t end, int64_t bytes, int kind,
              int64_t corr) {
    exec(
        QString("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start,end,deviceId,contextId,streamId,correlationId,"
                "globalPid,bytes,copyKind) VALUES(%1,%2,0,1,%3,%4,%5,%6,%7)")
            .arg(start)
            .arg(end)
            .arg(stream)
            .arg(corr)
            .arg(gpid(pid))
            .arg(bytes)
            .arg(kind));
  }
  void memset(int64_t pid, int64_t stream, int64_t start, int64_t end, int64_t bytes) {
    exec(QString(
             "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET (start,end,deviceId,contextId,streamId,globalPid,value,"
             "bytes) VALUES(%1,%2,0,1,%3,%4,0,%5)")
             .arg(start)
             .arg(end)
             .arg(stream)
             .arg(gpid(pid))
             .arg(bytes));
  }
  void epoch(int64_t ns) {
    exec(QString("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES(%1,'','')").arg(ns));
  }
  std::filesystem::path path() const { return path_.toStdString(); }

 private:
  QString path_;
  sqlite3* db_ = nullptr;
};

enum : int64_t { kGemm = 1, kAllReduce = 2, kLaunch = 3, kMain = 4, kElementwise = 5 };

void names(NsysFile& f, int64_t pid) {
  f.string(kGemm, "void gemm_kernel<float>(float const*, float*)");
  f.string(kAllReduce, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
  f.string(kLaunch, "cudaLaunchKernel_v7000");
  f.string(kMain, "python3");
  f.string(kElementwise, "void at::native::elementwise_kernel<128, 2>()");
  f.exec(QString("INSERT INTO ThreadNames VALUES(%1,0,%2)").arg(kMain).arg(gtid(pid, pid)));
}

// Rank 0 (pid 1000), times in us. Steps #1 [0,100), #2 [100,200).
//  step 1: gemm [10,40) [45,70) on stream 7; all-reduce [30,60) [75,90) on stream 13;
//          Memcpy HtoD [90,95) (memory: neither compute nor communication).
//          compute 55, comm 45, overlap [30,40)+[45,60) = 25: compute-only 30, exposed 20, idle 25.
//  step 2: gemm [110,150); all-reduce [140,170): overlap 10: compute-only 30, exposed 20, idle 40.
// Every kernel is launched by a cudaLaunchKernel 2 us before it starts (correlation ids 1..).
void writeRank0(NsysFile& f, int64_t epoch, int64_t offset) {
  const int64_t pid = 1000;
  names(f, pid);
  f.epoch(epoch);
  auto t = [&](int64_t us) { return us * U - offset; };
  f.nvtx(pid, t(0), t(100), "ProfilerStep#1");
  f.nvtx(pid, t(100), t(200), "ProfilerStep#2");
  f.nvtx(pid, t(5), t(20), "forward");
  f.nvtx(pid, t(50), t(50), "checkpoint", 34);
  int64_t corr = 1;
  auto k = [&](int64_t stream, int64_t s, int64_t e, int64_t name) {
    f.runtime(pid, t(s - 2), t(s - 1), kLaunch, corr);
    f.kernel(pid, stream, t(s), t(e), name, corr++);
  };
  k(7, 10, 40, kGemm);
  k(7, 45, 70, kGemm);
  k(13, 30, 60, kAllReduce);
  k(13, 75, 90, kAllReduce);
  f.memcpy(pid, 7, t(90), t(95), 4096, 1, 99);
  f.memset(pid, 7, t(96), t(97), 512);
  k(7, 110, 150, kGemm);
  k(13, 140, 170, kAllReduce);
}

// Rank 1 (pid 1001). step 1: compute [0,50), all-reduce [50,80): compute-only 50, exposed 30,
// idle 20. step 2: compute [100,180), all-reduce [150,190): overlap 30: compute-only 50,
// exposed 10, idle 10.
void writeRank1(NsysFile& f, int64_t epoch, int64_t offset) {
  const int64_t pid = 1001;
  names(f, pid);
  f.epoch(epoch);
  auto t = [&](int64_t us) { return us * U - offset; };
  f.nvtx(pid, t(0), t(100), "ProfilerStep#1");
  f.nvtx(pid, t(100), t(200), "ProfilerStep#2");
  f.kernel(pid, 7, t(0), t(50), kElementwise, 1);
  f.kernel(pid, 13, t(50), t(80), kAllReduce, 2);
  f.kernel(pid, 7, t(100), t(180), kGemm, 3);
  f.kernel(pid, 13, t(150), t(190), kAllReduce, 4);
}

const Attr* attrOf(TraceStore& s, TrackId t, size_t i, AttrKey k) {
  return s.events(t).findAttr(i, k);
}

QString customString(TraceStore& s, TrackId t, size_t i, std::string_view key) {
  const auto id = s.strings().find(key);
  if (!id) return {};
  for (const Attr& a : s.events(t).attrs(i))
    if (a.key == kCustomAttrBase + *id) return QString::fromStdString(std::string(s.str(a.asString())));
  return {};
}

std::optional<TrackId> findTrack(TraceStore& s, RankId r, TrackKind k, const std::string& name) {
  for (TrackId t = 0; t < s.trackCount(); ++t)
    if (s.track(t).rank == r && s.track(t).kind == k && s.track(t).name == name) return t;
  return std::nullopt;
}

}  // namespace

class TstNsysImport : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() { QVERIFY(dir_.isValid()); }

  // One file: names from StringIds, globalTid/globalPid decoded, tracks, kinds, attributes.
  void oneFileModel() {
    const QString path = dir_.filePath("one_rank0.sqlite");
    {
      NsysFile f(path);
      writeRank0(f, kEpoch, 0);
    }
    QVERIFY(looksLikeNsysExport(path.toStdString()));
    auto r = importNsysSqlite(path.toStdString());
    QVERIFY2(r, r ? "" : r.status().message().c_str());
    TraceStore& s = r.value();
    QCOMPARE(s.ranks().size(), size_t{1});
    QCOMPARE(s.ranks().begin()->second.pid, int64_t{1000});
    QCOMPARE(s.ranks().begin()->second.device, 0);
    QCOMPARE(s.metadata().at("import_format"), std::string("nsys"));
    QCOMPARE(s.metadata().at("nsys_export_schema_version"), std::string("3.16.1"));
    QCOMPARE(s.metadata().at("nsys_product_version"), std::string("2024.6.2.225"));
    QCOMPARE(s.metadata().at("utcEpochNs"), std::to_string(kEpoch));

    auto cpu = findTrack(s, 0, TrackKind::CpuThread, "python3");  // ThreadNames
    auto compute = findTrack(s, 0, TrackKind::CudaStream, "GPU 0 stream 7");
    auto comm = findTrack(s, 0, TrackKind::CudaStream, "GPU 0 stream 13");
    QVERIFY(cpu && compute && comm);
    QCOMPARE(s.track(*cpu).externalId, int64_t{1000});  // tid = globalTid & 0xFFFFFF

    // CPU thread: 2 steps, 1 range, 1 mark, 6 launches.
    const TrackEvents& c = s.events(*cpu);
    QCOMPARE(c.size(), size_t{10});
    QCOMPARE(s.str(c.name(0)), std::string_view("ProfilerStep#1"));
    QCOMPARE(c.kind(0), EventKind::Step);
    QCOMPARE(c.start(0), kEpoch);  // utcEpochNs added
    QCOMPARE(attrOf(s, *cpu, 0, AttrKey::Step)->asInt(), int64_t{1});
    size_t marks = 0, launches = 0, ranges = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      if (c.kind(i) == EventKind::Marker) ++marks;
      if (s.str(c.name(i)) == "cudaLaunchKernel_v7000") ++launches;
      if (s.str(c.name(i)) == "forward") ranges += c.kind(i) == EventKind::Range;
    }
    QCOMPARE(marks, size_t{1});
    QCOMPARE(launches, size_t{6});
    QCOMPARE(ranges, size_t{1});

    // Compute stream: 3 gemm kernels, the memcpy and the memset.
    const TrackEvents& k = s.events(*compute);
    QCOMPARE(k.size(), size_t{5});
    QCOMPARE(k.kind(0), EventKind::Kernel);
    QCOMPARE(s.str(k.name(0)), std::string_view("void gemm_kernel<float>(float const*, float*)"));
    QCOMPARE(k.start(0) - kEpoch, 10 * U);
    QCOMPARE(attrOf(s, *compute, 0, AttrKey::Stream)->asInt(), int64_t{7});
    size_t copies = 0, sets = 0;
    for (size_t i = 0; i < k.size(); ++i) {
      if (k.kind(i) == EventKind::Memcpy) {
        ++copies;
        QCOMPARE(s.str(k.name(i)), std::string_view("Memcpy HtoD"));
        QCOMPARE(customString(s, *compute, i, "copy_kind"),
                 QString("Host-to-Device"));  // ENUM_CUDA_MEMCPY_OPER
        QCOMPARE(attrOf(s, *compute, i, AttrKey::Bytes)->asInt(), int64_t{4096});
      }
      if (k.kind(i) == EventKind::Memset) {
        ++sets;
        QCOMPARE(attrOf(s, *compute, i, AttrKey::Bytes)->asInt(), int64_t{512});
      }
    }
    QCOMPARE(copies, size_t{1});
    QCOMPARE(sets, size_t{1});

    // NCCL kernels: collectives with the collective, algorithm and protocol from the name; the
    // all-reduces of a step are its buckets, in start order.
    const TrackEvents& n = s.events(*comm);
    QCOMPARE(n.size(), size_t{3});
    for (size_t i = 0; i < n.size(); ++i) {
      QCOMPARE(n.kind(i), EventKind::Collective);
      QCOMPARE(customString(s, *comm, i, "collective"), QString("AllReduce"));
      QCOMPARE(s.str(attrOf(s, *comm, i, AttrKey::Algorithm)->asString()), std::string_view("RING"));
      QCOMPARE(s.str(attrOf(s, *comm, i, AttrKey::Protocol)->asString()), std::string_view("LL"));
    }
    QCOMPARE(attrOf(s, *comm, 0, AttrKey::Bucket)->asInt(), int64_t{0});
    QCOMPARE(attrOf(s, *comm, 1, AttrKey::Bucket)->asInt(), int64_t{1});
    QCOMPARE(attrOf(s, *comm, 2, AttrKey::Bucket)->asInt(), int64_t{0});  // step 2's first

    // The launch and its kernel share correlation id and flow id: the all-reduce [30,60) is
    // correlation 3, launched at 28 us.
    QCOMPARE(attrOf(s, *comm, 0, AttrKey::CorrelationId)->asInt(), int64_t{3});
    const int64_t flow = attrOf(s, *comm, 0, AttrKey::FlowId)->asInt();
    bool launchFound = false;
    for (size_t i = 0; i < c.size(); ++i)
      if (const Attr* a = attrOf(s, *cpu, i, AttrKey::FlowId); a && a->asInt() == flow) {
        launchFound = true;
        QCOMPARE(c.start(i) - kEpoch, 28 * U);
        QCOMPARE(attrOf(s, *cpu, i, AttrKey::CorrelationId)->asInt(), int64_t{3});
      }
    QVERIFY(launchFound);
  }

  // One report holding two processes (nsys profile around a launcher): each is a rank, in pid order.
  void processesAreRanks() {
    const QString path = dir_.filePath("two_processes.sqlite");
    {
      NsysFile f(path);
      f.string(1, "k");
      f.nvtx(2000, 0, 10, "a");  // seen first, but the higher pid
      f.kernel(2000, 7, 0, 5, 1, 1);
      f.kernel(1500, 7, 0, 5, 1, 1);
    }
    auto r = importNsysSqlite(path.toStdString());
    QVERIFY2(r, r ? "" : r.status().message().c_str());
    QCOMPARE(r->ranks().size(), size_t{2});
    QCOMPARE(r->rank(0)->pid, int64_t{1500});
    QCOMPARE(r->rank(1)->pid, int64_t{2000});
    QCOMPARE(r->metadata().at("nsys_export_schema_version"), std::string("3.16.1"));
    QVERIFY(!r->metadata().count("utcEpochNs"));  // no session start table rows
  }

  // Two rank files through the CLI, then analyze --json: the breakdown, data_parallel and buckets
  // equal the hand arithmetic above writeRank0/writeRank1. Rank 1's capture started 3 us later
  // (utcEpochNs) and its file times are 3 us smaller: on the session clock the steps coincide.
  void twoRanksAnalyze() {
    const QString r0 = dir_.filePath("job_rank0.sqlite"), r1 = dir_.filePath("job_rank1.sqlite");
    {
      NsysFile a(r0), b(r1);
      writeRank0(a, kEpoch, 0);
      writeRank1(b, kEpoch + 3 * U, 3 * U);
    }
    const QString out = dir_.filePath("two.tsdb");
    // Given in reverse order: the ranks come from the file names.
    auto imp = runCli({"import", r1, r0, "--out", out});
    QVERIFY2(imp.code == 0, qPrintable(imp.err + imp.out));
    QVERIFY2(imp.out.contains("job_rank1.sqlite -> rank 1 (from file name)"), qPrintable(imp.out));
    QVERIFY2(imp.out.contains("clock alignment: utcEpochNs"), qPrintable(imp.out));

    auto info = runCli({"info", out, "--json"});
    QCOMPARE(info.code, 0);

    auto an = runCli({"analyze", out, "--json"});
    QVERIFY2(an.code == 0, qPrintable(an.err));
    const QJsonObject j = QJsonDocument::fromJson(an.out.toUtf8()).object();
    QCOMPARE(j["steps"].toObject()["count"].toInt(), 2);
    QCOMPARE(j["steps"].toObject()["step_time_ms"].toObject()["mean"].toDouble(), 0.1);
    const QJsonArray per = j["breakdown"].toObject()["per_rank"].toArray();
    QCOMPARE(per.size(), 2);
    auto near = [](double a, double b) { return std::abs(a - b) < 1e-9; };
    struct Expect {
      double compute, overlapped, exposed, idle;
    };
    const Expect e[2] = {{0.030, 0.0175, 0.020, 0.0325}, {0.050, 0.015, 0.020, 0.015}};
    for (int r = 0; r < 2; ++r) {
      const QJsonObject b = per[r].toObject();
      QCOMPARE(b["rank"].toInt(), r);
      QVERIFY2(near(b["compute_ms"].toDouble(), e[r].compute), qPrintable(QJsonDocument(b).toJson()));
      QVERIFY2(near(b["overlapped_comm_ms"].toDouble(), e[r].overlapped),
               qPrintable(QJsonDocument(b).toJson()));
      QVERIFY2(near(b["exposed_comm_ms"].toDouble(), e[r].exposed), qPrintable(QJsonDocument(b).toJson()));
      QVERIFY2(near(b["idle_ms"].toDouble(), e[r].idle), qPrintable(QJsonDocument(b).toJson()));
    }
    // data_parallel: rank 0 hides 35 of 75 us, rank 1 30 of 70; exposed 20 us per step on both.
    const QJsonObject dp = j["data_parallel"].toObject();
    QVERIFY2(!dp.isEmpty(), qPrintable(an.out.left(2000)));
    QVERIFY(near(dp["overlap_ratio"].toDouble(), (35.0 / 75 + 30.0 / 70) / 2));
    QVERIFY(near(dp["exposed_comm_ms"].toDouble(), 0.020));
    // Bucket 0: rank 0 hides 25 + 10 of 30 + 30, rank 1 0 + 30 of 30 + 40; bucket 1 (rank 0's
    // [75,90) only): nothing hidden.
    const QJsonArray buckets = dp["buckets"].toArray();
    QCOMPARE(buckets.size(), 2);
    QVERIFY(near(buckets[0].toObject()["overlap_ratio"].toDouble(), (35.0 / 60 + 30.0 / 70) / 2));
    QVERIFY(near(buckets[1].toObject()["overlap_ratio"].toDouble(), 0.0));

    // The session says how the clocks were related and where each rank came from.
    auto loaded = importTraceFiles({out.toStdString()});
    QVERIFY(!loaded);  // a .tsdb is not a trace to import (SQLite, but not nsys's tables)
    QVERIFY2(loaded.status().message().find("a Trainscope session (.tsdb)") != std::string::npos,
             loaded.status().message().c_str());
  }

  // NVTX names through textId; registrations (eventType 75, a domain) and a range without an
  // end are skipped and counted. Files named without a rank get ranks in the order given, and a
  // file is known for an nsys export by its SQLite header whatever its name.
  void textIdsOrderAndHeader() {
    const QString a = dir_.filePath("b_node.db"), b = dir_.filePath("a_node.db");
    {
      NsysFile f(a), g(b);
      writeRank1(f, kEpoch, 0);
      writeRank1(g, kEpoch, 0);
      f.string(40, "registered range");
      f.exec(QString("INSERT INTO NVTX_EVENTS (start,end,eventType,textId,globalTid) VALUES(10,20,59,40,%1)")
                 .arg(gtid(1001, 1001)));
      f.exec(
          QString(
              "INSERT INTO NVTX_EVENTS (start,end,eventType,text,globalTid) VALUES(5,NULL,75,'my domain',%1)")
              .arg(gtid(1001, 1001)));
      f.exec(
          QString("INSERT INTO NVTX_EVENTS (start,end,eventType,text,globalTid) VALUES(30,NULL,59,'open',%1)")
              .arg(gtid(1001, 1001)));
    }
    auto one = importNsysSqlite(a.toStdString());
    QVERIFY2(one, one ? "" : one.status().message().c_str());
    QCOMPARE(one->metadata().at("import_skipped_events"), std::string("2"));
    auto cpu = findTrack(*one, 0, TrackKind::CpuThread, "python3");
    QVERIFY(cpu);
    bool found = false;
    for (size_t i = 0; i < one->events(*cpu).size(); ++i)
      found = found || (one->str(one->events(*cpu).name(i)) == "registered range" &&
                        one->events(*cpu).kind(i) == EventKind::Range);
    QVERIFY(found);

    const QString out = dir_.filePath("order.tsdb");
    auto cli = runCli({"import", a, b, "--out", out});  // .db: told by the header
    QVERIFY2(cli.code == 0, qPrintable(cli.err));
    QVERIFY2(cli.out.contains("b_node.db -> rank 0 (from order)"), qPrintable(cli.out));
    QVERIFY2(cli.out.contains("a_node.db -> rank 1 (from order)"), qPrintable(cli.out));
  }

  // FSDP on NCCL: the gradients' reduce-scatters are buckets as DDP's all-reduces are; the
  // parameters' all-gathers are communication, not buckets (issue 38). Rank 0's steps, times in
  // us: AG [0,10) and [100,110), RS [40,60) and [150,170) on stream 13, gemm [10,50) and
  // [110,160) on stream 7. Step 1 G = [40,60), hidden [40,50); step 2 G = [150,170), hidden
  // [150,160): data_parallel.overlap_ratio = 20 / 40.
  void reduceScatterIsGradient() {
    const QString path = dir_.filePath("fsdp_rank0.sqlite");
    enum : int64_t { kReduceScatter = 6, kAllGather = 7 };
    {
      NsysFile f(path);
      names(f, 1000);
      f.epoch(kEpoch);
      f.string(kReduceScatter, "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
      f.string(kAllGather, "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
      f.nvtx(1000, 0, 100 * U, "ProfilerStep#1");
      f.nvtx(1000, 100 * U, 200 * U, "ProfilerStep#2");
      f.kernel(1000, 13, 0, 10 * U, kAllGather, 1);
      f.kernel(1000, 7, 10 * U, 50 * U, kGemm, 2);
      f.kernel(1000, 13, 40 * U, 60 * U, kReduceScatter, 3);
      f.kernel(1000, 13, 100 * U, 110 * U, kAllGather, 4);
      f.kernel(1000, 7, 110 * U, 160 * U, kGemm, 5);
      f.kernel(1000, 13, 150 * U, 170 * U, kReduceScatter, 6);
    }
    auto r = importNsysSqlite(path.toStdString());
    QVERIFY2(r, r ? "" : r.status().message().c_str());
    TraceStore& s = r.value();
    auto comm = findTrack(s, 0, TrackKind::CudaStream, "GPU 0 stream 13");
    QVERIFY(comm);
    const TrackEvents& n = s.events(*comm);
    QCOMPARE(n.size(), size_t{4});
    for (size_t i = 0; i < n.size(); ++i) {
      QCOMPARE(n.kind(i), EventKind::Collective);
      const bool rs = customString(s, *comm, i, "collective") == "ReduceScatter";
      QCOMPARE(rs, i % 2 == 1);
      if (rs)
        QCOMPARE(attrOf(s, *comm, i, AttrKey::Bucket)->asInt(), int64_t{0});
      else
        QVERIFY(attrOf(s, *comm, i, AttrKey::Bucket) == nullptr);
    }
    const AnalysisResult a = analyzeStore(s);
    QVERIFY(a.dataParallel.present);
    QVERIFY2(std::abs(a.dataParallel.overlapRatio - 0.5) < 1e-12, qPrintable(QString::number(a.dataParallel.overlapRatio)));
  }

  // Without utcEpochNs on every file, the ranks are aligned on their first NCCL collective.
  void alignOnFirstCollective() {
    const QString r0 = dir_.filePath("al_rank0.sqlite"), r1 = dir_.filePath("al_rank1.sqlite");
    {
      NsysFile a(r0), b(r1);
      writeRank0(a, kEpoch, 0);
      b.string(kAllReduce, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
      b.kernel(1001, 13, 500 * U, 560 * U, kAllReduce, 1);  // ends with rank 0's first (60 us)
    }
    auto m = importNsysSqliteFiles({r0.toStdString(), r1.toStdString()});
    QVERIFY2(m, m ? "" : m.status().message().c_str());
    QCOMPARE(m->store.metadata().at("clock_alignment"), std::string("first_collective"));
    auto t = findTrack(m->store, 1, TrackKind::CudaStream, "GPU 0 stream 13");
    QVERIFY(t);
    QCOMPARE(m->store.events(*t).end(0), 60 * U);  // rank 0's time base was taken off
  }

  void unknownSchemaVersion() {
    const QString path = dir_.filePath("v4.sqlite");
    {
      NsysFile f(path);
      writeRank0(f, kEpoch, 0);
      f.exec("UPDATE META_DATA_EXPORT SET value='4.0.0' WHERE name='EXPORT_SCHEMA_VERSION'");
    }
    for (bool partial : {false, true}) {
      auto r = importNsysSqlite(path.toStdString(), {.partial = partial});
      QVERIFY(!r);
      const QString msg = QString::fromStdString(r.status().message());
      QVERIFY2(msg.startsWith(path) && msg.contains("'4.0.0'") && msg.contains("not supported"),
               qPrintable(msg));
    }
    const QString out = dir_.filePath("v4.tsdb");
    auto cli = runCli({"import", path, "--out", out});
    QCOMPARE(cli.code, 1);
    QVERIFY2(cli.err.contains("4.0.0"), qPrintable(cli.err));
    QVERIFY(!QFile::exists(out));
    QCOMPARE(QDir(dir_.path()).entryList({"v4.tsdb*"}).size(), 0);  // nothing half written

    // Older exports keep the version in EXPORT_META_DATA: a known major is read, an unreadable
    // version refused.
    {
      NsysFile f(path, false, false);
      f.exec("ALTER TABLE META_DATA_EXPORT RENAME TO EXPORT_META_DATA");
      f.exec("UPDATE EXPORT_META_DATA SET value='2.9.0' WHERE name='EXPORT_SCHEMA_VERSION'");
    }
    auto old = importNsysSqlite(path.toStdString());
    QVERIFY2(old, old ? "" : old.status().message().c_str());
    QCOMPARE(old->metadata().at("nsys_export_schema_version"), std::string("2.9.0"));
    {
      NsysFile f(path, false, false);
      f.exec("UPDATE EXPORT_META_DATA SET value='three' WHERE name='EXPORT_SCHEMA_VERSION'");
    }
    auto unreadable = importNsysSqlite(path.toStdString());
    QVERIFY(!unreadable);
    QVERIFY2(unreadable.status().message().find("'three'") != std::string::npos,
             unreadable.status().message().c_str());
  }

  void missingTablesAndColumns() {
    const QString none = dir_.filePath("empty.sqlite");
    {
      NsysFile f(none, false);
      f.exec("CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)");
    }
    auto r = importNsysSqlite(none.toStdString());
    QVERIFY(!r);
    QVERIFY2(r.status().message().find("no Nsight Systems activity tables") != std::string::npos,
             r.status().message().c_str());

    const QString noStrings = dir_.filePath("nostrings.sqlite");
    {
      NsysFile f(noStrings);
      f.exec("DROP TABLE StringIds");
    }
    r = importNsysSqlite(noStrings.toStdString());
    QVERIFY(!r);
    QVERIFY2(r.status().message().find("no StringIds table") != std::string::npos,
             r.status().message().c_str());

    const QString noColumn = dir_.filePath("nocolumn.sqlite");
    {
      NsysFile f(noColumn);
      f.exec("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL");
      f.exec(
          "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, "
          "deviceId INTEGER NOT NULL, shortName INTEGER NOT NULL)");
    }
    r = importNsysSqlite(noColumn.toStdString());
    QVERIFY(!r);
    QVERIFY2(
        r.status().message().find("CUPTI_ACTIVITY_KIND_KERNEL has no column 'streamId'") != std::string::npos,
        r.status().message().c_str());
  }

  // Issue 40: an 80 KB export whose activity table is a view joining a table with itself ran out
  // of memory (5.4 GB) or never finished. Views are refused at once, named.
  void viewsAreRefused() {
    const QString path = dir_.filePath("view.sqlite");
    {
      NsysFile f(path);
      f.exec("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL");
      f.exec("CREATE TABLE K (start INTEGER, end INTEGER)");
      f.exec("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000) "
             "INSERT INTO K SELECT i, i + 1 FROM n");
      f.exec("CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS SELECT a.start AS start, b.end AS end FROM K a, K b, K c");
    }
    auto r = importNsysSqlite(path.toStdString());
    QVERIFY(!r);
    QVERIFY2(r.status().message().find("\"CUPTI_ACTIVITY_KIND_KERNEL\" is a view, not a table") != std::string::npos,
             r.status().message().c_str());
  }

  // A text start, a real in a kernel's name id, a name id not in StringIds, an end before its
  // start: each named by table and rowid; --partial skips those rows and counts them.
  void wrongTypedValues() {
    const QString path = dir_.filePath("types.sqlite");
    {
      NsysFile f(path);
      writeRank0(f, kEpoch, 0);
      f.exec("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start='abc' WHERE rowid=2");
    }
    auto r = importNsysSqlite(path.toStdString());
    QVERIFY(!r);
    QCOMPARE(r.status().code(), ErrorCode::BadTrace);
    const std::string msg = r.status().message();
    QVERIFY2(
        msg ==
            path.toStdString() +
                ": CUPTI_ACTIVITY_KIND_KERNEL rowid 2: column start holds text, expected an integer ('abc')",
        msg.c_str());
    {
      NsysFile f(path, false, false);
      f.exec("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName=2.5 WHERE rowid=3");
      f.exec("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId=777 WHERE rowid=1");
      f.exec("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET end=0 WHERE rowid=1");
    }
    auto p = importNsysSqlite(path.toStdString(), {.partial = true});
    QVERIFY2(p, p ? "" : p.status().message().c_str());
    QCOMPARE(p->metadata().at("import_invalid_events"), std::string("4"));
    QCOMPARE(p->eventCount(EventKind::Memcpy), size_t{0});
    QCOMPARE(p->eventCount(EventKind::Kernel) + p->eventCount(EventKind::Collective), size_t{6 - 2});
    QVERIFY2(p->metadata().at("import_first_error").find("rowid 1: string id 777 is not in StringIds") !=
                 std::string::npos,
             p->metadata().at("import_first_error").c_str());

    // The CLI says what --partial skipped.
    const QString out = dir_.filePath("types.tsdb");
    auto cli = runCli({"import", path, "--out", out, "--partial"});
    QVERIFY2(cli.code == 0, qPrintable(cli.err));
    QVERIFY2(cli.out.contains("skipped 4 invalid events (--partial)"), qPrintable(cli.out));
  }

  // Timestamps that adding utcEpochNs would overflow are bad rows, not undefined behaviour.
  void timestampOutOfRange() {
    const QString path = dir_.filePath("far.sqlite");
    {
      NsysFile f(path);
      writeRank1(f, kEpoch, 0);
      f.exec("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end=9000000000000000000 WHERE rowid=1");
    }
    auto r = importNsysSqlite(path.toStdString());
    QVERIFY(!r);
    QVERIFY2(r.status().message().find("CUPTI_ACTIVITY_KIND_KERNEL rowid 1: timestamp out of range") !=
                 std::string::npos,
             r.status().message().c_str());
  }

  void truncatedFile() {
    const QString path = dir_.filePath("cut.sqlite");
    {
      NsysFile f(path);
      writeRank0(f, kEpoch, 0);
    }
    const auto size = std::filesystem::file_size(path.toStdString());
    std::filesystem::resize_file(path.toStdString(), size / 2);
    auto r = importNsysSqlite(path.toStdString());
    QVERIFY(!r);
    QCOMPARE(r.status().code(), ErrorCode::Truncated);
    QVERIFY2(r.status().message().starts_with(path.toStdString() + ": truncated"),
             r.status().message().c_str());
    const QString out = dir_.filePath("cut.tsdb");
    auto cli = runCli({"import", path, "--out", out});
    QCOMPARE(cli.code, 1);
    QVERIFY2(cli.err.contains("truncated"), qPrintable(cli.err));
    QVERIFY(!QFile::exists(out));
  }

  // Damaged bytes anywhere in a valid export: an error naming the file, or (--partial) a store;
  // never a crash. Deterministic offsets, one damaged byte run per import.
  void damagedBytesNeverCrash() {
    const QString good = dir_.filePath("good.sqlite"), bad = dir_.filePath("damaged.sqlite");
    {
      NsysFile f(good);
      writeRank0(f, kEpoch, 0);
    }
    const auto size = static_cast<size_t>(std::filesystem::file_size(good.toStdString()));
    std::string bytes(size, '\0');
    std::ifstream(good.toStdString(), std::ios::binary)
        .read(bytes.data(), static_cast<std::streamsize>(size));
    uint32_t x = 12345;
    int errors = 0, partialStores = 0;
    for (int i = 0; i < 150; ++i) {
      x = x * 1664525u + 1013904223u;
      std::string copy = bytes;
      const size_t at = 100 + x % (size - 116);
      for (size_t k = 0; k < 16; ++k) copy[at + k] = static_cast<char>((x >> (k % 4 * 8)) ^ copy[at + k]);
      std::ofstream(bad.toStdString(), std::ios::binary | std::ios::trunc)
          .write(copy.data(), static_cast<std::streamsize>(size));
      auto r = importNsysSqlite(bad.toStdString());
      if (!r) {
        ++errors;
        QVERIFY2(r.status().message().starts_with(bad.toStdString() + ":"), r.status().message().c_str());
      }
      auto p = importNsysSqlite(bad.toStdString(), {.partial = true});
      if (p) ++partialStores;
    }
    qInfo("150 damaged copies: %d refused, %d imported under --partial", errors, partialStores);
    // A cut file under --partial keeps what the remaining pages hold.
    std::ofstream(bad.toStdString(), std::ios::binary | std::ios::trunc)
        .write(bytes.data(), static_cast<std::streamsize>(size * 3 / 4));
    auto cut = importNsysSqlite(bad.toStdString(), {.partial = true});
    if (cut) QVERIFY(cut->metadata().at("import_first_error").find("truncated") != std::string::npos);
  }

  void notSqliteAndReports() {
    const QString rep = dir_.filePath("profile.nsys-rep");
    { std::ofstream(rep.toStdString()) << "NSYS report bytes"; }
    auto cli = runCli({"import", rep, "--out", dir_.filePath("rep.tsdb")});
    QCOMPARE(cli.code, 1);
    QVERIFY2(cli.err.contains("nsys export --type sqlite"), qPrintable(cli.err));
    auto r = importNsysSqlite(rep.toStdString());
    QVERIFY(!r);
    QCOMPARE(r.status().code(), ErrorCode::NotSqlite);
    QVERIFY2(r.status().message().find("nsys export --type sqlite") != std::string::npos,
             r.status().message().c_str());

    const QString text = dir_.filePath("text.sqlite");
    { std::ofstream(text.toStdString()) << "not a database"; }
    r = importNsysSqlite(text.toStdString());
    QVERIFY(!r);
    QCOMPARE(r.status().code(), ErrorCode::NotSqlite);

    // JSON and nsys files do not mix in one session.
    const QString json = dir_.filePath("rank0.json");
    { std::ofstream(json.toStdString()) << R"({"traceEvents": []})"; }
    const QString sq = dir_.filePath("mix_rank1.sqlite");
    {
      NsysFile f(sq);
      writeRank1(f, kEpoch, 0);
    }
    auto mixed = importTraceFiles({json.toStdString(), sq.toStdString()});
    QVERIFY(!mixed);
    QVERIFY2(mixed.status().message().find("cannot combine") != std::string::npos,
             mixed.status().message().c_str());
  }

#if TRAINSCOPE_TEST_GUI
  // File -> Open in the real main window (offscreen): one export, two ranks' exports as one
  // session, and a .nsys-rep refused with the export command.
  void guiOpensExports() {
    const QString r0 = dir_.filePath("gui_rank0.sqlite"), r1 = dir_.filePath("gui_rank1.sqlite");
    {
      NsysFile a(r0), b(r1);
      writeRank0(a, kEpoch, 0);
      writeRank1(b, kEpoch, 0);
    }
    auto one = importNsysSqlite(r0.toStdString());
    QVERIFY(one);
    trainscope::app::MainWindow w;
    QSignalSpy loaded(&w, &trainscope::app::MainWindow::loaded);
    QSignalSpy failed(&w, &trainscope::app::MainWindow::failed);
    auto wait = [](QSignalSpy& spy, int n) {
      for (int i = 0; i < 800 && spy.count() < n; ++i) QTest::qWait(25);
      return spy.count() >= n;
    };
    w.openFile(r0);
    QVERIFY(wait(loaded, 1));
    QCOMPARE(w.currentView()->data()->store.eventCount(), one->eventCount());
    w.openFiles({r1, r0});
    QVERIFY(wait(loaded, 2));
    QCOMPARE(w.currentView()->data()->store.ranks().size(), size_t{2});
    QCOMPARE(w.currentView()->title(), QString("2 files"));
    const QString rep = dir_.filePath("gui.nsys-rep");
    { std::ofstream(rep.toStdString()) << "report"; }
    w.openFile(rep);
    QVERIFY(wait(failed, 1));
    QVERIFY2(failed.at(0).at(1).toString().contains("nsys export --type sqlite"),
             qPrintable(failed.at(0).at(1).toString()));
  }
#endif

 private:
  QTemporaryDir dir_;
};

#if TRAINSCOPE_TEST_GUI
QTEST_MAIN(TstNsysImport)
#else
QTEST_GUILESS_MAIN(TstNsysImport)
#endif
#include "tst_nsys_import.moc"
