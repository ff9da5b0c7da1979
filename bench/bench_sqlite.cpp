// .tsdb session benchmark: SessionWriter throughput side by side with a bare SQLite insert loop
// (the anchor: what SQLite itself costs on this machine with the same pragmas), then reopening
// the written file and loading "events of rank 3 between t0 and t1".
//
//   bench_sqlite [--events N] [--runs R] [--out DIR] [--keep]
//
// Prints a markdown table (medians of R runs) for docs/BENCHMARKS.md. Timings are wall clock,
// page cache warm (the file was just written), single thread.
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "trainscope/core/session/tsdb.h"

using namespace trainscope::core;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  uint64_t events = 10'000'000;
  int runs = 3;
  fs::path out = "/tmp";
  bool keep = false;
};

// The synthetic timeline: 8 ranks x 4 streams, events round-robin over the 32 tracks, one
// every 200 ns of session time, 100..1999 ns long: ~2 s of a busy job for 10 M events.
constexpr int kRanks = 8;
constexpr int kTracksPerRank = 4;
constexpr int kTracks = kRanks * kTracksPerRank;
constexpr int64_t kOrigin = 1'000'000'000;
constexpr int64_t kSpacing = 200;

struct Ev {
  int64_t start, end;
  int track;
};
inline Ev eventAt(uint64_t i) {
  const int64_t start = kOrigin + static_cast<int64_t>(i) * kSpacing;
  return {start, start + 100 + static_cast<int64_t>((i * 7919) % 1900), static_cast<int>(i % kTracks)};
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bench_sqlite: %s\n", what.c_str());
  std::exit(1);
}
void check(const Status& s) {
  if (!s) die(s.toString());
}
void checkSqlite(int rc, sqlite3* db, const char* what) {
  if (rc != SQLITE_OK && rc != SQLITE_DONE) die(std::string(what) + ": " + sqlite3_errmsg(db));
}

void removeDb(const fs::path& p) {
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(p.string() + suffix, ec);
}

// The anchor: a prepared INSERT of 7 integer columns into a table without indexes, one big
// transaction, the writer's pragmas. Returns rows per second.
double bareLoop(const fs::path& p, uint64_t n) {
  removeDb(p);
  sqlite3* db = nullptr;
  checkSqlite(sqlite3_open_v2(p.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr),
              db, "open");
  checkSqlite(sqlite3_exec(db, SessionWriter::pragmas(), nullptr, nullptr, nullptr), db, "pragmas");
  checkSqlite(sqlite3_exec(db, "CREATE TABLE bare(a INTEGER, b INTEGER, c INTEGER, d INTEGER, e INTEGER, "
                               "f INTEGER, g INTEGER)",
                           nullptr, nullptr, nullptr),
              db, "create");
  sqlite3_stmt* st = nullptr;
  checkSqlite(sqlite3_prepare_v2(db, "INSERT INTO bare VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)", -1, &st, nullptr), db,
              "prepare");
  const auto t0 = Clock::now();
  checkSqlite(sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr), db, "begin");
  for (uint64_t i = 0; i < n; ++i) {
    const Ev e = eventAt(i);
    sqlite3_bind_int64(st, 1, e.track / kTracksPerRank);
    sqlite3_bind_int64(st, 2, e.track);
    sqlite3_bind_int64(st, 3, 0);
    sqlite3_bind_int64(st, 4, 1 + e.track % 3);
    sqlite3_bind_int64(st, 5, e.start);
    sqlite3_bind_int64(st, 6, e.end);
    sqlite3_bind_int64(st, 7, static_cast<int64_t>(i));
    if (sqlite3_step(st) != SQLITE_DONE) die(std::string("insert: ") + sqlite3_errmsg(db));
    sqlite3_reset(st);
  }
  checkSqlite(sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr), db, "commit");
  const double s = seconds(Clock::now() - t0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return static_cast<double>(n) / s;
}

struct WriterRun {
  double eventsPerSecond = 0;  // append + commit of every batch
  double closeSeconds = 0;     // finishSegment (index build) + checkpoint + close
};

// Plain events (no attributes) through SessionWriter, as a live recording delivers them.
WriterRun writerPlain(const fs::path& p, uint64_t n) {
  TraceStore store;
  for (int r = 0; r < kRanks; ++r)
    for (int t = 0; t < kTracksPerRank; ++t)
      store.findOrAddTrack(r, TrackKind::CudaStream, t, "stream " + std::to_string(t));
  const StringId names[] = {store.intern("gemm"), store.intern("gelu"), store.intern("layernorm")};
  auto w = SessionWriter::create(p);
  if (!w) die(w.status().toString());
  check(w.value()->putMetadata("generator", "bench_sqlite"));
  const auto t0 = Clock::now();
  for (uint64_t i = 0; i < n; ++i) {
    const Ev e = eventAt(i);
    check(w.value()->append(store, static_cast<TrackId>(e.track), {e.start, e.end, names[e.track % 3], EventKind::Kernel},
                            {}));
  }
  check(w.value()->commit());
  const auto t1 = Clock::now();
  check(w.value()->close());
  const auto t2 = Clock::now();
  return {static_cast<double>(n) / seconds(t1 - t0), seconds(t2 - t1)};
}

// Events with the attributes a kernel typically carries (correlation id, stream, device, layer).
double writerAttributed(const fs::path& p, uint64_t n) {
  TraceStore store;
  for (int r = 0; r < kRanks; ++r)
    for (int t = 0; t < kTracksPerRank; ++t)
      store.findOrAddTrack(r, TrackKind::CudaStream, t, "stream " + std::to_string(t));
  const StringId name = store.intern("gemm");
  auto w = SessionWriter::create(p);
  if (!w) die(w.status().toString());
  const auto t0 = Clock::now();
  for (uint64_t i = 0; i < n; ++i) {
    const Ev e = eventAt(i);
    const Attr a[] = {Attr::ofInt(AttrKey::CorrelationId, static_cast<int64_t>(i)), Attr::ofInt(AttrKey::Stream, 7),
                      Attr::ofInt(AttrKey::Device, e.track / kTracksPerRank), Attr::ofInt(AttrKey::Layer, e.track % 12)};
    check(w.value()->append(store, static_cast<TrackId>(e.track), {e.start, e.end, name, EventKind::Kernel}, a));
  }
  check(w.value()->commit());
  const double s = seconds(Clock::now() - t0);
  check(w.value()->close());
  return static_cast<double>(n) / s;
}

double timeIt(const std::function<void()>& f) {
  const auto t0 = Clock::now();
  f();
  return seconds(Clock::now() - t0);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value after " + a);
      return argv[++i];
    };
    if (a == "--events") o.events = std::stoull(value());
    else if (a == "--runs") o.runs = std::max(1, std::stoi(value()));
    else if (a == "--out") o.out = value();
    else if (a == "--keep") o.keep = true;
    else if (a == "--help" || a == "-h") {
      std::printf("usage: bench_sqlite [--events N (10000000)] [--runs R (3)] [--out DIR (/tmp)] [--keep]\n");
      std::exit(0);
    } else {
      die("unknown argument " + a + " (try --help)");
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const fs::path bare = o.out / "bench_bare.sqlite";
  const fs::path plain = o.out / "bench_plain.tsdb";
  const fs::path attributed = o.out / "bench_attr.tsdb";
  const uint64_t nAttr = std::min<uint64_t>(o.events, 2'000'000);
  std::fprintf(stderr, "bench_sqlite: %llu events, %d runs, files in %s\n",
               static_cast<unsigned long long>(o.events), o.runs, o.out.c_str());

  // Writers alternate with the bare loop, so both see the same machine state.
  std::vector<double> bareRate, plainRate, closeSec, attrRate;
  for (int r = 0; r < o.runs; ++r) {
    bareRate.push_back(bareLoop(bare, o.events));
    const WriterRun w = writerPlain(plain, o.events);
    plainRate.push_back(w.eventsPerSecond);
    closeSec.push_back(w.closeSeconds);
    attrRate.push_back(writerAttributed(attributed, nAttr));
    std::fprintf(stderr, "  run %d: bare %.0f rows/s, writer %.0f ev/s (close %.2f s), attributed %.0f ev/s\n", r + 1,
                 bareRate.back(), plainRate.back(), closeSec.back(), attrRate.back());
  }

  // Reopen the plain file and ask for rank 3 in windows around the middle of the session.
  std::vector<double> openSec, summarySec;
  for (int r = 0; r < std::max(o.runs, 5); ++r) {
    std::unique_ptr<SessionReader> reader;
    openSec.push_back(timeIt([&] {
      auto opened = SessionReader::open(plain);
      if (!opened) die(opened.status().toString());
      reader = std::move(opened.value());
    }));
    summarySec.push_back(timeIt([&] {
      auto s = reader->summary();
      if (!s || s->eventCount != o.events) die("summary disagrees with what was written");
    }));
  }
  auto reader = SessionReader::open(plain);
  if (!reader) die(reader.status().toString());
  const int64_t mid = kOrigin + static_cast<int64_t>(o.events / 2) * kSpacing;
  struct Query {
    int64_t windowNs;
    size_t events = 0;
    double seconds = 0;
  };
  std::vector<Query> queries = {{1'000'000}, {10'000'000}, {100'000'000}};
  for (Query& q : queries) {
    std::vector<double> t;
    for (int r = 0; r < std::max(o.runs, 5); ++r) {
      TraceStore store;
      t.push_back(timeIt([&] { check(reader.value()->loadRange(store, 3, mid, mid + q.windowNs)); }));
      q.events = store.eventCount();
    }
    q.seconds = median(t);
  }
  // Everything back into memory once (not a target; for scale).
  size_t loadedEvents = 0;
  const double loadAllSec = timeIt([&] {
    TraceStore all;
    check(reader.value()->loadAll(all));
    loadedEvents = all.eventCount();
  });
  if (loadedEvents != o.events) die("loadAll disagrees with what was written");
  std::error_code ec;
  const auto fileBytes = fs::file_size(plain, ec);

  const double bareMed = median(bareRate), plainMed = median(plainRate);
  std::printf("| measurement | median of %d | notes |\n|---|---:|---|\n", o.runs);
  std::printf("| bare SQLite loop (anchor) | %.2f M rows/s | 7 INTEGER columns, no index, one transaction |\n",
              bareMed / 1e6);
  std::printf("| SessionWriter, plain events | %.2f M events/s | batches of 100000, WAL; **%.2f x the anchor** |\n",
              plainMed / 1e6, plainMed / bareMed);
  std::printf("| SessionWriter, 4 int attributes | %.2f M events/s | %llu events, args JSON |\n", median(attrRate) / 1e6,
              static_cast<unsigned long long>(nAttr));
  std::printf("| close (segment indexes, checkpoint) | %.2f s | time indexes over %llu events |\n", median(closeSec),
              static_cast<unsigned long long>(o.events));
  std::printf("| file size | %.0f MiB | %.1f bytes/event |\n", static_cast<double>(fileBytes) / (1 << 20),
              static_cast<double>(fileBytes) / static_cast<double>(o.events));
  std::printf("| SessionReader::open | %.2f ms | validation, no events read |\n", median(openSec) * 1e3);
  std::printf("| summary() | %.2f ms | counts from the segments table |\n", median(summarySec) * 1e3);
  for (const Query& q : queries)
    std::printf("| loadRange rank 3, %lld ms window | %.2f ms | %zu events into a TraceStore |\n",
                static_cast<long long>(q.windowNs / 1'000'000), q.seconds * 1e3, q.events);

  std::printf("| loadAll (one run) | %.2f s | %.2f M events/s into a TraceStore |\n", loadAllSec,
              static_cast<double>(o.events) / loadAllSec / 1e6);

  if (!o.keep)
    for (const fs::path& p : {bare, plain, attributed}) removeDb(p);
  return 0;
}
