// Opening an Nsight Systems export and checking what it is: SQLite header and size, schema
// version, tables and columns, and each value's SQLite type (reader.h).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <string_view>

#include "interop/nsys/names.h"
#include "interop/nsys/reader.h"
#include "trainscope/core/interop/nsys/nsys_import.h"

namespace trainscope::core {

namespace fs = std::filesystem;
namespace nsys {

const char* typeName(int t) {
  switch (t) {
    case SQLITE_INTEGER:
      return "an integer";
    case SQLITE_FLOAT:
      return "a real";
    case SQLITE_TEXT:
      return "text";
    case SQLITE_BLOB:
      return "a blob";
    default:
      return "NULL";
  }
}

Status Reader::openFile() {
  std::error_code ec;
  const auto st = fs::status(path_, ec);
  if (!fs::exists(st)) return Status(ErrorCode::NotFound, name_ + ": no such file");
  if (fs::is_directory(st)) return Status(ErrorCode::Io, name_ + ": is a directory, not an nsys export");
  const uintmax_t size = fs::file_size(path_, ec);
  std::ifstream f(path_, std::ios::binary);
  if (!f) return Status(ErrorCode::Io, name_ + ": cannot open: " + std::strerror(errno ? errno : EACCES));
  unsigned char h[100] = {};
  f.read(reinterpret_cast<char*>(h), sizeof h);
  const auto got = static_cast<size_t>(f.gcount());
  if (got < 16 || std::memcmp(h, "SQLite format 3\0", 16) != 0) {
    std::string hint;
    if (isNsysReportName(path_))
      hint = "; an Nsight Systems report must be exported first: nsys export --type sqlite -o " +
             path_.stem().string() + ".sqlite " + path_.filename().string();
    return Status(ErrorCode::NotSqlite, name_ + ": not an SQLite file" + hint);
  }
  if (got < 100) return Status(ErrorCode::Truncated, name_ + ": truncated inside the SQLite header");
  // The header's page count is valid when its change counter matches "version-valid-for".
  auto be32 = [&](int o) {
    return uint32_t{h[o]} << 24 | uint32_t{h[o + 1]} << 16 | uint32_t{h[o + 2]} << 8 | h[o + 3];
  };
  uint64_t pageSize = uint64_t{h[16]} << 8 | h[17];
  if (pageSize == 1) pageSize = 65536;
  const uint64_t pages = be32(28);
  if (pages > 0 && be32(24) == be32(92) && !ec && size < pageSize * pages) {
    Status cut(ErrorCode::Truncated, name_ + ": truncated: the SQLite header says " +
                                         std::to_string(pageSize * pages) + " bytes, the file has " +
                                         std::to_string(size));
    if (!partial_) return cut;
    ++invalid_;  // --partial: read what the pages that are there still hold
    firstInvalid_ = cut.message();
  }
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(name_.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
  db_.reset(db);
  if (rc != SQLITE_OK) return tsdb::sqliteError(db, rc, path_, "opening");
  auto q = tsdb::prepare(db, "SELECT name, type FROM sqlite_master WHERE type IN ('table','view')", path_);
  if (!q) return q.status();
  int step;
  while ((step = sqlite3_step(q->get())) == SQLITE_ROW) {
    // Nsight Systems writes tables only. A view is a query the reader would run: one built to
    // join a table with itself ran out of memory (5.4 GB) or never finished on an 80 KB file
    // (issue 40). Refused, named.
    const std::string name(tsdb::columnText(q->get(), 0));
    if (tsdb::columnText(q->get(), 1) == "view") {
      // Only a view under a name the reader queries (other files, e.g. a .tsdb with its
      // event_view, go on to be told apart by their tables).
      static constexpr std::string_view kRead[] = {"CUPTI_", "NVTX_", "StringIds", "TARGET_INFO", "META_DATA",
                                                   "EXPORT_META", "ENUM_", "MPI_", "UCX_", "OSRT_", "ThreadNames"};
      for (std::string_view prefix : kRead)
        if (name.rfind(prefix, 0) == 0)
          return Status(ErrorCode::BadTrace, name_ + ": \"" + name +
                                                 "\" is a view, not a table: not an Nsight Systems export (views are "
                                                 "queries of any cost; refused)");
      continue;
    }
    tables_.insert(name);
  }
  if (step != SQLITE_DONE) return tsdb::sqliteError(db, step, path_, "reading the table list");
  return Status::ok();
}

Status Reader::readVersion() {
  for (const char* t : {"META_DATA_EXPORT", "EXPORT_META_DATA"}) {
    if (!tables_.count(t)) continue;
    auto cols = columns(t);
    if (!cols) return cols.status();
    if (!cols->count("name") || !cols->count("value"))
      return Status(ErrorCode::BadTrace, name_ + ": table " + t + " has no name/value columns");
    auto q = tsdb::prepare(db_.get(), std::string("SELECT name, value FROM ") + t, path_);
    if (!q) return q.status();
    int rc;
    while ((rc = sqlite3_step(q->get())) == SQLITE_ROW) {
      const std::string_view k = tsdb::columnText(q->get(), 0);
      if (k == "EXPORT_SCHEMA_VERSION") schemaVersion_ = std::string(tsdb::columnText(q->get(), 1));
      if (k == "EXPORT_PRODUCT_VERSION") productVersion_ = std::string(tsdb::columnText(q->get(), 1));
    }
    if (rc != SQLITE_DONE) return tsdb::sqliteError(db_.get(), rc, path_, std::string("reading ") + t);
    if (schemaVersion_ == "unknown") return Status::ok();
    int major = -1;
    const size_t dot = schemaVersion_.find('.');
    try {
      size_t used = 0;
      major = std::stoi(schemaVersion_.substr(0, dot), &used);
      if (used != schemaVersion_.substr(0, dot).size()) major = -1;
    } catch (...) {
    }
    const bool known =
        std::find(std::begin(kKnownMajors), std::end(kKnownMajors), major) != std::end(kKnownMajors);
    if (!known)
      return Status(ErrorCode::BadTrace,
                    name_ + ": Nsight Systems export schema version '" + schemaVersion_ + "' (" + t +
                        ".EXPORT_SCHEMA_VERSION) is not supported: this build "
                        "reads schema major versions 2 and 3 (Nsight Systems 2021-2025)");
    return Status::ok();
  }
  return Status::ok();
}

Result<std::map<std::string, int>> Reader::columns(const std::string& table) {
  auto q = tsdb::prepare(db_.get(), "PRAGMA table_info(\"" + table + "\")", path_);
  if (!q) return q.status();
  std::map<std::string, int> out;
  int rc;
  while ((rc = sqlite3_step(q->get())) == SQLITE_ROW)
    out[std::string(tsdb::columnText(q->get(), 1))] = sqlite3_column_int(q->get(), 0);
  if (rc != SQLITE_DONE) return tsdb::sqliteError(db_.get(), rc, path_, "reading the columns of " + table);
  return out;
}

Result<Query> Reader::select(const std::string& table, const std::vector<std::string>& required,
                             const std::vector<std::string>& optional) {
  auto cols = columns(table);
  if (!cols) return cols.status();
  std::string sql = "SELECT rowid";
  Query q;
  for (const auto& c : required) {
    if (!cols->count(c))
      return Status(ErrorCode::BadTrace, name_ + ": table " + table + " has no column '" + c +
                                             "' (Nsight Systems' schema has it): not an nsys export, or a "
                                             "schema this build does not know");
    sql += ", \"" + c + "\"";
    q.names.push_back(c);
  }
  for (const auto& c : optional) {
    sql += cols->count(c) ? ", \"" + c + "\"" : std::string(", NULL");
    q.names.push_back(c);
  }
  sql += " FROM \"" + table + "\"";
  auto st = tsdb::prepare(db_.get(), sql, path_);
  if (!st) return st.status();
  q.stmt = std::move(st.value());
  return q;
}

bool Reader::intAt(sqlite3_stmt* s, int c, const Query& q, bool required, int64_t& out, bool& present) {
  const int t = sqlite3_column_type(s, c + 1);  // column 0 is the rowid
  present = t == SQLITE_INTEGER;
  if (present) {
    out = tsdb::col64(s, c + 1);
    return true;
  }
  if (t == SQLITE_NULL && !required) return true;
  err_ = "column " + q.names[static_cast<size_t>(c)] + " holds " + typeName(t) + ", expected an integer";
  if (t == SQLITE_TEXT) err_ += " ('" + std::string(tsdb::columnText(s, c + 1).substr(0, 40)) + "')";
  return false;
}

bool Reader::nameOf(int64_t id, StringId& out) {
  if (auto it = interned_.find(id); it != interned_.end()) {
    out = it->second;
    return true;
  }
  auto it = strings_.find(id);
  if (it == strings_.end()) {
    err_ = "string id " + std::to_string(id) + " is not in StringIds";
    return false;
  }
  out = interned_[id] = store_.intern(it->second);
  return true;
}

Status Reader::rowError(const std::string& table, int64_t rowid) {
  const std::string msg = name_ + ": " + table + " rowid " + std::to_string(rowid) + ": " + err_;
  if (!partial_) return Status(ErrorCode::BadTrace, msg);
  ++invalid_;
  if (firstInvalid_.empty()) firstInvalid_ = msg;
  return Status::ok();
}

Status Reader::tableError(const std::string& table, int rc) {
  Status st = tsdb::sqliteError(db_.get(), rc, path_, "reading " + table);
  if (!partial_) return st;
  ++invalid_;  // the rest of the table is lost
  if (firstInvalid_.empty()) firstInvalid_ = st.message() + " (the rest of " + table + " skipped)";
  return Status::ok();
}

Status Reader::readStrings() {
  if (!tables_.count("StringIds"))
    return Status(ErrorCode::BadTrace, name_ + ": no StringIds table (every Nsight Systems export has one)");
  auto q = select("StringIds", {"id", "value"}, {});
  if (!q) return q.status();
  sqlite3_stmt* s = q->stmt.get();
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    int64_t id = 0;
    bool present = false;
    const int valueType = sqlite3_column_type(s, 2);
    bool ok = intAt(s, 0, *q, true, id, present);
    if (ok && valueType != SQLITE_TEXT && valueType != SQLITE_NULL) {
      err_ = std::string("column value holds ") + typeName(valueType) + ", expected text";
      ok = false;
    }
    if (!ok) {
      if (Status st = rowError("StringIds", tsdb::col64(s, 0)); !st) return st;
      continue;
    }
    strings_.emplace(id, std::string(tsdb::columnText(s, 2)));
  }
  if (rc != SQLITE_DONE) return tableError("StringIds", rc);
  return Status::ok();
}

// Optional tables: thread names, host name, session start. Damage here only loses names.
void Reader::readThreadNames() {
  if (!tables_.count("ThreadNames")) return;
  auto q = select("ThreadNames", {"nameId", "globalTid"}, {});
  if (!q) return;
  sqlite3_stmt* s = q->stmt.get();
  while (sqlite3_step(s) == SQLITE_ROW) {
    if (sqlite3_column_type(s, 1) != SQLITE_INTEGER || sqlite3_column_type(s, 2) != SQLITE_INTEGER) continue;
    auto it = strings_.find(tsdb::col64(s, 1));
    const int64_t g = tsdb::col64(s, 2);
    if (it != strings_.end()) threadNames_[pidOf(g) << 24 | tidOf(g)] = it->second;
  }
}

void Reader::readSessionInfo() {
  if (tables_.count("TARGET_INFO_SESSION_START_TIME")) {
    if (auto q = select("TARGET_INFO_SESSION_START_TIME", {"utcEpochNs"}, {}); q) {
      sqlite3_stmt* s = q->stmt.get();
      if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 1) == SQLITE_INTEGER) {
        const int64_t v = tsdb::col64(s, 1);
        if (v > 0 && v < (int64_t{1} << 62)) base_ = v;
      }
    }
  }
  if (tables_.count("ENUM_CUDA_MEMCPY_OPER")) {  // the export's own names for copyKind
    if (auto q = select("ENUM_CUDA_MEMCPY_OPER", {"id", "name", "label"}, {}); q) {
      sqlite3_stmt* s = q->stmt.get();
      while (sqlite3_step(s) == SQLITE_ROW)
        if (sqlite3_column_type(s, 1) == SQLITE_INTEGER)
          copyKinds_[tsdb::col64(s, 1)] = {nsys::memcpyKindFromEnum(tsdb::columnText(s, 2)),
                                           std::string(tsdb::columnText(s, 3))};
    }
  }
  if (tables_.count("TARGET_INFO_SYSTEM_ENV")) {
    if (auto q = select("TARGET_INFO_SYSTEM_ENV", {"name", "value"}, {}); q) {
      sqlite3_stmt* s = q->stmt.get();
      while (sqlite3_step(s) == SQLITE_ROW)
        if (tsdb::columnText(s, 1) == "Hostname") host_ = std::string(tsdb::columnText(s, 2));
    }
  }
}

}  // namespace nsys

bool hasSqliteHeader(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  char h[16] = {};
  f.read(h, sizeof h);
  return f.gcount() == 16 && std::memcmp(h, "SQLite format 3\0", 16) == 0;
}

bool isNsysReportName(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".nsys-rep" || ext == ".qdrep";
}

bool looksLikeNsysExport(const fs::path& path) {
  if (!hasSqliteHeader(path)) return false;
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
  tsdb::DbPtr db(raw);
  if (rc != SQLITE_OK) return false;
  auto q =
      tsdb::prepare(db.get(),
                    "SELECT count(*) FROM sqlite_master WHERE type='table' AND name IN "
                    "('StringIds','CUPTI_ACTIVITY_KIND_KERNEL','CUPTI_ACTIVITY_KIND_RUNTIME','NVTX_EVENTS',"
                    "'CUPTI_ACTIVITY_KIND_MEMCPY','CUPTI_ACTIVITY_KIND_MEMSET','META_DATA_EXPORT')",
                    path);
  return q && sqlite3_step(q->get()) == SQLITE_ROW && sqlite3_column_int(q->get(), 0) >= 2;
}

}  // namespace trainscope::core
