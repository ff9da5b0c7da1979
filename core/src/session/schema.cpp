#include "session/schema.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "session/sqlite.h"
#include "trainscope/core/model/events.h"
#include "trainscope/core/session/tsdb.h"

namespace trainscope::core::tsdb {

namespace fs = std::filesystem;

namespace {

// Tables and views of schema version 2. events.attrs, the binary copy of args that the loader
// decodes without JSON parsing, came later within version 2 (readers that do not know it ignore
// it; files without it are read through args); a hand edit of args by SQL clears it, so the
// loader then reads the edited JSON. Integer codes (kind) are stored compactly and named by
// lookup tables so that the sqlite3 shell can show words; event names are string ids for the
// same reason. Times are int64 nanoseconds of the session clock. The longest events of a
// segment (longer than segments.long_dur_ns) get an index of their own, so that one long event
// does not widen the backward search of every range query (see SessionReader::loadRange).
constexpr const char* kSchemaSql = R"sql(
CREATE TABLE meta(key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE strings(id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE kinds(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE track_kinds(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE ranks(
  rank INTEGER PRIMARY KEY,
  host TEXT NOT NULL DEFAULT '',
  pid INTEGER NOT NULL DEFAULT 0,
  local_rank INTEGER NOT NULL DEFAULT 0,
  device INTEGER NOT NULL DEFAULT -1,
  clock_offset_ns INTEGER NOT NULL DEFAULT 0,
  dropped_events INTEGER NOT NULL DEFAULT 0);
CREATE TABLE tracks(
  id INTEGER PRIMARY KEY,
  rank INTEGER NOT NULL,
  kind INTEGER NOT NULL,
  name TEXT NOT NULL,
  external_id INTEGER NOT NULL);
CREATE TABLE events(
  id INTEGER PRIMARY KEY,
  rank INTEGER NOT NULL,
  track INTEGER NOT NULL,
  kind INTEGER NOT NULL,
  name INTEGER NOT NULL,
  start_ns INTEGER NOT NULL,
  end_ns INTEGER NOT NULL,
  args TEXT,
  attrs BLOB);
CREATE TABLE knob_changes(
  event_id INTEGER PRIMARY KEY,
  step INTEGER,
  rank INTEGER NOT NULL,
  knob TEXT,
  value TEXT,
  ts_ns INTEGER NOT NULL);
CREATE TABLE segments(
  id INTEGER PRIMARY KEY,
  first_event_id INTEGER NOT NULL,
  last_event_id INTEGER NOT NULL,
  event_count INTEGER NOT NULL,
  min_start_ns INTEGER,
  max_end_ns INTEGER,
  max_dur_ns INTEGER NOT NULL,
  long_dur_ns INTEGER,
  kind_counts TEXT NOT NULL,
  track_counts TEXT NOT NULL,
  indexed INTEGER NOT NULL DEFAULT 0,
  closes_session INTEGER NOT NULL DEFAULT 0);
CREATE TRIGGER events_args_edited AFTER UPDATE OF args ON events BEGIN
  UPDATE events SET attrs = NULL WHERE id = new.id;
END;
CREATE VIEW event_view AS
  SELECT e.id, e.rank, e.track, k.name AS kind, s.value AS name, e.start_ns, e.end_ns,
         e.end_ns - e.start_ns AS dur_ns, e.args
  FROM events e LEFT JOIN kinds k ON k.id = e.kind LEFT JOIN strings s ON s.id = e.name;
CREATE VIEW track_view AS
  SELECT t.id, t.rank, k.name AS kind, t.name, t.external_id
  FROM tracks t LEFT JOIN track_kinds k ON k.id = t.kind;
)sql";

uint32_t be32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// The first bytes of a file, printable, for "this one starts with ..." messages.
std::string preview(const unsigned char* p, size_t n) {
  std::string s;
  for (size_t i = 0; i < n && i < 16; ++i) s += (p[i] >= 0x20 && p[i] < 0x7f) ? char(p[i]) : '.';
  return s;
}

bool nonEmptyFile(const fs::path& p) {
  std::error_code ec;
  const auto size = fs::file_size(p, ec);
  return !ec && size > 0;
}

struct HeaderRead {
  unsigned char bytes[100] = {};
  size_t n = 0;       // bytes read (<= 100)
  uint64_t size = 0;  // file size
};

Status readHeader(const fs::path& path, HeaderRead& h) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    const int err = errno;
    if (err == ENOENT) return {ErrorCode::NotFound, path.string() + ": no such file"};
    return {ErrorCode::Io, path.string() + ": cannot open the file: " + std::strerror(err)};
  }
  h.n = std::fread(h.bytes, 1, sizeof h.bytes, f);
  const bool readError = std::ferror(f) != 0;
  const bool seekOk = std::fseek(f, 0, SEEK_END) == 0;
  const long size = seekOk ? std::ftell(f) : -1;
  std::fclose(f);
  if (readError || size < 0) return {ErrorCode::Io, path.string() + ": cannot read the file"};
  h.size = static_cast<uint64_t>(size);
  return Status::ok();
}

}  // namespace

std::string segmentIndexName(int64_t segment, const char* column) {
  return "events_s" + std::to_string(segment) + "_" + column;
}

Status createSchema(sqlite3* db, const fs::path& path) {
  std::string sql = "BEGIN;\n";
  sql += "PRAGMA application_id = " + std::to_string(static_cast<int32_t>(kTsdbApplicationId)) + ";\n";
  sql += "PRAGMA user_version = " + std::to_string(kTsdbSchemaVersion) + ";\n";
  sql += kSchemaSql;
  for (int k = 0; k < kEventKindCount; ++k)
    sql += "INSERT INTO kinds VALUES(" + std::to_string(k) + ",'" +
           std::string(eventKindName(static_cast<EventKind>(k))) + "');\n";
  for (int k = 0; k < kTrackKindCount; ++k)
    sql += "INSERT INTO track_kinds VALUES(" + std::to_string(k) + ",'" +
           std::string(trackKindName(static_cast<TrackKind>(k))) + "');\n";
  sql += "INSERT INTO strings VALUES(0, '');\nCOMMIT;\n";
  return exec(db, sql, path, "creating the session schema");
}

Status checkFileHeader(const fs::path& path, std::string* walNote) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) return {ErrorCode::NotFound, path.string() + ": no such file"};
  if (ec) return {ErrorCode::Io, path.string() + ": cannot access the file: " + ec.message()};
  if (fs::is_directory(st))
    return {ErrorCode::NotSqlite, path.string() + ": is a directory, not a session file (.tsdb)"};

  static constexpr char kMagic[] = "SQLite format 3";  // 15 characters + NUL = the 16-byte magic
  for (int attempt = 0;; ++attempt) {
    HeaderRead h;
    if (Status s = readHeader(path, h); !s) return s;
    if (h.size == 0)
      return {ErrorCode::NotSqlite, path.string() + ": empty file (0 bytes), not an SQLite database "
                                                    "and so not a Trainscope session (.tsdb)"};
    if (h.n < 16 || std::memcmp(h.bytes, kMagic, 16) != 0)
      return {ErrorCode::NotSqlite,
              path.string() + ": not an SQLite database, so not a Trainscope session (.tsdb): a session "
                              "starts with \"SQLite format 3\", this file starts with \"" +
                  preview(h.bytes, h.n) + "\""};
    if (h.n < 100)
      return {ErrorCode::Truncated, path.string() + ": truncated: the file has only " + std::to_string(h.size) +
                                        " bytes, less than the 100-byte SQLite header"};
    uint32_t pageSize = (uint32_t{h.bytes[16]} << 8) | h.bytes[17];
    if (pageSize == 1) pageSize = 65536;
    if (pageSize < 512 || (pageSize & (pageSize - 1)) != 0)
      return {ErrorCode::Corrupt, path.string() + ": the file's structure is damaged: its SQLite header "
                                                  "gives an impossible page size (" +
                                      std::to_string(pageSize) + ")"};
    // The in-header page count is valid only when "version-valid-for" equals the change counter
    // (SQLite file format, section 1.3.7); older writers leave it stale, then we cannot tell.
    const uint32_t pages = be32(h.bytes + 28);
    const bool countValid = pages > 0 && be32(h.bytes + 92) == be32(h.bytes + 24);
    const uint64_t expected = uint64_t{pages} * pageSize;
    if (!countValid || h.size >= expected) return Status::ok();
    // A checkpoint of a live WAL session writes page 1 (the header) before the pages that grow
    // the file; look once more before calling a live file truncated.
    const fs::path wal(path.string() + "-wal");
    const bool hasWal = nonEmptyFile(wal);
    if (attempt == 0 && hasWal) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    const std::string shortBy = "the file has " + std::to_string(h.size) + " bytes but its SQLite header says " +
                                std::to_string(pages) + " pages of " + std::to_string(pageSize) + " bytes (" +
                                std::to_string(expected) + " bytes)";
    // A checkpoint cut short (disk full, killed writer): the log still holds the pages.
    if (hasWal) {
      if (walNote)
        *walNote = shortBy + "; the missing pages are expected in its write-ahead log " + wal.filename().string() +
                   " (a checkpoint cut short, e.g. by a full disk)";
      return Status::ok();
    }
    return {ErrorCode::Truncated, path.string() + ": truncated: " + shortBy +
                                      "; it was cut short, e.g. by an interrupted copy or a full disk"};
  }
}

}  // namespace trainscope::core::tsdb
