// .tsdb session files: exact round trips, live append while reading, range loads against a
// brute-force filter, summaries, every open error, the version-1 layout and plain-SQL queries.
#include <QtTest>

#include <sqlite3.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "trainscope/core/session/tsdb.h"
#include "trainscope/core/synth/synth.h"

using namespace trainscope::core;
namespace fs = std::filesystem;

namespace {

// Everything about an attribute, with strings by content (a loaded store renumbers strings).
std::string attrText(const TraceStore& s, const Attr& a) {
  std::string out = a.isCustom() ? "custom:" + std::string(s.str(a.key - kCustomAttrBase))
                                 : "key" + std::to_string(a.key);
  out += "|t" + std::to_string(static_cast<int>(a.type)) + "|";
  out += a.type == AttrType::String ? std::string(s.str(a.asString())) : std::to_string(a.bits);
  return out;
}

// One event as text: position-independent identity for comparing stores.
std::string eventText(const TraceStore& s, const TrackEvents& ev, size_t i) {
  std::string out = std::to_string(ev.start(i)) + "," + std::to_string(ev.end(i)) + "," +
                    std::string(eventKindName(ev.kind(i))) + "," + std::string(s.str(ev.name(i)));
  for (const Attr& a : ev.attrs(i)) out += " {" + attrText(s, a) + "}";
  return out;
}

std::string trackText(const TrackInfo& t) {
  return std::to_string(t.rank) + "/" + std::string(trackKindName(t.kind)) + "/" + std::to_string(t.externalId) +
         "/" + t.name;
}

// "" when equal, else the first difference (so a failing test says what differs).
std::string diffStores(TraceStore& a, TraceStore& b) {
  a.flush();  // both as their owners publish them: sorted
  b.flush();
  if (a.ranks() != b.ranks()) return "ranks differ";
  if (a.tracks() != b.tracks()) return "tracks differ";
  if (a.metadata() != b.metadata()) return "metadata differs";
  if (a.eventCount() != b.eventCount())
    return "event counts differ: " + std::to_string(a.eventCount()) + " vs " + std::to_string(b.eventCount());
  for (TrackId t = 0; t < a.trackCount(); ++t) {
    const TrackEvents& ea = a.events(t);
    const TrackEvents& eb = b.events(t);
    if (ea.size() != eb.size()) return "track " + std::to_string(t) + " sizes differ";
    for (size_t i = 0; i < ea.size(); ++i) {
      const std::string x = eventText(a, ea, i), y = eventText(b, eb, i);
      if (x != y) return "track " + std::to_string(t) + " event " + std::to_string(i) + ": " + x + " vs " + y;
    }
  }
  return {};
}

// A store with every attribute type and every awkward key and string we can think of, appended
// out of order.
TraceStore handBuiltStore() {
  TraceStore s;
  s.setRank({.rank = 0, .host = "node\"0\"", .pid = 4242, .localRank = 1, .device = 3,
             .clockOffsetNs = -123456789, .droppedEvents = 17});
  s.setRank({.rank = 5, .host = "h\xC2\xB5-5", .pid = 1, .localRank = 0, .device = -1, .clockOffsetNs = 9,
             .droppedEvents = 0});
  const TrackId cpu = s.addTrack({0, TrackKind::CpuThread, "main thread", 1000});
  const TrackId stream = s.addTrack({0, TrackKind::CudaStream, "stream 7", 7});
  const TrackId comm = s.addTrack({5, TrackKind::Communicator, "comm \"world\"", 0x5eed});
  s.addTrack({5, TrackKind::Counter, "empty track", 0});  // a track without events survives too
  const TrackId stage = s.addTrack({5, TrackKind::PipelineStage, "stage 1", 1});

  const StringId weird = s.intern("quote\" back\\slash\nnew line \x01 tab\t \xF0\x9F\x9A\x80 \xC2\xB5s");
  const StringId cBytes = s.intern("bytes");  // custom key that collides with a built-in name
  const StringId cAt = s.intern("@at"), cHash = s.intern("#hash"), cEmpty = s.intern("");
  const StringId cLr = s.intern("learning_rate"), cTag = s.intern("tag"), cCount = s.intern("count");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();

  const Attr all[] = {
      Attr::ofInt(AttrKey::Bytes, 1LL << 40),
      Attr::ofInt(AttrKey::Peer, -1),
      Attr::ofInt(AttrKey::CorrelationId, std::numeric_limits<int64_t>::max()),
      Attr::ofInt(AttrKey::FlowId, std::numeric_limits<int64_t>::min()),
      Attr::ofDouble(AttrKey::Value, 0.1),
      Attr::ofDouble(AttrKey::Value, 3.0),  // duplicate key, integral double
      Attr::ofString(AttrKey::Algorithm, s.intern("ring")),
      Attr::ofString(AttrKey::Protocol, weird),
      Attr::custom(cLr, AttrType::Double, std::bit_cast<int64_t>(1e-300)),
      Attr::custom(cTag, AttrType::String, s.intern("warmup")),
      Attr::custom(cCount, AttrType::Int, 42),
      Attr::custom(cBytes, AttrType::Int, 7),
      Attr::custom(cAt, AttrType::String, weird),
      Attr::custom(cHash, AttrType::Double, std::bit_cast<int64_t>(-0.0)),
      Attr::custom(cEmpty, AttrType::Int, 0),
      Attr::custom(weird, AttrType::Double, std::bit_cast<int64_t>(4.9406564584124654e-324)),
      Attr{99, AttrType::Int, 5},                              // a key number without a name
      Attr::ofInt(AttrKey::Step, 3),
      Attr{static_cast<uint32_t>(AttrKey::Bytes), AttrType::Double, std::bit_cast<int64_t>(2.5)},  // odd type
  };
  const Attr specials[] = {Attr::ofDouble(AttrKey::Value, nan), Attr::ofDouble(AttrKey::Value, inf),
                           Attr::ofDouble(AttrKey::Value, -inf), Attr::ofDouble(AttrKey::Value, 1.7976931348623157e308),
                           Attr::ofDouble(AttrKey::Value, -2.2250738585072014e-308)};

  // Out of order: later starts first, ties on (start, end) keep arrival order, nesting by end.
  s.append(cpu, {5'000, 9'000, s.intern("late"), EventKind::Range}, all);
  s.append(cpu, {1'000, 2'000, weird, EventKind::Range});
  s.append(cpu, {1'000, 8'000, s.intern("parent"), EventKind::Phase});
  s.append(cpu, {1'000, 2'000, s.intern("tie second"), EventKind::Range});
  s.append(cpu, {1'500, 1'500, s.intern("instant"), EventKind::Marker}, std::span(all, 1));
  s.append(cpu, {0, 10'000, s.intern("step"), EventKind::Step}, std::span(all + 17, 1));
  s.append(stream, {3'000, 4'000, s.intern("gemm"), EventKind::Kernel}, std::span(all, 4));
  s.append(stream, {2'000, 2'500, s.intern("gemm"), EventKind::Kernel}, specials);
  s.append(comm, {-50, 70, s.intern("allreduce"), EventKind::Collective}, std::span(all + 6, 2));
  const Attr knob[] = {Attr::ofString(AttrKey::Knob, s.intern("dp.bucket_bytes")),
                       Attr::ofString(AttrKey::KnobValue, s.intern("8388608")), Attr::ofInt(AttrKey::Step, 4)};
  s.append(stage, {600, 600, s.intern("dp.bucket_bytes"), EventKind::KnobChange}, knob);
  s.append(stage, {100, 500, s.intern("F0"), EventKind::MicroBatchF});
  s.metadata()["job_id"] = "job-7";
  s.metadata()["clock_domain"] = "CLOCK_MONOTONIC";
  s.metadata()["note"] = std::string("multi\nline \"quoted\" ") + "\xE2\x9C\x93";
  s.metadata()[""] = "empty key";
  return s;
}

TraceStore synthStore(int ranks = 4, int steps = 6) {
  TraceStore s;
  synthesizeTrace(s, {.ranks = ranks, .steps = steps, .kernelsPerStep = 16, .buckets = 4, .seed = 7});
  if (ranks > 2) {
    s.rank(1)->droppedEvents = 12345;
    s.rank(2)->clockOffsetNs = -777;
  }
  return s;
}

// Events of `rank` overlapping [t0, t1) as sorted text, with their track, from a store.
std::vector<std::string> overlapping(TraceStore& s, RankId rank, int64_t t0, int64_t t1) {
  std::vector<std::string> out;
  for (TrackId t = 0; t < s.trackCount(); ++t) {
    if (s.track(t).rank != rank) continue;
    const TrackEvents& ev = s.events(t);
    ev.forEachOverlapping(t0, t1, [&](size_t i) { out.push_back(trackText(s.track(t)) + " " + eventText(s, ev, i)); });
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> allEvents(TraceStore& s) {
  std::vector<std::string> out;
  for (TrackId t = 0; t < s.trackCount(); ++t) {
    const TrackEvents& ev = s.events(t);
    for (size_t i = 0; i < ev.size(); ++i) out.push_back(trackText(s.track(t)) + " " + eventText(s, ev, i));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Plain SQL on a file, as the sqlite3 shell would run it.
class Sql {
 public:
  explicit Sql(const fs::path& p, bool write = false) {
    sqlite3_open_v2(p.c_str(), &db_, write ? SQLITE_OPEN_READWRITE : SQLITE_OPEN_READONLY, nullptr);
  }
  ~Sql() { sqlite3_close_v2(db_); }
  Sql(const Sql&) = delete;
  Sql& operator=(const Sql&) = delete;
  bool exec(const std::string& sql) { return sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK; }
  // First column of the first row as text ("NULL" for NULL, "ERROR: ..." on failure).
  std::string one(const std::string& sql) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr) != SQLITE_OK)
      return "ERROR: " + std::string(sqlite3_errmsg(db_));
    std::string out = "NO ROW";
    if (sqlite3_step(st) == SQLITE_ROW) {
      const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
      out = t ? t : "NULL";
    }
    sqlite3_finalize(st);
    return out;
  }
  int type(const std::string& sql) {
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr);
    const int t = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_type(st, 0) : -1;
    sqlite3_finalize(st);
    return t;
  }
  double real(const std::string& sql) {
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr);
    const double v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_double(st, 0) : -1.0;
    sqlite3_finalize(st);
    return v;
  }

 private:
  sqlite3* db_ = nullptr;
};

void expectError(const fs::path& p, ErrorCode code) {
  auto r = SessionReader::open(p);
  QVERIFY2(!r.isOk(), "opening should fail");
  QVERIFY2(r.status().code() == code, r.status().toString().c_str());
  QVERIFY2(r.status().message().find(p.string()) != std::string::npos, r.status().message().c_str());
  auto l = loadSession(p);  // the whole-store helper reports the same
  QVERIFY(!l.isOk());
  QCOMPARE(l.status().code(), code);
}

}  // namespace

class TstSessionDb : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  fs::path file(const char* name) const { return fs::path(dir_.filePath(name).toStdString()); }

 private slots:
  void initTestCase() { QVERIFY(dir_.isValid()); }

  void roundTripHandBuilt() {
    TraceStore original = handBuiltStore();
    const fs::path p = file("hand.tsdb");
    QVERIFY2(saveSession(original, p).isOk(), "save");
    auto loaded = loadSession(p);
    QVERIFY2(loaded.isOk(), loaded.status().toString().c_str());
    const std::string diff = diffStores(original, loaded.value());
    QVERIFY2(diff.empty(), diff.c_str());

    // Spot checks with hand-known values, independent of diffStores.
    TraceStore& l = loaded.value();
    QCOMPARE(l.rank(0)->droppedEvents, uint64_t{17});
    QCOMPARE(l.rank(0)->clockOffsetNs, int64_t{-123456789});
    QCOMPARE(l.trackCount(), size_t{5});
    const TrackEvents& cpu = l.events(0);
    QCOMPARE(cpu.size(), size_t{6});
    QCOMPARE(l.str(cpu.name(0)), std::string_view("step"));     // (0, 10000)
    QCOMPARE(l.str(cpu.name(1)), std::string_view("parent"));   // (1000, 8000) encloses
    QCOMPARE(l.str(cpu.name(3)), std::string_view("tie second"));  // equal (start, end): arrival order
    const auto late = cpu.attrs(5);
    QCOMPARE(late.size(), size_t{19});
    QCOMPARE(late[4].asDouble(), 0.1);
    QCOMPARE(late[5].type, AttrType::Double);
    QCOMPARE(late[5].asDouble(), 3.0);
    QVERIFY(late[11].isCustom());
    QCOMPARE(l.str(late[11].key - kCustomAttrBase), std::string_view("bytes"));
    QCOMPARE(late[11].bits, int64_t{7});
    QCOMPARE(std::bit_cast<uint64_t>(late[13].asDouble()), std::bit_cast<uint64_t>(-0.0));
    QCOMPARE(late[16].key, uint32_t{99});
    const auto specials = l.events(1).attrs(0);
    QVERIFY(std::isnan(specials[0].asDouble()));
    QCOMPARE(specials[1].asDouble(), std::numeric_limits<double>::infinity());
    QCOMPARE(specials[2].asDouble(), -std::numeric_limits<double>::infinity());
  }

  void roundTripSynth() {
    TraceStore original = synthStore();
    const fs::path p = file("synth.tsdb");
    QVERIFY(saveSession(original, p).isOk());
    auto loaded = loadSession(p);
    QVERIFY2(loaded.isOk(), loaded.status().toString().c_str());
    QVERIFY(loaded.value().eventCount() > 1000);
    const std::string diff = diffStores(original, loaded.value());
    QVERIFY2(diff.empty(), diff.c_str());
  }

  // Events given to the writer one by one, out of order and in small batches, load back in the
  // store's sorted order.
  void writerAppendsOutOfOrder() {
    TraceStore src = handBuiltStore();
    TraceStore live;  // the same events in the order an agent might deliver them
    for (const auto& [r, info] : src.ranks()) live.setRank(info);
    for (TrackId t = 0; t < src.trackCount(); ++t) live.addTrack(src.track(t));
    live.metadata() = src.metadata();
    const fs::path p = file("live-order.tsdb");
    auto w = SessionWriter::create(p, {.batchEvents = 3});
    QVERIFY(w.isOk());
    for (const auto& [k, v] : live.metadata()) QVERIFY(w.value()->putMetadata(k, v).isOk());
    for (const auto& [r, info] : live.ranks()) QVERIFY(w.value()->putRank(info).isOk());
    QVERIFY(w.value()->putTrack(3, live.track(3)).isOk());  // the track without events; the rest go with their events
    std::mt19937 rng(3);
    std::vector<std::pair<TrackId, size_t>> order;
    for (TrackId t = 0; t < src.trackCount(); ++t)
      for (size_t i = 0; i < src.rawEvents(t).size(); ++i) order.emplace_back(t, i);
    for (int round = 0; round < 50; ++round) {
      std::shuffle(order.begin(), order.end(), rng);
      for (auto [t, i] : order) {
        const TrackEvents& ev = src.rawEvents(t);
        EventRecord e = ev.record(i);
        e.name = live.intern(src.str(e.name));
        std::vector<Attr> attrs(ev.attrs(i).begin(), ev.attrs(i).end());
        for (Attr& a : attrs) {  // re-intern into the live store's table
          if (a.type == AttrType::String) a.bits = live.intern(src.str(a.asString()));
          if (a.isCustom()) a.key = kCustomAttrBase + live.intern(src.str(a.key - kCustomAttrBase));
        }
        live.append(t, e, attrs);
        QVERIFY(w.value()->append(live, t, e, attrs).isOk());
      }
      if (round == 20) QVERIFY(w.value()->finishSegment().isOk());
    }
    QCOMPARE(w.value()->eventsWritten(), uint64_t(live.eventCount()));
    QVERIFY(w.value()->close().isOk());
    auto loaded = loadSession(p);
    QVERIFY2(loaded.isOk(), loaded.status().toString().c_str());
    const std::string diff = diffStores(live, loaded.value());
    QVERIFY2(diff.empty(), diff.c_str());
  }

  void liveAppendWhileReading() {
    const fs::path p = file("live.tsdb");
    TraceStore src;
    const TrackId t0 = src.addTrack({0, TrackKind::CudaStream, "s", 1});
    const TrackId t1 = src.addTrack({1, TrackKind::CpuThread, "c", 2});
    auto w = SessionWriter::create(p, {.batchEvents = 100});
    QVERIFY(w.isOk());
    SessionWriter& writer = *w.value();
    auto add = [&](int i) {
      // A new name every 10 events: strings must travel with the batch that uses them.
      const EventRecord e{i * 1000, i * 1000 + 500, src.intern("k" + std::to_string(i / 10)), EventKind::Kernel};
      const Attr a[] = {Attr::ofInt(AttrKey::Seq, i)};
      return writer.append(src, i % 2 ? t1 : t0, e, a).isOk();
    };
    for (int i = 0; i < 250; ++i) QVERIFY(add(i));  // two batches committed, 50 pending

    auto r = SessionReader::open(p);
    QVERIFY2(r.isOk(), r.status().toString().c_str());
    SessionReader& reader = *r.value();
    auto s1 = reader.summary();
    QVERIFY(s1.isOk());
    QCOMPARE(s1->eventCount, uint64_t{200});
    QVERIFY(!s1->complete);
    QCOMPARE(s1->segments, uint64_t{0});
    TraceStore a;
    QVERIFY(reader.loadAll(a).isOk());
    QCOMPARE(a.eventCount(), size_t{200});  // not the 50 uncommitted ones
    QCOMPARE(a.str(a.events(0).name(a.events(0).size() - 1)), std::string_view("k19"));
    {  // a plain SQLite connection (the shell, another process) sees the same
      Sql shell(p);
      QCOMPARE(shell.one("PRAGMA journal_mode"), std::string("wal"));
      QCOMPARE(shell.one("SELECT count(*) FROM events"), std::string("200"));
      QCOMPARE(shell.one("SELECT count(*) FROM event_view WHERE name = 'k19'"), std::string("10"));
    }

    QVERIFY(writer.commit().isOk());
    TraceStore b;
    QVERIFY(reader.loadAll(b).isOk());  // the same reader sees the new batch and its strings
    QCOMPARE(b.eventCount(), size_t{250});
    QCOMPARE(reader.summary()->eventCount, uint64_t{250});

    // A finished (indexed) segment plus a committed tail: a range load uses both.
    QVERIFY(writer.finishSegment().isOk());
    for (int i = 250; i < 320; ++i) QVERIFY(add(i));
    QVERIFY(writer.commit().isOk());
    TraceStore c;
    QVERIFY(reader.loadRange(c, 0, 200'000, 300'000).isOk());
    QCOMPARE(c.eventCount(), size_t{50});  // even i in [200, 300), across segment and tail
    auto s2 = reader.summary();
    QCOMPARE(s2->eventCount, uint64_t{320});
    QCOMPARE(s2->segments, uint64_t{1});
    QCOMPARE(s2->endNs, int64_t{319'500});
    QVERIFY(writer.close().isOk());
    auto s3 = reader.summary();
    QVERIFY(s3->complete);
    QCOMPARE(s3->segments, uint64_t{2});
  }

  void loadRangeMatchesBruteForce() {
    TraceStore original = synthStore(4, 8);
    // Long events that start far before most windows: the max-duration bound must reach them.
    const TrackId longTrack = original.findOrAddTrack(3, TrackKind::CpuThread, 9, "long");
    const auto [lo, hi] = original.timeSpan();
    original.append(longTrack, {lo - 1, hi + 1, original.intern("everything"), EventKind::Range});
    original.append(longTrack, {lo + (hi - lo) / 3, lo + (hi - lo) / 3, original.intern("instant"), EventKind::Marker});
    original.flush();

    // Three segments and an unindexed tail, written track by track.
    const fs::path p = file("range.tsdb");
    auto w = SessionWriter::create(p, {.batchEvents = 1000});
    QVERIFY(w.isOk());
    for (TrackId t = 0; t < original.trackCount(); ++t) {
      const TrackEvents& ev = original.rawEvents(t);
      for (size_t i = 0; i < ev.size(); ++i) QVERIFY(w.value()->append(original, t, ev.record(i), ev.attrs(i)).isOk());
      if (t % 5 == 4) QVERIFY(w.value()->finishSegment().isOk());
    }
    QVERIFY(w.value()->commit().isOk());
    auto r = SessionReader::open(p);
    QVERIFY(r.isOk());
    QVERIFY(r.value()->summary()->segments >= 3);
    {  // the long-event index path is exercised, not only the short one
      Sql db(p);
      QVERIFY(std::stoi(db.one("SELECT count(*) FROM segments WHERE long_dur_ns IS NOT NULL")) >= 2);
      QVERIFY(std::stoi(db.one("SELECT count(*) FROM sqlite_schema WHERE name LIKE 'events_s%_long'")) >= 2);
    }

    std::mt19937_64 rng(11);
    std::vector<std::pair<int64_t, int64_t>> windows = {
        {lo, hi + 2}, {lo - 100, lo}, {hi + 1, hi + 100}, {lo + (hi - lo) / 3, lo + (hi - lo) / 3 + 1},
        {lo + (hi - lo) / 3, lo + (hi - lo) / 3},  // empty interval: only events strictly across it
    };
    std::uniform_int_distribution<int64_t> at(lo - 1000, hi + 1000);
    for (int i = 0; i < 30; ++i) {
      int64_t a = at(rng), b = at(rng);
      if (a > b) std::swap(a, b);
      windows.emplace_back(a, std::min(b, a + (hi - lo) / 20));
    }
    for (RankId rank : {0, 3, 7}) {
      for (auto [t0, t1] : windows) {
        TraceStore got;
        const Status s = r.value()->loadRange(got, rank, t0, t1);
        QVERIFY2(s.isOk(), s.toString().c_str());
        const auto expected = overlapping(original, rank, t0, t1);
        const auto actual = allEvents(got);
        QVERIFY2(actual == expected, qPrintable(QString("rank %1 [%2, %3): %4 events, expected %5")
                                                    .arg(rank).arg(t0).arg(t1).arg(actual.size()).arg(expected.size())));
        if (rank == 3 && t1 - t0 > 1000) QVERIFY(!expected.empty());  // the long event is always there
      }
    }
    // Overlapping follow-up loads into one store add nothing twice.
    TraceStore acc;
    const int64_t mid = lo + (hi - lo) / 2;
    QVERIFY(r.value()->loadRange(acc, 2, lo, mid).isOk());
    QVERIFY(r.value()->loadRange(acc, 2, mid - (hi - lo) / 10, hi).isOk());
    QCOMPARE(allEvents(acc), overlapping(original, 2, lo, hi));
    QVERIFY(w.value()->close().isOk());
  }

  // Follow-up loads into one store: boundary instants and events loaded before come once.
  void loadRangeTwiceAddsNothingTwice() {
    TraceStore s;
    const TrackId t = s.addTrack({2, TrackKind::CpuThread, "cpu", 1});
    s.append(t, {50, 50, s.intern("instant at 50"), EventKind::Marker});
    s.append(t, {10, 55, s.intern("across 50"), EventKind::Range});
    s.append(t, {60, 60, s.intern("instant at 60"), EventKind::Marker});
    s.append(t, {65, 90, s.intern("later"), EventKind::Range});
    const fs::path p = file("twice.tsdb");
    QVERIFY(saveSession(s, p).isOk());
    auto r = SessionReader::open(p);
    QVERIFY(r.isOk());
    TraceStore got;
    QVERIFY(r.value()->loadRange(got, 2, 50, 60).isOk());
    QCOMPARE(got.eventCount(), size_t{2});  // the instant at 50 and the range across it; not 60
    QVERIFY(r.value()->loadRange(got, 2, 40, 70).isOk());
    QCOMPARE(got.eventCount(), size_t{4});
    QCOMPARE(allEvents(got), overlapping(s, 2, 0, 100));
  }

  void summaryCounts() {
    TraceStore original = synthStore();
    const fs::path p = file("summary.tsdb");
    QVERIFY(saveSession(original, p).isOk());
    auto r = SessionReader::open(p);
    QVERIFY(r.isOk());
    QCOMPARE(r.value()->schemaVersion(), kTsdbSchemaVersion);
    auto s = r.value()->summary();
    QVERIFY2(s.isOk(), s.status().toString().c_str());
    QCOMPARE(s->eventCount, uint64_t(original.eventCount()));
    for (int k = 0; k < kEventKindCount; ++k) {
      const auto kind = static_cast<EventKind>(k);
      const uint64_t n = original.eventCount(kind);
      QCOMPARE(s->eventsPerKind.count(kind) ? s->eventsPerKind.at(kind) : 0, n);
    }
    // Hand-known numbers of the synthetic job: 4 ranks x 6 steps.
    QCOMPARE(s->eventsPerKind.at(EventKind::Step), uint64_t{24});
    QCOMPARE(s->eventsPerKind.at(EventKind::KnobChange), uint64_t{4});
    QCOMPARE(s->eventsPerKind.at(EventKind::Counter), uint64_t{24});
    const auto [lo, hi] = original.timeSpan();
    QCOMPARE(s->startNs, lo);
    QCOMPARE(s->endNs, hi);
    QCOMPARE(s->droppedEvents, uint64_t{12345});
    QCOMPARE(s->ranks.size(), size_t{4});
    QCOMPARE(s->ranks[2].clockOffsetNs, int64_t{-777});
    QCOMPARE(s->tracks.size(), original.trackCount());
    for (const TrackSummary& t : s->tracks) {
      QCOMPARE(t.info, original.track(t.id));
      QCOMPARE(t.eventCount, uint64_t(original.rawEvents(t.id).size()));
    }
    QCOMPARE(s->metadata, original.metadata());
    QCOMPARE(s->segments, uint64_t{1});
    QVERIFY(s->complete);
    QCOMPARE(s->path, p);

    // An empty session is complete, with zero everything.
    TraceStore empty;
    QVERIFY(saveSession(empty, file("empty.tsdb")).isOk());
    auto e = SessionReader::open(file("empty.tsdb"));
    QVERIFY(e.isOk());
    auto es = e.value()->summary();
    QCOMPARE(es->eventCount, uint64_t{0});
    QCOMPARE(es->startNs, int64_t{0});
    QCOMPARE(es->endNs, int64_t{0});
    QVERIFY(es->complete);
  }

  void errorTruncated() {
    TraceStore s = synthStore();
    const fs::path p = file("truncated.tsdb");
    QVERIFY(saveSession(s, p).isOk());
    fs::resize_file(p, fs::file_size(p) / 2);
    expectError(p, ErrorCode::Truncated);
    auto r = SessionReader::open(p);
    QVERIFY(r.status().message().find("truncated") != std::string::npos);
  }

  // A checkpoint cut short by a full disk (or a kill) writes page 1 -- with the new page count --
  // before the pages that grow the file: the file is shorter than its header says, but the
  // write-ahead log beside it still holds every committed page. Such a session opens with all its
  // committed events; without its log it is truncated. A writer with commitMs commits by time too.
  void shortFileWithWriteAheadLogOpens() {
    const fs::path live = file("cut-checkpoint-live.tsdb");
    TraceStore src;
    const TrackId t = src.addTrack({0, TrackKind::CpuThread, "c", 1});
    auto w = SessionWriter::create(live, {.batchEvents = 1'000'000, .commitMs = 1});
    QVERIFY(w.isOk());
    for (int i = 0; i < 300; ++i) {
      if (i == 200) QThread::msleep(20);
      const EventRecord e{i * 1000, i * 1000 + 500, src.intern("k"), EventKind::Kernel};
      QVERIFY(w.value()->append(src, t, e, {}).isOk());
    }
    // Every event appended before the 20 ms pause is committed once one more comes after it: the
    // batch that holds event 200 was either committed by time at event 200 (a slow machine, ASan)
    // or is still open at event 201, begun more than 1 ms ago. The coarse clock may commit more.
    const uint64_t committed = w.value()->eventsCommitted();
    QVERIFY2(committed >= 200 && committed <= 300, std::to_string(committed).c_str());
    QCOMPARE(w.value()->eventsWritten(), uint64_t{300});
    // What the disk holds at this moment, as a crash would leave it: the file and its log.
    const fs::path p = file("cut-checkpoint.tsdb");
    fs::copy_file(live, p);
    fs::copy_file(fs::path(live.string() + "-wal"), fs::path(p.string() + "-wal"));
    QVERIFY(w.value()->close().isOk());
    {  // page 1 as a checkpoint that ran out of space leaves it: 40 pages more than the file has
      std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
      unsigned char h[100];
      f.read(reinterpret_cast<char*>(h), 100);
      const uint32_t pages = static_cast<uint32_t>(fs::file_size(p) / 4096) + 40;
      const unsigned char be[4] = {uint8_t(pages >> 24), uint8_t(pages >> 16), uint8_t(pages >> 8), uint8_t(pages)};
      f.seekp(28);
      f.write(reinterpret_cast<const char*>(be), 4);
      f.seekp(92);
      f.write(reinterpret_cast<const char*>(h + 24), 4);  // version-valid-for = change counter
    }
    {
      auto r = SessionReader::open(p);
      QVERIFY2(r.isOk(), r.status().toString().c_str());
      auto sum = r.value()->summary();
      QVERIFY(sum.isOk());
      QCOMPARE(sum->eventCount, committed);  // every committed event
      QVERIFY(!sum->complete);
      QCOMPARE(Sql(p).one("PRAGMA integrity_check"), std::string("ok"));
    }
    fs::remove(fs::path(p.string() + "-wal"));
    fs::remove(fs::path(p.string() + "-shm"));
    expectError(p, ErrorCode::Truncated);  // without its log, the same file is cut short
  }

  void errorWrongMagic() {
    const fs::path p = file("other.db");
    sqlite3* db = nullptr;
    QCOMPARE(sqlite3_open(p.c_str(), &db), SQLITE_OK);
    QCOMPARE(sqlite3_exec(db, "PRAGMA application_id = 1234; CREATE TABLE t(x); INSERT INTO t VALUES(1);", nullptr,
                          nullptr, nullptr),
             SQLITE_OK);
    sqlite3_close(db);
    expectError(p, ErrorCode::WrongMagic);
    QVERIFY(SessionReader::open(p).status().message().find("0x000004D2") != std::string::npos);
  }

  void errorNewerSchema() {
    TraceStore s = synthStore(2, 2);
    const fs::path p = file("newer.tsdb");
    QVERIFY(saveSession(s, p).isOk());
    {
      Sql db(p, true);
      QVERIFY(db.exec("PRAGMA user_version = 99"));
    }
    expectError(p, ErrorCode::NewerSchema);
    const std::string msg = SessionReader::open(p).status().message();
    QVERIFY2(msg.find("99") != std::string::npos && msg.find(std::to_string(kTsdbSchemaVersion)) != std::string::npos,
             msg.c_str());
  }

  void errorNotSqlite() {
    const fs::path p = file("trace.txt");
    std::ofstream(p) << "{\"traceEvents\": []}\nthis is a text file, not a database\n";
    expectError(p, ErrorCode::NotSqlite);
    const fs::path e = file("empty-file.tsdb");
    { std::ofstream create(e); }
    expectError(e, ErrorCode::NotSqlite);
  }

  void errorNotFound() { expectError(file("does-not-exist.tsdb"), ErrorCode::NotFound); }

  void errorCorrupt() {
    TraceStore s = synthStore();
    const fs::path p = file("corrupt.tsdb");
    QVERIFY(saveSession(s, p).isOk());
    int64_t root = 0, pageSize = 0;
    {
      Sql db(p);
      root = std::stoll(db.one("SELECT rootpage FROM sqlite_schema WHERE name = 'events'"));
      pageSize = std::stoll(db.one("PRAGMA page_size"));
    }
    {  // scribble over the root page of the events table
      std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp((root - 1) * pageSize);
      const std::string junk(static_cast<size_t>(pageSize), '\xA5');
      f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
    }
    expectError(p, ErrorCode::Corrupt);

    // Damage inside a value: malformed args.
    const fs::path q = file("bad-args.tsdb");
    QVERIFY(saveSession(s, q).isOk());
    {
      Sql db(q, true);
      QVERIFY(db.exec("UPDATE events SET args = '{\"bytes\": [1,2]}' WHERE id = 5"));
    }
    auto r = SessionReader::open(q);
    QVERIFY(r.isOk());
    TraceStore t;
    const Status st = r.value()->loadAll(t);
    QCOMPARE(st.code(), ErrorCode::Corrupt);
    QVERIFY(st.message().find(q.string()) != std::string::npos);
    QVERIFY(st.message().find("event 5") != std::string::npos);

    // Damage inside the binary attrs: a key whose value is cut off, a string id past the table.
    for (const char* blob : {"x'05'", "x'0a'", "x'03'", "x'0aff7f'"}) {
      const fs::path b = file("bad-attrs.tsdb");
      fs::remove(b);
      QVERIFY(saveSession(s, b).isOk());
      {
        Sql db(b, true);
        QVERIFY(db.exec(std::string("UPDATE events SET attrs = ") + blob + " WHERE id = 7"));
      }
      auto rb = SessionReader::open(b);
      QVERIFY(rb.isOk());
      TraceStore u;
      const Status sb = rb.value()->loadAll(u);
      QVERIFY2(sb.code() == ErrorCode::Corrupt, blob);
      QVERIFY2(sb.message().find("event 7 has malformed attrs") != std::string::npos, sb.message().c_str());
    }
  }

  // Files written before events.attrs existed (same version 2): the loader parses args instead,
  // and must build the same store. A hand edit of args clears attrs (trigger): the edit loads.
  void readsFilesWithoutAttrs() {
    for (const bool synth : {false, true}) {
      TraceStore original = synth ? synthStore() : handBuiltStore();
      const fs::path v3 = file("fast.tsdb"), v2 = file("slow.tsdb");
      fs::remove(v3);
      fs::remove(v2);
      QVERIFY(saveSession(original, v3).isOk());
      QVERIFY(saveSession(original, v2).isOk());
      {
        Sql db(v2, true);
        QCOMPARE(db.one("SELECT count(*) FROM events WHERE attrs IS NOT NULL"),
                 db.one("SELECT count(*) FROM events WHERE args IS NOT NULL"));
        QVERIFY(db.exec("DROP TRIGGER events_args_edited; ALTER TABLE events DROP COLUMN attrs; VACUUM"));
        QCOMPARE(db.one("SELECT count(*) FROM pragma_table_info('events') WHERE name = 'attrs'"),
                 std::string("0"));
      }
      auto fast = loadSession(v3);
      auto slow = loadSession(v2);
      QVERIFY2(fast.isOk(), fast.status().toString().c_str());
      QVERIFY2(slow.isOk(), slow.status().toString().c_str());
      QCOMPARE(SessionReader::open(v2).value()->schemaVersion(), 2);
      std::string diff = diffStores(fast.value(), slow.value());
      QVERIFY2(diff.empty(), diff.c_str());
      diff = diffStores(original, slow.value());
      QVERIFY2(diff.empty(), diff.c_str());
      diff = diffStores(original, fast.value());
      QVERIFY2(diff.empty(), diff.c_str());
    }
    TraceStore original = synthStore();
    const fs::path p = file("edited.tsdb");
    fs::remove(p);
    QVERIFY(saveSession(original, p).isOk());
    std::string id;
    {
      Sql db(p, true);
      id = db.one("SELECT id FROM event_view WHERE name = 'memcpy_h2d' LIMIT 1");
      QVERIFY(db.exec("UPDATE events SET args = '{\"bytes\": 42, \"note\": \"edited\"}' WHERE id = " + id));
      QCOMPARE(db.one("SELECT attrs IS NULL FROM events WHERE id = " + id), std::string("1"));
      QCOMPARE(db.one("SELECT count(*) FROM events WHERE attrs IS NULL AND args IS NOT NULL"),
               std::string("1"));
    }
    auto loaded = loadSession(p);
    QVERIFY2(loaded.isOk(), loaded.status().toString().c_str());
    TraceStore& l = loaded.value();
    int edited = 0;
    for (TrackId t = 0; t < l.trackCount(); ++t) {
      const TrackEvents& ev = l.events(t);
      for (size_t i = 0; i < ev.size(); ++i) {
        if (l.str(ev.name(i)) != "memcpy_h2d" || ev.attrs(i).size() != 2) continue;
        QCOMPARE(ev.findAttr(i, AttrKey::Bytes)->asInt(), int64_t{42});
        QCOMPARE(l.str(ev.attrs(i)[1].key - kCustomAttrBase), std::string_view("note"));
        QCOMPARE(l.str(ev.attrs(i)[1].asString()), std::string_view("edited"));
        ++edited;
      }
    }
    QCOMPARE(edited, 1);
  }

  // Version 1, the first development layout: no segments table, no ranks.dropped_events.
  void readsVersion1() {
    const fs::path p = file("v1.tsdb");
    sqlite3* db = nullptr;
    QCOMPARE(sqlite3_open(p.c_str(), &db), SQLITE_OK);
    const char* v1 = R"sql(
      PRAGMA application_id = 1414743106; PRAGMA user_version = 1;
      CREATE TABLE meta(key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID;
      CREATE TABLE strings(id INTEGER PRIMARY KEY, value TEXT NOT NULL);
      CREATE TABLE kinds(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
      CREATE TABLE track_kinds(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
      CREATE TABLE ranks(rank INTEGER PRIMARY KEY, host TEXT NOT NULL DEFAULT '', pid INTEGER NOT NULL DEFAULT 0,
        local_rank INTEGER NOT NULL DEFAULT 0, device INTEGER NOT NULL DEFAULT -1,
        clock_offset_ns INTEGER NOT NULL DEFAULT 0);
      CREATE TABLE tracks(id INTEGER PRIMARY KEY, rank INTEGER NOT NULL, kind INTEGER NOT NULL, name TEXT NOT NULL,
        external_id INTEGER NOT NULL);
      CREATE TABLE events(id INTEGER PRIMARY KEY, rank INTEGER NOT NULL, track INTEGER NOT NULL,
        kind INTEGER NOT NULL, name INTEGER NOT NULL, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, args TEXT);
      CREATE TABLE knob_changes(event_id INTEGER PRIMARY KEY, step INTEGER, rank INTEGER NOT NULL, knob TEXT,
        value TEXT, ts_ns INTEGER NOT NULL);
      INSERT INTO meta VALUES('job_id', 'old-job');
      INSERT INTO strings VALUES(0, ''), (1, 'gemm'), (2, 'allreduce'), (3, 'ring');
      INSERT INTO ranks VALUES(0, 'nodeA', 100, 0, 0, 5), (1, 'nodeA', 101, 1, 1, -5);
      INSERT INTO tracks VALUES(0, 0, 1, 'stream 7', 7), (1, 1, 1, 'stream 7', 7), (2, 1, 2, 'comm', 99);
      INSERT INTO events VALUES
        (1, 0, 0, 0, 1, 100, 200, NULL),
        (2, 0, 0, 0, 1, 300, 450, '{"correlation_id":9,"value":1.5}'),
        (3, 1, 1, 0, 1, 120, 220, NULL),
        (4, 1, 2, 3, 2, 150, 900, '{"bytes":1024,"algorithm":"ring","my_key":"x"}');
    )sql";
    QCOMPARE(sqlite3_exec(db, v1, nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);

    auto r = SessionReader::open(p);
    QVERIFY2(r.isOk(), r.status().toString().c_str());
    QCOMPARE(r.value()->schemaVersion(), 1);
    auto s = r.value()->summary();
    QVERIFY2(s.isOk(), s.status().toString().c_str());
    QCOMPARE(s->eventCount, uint64_t{4});
    QCOMPARE(s->eventsPerKind.at(EventKind::Kernel), uint64_t{3});
    QCOMPARE(s->eventsPerKind.at(EventKind::Collective), uint64_t{1});
    QCOMPARE(s->startNs, int64_t{100});
    QCOMPARE(s->endNs, int64_t{900});
    QCOMPARE(s->segments, uint64_t{0});
    QCOMPARE(s->droppedEvents, uint64_t{0});
    QVERIFY(s->complete);
    QCOMPARE(s->tracks[2].eventCount, uint64_t{1});

    auto loaded = loadSession(p);
    QVERIFY2(loaded.isOk(), loaded.status().toString().c_str());
    TraceStore& l = loaded.value();
    QCOMPARE(l.rank(1)->clockOffsetNs, int64_t{-5});
    QCOMPARE(l.rank(1)->droppedEvents, uint64_t{0});
    QCOMPARE(l.metadata().at("job_id"), std::string("old-job"));
    QCOMPARE(l.trackCount(), size_t{3});
    const TrackEvents& comm = l.events(2);
    QCOMPARE(comm.size(), size_t{1});
    QCOMPARE(comm.findAttr(0, AttrKey::Bytes)->bits, int64_t{1024});
    QCOMPARE(l.str(comm.findAttr(0, AttrKey::Algorithm)->asString()), std::string_view("ring"));
    QCOMPARE(l.str(comm.attrs(0)[2].key - kCustomAttrBase), std::string_view("my_key"));
    QCOMPARE(l.events(0).findAttr(1, AttrKey::Value)->asDouble(), 1.5);

    TraceStore range;
    QVERIFY(r.value()->loadRange(range, 1, 210, 300).isOk());
    QCOMPARE(range.eventCount(), size_t{2});  // (120, 220) and (150, 900)
  }

  // What a person types into the sqlite3 shell works and gives the stored values.
  void plainSqlQueries() {
    TraceStore s = synthStore();
    const fs::path p = file("shell.tsdb");
    QVERIFY(saveSession(s, p).isOk());
    Sql db(p);
    QCOMPARE(db.one("PRAGMA application_id"), std::to_string(kTsdbApplicationId));
    QCOMPARE(db.one("PRAGMA user_version"), std::string("2"));
    QCOMPARE(db.one("PRAGMA journal_mode"), std::string("delete"));  // a closed session is one file
    QCOMPARE(db.one("SELECT count(*) FROM event_view WHERE kind = 'step'"), std::string("24"));
    QCOMPARE(db.one("SELECT count(*) FROM events WHERE kind = (SELECT id FROM kinds WHERE name = 'kernel')"),
             std::to_string(s.eventCount(EventKind::Kernel)));
    // Synthetic memcpy: 10 us, 1 MiB, named memcpy_h2d.
    QCOMPARE(db.one("SELECT dur_ns FROM event_view WHERE kind = 'memcpy' LIMIT 1"), std::string("10000"));
    QCOMPARE(db.one("SELECT json_extract(args, '$.bytes') FROM event_view WHERE name = 'memcpy_h2d' LIMIT 1"),
             std::string("1048576"));
    QCOMPARE(db.one("SELECT json_extract(args, '$.algorithm') FROM event_view WHERE kind = 'collective' LIMIT 1"),
             std::string("ring"));
    // The loss counter is a double and reads back as REAL with its exact value (rank 1, step 2).
    const std::string loss = "SELECT json_extract(args, '$.value') FROM event_view WHERE kind = 'counter' AND rank = 1 "
                             "AND json_extract(args, '$.step') = 2";
    QCOMPARE(db.type(loss), SQLITE_FLOAT);
    QCOMPARE(db.real(loss), 2.5 / 3.0 + 0.01);
    // Only phases and the optimizer kernel (one per rank and step) carry no attributes.
    QCOMPARE(db.one("SELECT count(*) FROM events WHERE args IS NULL"),
             std::to_string(s.eventCount(EventKind::Phase) + 4 * 6));
    QCOMPARE(db.one("SELECT count(*) FROM knob_changes WHERE knob = 'dp.bucket_bytes' AND value = '8388608' AND step = 3"),
             std::string("4"));
    QCOMPARE(db.one("SELECT host FROM ranks WHERE rank = 1"), std::string("node0"));
    QCOMPARE(db.one("SELECT dropped_events FROM ranks WHERE rank = 1"), std::string("12345"));
    QCOMPARE(db.one("SELECT kind FROM track_view WHERE name = 'comm stream 13' LIMIT 1"), std::string("cuda_stream"));
    QCOMPARE(db.one("SELECT value FROM meta WHERE key = 'generator'"), std::string("trainscope synth"));
    QCOMPARE(db.one("SELECT event_count FROM segments"), std::to_string(s.eventCount()));
    QCOMPARE(db.one("SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND "
                    "name IN ('events_s1_rank', 'events_s1_track')"),
             std::string("2"));
    // The range query of loadRange uses the segment's time index.
    sqlite3_stmt* st = nullptr;
    sqlite3* raw = nullptr;
    sqlite3_open_v2(p.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr);
    const std::string eqp = "EXPLAIN QUERY PLAN SELECT id FROM events WHERE id BETWEEN 1 AND " +
                            std::to_string(s.eventCount()) + " AND rank = 3 AND start_ns >= 0 AND start_ns < 100";
    QCOMPARE(sqlite3_prepare_v2(raw, eqp.c_str(), -1, &st, nullptr), SQLITE_OK);
    QCOMPARE(sqlite3_step(st), SQLITE_ROW);
    const std::string detail = reinterpret_cast<const char*>(sqlite3_column_text(st, 3));
    sqlite3_finalize(st);
    sqlite3_close(raw);
    QVERIFY2(detail.find("events_s1_rank") != std::string::npos, detail.c_str());
    // So does the query for the long events (steps, phases): their own partial index.
    const std::string longDur = db.one("SELECT long_dur_ns FROM segments WHERE id = 1");
    QVERIFY2(longDur != "NULL" && std::stoll(longDur) > 0, longDur.c_str());
    const std::string longPlan = db.one(
        "EXPLAIN QUERY PLAN SELECT id FROM events INDEXED BY events_s1_long WHERE id BETWEEN 1 AND " +
        std::to_string(s.eventCount()) + " AND end_ns - start_ns > " + longDur + " AND rank = 3 AND start_ns >= 0");
    QVERIFY2(longPlan.rfind("ERROR", 0) != 0, longPlan.c_str());
    QCOMPARE(db.one("SELECT count(*) FROM events WHERE end_ns - start_ns > " + longDur) ,
             db.one("SELECT count(*) FROM events INDEXED BY events_s1_long WHERE id BETWEEN 1 AND " +
                    std::to_string(s.eventCount()) + " AND end_ns - start_ns > " + longDur + " AND rank >= 0"));
  }

  void writerRefusals() {
    const fs::path p = file("refuse.tsdb");
    TraceStore s = synthStore(1, 1);
    QVERIFY(saveSession(s, p).isOk());
    auto again = SessionWriter::create(p, {.overwrite = false});
    QCOMPARE(again.status().code(), ErrorCode::InvalidArgument);
    QVERIFY(again.status().message().find(p.string()) != std::string::npos);
    auto w = SessionWriter::create(p);  // overwrite (the default) replaces the file
    QVERIFY(w.isOk());
    QCOMPARE(w.value()->append(s, 999, {0, 1, 0, EventKind::Kernel}, {}).code(), ErrorCode::InvalidArgument);
    QVERIFY(w.value()->close().isOk());
    QCOMPARE(w.value()->append(s, 0, {0, 1, 0, EventKind::Kernel}, {}).code(), ErrorCode::InvalidArgument);
    auto r = SessionReader::open(p);
    QVERIFY(r.isOk());
    QCOMPARE(r.value()->summary()->eventCount, uint64_t{0});
  }
};

QTEST_GUILESS_MAIN(TstSessionDb)
#include "tst_session_db.moc"
