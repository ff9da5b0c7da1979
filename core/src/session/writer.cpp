// SessionWriter: appends a live session to a .tsdb file.
//
// Events go straight into a prepared INSERT inside an open transaction that is committed every
// Options::batchEvents events, so a batch is never copied twice and readers (WAL) see whole
// batches only. Strings, tracks and ranks an event needs are written in the same transaction
// as the event, so a reader never meets a dangling id. Each segment gets its time indexes when
// it is finished: partial indexes over its id range, which later live inserts skip.
#include <array>
#include <bit>
#include <charconv>
#include <ctime>
#include <limits>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "session/args.h"
#include "session/schema.h"
#include "session/sqlite.h"
#include "trainscope/core/session/tsdb.h"

namespace trainscope::core {

namespace fs = std::filesystem;
using tsdb::Stmt;

namespace {

constexpr StringId kUnmapped = std::numeric_limits<StringId>::max();

// Extent and counts of the segment being written; stored in the segments table when it is
// finished, so that summary() never scans the events table of a finished session.
struct SegmentStats {
  int64_t firstId = 1;
  uint64_t count = 0;
  int64_t minStart = std::numeric_limits<int64_t>::max();
  int64_t maxEnd = std::numeric_limits<int64_t>::min();
  int64_t maxDur = 0;
  std::array<uint64_t, 65> perClass{};  // events by duration class (durationClass)
  std::array<uint64_t, 256> perKind{};
  std::vector<uint64_t> perTrack;

  void reset(int64_t nextId) {
    *this = SegmentStats{};
    firstId = nextId;
  }
  void add(TrackId track, const EventRecord& e, int durClass) {
    ++count;
    minStart = std::min(minStart, e.startNs);
    maxEnd = std::max(maxEnd, e.endNs);
    maxDur = std::max(maxDur, e.endNs - e.startNs);
    ++perClass[static_cast<size_t>(durClass)];
    ++perKind[static_cast<uint8_t>(e.kind)];
    if (track >= perTrack.size()) perTrack.resize(track + 1);
    ++perTrack[track];
  }
  // The duration threshold of the long-event index: 2^k - 1 for the smallest class k that leaves
  // at most 1/64 of the events longer. -1 when no event is longer than it (no long index).
  // A power-of-two grid: at most 2x above the duration the cut actually needs.
  int64_t longThreshold() const {
    uint64_t above = count;
    for (int k = 0; k < 64; ++k) {
      above -= perClass[static_cast<size_t>(k)];
      if (above <= count / 64) return above == 0 ? -1 : int64_t((uint64_t{1} << k) - 1);
    }
    return -1;
  }
  // {"kernel":12,"range":40}: by name, so the shell can read it; unknown kinds by number.
  std::string kindCountsJson() const {
    nlohmann::json j = nlohmann::json::object();
    for (size_t k = 0; k < perKind.size(); ++k) {
      if (!perKind[k]) continue;
      const auto kind = static_cast<EventKind>(k);
      const std::string name = k < kEventKindCount ? std::string(eventKindName(kind)) : std::to_string(k);
      j[name] = perKind[k];
    }
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  std::string trackCountsJson() const {
    nlohmann::json j = nlohmann::json::object();
    for (size_t t = 0; t < perTrack.size(); ++t)
      if (perTrack[t]) j[std::to_string(t)] = perTrack[t];
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
};

// Bit width of the duration, 0..63 (0 for instants and negative durations): every event of
// class c is at most 2^c - 1 long.
int durationClass(const EventRecord& e) {
  const int64_t d = e.endNs - e.startNs;
  return d > 0 ? std::bit_width(static_cast<uint64_t>(d)) : 0;
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

}  // namespace

const char* SessionWriter::pragmas() {
  // 4 KiB pages, SQLite's default: 8 and 16 KiB were within the noise (about 5 %) of it in
  // bench_sqlite. A 64 MiB page cache keeps the index sort of a segment of a few million events
  // in memory.
  return "PRAGMA page_size = 4096;"
         "PRAGMA journal_mode = WAL;"
         "PRAGMA synchronous = NORMAL;"
         "PRAGMA cache_size = -65536;";
}

struct SessionWriter::Impl {
  fs::path path;
  Options options;
  tsdb::DbPtr db;
  Stmt begin, commit, insEvent, insString, insKnob, upRank, upTrack, upMeta, insSegment, closeSegment;
  bool inTx = false;
  bool closed = false;
  Status failure;  // first error; the writer refuses further work after it

  int64_t nextEventId = 1;
  int64_t nextSegmentId = 1;
  uint64_t pending = 0;
  uint64_t appended = 0;
  uint64_t committed = 0;  // appended as of the last successful commit
  int64_t txStartNs = 0;   // when the open batch began (coarse monotonic), for Options::commitMs
  SegmentStats seg;
  std::string args;             // reused buffer for the args JSON
  std::string attrBlob;         // reused buffer for the binary attrs column
  std::vector<Attr> fileAttrs;  // attrs with file string ids, for attrBlob

  // Store string id -> file string id. File ids are assigned by first use; content -> id makes
  // a string that several stores share land once in the strings table.
  const TraceStore* mappedStore = nullptr;
  std::vector<StringId> remap;
  std::unordered_map<std::string, StringId, StringHash, std::equal_to<>> fileStrings;
  StringId nextString = 1;  // 0 is "" (written by createSchema)

  std::vector<uint8_t> trackWritten;  // by TrackId: has a tracks row
  std::unordered_set<RankId> ranksWritten;

  Status fail(Status s) {
    if (!s.isOk() && failure.isOk()) failure = s;
    return s;
  }
  Status usable() const {
    if (closed) return {ErrorCode::InvalidArgument, path.string() + ": the session writer is already closed"};
    return failure;
  }
  Status step(sqlite3_stmt* s, std::string_view what) {
    const int rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc == SQLITE_DONE || rc == SQLITE_ROW) return Status::ok();
    return fail(tsdb::sqliteError(db.get(), rc, path, what));
  }
  Status beginIfNeeded() {
    if (inTx) return Status::ok();
    if (Status s = step(begin.get(), "starting a transaction"); !s) return s;
    inTx = true;
    if (options.commitMs > 0) txStartNs = coarseNowNs();
    return Status::ok();
  }
  Status commitTx() {
    if (!inTx) return Status::ok();
    inTx = false;
    pending = 0;
    Status s = step(commit.get(), "committing a batch of events");
    if (s) committed = appended;
    // A failed COMMIT may leave SQLite's transaction open (SQLITE_FULL): roll it back, so that
    // the connection closes on the last committed state.
    else if (!sqlite3_get_autocommit(db.get()))
      (void)tsdb::exec(db.get(), "ROLLBACK", path, "rolling back after a failed commit");
    return s;
  }
  static int64_t coarseNowNs() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);  // a few ns (vDSO), ms resolution is enough
    return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
  }

  Status prepareAll();
  Status fileString(const StringTable& strings, StringId id, StringId& out);
  Status writeRank(const RankInfo& r);
  Status writeTrack(TrackId id, const TrackInfo& t);
  Status writeKnobChange(const TraceStore& store, RankId rank, const EventRecord& e, std::span<const Attr> attrs);
  Status appendEvent(const TraceStore& store, TrackId track, const EventRecord& e, std::span<const Attr> attrs);
  Status finishSegment(bool closesSession);
};

Status SessionWriter::Impl::prepareAll() {
  struct {
    Stmt* stmt;
    const char* sql;
  } const list[] = {
      {&begin, "BEGIN"},
      {&commit, "COMMIT"},
      // No id: SQLite's own next rowid skips the existence probe an explicit key would cost.
      {&insEvent, "INSERT INTO events(rank, track, kind, name, start_ns, end_ns, args, attrs) "
                  "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"},
      {&insString, "INSERT INTO strings(id, value) VALUES(?1, ?2)"},
      {&insKnob, "INSERT INTO knob_changes(event_id, step, rank, knob, value, ts_ns) "
                 "VALUES(?1, ?2, ?3, ?4, ?5, ?6)"},
      {&upRank, "INSERT OR REPLACE INTO ranks(rank, host, pid, local_rank, device, clock_offset_ns, "
                "dropped_events) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)"},
      {&upTrack, "INSERT OR REPLACE INTO tracks(id, rank, kind, name, external_id) VALUES(?1, ?2, ?3, ?4, ?5)"},
      {&upMeta, "INSERT OR REPLACE INTO meta(key, value) VALUES(?1, ?2)"},
      {&insSegment, "INSERT INTO segments(id, first_event_id, last_event_id, event_count, min_start_ns, "
                    "max_end_ns, max_dur_ns, kind_counts, track_counts, indexed, closes_session, long_dur_ns) "
                    "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"},
      {&closeSegment, "UPDATE segments SET closes_session = 1 WHERE id = ?1"},
  };
  for (const auto& [stmt, sql] : list) {
    auto r = tsdb::prepare(db.get(), sql, path);
    if (!r) return r.status();
    *stmt = std::move(r.value());
  }
  return Status::ok();
}

Status SessionWriter::Impl::fileString(const StringTable& strings, StringId id, StringId& out) {
  if (id < remap.size() && remap[id] != kUnmapped) {  // the per-event fast path
    out = remap[id];
    return Status::ok();
  }
  const std::string_view text = strings.get(id);
  auto it = fileStrings.find(text);
  if (it == fileStrings.end()) {
    if (Status s = beginIfNeeded(); !s) return s;
    sqlite3_stmt* st = insString.get();
    sqlite3_bind_int64(st, 1, nextString);
    tsdb::bindText(st, 2, text);
    if (Status s = step(st, "writing a string"); !s) return s;
    it = fileStrings.emplace(std::string(text), nextString++).first;
  }
  if (id >= remap.size()) remap.resize(std::max<size_t>(id + 1, strings.size()), kUnmapped);
  out = remap[id] = it->second;
  return Status::ok();
}

Status SessionWriter::Impl::writeRank(const RankInfo& r) {
  if (Status s = beginIfNeeded(); !s) return s;
  sqlite3_stmt* st = upRank.get();
  sqlite3_bind_int64(st, 1, r.rank);
  tsdb::bindText(st, 2, r.host);
  sqlite3_bind_int64(st, 3, r.pid);
  sqlite3_bind_int64(st, 4, r.localRank);
  sqlite3_bind_int64(st, 5, r.device);
  sqlite3_bind_int64(st, 6, r.clockOffsetNs);
  // SQLite integers are signed 64-bit; counts above 2^63 do not occur.
  sqlite3_bind_int64(st, 7, static_cast<int64_t>(r.droppedEvents));
  if (Status s = step(st, "writing a rank"); !s) return s;
  ranksWritten.insert(r.rank);
  return Status::ok();
}

Status SessionWriter::Impl::writeTrack(TrackId id, const TrackInfo& t) {
  if (Status s = beginIfNeeded(); !s) return s;
  sqlite3_stmt* st = upTrack.get();
  sqlite3_bind_int64(st, 1, id);
  sqlite3_bind_int64(st, 2, t.rank);
  sqlite3_bind_int64(st, 3, static_cast<int64_t>(t.kind));
  tsdb::bindText(st, 4, t.name);
  sqlite3_bind_int64(st, 5, t.externalId);
  if (Status s = step(st, "writing a track"); !s) return s;
  if (id >= trackWritten.size()) trackWritten.resize(id + 1, 0);
  trackWritten[id] = 1;
  return Status::ok();
}

// KnobChange events are mirrored into knob_changes so the shell can list them without JSON.
Status SessionWriter::Impl::writeKnobChange(const TraceStore& store, RankId rank, const EventRecord& e,
                                            std::span<const Attr> attrs) {
  const Attr* knob = nullptr;
  const Attr* value = nullptr;
  const Attr* stepAttr = nullptr;
  for (const Attr& a : attrs) {
    if (a.key == static_cast<uint32_t>(AttrKey::Knob) && !knob) knob = &a;
    if (a.key == static_cast<uint32_t>(AttrKey::KnobValue) && !value) value = &a;
    if (a.key == static_cast<uint32_t>(AttrKey::Step) && !stepAttr) stepAttr = &a;
  }
  // Attribute text: strings by content, numbers as text (a knob value may be typed either way).
  auto text = [&store](const Attr& a) {
    if (a.type == AttrType::String) return std::string(store.str(a.asString()));
    if (a.type != AttrType::Double) return std::to_string(a.bits);
    char buf[40];  // shortest text that reads back to the same double ("0.1", not "0.100000")
    const auto r = std::to_chars(buf, buf + sizeof buf, a.asDouble());
    return std::string(buf, r.ptr);
  };
  std::string knobText = knob ? text(*knob) : std::string(store.str(e.name));
  std::string valueText = value ? text(*value) : std::string();
  sqlite3_stmt* st = insKnob.get();
  sqlite3_bind_int64(st, 1, nextEventId - 1);
  if (stepAttr) sqlite3_bind_int64(st, 2, stepAttr->bits);
  else sqlite3_bind_null(st, 2);
  sqlite3_bind_int64(st, 3, rank);
  tsdb::bindText(st, 4, knobText);
  if (value) tsdb::bindText(st, 5, valueText);
  else sqlite3_bind_null(st, 5);
  sqlite3_bind_int64(st, 6, e.startNs);
  return step(st, "writing a knob change");
}

Status SessionWriter::Impl::appendEvent(const TraceStore& store, TrackId track, const EventRecord& e,
                                        std::span<const Attr> attrs) {
  if (track >= store.trackCount())
    return {ErrorCode::InvalidArgument, path.string() + ": append to track " + std::to_string(track) +
                                            ", which the store does not have"};
  if (Status s = beginIfNeeded(); !s) return s;
  if (&store != mappedStore) {  // string ids are per store
    mappedStore = &store;
    remap.assign(store.strings().size(), kUnmapped);
  }
  const TrackInfo& info = store.track(track);
  if (track >= trackWritten.size() || !trackWritten[track]) {
    if (!ranksWritten.count(info.rank)) {
      const RankInfo* r = store.rank(info.rank);
      if (Status s = writeRank(r ? *r : RankInfo{.rank = info.rank}); !s) return s;
    }
    if (Status s = writeTrack(track, info); !s) return s;
  }
  StringId name = 0;
  if (Status s = fileString(store.strings(), e.name, name); !s) return s;

  sqlite3_stmt* st = insEvent.get();
  sqlite3_bind_int64(st, 1, info.rank);
  sqlite3_bind_int64(st, 2, track);
  sqlite3_bind_int64(st, 3, static_cast<int64_t>(e.kind));
  sqlite3_bind_int64(st, 4, name);
  sqlite3_bind_int64(st, 5, e.startNs);
  sqlite3_bind_int64(st, 6, e.endNs);
  if (attrs.empty()) {
    sqlite3_bind_null(st, 7);
    sqlite3_bind_null(st, 8);
  } else {
    args.clear();
    tsdb::encodeArgs(attrs, store.strings(), args);
    tsdb::bindText(st, 7, args);
    // The same attributes for the loader: string ids become file ids (strings table rows).
    fileAttrs.assign(attrs.begin(), attrs.end());
    for (Attr& a : fileAttrs) {
      StringId id = 0;
      if (a.isCustom()) {
        if (Status s = fileString(store.strings(), a.key - kCustomAttrBase, id); !s) return s;
        a.key = kCustomAttrBase + id;
      }
      if (a.type == AttrType::String) {
        if (Status s = fileString(store.strings(), a.asString(), id); !s) return s;
        a.bits = id;
      }
    }
    attrBlob.clear();
    tsdb::encodeAttrBlob(fileAttrs, attrBlob);
    sqlite3_bind_blob(st, 8, attrBlob.data(), static_cast<int>(attrBlob.size()), SQLITE_STATIC);
  }
  if (Status s = step(st, "writing an event"); !s) return s;
  // Ids are max(id) + 1 in a table only this writer appends to; the segment extents rely on it.
  nextEventId = sqlite3_last_insert_rowid(db.get()) + 1;
  ++appended;
  seg.add(track, e, durationClass(e));
  if (e.kind == EventKind::KnobChange)
    if (Status s = writeKnobChange(store, info.rank, e, attrs); !s) return s;
  if (++pending >= options.batchEvents) return commitTx();
  if (options.commitMs > 0 && coarseNowNs() - txStartNs >= int64_t{options.commitMs} * 1'000'000) return commitTx();
  return Status::ok();
}

Status SessionWriter::Impl::finishSegment(bool closesSession) {
  if (Status s = commitTx(); !s) return s;
  if (seg.count == 0) {
    if (!closesSession) return Status::ok();
    if (nextSegmentId > 1) {  // nothing new since the last segment: mark that one final
      sqlite3_bind_int64(closeSegment.get(), 1, nextSegmentId - 1);
      return step(closeSegment.get(), "marking the session complete");
    }
  }
  // One transaction for the segment row and its indexes: a reader sees both or neither (and
  // without them treats the events as an unindexed tail, which is slower but still right).
  if (Status s = beginIfNeeded(); !s) return s;
  const int64_t id = nextSegmentId;
  const int64_t last = nextEventId - 1;
  const bool index = seg.count > 0;
  sqlite3_stmt* st = insSegment.get();
  sqlite3_bind_int64(st, 1, id);
  sqlite3_bind_int64(st, 2, seg.firstId);
  sqlite3_bind_int64(st, 3, last);
  sqlite3_bind_int64(st, 4, static_cast<int64_t>(seg.count));
  if (seg.count) {
    sqlite3_bind_int64(st, 5, seg.minStart);
    sqlite3_bind_int64(st, 6, seg.maxEnd);
  } else {
    sqlite3_bind_null(st, 5);
    sqlite3_bind_null(st, 6);
  }
  sqlite3_bind_int64(st, 7, seg.maxDur);
  const std::string kinds = seg.kindCountsJson(), tracks = seg.trackCountsJson();
  tsdb::bindText(st, 8, kinds);
  tsdb::bindText(st, 9, tracks);
  sqlite3_bind_int(st, 10, index ? 1 : 0);
  sqlite3_bind_int(st, 11, closesSession ? 1 : 0);
  const int64_t longDur = seg.longThreshold();
  if (longDur >= 0) sqlite3_bind_int64(st, 12, longDur);
  else sqlite3_bind_null(st, 12);
  if (Status s = step(st, "recording a segment"); !s) return s;
  if (index) {
    // Partial indexes: only this segment's rows; the planner uses them for queries that repeat
    // the same "id BETWEEN a AND b" term (SessionReader::loadRange does). (rank, start_ns) keeps
    // the sort cheap: events arrive nearly in start order. The few longest events get a third
    // index, with end_ns so that it filters without touching the table.
    const std::string where = " WHERE id BETWEEN " + std::to_string(seg.firstId) + " AND " + std::to_string(last);
    std::string sql =
        "CREATE INDEX " + tsdb::segmentIndexName(id, "rank") + " ON events(rank, start_ns)" + where + ";" +
        "CREATE INDEX " + tsdb::segmentIndexName(id, "track") + " ON events(track, start_ns)" + where + ";";
    if (longDur >= 0)
      sql += "CREATE INDEX " + tsdb::segmentIndexName(id, "long") + " ON events(rank, start_ns, end_ns)" + where +
             " AND end_ns - start_ns > " + std::to_string(longDur) + ";";
    if (Status s = tsdb::exec(db.get(), sql, path, "building the time indexes of a segment"); !s) return fail(s);
  }
  if (Status s = commitTx(); !s) return s;
  ++nextSegmentId;
  seg.reset(nextEventId);
  return Status::ok();
}

// ---------------------------------------------------------------------------------------------

SessionWriter::SessionWriter() : d_(std::make_unique<Impl>()) {}

SessionWriter::~SessionWriter() {
  if (d_ && !d_->closed) (void)close();
}

Result<std::unique_ptr<SessionWriter>> SessionWriter::create(const fs::path& path, const Options& options) {
  std::error_code ec;
  if (fs::exists(path, ec)) {
    if (!options.overwrite)
      return Status{ErrorCode::InvalidArgument, path.string() + ": already exists (and overwrite is off)"};
    if (fs::is_directory(path, ec))
      return Status{ErrorCode::InvalidArgument, path.string() + ": is a directory, not a session file"};
  }
  // A leftover -wal from an earlier session would be replayed into the new file: remove it too.
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    const fs::path p = path.string() + suffix;
    if (!fs::remove(p, ec) && ec && ec != std::errc::no_such_file_or_directory)
      return Status{ErrorCode::Io, p.string() + ": cannot remove the old file: " + ec.message()};
  }
  std::unique_ptr<SessionWriter> w(new SessionWriter());
  Impl& d = *w->d_;
  d.path = path;
  d.options = options;
  if (d.options.batchEvents == 0) d.options.batchEvents = 1;
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                                 nullptr);
  d.db.reset(raw);
  if (rc != SQLITE_OK) {
    Status s = tsdb::sqliteError(raw, rc, path, "creating the session file");
    d.closed = true;
    return Status{ErrorCode::Io, s.message()};
  }
  sqlite3_busy_timeout(raw, 5000);  // a reader's checkpoint-free read lock is brief
  Status s = tsdb::exec(raw, pragmas(), path, "setting up the session file");
  if (s) s = tsdb::createSchema(raw, path);
  if (s) s = d.prepareAll();
  d.fileStrings.emplace("", kEmptyString);  // createSchema wrote it
  if (!s) {
    d.closed = true;
    d.db.reset();
    return s;
  }
  return w;
}

Status SessionWriter::putMetadata(const std::string& key, const std::string& value) {
  if (Status s = d_->usable(); !s) return s;
  if (Status s = d_->beginIfNeeded(); !s) return s;
  tsdb::bindText(d_->upMeta.get(), 1, key);
  tsdb::bindText(d_->upMeta.get(), 2, value);
  return d_->step(d_->upMeta.get(), "writing metadata");
}

Status SessionWriter::putRank(const RankInfo& rank) {
  if (Status s = d_->usable(); !s) return s;
  return d_->writeRank(rank);
}

Status SessionWriter::putTrack(TrackId id, const TrackInfo& track) {
  if (Status s = d_->usable(); !s) return s;
  return d_->writeTrack(id, track);
}

Status SessionWriter::append(const TraceStore& store, TrackId track, const EventRecord& e,
                             std::span<const Attr> attrs) {
  if (Status s = d_->usable(); !s) return s;
  return d_->appendEvent(store, track, e, attrs);
}

Status SessionWriter::appendStore(const TraceStore& store) {
  if (Status s = d_->usable(); !s) return s;
  for (const auto& [key, value] : store.metadata())
    if (Status s = putMetadata(key, value); !s) return s;
  for (const auto& [r, info] : store.ranks())
    if (Status s = d_->writeRank(info); !s) return s;
  for (TrackId t = 0; t < store.trackCount(); ++t)
    if (Status s = d_->writeTrack(t, store.track(t)); !s) return s;
  for (TrackId t = 0; t < store.trackCount(); ++t) {
    const TrackEvents& ev = store.rawEvents(t);
    for (size_t i = 0; i < ev.size(); ++i)
      if (Status s = d_->appendEvent(store, t, ev.record(i), ev.attrs(i)); !s) return s;
  }
  return d_->commitTx();
}

Status SessionWriter::commit() {
  if (Status s = d_->usable(); !s) return s;
  return d_->commitTx();
}

Status SessionWriter::finishSegment() {
  if (Status s = d_->usable(); !s) return s;
  return d_->finishSegment(false);
}

Status SessionWriter::close() {
  Impl& d = *d_;
  if (d.closed) return Status::ok();
  Status s = d.failure;
  if (s) s = d.finishSegment(true);
  if (s) {
    // A finished session becomes one self-contained file in rollback-journal mode: it can be
    // copied alone and opened read-only anywhere. Best effort: a reader holding the file open
    // keeps it in WAL mode, which SQLite reads just as well.
    (void)tsdb::exec(d.db.get(), "PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode = DELETE;", d.path,
                     "closing the session");
  } else {
    // After a failure (a full disk above all) the file keeps what the last commit left: no
    // checkpoint on close, which would only write into the full disk again. The write-ahead
    // log beside the file holds the committed pages; readers take both.
    if (!sqlite3_get_autocommit(d.db.get()))
      (void)tsdb::exec(d.db.get(), "ROLLBACK", d.path, "rolling back the failed batch");
    sqlite3_db_config(d.db.get(), SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  }
  d.closed = true;
  for (Stmt* st : {&d.begin, &d.commit, &d.insEvent, &d.insString, &d.insKnob, &d.upRank, &d.upTrack, &d.upMeta,
                   &d.insSegment, &d.closeSegment})
    *st = Stmt();  // finalized before the connection closes
  const int rc = sqlite3_close(d.db.release());
  if (s && rc != SQLITE_OK) s = tsdb::sqliteError(nullptr, rc, d.path, "closing the session file");
  return s;
}

uint64_t SessionWriter::eventsWritten() const { return d_->appended; }
uint64_t SessionWriter::eventsCommitted() const { return d_->committed; }
Status SessionWriter::failure() const { return d_->failure; }

}  // namespace trainscope::core
