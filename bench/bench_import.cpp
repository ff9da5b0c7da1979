// Import speed and memory of Chrome/Kineto traces (docs/BENCHMARKS.md, "Importing PyTorch
// traces"). One file per process, so that peak RSS is this import's:
//   bench_import stream FILE   -- importChromeTraceFile: streamed through zlib (plain or .gz), read
//                                 by the fast reader (interop/chrome/fast_reader.h)
//   bench_import reference FILE -- the same with the reference reader (nlohmann SAX) alone: the
//                                 reader before issue 37
//   bench_import dir DIR       -- importChromeTraceFiles: every rank file of DIR into one session
//   bench_import dir-reference DIR -- the same with the reference reader alone
//   bench_import whole FILE    -- the previous path: the whole file read into a string, then parsed
//   bench_import make-nsys FILE N  -- writes an Nsight Systems export (schema 3.16.1) with N kernels
//                                 (10 % NCCL all-reduces), N cudaLaunchKernel calls, a step per 1000
//   bench_import nsys FILE     -- importNsysSqlite
//   bench_import nsys-floor FILE -- the anchor: a bare SQLite loop reading the same columns of the
//                                 kernel, runtime and NVTX tables, nothing kept
// Prints one JSON line: bytes (on disk), json_events (traceEvents entries), events (kept),
// wall_s, cpu_s, MB/s and events/s (per CPU second: the machine is shared), peak_rss_mb.
#include <sqlite3.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "trainscope/core/interop/chrome_trace.h"
#include "trainscope/core/interop/nsys/nsys_import.h"

using namespace trainscope::core;

namespace {

int makeNsys(const std::filesystem::path& path, long n) {
  std::filesystem::remove(path);
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) return 1;
  std::ifstream schema(std::string(TRAINSCOPE_SOURCE_DIR) + "/tests/data/nsys/schema_3_16_1.sql");
  std::stringstream ss;
  ss << schema.rdbuf();
  auto exec = [&](const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      std::fprintf(stderr, "%s\n", err);
      std::exit(1);
    }
  };
  exec(ss.str());
  exec("BEGIN");
  for (int i = 0; i < 20; ++i)
    exec("INSERT INTO StringIds VALUES(" + std::to_string(i + 1) + ",'void compute_kernel_" +
         std::to_string(i) + "<float, 128>(float const*, float*, int)')");
  exec(
      "INSERT INTO StringIds "
      "VALUES(100,'ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)')");
  exec("INSERT INTO StringIds VALUES(101,'cudaLaunchKernel_v7000')");
  exec("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES(1700000000000000000,'','')");
  const int64_t pid = 4242, gpid = pid << 24, gtid = gpid | pid;
  sqlite3_stmt *k = nullptr, *r = nullptr, *v = nullptr;
  sqlite3_prepare_v2(
      db,
      "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start,end,deviceId,contextId,streamId,correlationId,"
      "globalPid,demangledName,shortName,registersPerThread,gridX,gridY,gridZ,blockX,blockY,blockZ,"
      "staticSharedMemory,dynamicSharedMemory,localMemoryPerThread,localMemoryTotal,gridId) "
      "VALUES(?,?,0,1,?,?,?,?,?,32,64,1,1,128,1,1,0,0,0,0,?)",
      -1, &k, nullptr);
  sqlite3_prepare_v2(
      db,
      "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start,end,eventClass,globalTid,correlationId,nameId,"
      "returnValue) VALUES(?,?,1,?,?,101,0)",
      -1, &r, nullptr);
  sqlite3_prepare_v2(db, "INSERT INTO NVTX_EVENTS (start,end,eventType,text,globalTid) VALUES(?,?,59,?,?)",
                     -1, &v, nullptr);
  int64_t t = 1000;
  for (long i = 0; i < n; ++i) {
    const bool nccl = i % 10 == 9;
    const int64_t name = nccl ? 100 : 1 + i % 20;
    sqlite3_bind_int64(r, 1, t);
    sqlite3_bind_int64(r, 2, t + 800);
    sqlite3_bind_int64(r, 3, gtid);
    sqlite3_bind_int64(r, 4, i + 1);
    sqlite3_step(r);
    sqlite3_reset(r);
    sqlite3_bind_int64(k, 1, t + 2000);
    sqlite3_bind_int64(k, 2, t + 2000 + (nccl ? 5000 : 1500));
    sqlite3_bind_int64(k, 3, nccl ? 13 : 7);
    sqlite3_bind_int64(k, 4, i + 1);
    sqlite3_bind_int64(k, 5, gpid);
    sqlite3_bind_int64(k, 6, name);
    sqlite3_bind_int64(k, 7, name);
    sqlite3_bind_int64(k, 8, i + 1);
    sqlite3_step(k);
    sqlite3_reset(k);
    if (i % 1000 == 999) {
      const std::string step = "ProfilerStep#" + std::to_string(i / 1000);
      sqlite3_bind_int64(v, 1, t - 999 * 1000);
      sqlite3_bind_int64(v, 2, t + 1000);
      sqlite3_bind_text(v, 3, step.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_int64(v, 4, gtid);
      sqlite3_step(v);
      sqlite3_reset(v);
    }
    t += 1000;
  }
  sqlite3_finalize(k);
  sqlite3_finalize(r);
  sqlite3_finalize(v);
  exec("COMMIT");
  sqlite3_close(db);
  return 0;
}

// The anchor: what reading the same rows costs SQLite alone.
size_t sqliteFloor(const std::filesystem::path& path) {
  sqlite3* db = nullptr;
  sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  size_t rows = 0;
  int64_t sum = 0;
  for (const char* sql :
       {"SELECT rowid,start,end,deviceId,streamId,demangledName,correlationId,globalPid FROM "
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "SELECT rowid,start,end,globalTid,nameId,correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME",
        "SELECT rowid,start,globalTid,end,eventType,textId,text FROM NVTX_EVENTS"}) {
    sqlite3_stmt* s = nullptr;
    sqlite3_prepare_v2(db, sql, -1, &s, nullptr);
    while (sqlite3_step(s) == SQLITE_ROW) {
      ++rows;
      for (int c = 0; c < sqlite3_column_count(s); ++c)
        if (sqlite3_column_type(s, c) == SQLITE_INTEGER) sum += sqlite3_column_int64(s, c);
    }
    sqlite3_finalize(s);
  }
  sqlite3_close(db);
  return rows + (sum == 42 ? 1 : 0);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "make-nsys") return makeNsys(argv[2], std::stol(argv[3]));
  if (argc != 3) {
    std::fprintf(stderr,
                 "usage: bench_import stream|reference|dir|dir-reference|whole|nsys|nsys-floor FILE | "
                 "make-nsys FILE N\n");
    return 2;
  }
  const std::string mode = argv[1];
  const std::filesystem::path path = argv[2];
  const auto t0 = std::chrono::steady_clock::now();
  const std::clock_t c0 = std::clock();
  Result<TraceStore> r = Status(ErrorCode::InvalidArgument, "mode");
  if (mode == "stream") {
    r = importChromeTraceFile(path);
  } else if (mode == "reference") {
    r = importChromeTraceFile(path, ChromeImportOptions{.referenceReader = true});
  } else if (mode == "dir" || mode == "dir-reference") {  // several ranks into one session
    auto m = importChromeTraceFiles({path}, ChromeImportOptions{.referenceReader = mode == "dir-reference"});
    if (m) {
      r = std::move(m->store);
    } else {
      r = m.status();
    }
  } else if (mode == "whole") {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    r = importChromeTrace(text, path.string());
  } else if (mode == "nsys") {
    r = importNsysSqlite(path);
  } else if (mode == "nsys-floor") {
    const size_t rows = sqliteFloor(path);
    TraceStore empty;
    empty.metadata()["rows"] = std::to_string(rows);
    r = std::move(empty);
  }
  const double cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r) {
    std::fprintf(stderr, "%s\n", r.status().toString().c_str());
    return 1;
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  double bytes = 0;
  if (std::filesystem::is_directory(path)) {
    auto files = expandTraceInputs({path});
    if (files)
      for (const auto& f : *files) bytes += static_cast<double>(std::filesystem::file_size(f));
  } else {
    bytes = static_cast<double>(std::filesystem::file_size(path));
  }
  const double kept =
      mode == "nsys-floor" ? std::stod(r->metadata().at("rows")) : static_cast<double>(r->eventCount());
  std::printf(
      "{\"mode\":\"%s\",\"file\":\"%s\",\"bytes\":%.0f,\"events\":%.0f,\"wall_s\":%.3f,\"cpu_s\":%.3f,"
      "\"mb_per_cpu_s\":%.1f,\"events_per_cpu_s\":%.0f,\"peak_rss_mb\":%.1f}\n",
      mode.c_str(), path.filename().c_str(), bytes, kept, wall, cpu, bytes / 1e6 / cpu, kept / cpu,
      static_cast<double>(ru.ru_maxrss) / 1024.0);
  return 0;
}
