// SessionReader (validation, summary, loading) and the whole-store helpers. The writer lives in
// session_writer.cpp; the schema and the raw-file checks in session_schema.cpp.
#include "trainscope/core/session/tsdb.h"

#include "trainscope/core/base/json_depth.h"
#include "trainscope/core/base/saturating.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "session/args.h"
#include "session/schema.h"
#include "session/sqlite.h"

namespace trainscope::core {

namespace fs = std::filesystem;
using tsdb::Stmt;

namespace {

constexpr StringId kUnmapped = std::numeric_limits<StringId>::max();
constexpr int64_t kMinId = std::numeric_limits<int64_t>::min();
constexpr int64_t kMaxId = std::numeric_limits<int64_t>::max();

// Columns every event query returns, in this order: id, track, kind, name, start_ns, end_ns,
// args (JSON, only where there is no attrs blob) and attrs (binary; files written before it
// existed have no such column).
constexpr const char* kEventColumnsWithAttrs =
    "SELECT id, track, kind, name, start_ns, end_ns, "
    "CASE WHEN attrs IS NULL THEN args END, attrs FROM events";
constexpr const char* kEventColumnsArgsOnly =
    "SELECT id, track, kind, name, start_ns, end_ns, args, NULL FROM events";
// The overlap test of TrackEvents::forEachOverlapping; ?3 = t1, ?4 = t0.
constexpr const char* kOverlap = "start_ns < ?3 AND (end_ns > ?4 OR (end_ns = start_ns AND start_ns >= ?4))";

bool overlaps(int64_t start, int64_t end, int64_t t0, int64_t t1) {
  return start < t1 && (end > t0 || (end == start && start >= t0));
}

struct Segment {
  int64_t id = 0, first = 0, last = 0, maxDur = 0;
  int64_t longDur = -1;  // events longer than this are also in the long-event index (-1: none)
  bool indexed = false;
  // Events not in the long-event index are at most this long.
  int64_t shortMaxDur() const { return longDur < 0 ? maxDur : std::min(maxDur, longDur); }
};

}  // namespace

struct SessionReader::Impl {
  fs::path path;
  tsdb::DbPtr db;
  int version = 0;
  bool hasSegments = false;  // v2
  bool hasDropped = false;   // v2: ranks.dropped_events
  bool hasAttrBlob = false;  // events.attrs (else every event's args JSON is parsed)
  std::vector<std::string> strings;  // the file's strings table, by id (grows for live files)
  std::unordered_map<int64_t, Stmt> segmentQueries;
  Stmt rangeQuery;  // unindexed: an id range, scanned by rowid

  // What loadRange already put into a store, so a later call does not add it twice: events of
  // `rank` overlapping [t0, t1) with ids up to maxId (later ids arrived after that call).
  struct Loaded {
    int64_t t0, t1, maxId;
  };
  std::unordered_map<const TraceStore*, std::unordered_map<RankId, std::vector<Loaded>>> loaded;

  Status error(int rc, std::string_view what) const { return tsdb::sqliteError(db.get(), rc, path, what); }
  Status corrupt(const std::string& what) const {
    return {ErrorCode::Corrupt, path.string() + ": the file's structure is damaged: " + what};
  }
  Status exec(const char* sql, std::string_view what) { return tsdb::exec(db.get(), sql, path, what); }
  Result<Stmt> prepare(std::string_view sql) { return tsdb::prepare(db.get(), sql, path); }
  std::string eventColumns() const { return hasAttrBlob ? kEventColumnsWithAttrs : kEventColumnsArgsOnly; }

  Status validate();
  Status refreshStrings();
  Status loadMetaAndRanks(TraceStore& store);
  Status mapTracks(TraceStore& store, std::vector<TrackId>& map);
  // What every load needs before events: new strings, metadata, ranks and the track mapping.
  Status loadHeader(TraceStore& store, std::vector<TrackId>& tracks) {
    if (Status s = refreshStrings(); !s) return s;
    if (Status s = loadMetaAndRanks(store); !s) return s;
    return mapTracks(store, tracks);
  }
  Result<std::vector<Segment>> segments();
  // The indexed range query of a segment (the long-event part when longPart), prepared once;
  // nullptr when the index is missing (dropped by hand): callers fall back to a scan.
  sqlite3_stmt* segmentQuery(const Segment& sg, bool longPart);
  // The store's id of file string `id` (< strings.size()), interned on first use.
  StringId storeString(TraceStore& store, std::vector<StringId>& names, StringId id) const {
    StringId& mapped = names[id];
    if (mapped == kUnmapped) mapped = store.intern(strings[id]);
    return mapped;
  }
  // Appends the rows of a prepared event query to store; skip() may drop rows.
  template <typename Skip>
  Status readEvents(sqlite3_stmt* st, TraceStore& store, const std::vector<TrackId>& tracks,
                    std::vector<StringId>& names, Skip&& skip);
};

// While a whole file is read, its pages come straight from the page cache (memory-mapped)
// instead of being copied into SQLite's own cache: loading 10 M events takes a third less system
// time. Mapped only for that read, so the mapped file does not stay in the process's RSS.
// Best effort: without it reads still work. Declare before the ReadTx (unmapped after it ends).
class MappedRead {
 public:
  explicit MappedRead(sqlite3* db) : db_(db) { set(2147418112); }  // SQLite's default maximum
  ~MappedRead() { set(0); }
  MappedRead(const MappedRead&) = delete;
  MappedRead& operator=(const MappedRead&) = delete;

 private:
  void set(int64_t bytes) {
    (void)sqlite3_exec(db_, ("PRAGMA mmap_size = " + std::to_string(bytes)).c_str(), nullptr, nullptr,
                       nullptr);
  }
  sqlite3* db_;
};

// A read transaction: every query inside sees the same committed state of a live file.
class ReadTx {
 public:
  ReadTx(sqlite3* db, const fs::path& path) : db_(db), path_(path) {}
  Status begin() {
    Status s = tsdb::exec(db_, "BEGIN", path_, "starting a read transaction");
    open_ = s.isOk();
    return s;
  }
  ~ReadTx() {
    if (open_) (void)tsdb::exec(db_, "COMMIT", path_, "ending a read transaction");
  }
  ReadTx(const ReadTx&) = delete;
  ReadTx& operator=(const ReadTx&) = delete;

 private:
  sqlite3* db_;
  const fs::path& path_;
  bool open_ = false;
};

Status SessionReader::Impl::validate() {
  auto pragmaInt = [this](const char* sql, int64_t& out) -> Status {
    auto st = prepare(sql);
    if (!st) return st.status();
    const int rc = sqlite3_step(st->get());
    if (rc != SQLITE_ROW) return error(rc, "reading the file header");
    out = tsdb::col64(st->get(), 0);
    return Status::ok();
  };
  int64_t appId = 0, userVersion = 0;
  if (Status s = pragmaInt("PRAGMA application_id", appId); !s) return s;
  if (static_cast<uint32_t>(appId) != kTsdbApplicationId)
    return {ErrorCode::WrongMagic,
            path.string() + ": an SQLite database, but not a Trainscope session (.tsdb): its application_id is " +
                tsdb::hex32(static_cast<uint32_t>(appId)) + ", a session's is " + tsdb::hex32(kTsdbApplicationId) +
                " (\"TSDB\"). Other traces (e.g. Nsight Systems exports) can be imported with "
                "trainscope-cli import"};
  if (Status s = pragmaInt("PRAGMA user_version", userVersion); !s) return s;
  if (userVersion > kTsdbSchemaVersion)
    return {ErrorCode::NewerSchema,
            path.string() + ": written with session schema version " + std::to_string(userVersion) +
                ", but this build of Trainscope reads versions " + std::to_string(tsdb::kOldestReadableSchema) +
                " to " + std::to_string(kTsdbSchemaVersion) + "; open it with a newer Trainscope"};
  if (userVersion < tsdb::kOldestReadableSchema)
    return corrupt("it carries the Trainscope application_id but no schema version (user_version " +
                   std::to_string(userVersion) + ")");
  version = static_cast<int>(userVersion);

  // Reading sqlite_schema parses the whole schema: damage to page 1 shows up here.
  auto tables = prepare("SELECT name FROM sqlite_schema WHERE type = 'table'");
  if (!tables) return tables.status();
  std::vector<std::string> names;
  int rc;
  while ((rc = sqlite3_step(tables->get())) == SQLITE_ROW) names.emplace_back(tsdb::columnText(tables->get(), 0));
  if (rc != SQLITE_DONE) return error(rc, "reading the schema");
  auto has = [&names](std::string_view n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  std::vector<std::string> required = {"meta", "strings", "ranks", "tracks", "events"};
  if (version >= 2) required.emplace_back("segments");
  for (const std::string& t : required)
    if (!has(t)) return corrupt("the table \"" + t + "\" of schema version " + std::to_string(version) + " is missing");
  hasSegments = has("segments");

  auto hasColumn = [this](const char* table, const char* name, bool& out) -> Status {
    auto column = prepare(std::string("SELECT count(*) FROM pragma_table_info('") + table +
                          "') WHERE name = '" + name + "'");
    if (!column) return column.status();
    const int r = sqlite3_step(column->get());
    if (r != SQLITE_ROW) return error(r, "reading the schema");
    out = sqlite3_column_int(column->get(), 0) > 0;
    return Status::ok();
  };
  if (Status s = hasColumn("ranks", "dropped_events", hasDropped); !s) return s;
  // A file without attrs (version 1, or 2 written before it existed) loads through args, slower.
  if (Status s = hasColumn("events", "attrs", hasAttrBlob); !s) return s;

  // Touch the rightmost pages of the events b-tree: a file cut inside the table fails here,
  // cheaply, instead of in the middle of a later load.
  auto maxId = prepare("SELECT max(id) FROM events");
  if (!maxId) return maxId.status();
  rc = sqlite3_step(maxId->get());
  if (rc != SQLITE_ROW) return error(rc, "reading the events table");
  return Status::ok();
}

Status SessionReader::Impl::refreshStrings() {
  auto st = prepare("SELECT id, value FROM strings WHERE id >= ?1 ORDER BY id");
  if (!st) return st.status();
  sqlite3_bind_int64(st->get(), 1, static_cast<int64_t>(strings.size()));
  int rc;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    const int64_t id = tsdb::col64(st->get(), 0);
    // Ids are dense from 0; a wild one means damage, not a reason to allocate gigabytes.
    if (id < 0 || id > static_cast<int64_t>(strings.size()) + (1 << 20))
      return corrupt("the strings table has an impossible id " + std::to_string(id));
    if (static_cast<size_t>(id) >= strings.size()) strings.resize(static_cast<size_t>(id) + 1);
    strings[static_cast<size_t>(id)] = tsdb::columnText(st->get(), 1);
  }
  return rc == SQLITE_DONE ? Status::ok() : error(rc, "reading strings");
}

Status SessionReader::Impl::loadMetaAndRanks(TraceStore& store) {
  auto meta = prepare("SELECT key, value FROM meta");
  if (!meta) return meta.status();
  int rc;
  while ((rc = sqlite3_step(meta->get())) == SQLITE_ROW)
    store.metadata()[std::string(tsdb::columnText(meta->get(), 0))] = tsdb::columnText(meta->get(), 1);
  if (rc != SQLITE_DONE) return error(rc, "reading metadata");

  // Version 1 had no dropped_events: those ranks read 0.
  auto ranks = prepare(hasDropped
                           ? "SELECT rank, host, pid, local_rank, device, clock_offset_ns, dropped_events FROM ranks"
                           : "SELECT rank, host, pid, local_rank, device, clock_offset_ns, 0 FROM ranks");
  if (!ranks) return ranks.status();
  sqlite3_stmt* s = ranks->get();
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    RankInfo r;
    r.rank = static_cast<RankId>(tsdb::col64(s, 0));
    r.host = tsdb::columnText(s, 1);
    r.pid = tsdb::col64(s, 2);
    r.localRank = static_cast<int32_t>(tsdb::col64(s, 3));
    r.device = static_cast<int32_t>(tsdb::col64(s, 4));
    r.clockOffsetNs = tsdb::col64(s, 5);
    r.droppedEvents = static_cast<uint64_t>(tsdb::col64(s, 6));
    store.setRank(r);
  }
  return rc == SQLITE_DONE ? Status::ok() : error(rc, "reading ranks");
}

// map[file track id] = store TrackId (kInvalidTrack where the file has no such track). Into an
// empty store the file's ids are kept; into a store that already holds tracks (a follow-up
// loadRange) the file's tracks are matched by (rank, kind, external id).
Status SessionReader::Impl::mapTracks(TraceStore& store, std::vector<TrackId>& map) {
  auto st = prepare("SELECT id, rank, kind, name, external_id FROM tracks ORDER BY id");
  if (!st) return st.status();
  std::vector<std::pair<int64_t, TrackInfo>> rows;
  int rc;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    sqlite3_stmt* s = st->get();
    TrackInfo t;
    t.rank = static_cast<RankId>(tsdb::col64(s, 1));
    t.kind = static_cast<TrackKind>(tsdb::col64(s, 2));
    t.name = tsdb::columnText(s, 3);
    t.externalId = tsdb::col64(s, 4);
    rows.emplace_back(tsdb::col64(s, 0), std::move(t));
  }
  if (rc != SQLITE_DONE) return error(rc, "reading tracks");
  map.clear();
  const bool fresh = store.trackCount() == 0;
  for (auto& [id, info] : rows) {
    if (id < 0 || id > static_cast<int64_t>(rows.size()) + (1 << 16))
      return corrupt("the tracks table has an impossible id " + std::to_string(id));
    const auto fileId = static_cast<size_t>(id);
    if (fileId >= map.size()) map.resize(fileId + 1, kInvalidTrack);
    if (fresh) {
      // Gaps in the file's ids (only possible through putTrack) become empty placeholder tracks.
      while (store.trackCount() < fileId) store.addTrack(TrackInfo{.rank = info.rank, .name = "(unused)"});
      map[fileId] = store.addTrack(info);
    } else if (fileId < store.trackCount() && store.track(static_cast<TrackId>(fileId)) == info) {
      map[fileId] = static_cast<TrackId>(fileId);
    } else {
      map[fileId] = store.findOrAddTrack(info.rank, info.kind, info.externalId, info.name);
    }
  }
  return Status::ok();
}

Result<std::vector<Segment>> SessionReader::Impl::segments() {
  std::vector<Segment> out;
  if (!hasSegments) return out;
  auto st = prepare("SELECT id, first_event_id, last_event_id, max_dur_ns, coalesce(long_dur_ns, -1), indexed "
                    "FROM segments WHERE event_count > 0 ORDER BY first_event_id");
  if (!st) return st.status();
  int rc;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    sqlite3_stmt* s = st->get();
    out.push_back({tsdb::col64(s, 0), tsdb::col64(s, 1), tsdb::col64(s, 2), std::max<int64_t>(0, tsdb::col64(s, 3)),
                   std::max<int64_t>(-1, tsdb::col64(s, 4)), sqlite3_column_int(s, 5) != 0});
  }
  if (rc != SQLITE_DONE) return error(rc, "reading segments");
  return out;
}

sqlite3_stmt* SessionReader::Impl::segmentQuery(const Segment& sg, bool longPart) {
  const int64_t key = sg.id * 2 + (longPart ? 1 : 0);
  auto it = segmentQueries.find(key);
  if (it == segmentQueries.end()) {
    // Literal ids and class: the planner uses a partial index only when the query repeats the
    // terms of its WHERE clause; INDEXED BY makes a missing index an error instead of a scan.
    std::string sql = eventColumns() + " INDEXED BY " +
                      tsdb::segmentIndexName(sg.id, longPart ? "long" : "rank") + " WHERE id BETWEEN " +
                      std::to_string(sg.first) + " AND " + std::to_string(sg.last);
    if (longPart) sql += " AND end_ns - start_ns > " + std::to_string(sg.longDur);
    sql += std::string(" AND rank = ?1 AND start_ns >= ?2 AND ") + kOverlap;
    auto st = prepare(sql);
    if (!st) return nullptr;
    it = segmentQueries.emplace(key, std::move(st.value())).first;
  }
  return it->second.get();
}

template <typename Skip>
Status SessionReader::Impl::readEvents(sqlite3_stmt* st, TraceStore& store, const std::vector<TrackId>& tracks,
                                       std::vector<StringId>& names, Skip&& skip) {
  tsdb::StmtReset reset(st);
  std::vector<Attr> attrs;
  std::string why;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const int64_t id = tsdb::col64(st, 0);
    const int64_t fileTrack = tsdb::col64(st, 1);
    const int64_t kind = tsdb::col64(st, 2);
    const int64_t name = tsdb::col64(st, 3);
    EventRecord e;
    e.startNs = tsdb::col64(st, 4);
    e.endNs = tsdb::col64(st, 5);
    if (skip(id, e)) continue;
    if (fileTrack < 0 || static_cast<size_t>(fileTrack) >= tracks.size() ||
        tracks[static_cast<size_t>(fileTrack)] == kInvalidTrack)
      return corrupt("event " + std::to_string(id) + " is on track " + std::to_string(fileTrack) +
                     ", which the tracks table lacks");
    if (name < 0 || static_cast<size_t>(name) >= strings.size())
      return corrupt("event " + std::to_string(id) + " is named by string " + std::to_string(name) +
                     ", which the strings table lacks");
    if (kind < 0 || kind > 255)
      return corrupt("event " + std::to_string(id) + " has an impossible kind " + std::to_string(kind));
    e.kind = static_cast<EventKind>(kind);
    e.name = storeString(store, names, static_cast<StringId>(name));
    attrs.clear();
    // NULL for SQL NULL (and for an empty blob, which the writer never stores: then args rules).
    if (const auto* blob = static_cast<const unsigned char*>(sqlite3_column_blob(st, 7))) {
      const auto size = static_cast<size_t>(sqlite3_column_bytes(st, 7));
      if (!tsdb::decodeAttrBlob({blob, size}, strings.size(), attrs, why))
        return corrupt("event " + std::to_string(id) + " has malformed attrs (" + why + ")");
      for (Attr& a : attrs) {  // file string ids -> the store's
        if (a.isCustom()) a.key = kCustomAttrBase + storeString(store, names, a.key - kCustomAttrBase);
        if (a.type == AttrType::String) a.bits = storeString(store, names, a.asString());
      }
    } else if (sqlite3_column_type(st, 6) != SQLITE_NULL &&
               !tsdb::decodeArgs(tsdb::columnText(st, 6), store.strings(), attrs, why)) {
      return corrupt("event " + std::to_string(id) + " has malformed args (" + why + ")");
    }
    store.append(tracks[static_cast<size_t>(fileTrack)], e, attrs);
  }
  return rc == SQLITE_DONE ? Status::ok() : error(rc, "reading events");
}

// ---------------------------------------------------------------------------------------------

SessionReader::SessionReader() : d_(std::make_unique<Impl>()) {}
SessionReader::~SessionReader() = default;

Result<std::unique_ptr<SessionReader>> SessionReader::open(const fs::path& path) {
  std::string walNote;  // the file is short, but its write-ahead log may hold the rest
  if (Status s = tsdb::checkFileHeader(path, &walNote); !s) return s;
  auto truncated = [&](const Status& s) {
    if (walNote.empty() || s.isOk()) return s;
    return Status{ErrorCode::Truncated, path.string() + ": truncated: " + walNote +
                                            ", but SQLite cannot read the session with it: " + s.message()};
  };
  std::unique_ptr<SessionReader> r(new SessionReader());
  Impl& d = *r->d_;
  d.path = path;
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
  d.db.reset(raw);
  if (rc != SQLITE_OK) return truncated(d.error(rc, "opening the session"));
  sqlite3_busy_timeout(raw, 5000);  // a live writer's checkpoint holds locks briefly
  if (Status s = d.validate(); !s) return truncated(s);
  return r;
}

int SessionReader::schemaVersion() const { return d_->version; }

Result<SessionSummary> SessionReader::summary() {
  Impl& d = *d_;
  SessionSummary s;
  s.path = d.path;
  s.schemaVersion = d.version;
  ReadTx tx(d.db.get(), d.path);
  if (Status st = tx.begin(); !st) return st;

  TraceStore header;  // ranks, tracks and metadata only: a few rows
  if (Status st = d.loadMetaAndRanks(header); !st) return st;
  std::vector<TrackId> map;
  if (Status st = d.mapTracks(header, map); !st) return st;
  for (const auto& [rank, info] : header.ranks()) {
    s.ranks.push_back(info);
    s.droppedEvents += info.droppedEvents;
  }
  for (TrackId t = 0; t < header.trackCount(); ++t) s.tracks.push_back({t, header.track(t), 0});
  s.metadata = header.metadata();

  int64_t lo = kMaxId, hi = kMinId;
  auto addCount = [&](int64_t track, EventKind kind, uint64_t n) {
    s.eventCount += n;
    s.eventsPerKind[kind] += n;
    if (track >= 0 && static_cast<size_t>(track) < map.size() && map[static_cast<size_t>(track)] != kInvalidTrack)
      s.tracks[map[static_cast<size_t>(track)]].eventCount += n;
  };

  // Finished segments carry their counts; only events after the last one are counted here.
  int64_t covered = kMinId;
  s.complete = !d.hasSegments;  // version 1 had no completion marker: a v1 file is taken as complete
  if (d.hasSegments) {
    auto st = d.prepare("SELECT event_count, min_start_ns, max_end_ns, kind_counts, track_counts, "
                        "closes_session, last_event_id FROM segments ORDER BY id");
    if (!st) return st.status();
    int rc;
    while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
      sqlite3_stmt* q = st->get();
      if (sqlite3_column_int(q, 5)) s.complete = true;
      covered = std::max(covered, tsdb::col64(q, 6));
      if (tsdb::col64(q, 0) <= 0) continue;
      ++s.segments;
      lo = std::min(lo, tsdb::col64(q, 1));
      hi = std::max(hi, tsdb::col64(q, 2));
      const std::string kindsText(tsdb::columnText(q, 3)), tracksText(tsdb::columnText(q, 4));
      // A crafted file's counts nested 70,000 deep would overflow the stack (json_depth.h).
      if (jsonNestedDeeperThan(kindsText) || jsonNestedDeeperThan(tracksText))
        return d.corrupt("a segment's counts are JSON nested deeper than " + std::to_string(kMaxJsonNesting) +
                         " levels");
      const auto kinds = nlohmann::json::parse(kindsText, nullptr, false);
      const auto tracks = nlohmann::json::parse(tracksText, nullptr, false);
      if (!kinds.is_object() || !tracks.is_object()) return d.corrupt("a segment's counts are not JSON objects");
      for (const auto& [name, n] : kinds.items()) {
        std::optional<EventKind> k = eventKindFromName(name);
        if (!k) {
          int v = -1;
          if (std::from_chars(name.data(), name.data() + name.size(), v).ec != std::errc() || v < 0 || v > 255)
            return d.corrupt("a segment counts events of an unknown kind \"" + name + "\"");
          k = static_cast<EventKind>(v);
        }
        if (!n.is_number_unsigned()) return d.corrupt("a segment's kind count is not a number");
        s.eventCount += n.get<uint64_t>();
        s.eventsPerKind[*k] += n.get<uint64_t>();
      }
      for (const auto& [track, n] : tracks.items()) {
        int64_t t = -1;
        std::from_chars(track.data(), track.data() + track.size(), t);
        if (!n.is_number_unsigned()) return d.corrupt("a segment's track count is not a number");
        if (t >= 0 && static_cast<size_t>(t) < map.size() && map[static_cast<size_t>(t)] != kInvalidTrack)
          s.tracks[map[static_cast<size_t>(t)]].eventCount += n.get<uint64_t>();
      }
    }
    if (rc != SQLITE_DONE) return d.error(rc, "reading segments");
  }
  auto tail = d.prepare("SELECT track, kind, count(*), min(start_ns), max(end_ns) FROM events "
                        "WHERE id > ?1 GROUP BY track, kind");
  if (!tail) return tail.status();
  sqlite3_bind_int64(tail->get(), 1, covered);
  int rc;
  while ((rc = sqlite3_step(tail->get())) == SQLITE_ROW) {
    sqlite3_stmt* q = tail->get();
    addCount(tsdb::col64(q, 0), static_cast<EventKind>(tsdb::col64(q, 1) & 0xff),
             static_cast<uint64_t>(tsdb::col64(q, 2)));
    lo = std::min(lo, tsdb::col64(q, 3));
    hi = std::max(hi, tsdb::col64(q, 4));
  }
  if (rc != SQLITE_DONE) return d.error(rc, "counting events");
  if (s.eventCount > 0) {
    s.startNs = lo;
    s.endNs = hi;
  }
  return s;
}

Status SessionReader::loadAll(TraceStore& store) {
  Impl& d = *d_;
  MappedRead mapped(d.db.get());
  ReadTx tx(d.db.get(), d.path);
  if (Status s = tx.begin(); !s) return s;
  std::vector<TrackId> tracks;
  if (Status s = d.loadHeader(store, tracks); !s) return s;
  auto st = d.prepare(d.eventColumns() + " ORDER BY id");
  if (!st) return st.status();
  std::vector<StringId> names(d.strings.size(), kUnmapped);
  Status r = d.readEvents(st->get(), store, tracks, names, [](int64_t, const EventRecord&) { return false; });
  store.flush();  // the loader owns the store until it returns: readers get it sorted
  return r;
}

Status SessionReader::loadRange(TraceStore& store, RankId rank, int64_t t0, int64_t t1) {
  Impl& d = *d_;
  ReadTx tx(d.db.get(), d.path);
  if (Status s = tx.begin(); !s) return s;
  std::vector<TrackId> tracks;
  if (Status s = d.loadHeader(store, tracks); !s) return s;
  auto segs = d.segments();
  if (!segs) return segs.status();

  int64_t maxId = 0;
  {
    auto st = d.prepare("SELECT coalesce(max(id), 0) FROM events");
    if (!st) return st.status();
    const int rc = sqlite3_step(st->get());
    if (rc != SQLITE_ROW) return d.error(rc, "reading the events table");
    maxId = tsdb::col64(st->get(), 0);
  }
  if (store.eventCount() == 0) d.loaded.erase(&store);  // a new (or emptied) store has seen nothing
  std::vector<Impl::Loaded>& before = d.loaded[&store][rank];
  auto skip = [&before](int64_t id, const EventRecord& e) {
    for (const Impl::Loaded& l : before)
      if (id <= l.maxId && overlaps(e.startNs, e.endNs, l.t0, l.t1)) return true;
    return false;
  };
  std::vector<StringId> names(d.strings.size(), kUnmapped);
  auto bindCommon = [&](sqlite3_stmt* st, int64_t lowStart) {
    sqlite3_bind_int64(st, 1, rank);
    sqlite3_bind_int64(st, 2, lowStart);
    sqlite3_bind_int64(st, 3, t1);
    sqlite3_bind_int64(st, 4, t0);
  };
  // Events in [first, last] by id, without a time index (rowid range scan).
  auto scan = [&](int64_t first, int64_t last) -> Status {
    if (first > last) return Status::ok();
    if (!d.rangeQuery) {
      auto st = d.prepare(d.eventColumns() + " WHERE id BETWEEN ?5 AND ?6 AND rank = ?1 AND " + kOverlap);
      if (!st) return st.status();
      d.rangeQuery = std::move(st.value());
    }
    sqlite3_stmt* st = d.rangeQuery.get();
    bindCommon(st, kMinId);
    sqlite3_bind_int64(st, 5, first);
    sqlite3_bind_int64(st, 6, last);
    Status r = d.readEvents(st, store, tracks, names, skip);
    store.flush();
    return r;
  };

  Status result;
  if (!d.hasSegments) {  // version 1: no extents known; whatever indexes the file has may help
    auto st = d.prepare(d.eventColumns() + " WHERE rank = ?1 AND start_ns >= ?2 AND " + kOverlap);
    if (!st) return st.status();
    bindCommon(st->get(), kMinId);
    result = d.readEvents(st->get(), store, tracks, names, skip);
  } else {
    int64_t cursor = kMinId;
    for (const Segment& sg : *segs) {
      if (result) result = scan(cursor, sg.first - 1);  // ids no segment covers (live tail, crash)
      cursor = std::max(cursor, sg.last == kMaxId ? kMaxId : sg.last + 1);
      if (!result) break;
      sqlite3_stmt* q = sg.indexed ? d.segmentQuery(sg, false) : nullptr;
      sqlite3_stmt* ql = sg.indexed && sg.longDur >= 0 ? d.segmentQuery(sg, true) : nullptr;
      if (!q || (sg.longDur >= 0 && !ql)) {
        result = scan(sg.first, sg.last);  // no usable index (e.g. dropped by hand): still right
        continue;
      }
      // The index is on start: an event overlapping t0 started at most its duration before it.
      // Short events (all but the longest 1/64) are searched back from t0 - shortMaxDur; the
      // long ones that started even earlier come from their own small index.
      const int64_t shortFrom = saturatingSub(t0, sg.shortMaxDur());
      bindCommon(q, shortFrom);
      result = d.readEvents(q, store, tracks, names, skip);
      if (result && ql && shortFrom > kMinId) {
        bindCommon(ql, saturatingSub(t0, sg.maxDur));
        sqlite3_bind_int64(ql, 3, std::min(t1, shortFrom));  // the short query covered the rest
        result = d.readEvents(ql, store, tracks, names, skip);
      }
    }
    if (result) result = scan(cursor, kMaxId);
  }
  if (result) before.push_back({t0, t1, maxId});
  return result;
}

// ---------------------------------------------------------------------------------------------

Status saveSession(const TraceStore& store, const fs::path& path) {
  auto w = SessionWriter::create(path);
  if (!w) return w.status();
  if (Status s = w.value()->appendStore(store); !s) return s;
  return w.value()->close();
}

Result<TraceStore> loadSession(const fs::path& path) {
  auto r = SessionReader::open(path);
  if (!r) return r.status();
  TraceStore store;
  if (Status s = r.value()->loadAll(store); !s) return s;
  store.shrinkToFit();  // sorts what arrived out of order and gives back the growth slack
  return store;
}

}  // namespace trainscope::core
