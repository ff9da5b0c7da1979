// Nsight Systems SQLite export -> TraceStore (trainscope/core/interop/nsys/nsys_import.h). One pass
// per table with a prepared SELECT; every value's SQLite type is checked before it is used, so a
// hand-edited or damaged file gets a message naming the table, the rowid and the column.
#include <sqlite3.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <unordered_map>

#include "interop/merge/rank_merge.h"
#include "interop/nsys/names.h"
#include "session/sqlite.h"
#include "trainscope/core/interop/nsys/nsys_import.h"

namespace trainscope::core {
namespace {

namespace fs = std::filesystem;
using tsdb::Stmt;

constexpr const char* kKernel = "CUPTI_ACTIVITY_KIND_KERNEL";
constexpr const char* kMemcpy = "CUPTI_ACTIVITY_KIND_MEMCPY";
constexpr const char* kMemset = "CUPTI_ACTIVITY_KIND_MEMSET";
constexpr const char* kRuntime = "CUPTI_ACTIVITY_KIND_RUNTIME";
constexpr const char* kNvtx = "NVTX_EVENTS";
constexpr int kKnownMajors[] = {2, 3};

// NVTX event types (ENUM_NSYS_EVENT_TYPE).
constexpr int64_t kNvtxMark = 34, kNvtxPushPop = 59, kNvtxStartEnd = 60;

int64_t pidOf(int64_t globalId) { return (globalId >> 24) & 0xFFFFFF; }
int64_t tidOf(int64_t globalId) { return globalId & 0xFFFFFF; }

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

// A SELECT over the columns we want, NULL in place of optional ones the table lacks.
struct Query {
  Stmt stmt;
  std::vector<std::string> names;  // as selected, for messages
};

class Reader {
 public:
  Reader(const fs::path& path, bool partial) : path_(path), name_(path.string()), partial_(partial) {}
  Result<TraceStore> run();

 private:
  Status openFile();
  Status readVersion();
  Result<std::map<std::string, int>> columns(const std::string& table);
  Result<Query> select(const std::string& table, const std::vector<std::string>& required,
                       const std::vector<std::string>& optional);
  Status readStrings();
  void readThreadNames();
  void readSessionInfo();
  Status readNvtx();
  Status readRuntime();
  Status readKernels();
  Status readCopies(bool memset);
  void appendCollectives();
  void finish();

  // Row helpers: false when the row is bad (err set).
  bool intAt(sqlite3_stmt* s, int c, const Query& q, bool required, int64_t& out, bool& present);
  bool nameOf(int64_t id, StringId& out);
  Status rowError(const std::string& table, int64_t rowid);  // ok() under --partial (row skipped)
  Status tableError(const std::string& table, int rc);       // a failed step: damage

  RankId rankFor(int64_t pid);
  TrackId cpuTrack(int64_t globalTid);
  TrackId gpuTrack(int64_t pid, int64_t device, int64_t stream);

  fs::path path_;
  std::string name_;
  bool partial_;
  tsdb::DbPtr db_;
  TraceStore store_;
  std::set<std::string> tables_;
  std::string schemaVersion_ = "unknown";
  std::string productVersion_;
  std::unordered_map<int64_t, std::string> strings_;    // StringIds
  std::unordered_map<int64_t, StringId> interned_;      // StringIds id -> our id, on first use
  std::unordered_map<int64_t, std::string> threadNames_;  // (pid << 24 | tid) -> name
  std::string host_;
  std::optional<int64_t> base_;  // utcEpochNs
  std::map<int64_t, RankId> rankOfPid_;
  std::unordered_map<int64_t, TrackId> cpuTracks_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, TrackId> gpuTracks_;
  std::tuple<int64_t, int64_t, int64_t> lastGpuKey_{-1, -1, -1};
  TrackId lastGpuTrack_ = kInvalidTrack;
  std::optional<int64_t> onlyPid_;  // for GPU rows without globalPid
  std::map<RankId, std::vector<std::pair<int64_t, int64_t>>> steps_;
  struct Coll {
    TrackId track;
    RankId rank;
    EventRecord rec;
    std::vector<Attr> attrs;
    bool allReduce;
  };
  std::vector<Coll> collectives_;
  std::string err_;  // the bad row's problem
  uint64_t invalid_ = 0, skipped_ = 0;
  std::string firstInvalid_;
};

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
  auto be32 = [&](int o) { return uint32_t{h[o]} << 24 | uint32_t{h[o + 1]} << 16 | uint32_t{h[o + 2]} << 8 | h[o + 3]; };
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
  auto q = tsdb::prepare(db, "SELECT name FROM sqlite_master WHERE type IN ('table','view')", path_);
  if (!q) return q.status();
  int step;
  while ((step = sqlite3_step(q->get())) == SQLITE_ROW) tables_.insert(std::string(tsdb::columnText(q->get(), 0)));
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
    const bool known = std::find(std::begin(kKnownMajors), std::end(kKnownMajors), major) != std::end(kKnownMajors);
    if (!known)
      return Status(ErrorCode::BadTrace, name_ + ": Nsight Systems export schema version '" + schemaVersion_ +
                                             "' (" + t + ".EXPORT_SCHEMA_VERSION) is not supported: this build "
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
  if (tables_.count("TARGET_INFO_SYSTEM_ENV")) {
    if (auto q = select("TARGET_INFO_SYSTEM_ENV", {"name", "value"}, {}); q) {
      sqlite3_stmt* s = q->stmt.get();
      while (sqlite3_step(s) == SQLITE_ROW)
        if (tsdb::columnText(s, 1) == "Hostname") host_ = std::string(tsdb::columnText(s, 2));
    }
  }
}

RankId Reader::rankFor(int64_t pid) {
  auto [it, added] = rankOfPid_.try_emplace(pid, static_cast<RankId>(rankOfPid_.size()));
  if (added) store_.setRank(RankInfo{.rank = it->second, .host = host_, .pid = pid});
  return it->second;
}

TrackId Reader::cpuTrack(int64_t globalTid) {
  const int64_t key = pidOf(globalTid) << 24 | tidOf(globalTid);
  if (auto it = cpuTracks_.find(key); it != cpuTracks_.end()) return it->second;
  const RankId rank = rankFor(pidOf(globalTid));
  auto n = threadNames_.find(key);
  std::string name = n != threadNames_.end() && !n->second.empty() ? n->second : "thread " + std::to_string(tidOf(globalTid));
  const TrackId t = store_.findOrAddTrack(rank, TrackKind::CpuThread, tidOf(globalTid), name);
  cpuTracks_[key] = t;
  return t;
}

TrackId Reader::gpuTrack(int64_t pid, int64_t device, int64_t stream) {
  const auto key = std::make_tuple(pid, device, stream);
  if (key == lastGpuKey_) return lastGpuTrack_;
  auto it = gpuTracks_.find(key);
  if (it == gpuTracks_.end()) {
    const RankId rank = rankFor(pid);
    if (RankInfo* r = store_.rank(rank); r && r->device < 0 && device >= 0 && device < (1 << 20))
      r->device = static_cast<int32_t>(device);
    const int64_t ext = (device & 0xFFFF) << 32 | (stream & 0xFFFFFFFF);
    it = gpuTracks_.emplace(key, store_.findOrAddTrack(rank, TrackKind::CudaStream, ext,
                                                       "GPU " + std::to_string(device) + " stream " +
                                                           std::to_string(stream)))
             .first;
  }
  lastGpuKey_ = key;
  lastGpuTrack_ = it->second;
  return it->second;
}

// Shared row checks: start/end integers, end >= start; times get the session base added.
#define NSYS_ROW_CHECK(table, cond) \
  if (!(cond)) {                     \
    if (Status st = rowError(table, tsdb::col64(s, 0)); !st) return st; \
    continue;                        \
  }

Status Reader::readNvtx() {
  if (!tables_.count(kNvtx)) return Status::ok();
  auto q = select(kNvtx, {"start", "globalTid"}, {"end", "eventType", "textId", "text"});
  if (!q) return q.status();
  sqlite3_stmt* s = q->stmt.get();
  const int64_t base = base_.value_or(0);
  const StringId unnamed = store_.intern("(unnamed NVTX range)");
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    int64_t start = 0, tid = 0, end = 0, type = 0, textId = 0;
    bool hasEnd = false, hasType = false, hasTextId = false, p = false;
    NSYS_ROW_CHECK(kNvtx, intAt(s, 0, *q, true, start, p) && intAt(s, 1, *q, true, tid, p) &&
                              intAt(s, 2, *q, false, end, hasEnd) && intAt(s, 3, *q, false, type, hasType) &&
                              intAt(s, 4, *q, false, textId, hasTextId));
    const bool mark = hasType ? type == kNvtxMark : !hasEnd;
    if (hasType && type != kNvtxMark && type != kNvtxPushPop && type != kNvtxStartEnd) {
      ++skipped_;  // domain / category registrations, payload-only events
      continue;
    }
    if (!mark && (!hasEnd || end < start)) {  // a range that never ended (capture stopped inside it)
      ++skipped_;
      continue;
    }
    StringId name = unnamed;
    const int textType = sqlite3_column_type(s, 6);
    if (textType == SQLITE_TEXT) {
      name = store_.intern(tsdb::columnText(s, 6));
    } else if (hasTextId) {
      NSYS_ROW_CHECK(kNvtx, nameOf(textId, name));
    } else if (textType != SQLITE_NULL) {
      err_ = std::string("column text holds ") + typeName(textType) + ", expected text";
      NSYS_ROW_CHECK(kNvtx, false);
    }
    const TrackId track = cpuTrack(tid);
    EventKind kind = mark ? EventKind::Marker : EventKind::Range;
    Attr stepAttr;
    const auto step = mark ? std::nullopt : nsys::parseStepName(store_.str(name));
    if (step) {
      kind = EventKind::Step;
      stepAttr = Attr::ofInt(AttrKey::Step, *step);
      steps_[store_.track(track).rank].push_back({start + base, end + base});
    }
    store_.append(track, EventRecord{start + base, (mark ? start : end) + base, name, kind},
                  step ? std::span<const Attr>(&stepAttr, 1) : std::span<const Attr>());
  }
  if (rc != SQLITE_DONE) return tableError(kNvtx, rc);
  return Status::ok();
}

Status Reader::readRuntime() {
  if (!tables_.count(kRuntime)) return Status::ok();
  auto q = select(kRuntime, {"start", "end", "globalTid", "nameId"}, {"correlationId"});
  if (!q) return q.status();
  sqlite3_stmt* s = q->stmt.get();
  const int64_t base = base_.value_or(0);
  Attr attrs[2];
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    int64_t start = 0, end = 0, tid = 0, nameId = 0, corr = 0;
    bool p = false, hasCorr = false;
    StringId name = kEmptyString;
    NSYS_ROW_CHECK(kRuntime, intAt(s, 0, *q, true, start, p) && intAt(s, 1, *q, true, end, p) &&
                                 intAt(s, 2, *q, true, tid, p) && intAt(s, 3, *q, true, nameId, p) &&
                                 intAt(s, 4, *q, false, corr, hasCorr) && nameOf(nameId, name));
    NSYS_ROW_CHECK(kRuntime, end >= start || (err_ = "end before start", false));
    size_t n = 0;
    if (hasCorr && corr != 0) {
      attrs[n++] = Attr::ofInt(AttrKey::CorrelationId, corr);
      attrs[n++] = Attr::ofInt(AttrKey::FlowId, pidOf(tid) << 32 | (corr & 0xFFFFFFFF));
    }
    store_.append(cpuTrack(tid), EventRecord{start + base, end + base, name, EventKind::Range},
                  std::span<const Attr>(attrs, n));
  }
  if (rc != SQLITE_DONE) return tableError(kRuntime, rc);
  return Status::ok();
}

Status Reader::readKernels() {
  if (!tables_.count(kKernel)) return Status::ok();
  auto cols = columns(kKernel);
  if (!cols) return cols.status();
  const std::string nameCol = cols->count("demangledName") ? "demangledName" : "shortName";
  auto q = select(kKernel, {"start", "end", "deviceId", "streamId", nameCol}, {"correlationId", "globalPid"});
  if (!q) return q.status();
  sqlite3_stmt* s = q->stmt.get();
  const int64_t base = base_.value_or(0);
  const StringId collectiveKey = store_.intern("collective");
  std::unordered_map<StringId, std::optional<nsys::NcclKernel>> nccl;  // per kernel name, parsed once
  std::vector<Attr> attrs;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    int64_t start = 0, end = 0, dev = 0, stream = 0, nameId = 0, corr = 0, gpid = 0;
    bool p = false, hasCorr = false, hasPid = false;
    StringId name = kEmptyString;
    NSYS_ROW_CHECK(kKernel, intAt(s, 0, *q, true, start, p) && intAt(s, 1, *q, true, end, p) &&
                                intAt(s, 2, *q, true, dev, p) && intAt(s, 3, *q, true, stream, p) &&
                                intAt(s, 4, *q, true, nameId, p) && intAt(s, 5, *q, false, corr, hasCorr) &&
                                intAt(s, 6, *q, false, gpid, hasPid) && nameOf(nameId, name));
    NSYS_ROW_CHECK(kKernel, end >= start || (err_ = "end before start", false));
    const int64_t pid = hasPid ? pidOf(gpid) : onlyPid_.value_or(0);
    const TrackId track = gpuTrack(pid, dev, stream);
    attrs.clear();
    attrs.push_back(Attr::ofInt(AttrKey::Device, dev));
    attrs.push_back(Attr::ofInt(AttrKey::Stream, stream));
    if (hasCorr && corr != 0) {
      attrs.push_back(Attr::ofInt(AttrKey::CorrelationId, corr));
      attrs.push_back(Attr::ofInt(AttrKey::FlowId, pid << 32 | (corr & 0xFFFFFFFF)));
    }
    auto [it, added] = nccl.try_emplace(name);
    if (added) it->second = nsys::parseNcclKernel(store_.str(name));
    const EventRecord rec{start + base, end + base, name, it->second ? EventKind::Collective : EventKind::Kernel};
    if (!it->second) {
      store_.append(track, rec, attrs);
      continue;
    }
    const nsys::NcclKernel& k = *it->second;
    attrs.push_back(Attr::custom(collectiveKey, AttrType::String, store_.intern(k.collective)));
    if (!k.algorithm.empty()) attrs.push_back(Attr::ofString(AttrKey::Algorithm, store_.intern(k.algorithm)));
    if (!k.protocol.empty()) attrs.push_back(Attr::ofString(AttrKey::Protocol, store_.intern(k.protocol)));
    collectives_.push_back({track, store_.track(track).rank, rec, attrs, k.collective == "AllReduce"});
  }
  if (rc != SQLITE_DONE) return tableError(kKernel, rc);
  return Status::ok();
}

Status Reader::readCopies(bool memset) {
  const char* table = memset ? kMemset : kMemcpy;
  if (!tables_.count(table)) return Status::ok();
  std::vector<std::string> required = {"start", "end", "deviceId", "streamId", "bytes"};
  if (!memset) required.push_back("copyKind");
  auto q = select(table, required, {"correlationId", "globalPid"});
  if (!q) return q.status();
  sqlite3_stmt* s = q->stmt.get();
  const int64_t base = base_.value_or(0);
  const int c0 = memset ? 5 : 6;  // first optional column
  const StringId memsetName = store_.intern("Memset");
  std::unordered_map<int64_t, StringId> copyNames;
  std::vector<Attr> attrs;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    int64_t start = 0, end = 0, dev = 0, stream = 0, bytes = 0, kind = 0, corr = 0, gpid = 0;
    bool p = false, hasCorr = false, hasPid = false;
    NSYS_ROW_CHECK(table, intAt(s, 0, *q, true, start, p) && intAt(s, 1, *q, true, end, p) &&
                              intAt(s, 2, *q, true, dev, p) && intAt(s, 3, *q, true, stream, p) &&
                              intAt(s, 4, *q, true, bytes, p) && (memset || intAt(s, 5, *q, true, kind, p)) &&
                              intAt(s, c0, *q, false, corr, hasCorr) && intAt(s, c0 + 1, *q, false, gpid, hasPid));
    NSYS_ROW_CHECK(table, end >= start || (err_ = "end before start", false));
    const int64_t pid = hasPid ? pidOf(gpid) : onlyPid_.value_or(0);
    StringId name = memsetName;
    if (!memset) {
      auto [it, added] = copyNames.try_emplace(kind);
      if (added) it->second = store_.intern("Memcpy " + std::string(nsys::memcpyKindShort(kind)));
      name = it->second;
    }
    attrs.clear();
    attrs.push_back(Attr::ofInt(AttrKey::Bytes, bytes));
    attrs.push_back(Attr::ofInt(AttrKey::Device, dev));
    attrs.push_back(Attr::ofInt(AttrKey::Stream, stream));
    if (hasCorr && corr != 0) {
      attrs.push_back(Attr::ofInt(AttrKey::CorrelationId, corr));
      attrs.push_back(Attr::ofInt(AttrKey::FlowId, pid << 32 | (corr & 0xFFFFFFFF)));
    }
    store_.append(gpuTrack(pid, dev, stream),
                  EventRecord{start + base, end + base, name, memset ? EventKind::Memset : EventKind::Memcpy}, attrs);
  }
  if (rc != SQLITE_DONE) return tableError(table, rc);
  return Status::ok();
}

#undef NSYS_ROW_CHECK

// NCCL all-reduces inside a step window are that step's gradient buckets, numbered in start
// order per rank and step (as the Kineto importer numbers DDP's), so data_parallel sees them.
void Reader::appendCollectives() {
  for (auto& [r, w] : steps_) std::sort(w.begin(), w.end());
  std::stable_sort(collectives_.begin(), collectives_.end(),
                   [](const Coll& a, const Coll& b) { return a.rec.startNs < b.rec.startNs; });
  std::map<std::pair<RankId, size_t>, int64_t> next;
  for (Coll& c : collectives_) {
    auto sw = steps_.find(c.rank);
    if (c.allReduce && sw != steps_.end()) {
      const auto& w = sw->second;
      auto it = std::upper_bound(w.begin(), w.end(), std::make_pair(c.rec.startNs, INT64_MAX));
      if (it != w.begin() && c.rec.startNs < std::prev(it)->second)
        c.attrs.push_back(Attr::ofInt(AttrKey::Bucket, next[{c.rank, static_cast<size_t>(it - w.begin() - 1)}]++));
    }
    store_.append(c.track, c.rec, c.attrs);
  }
  collectives_.clear();
}

// Ranks were numbered as processes appeared; the session numbers them in pid order.
void Reader::finish() {
  bool ordered = true;
  RankId expect = 0;
  for (const auto& [pid, rank] : rankOfPid_) ordered = ordered && rank == expect++;
  if (!ordered) {
    TraceStore sorted;
    RankId r = 0;
    for (const auto& [pid, rank] : rankOfPid_) interop::appendStoreAs(sorted, store_, rank, r++, 0);
    sorted.metadata() = store_.metadata();
    store_ = std::move(sorted);
  }
  auto& md = store_.metadata();
  md["import_format"] = "nsys";
  md["nsys_export_schema_version"] = schemaVersion_;
  if (!productVersion_.empty()) md["nsys_product_version"] = productVersion_;
  if (base_) md["utcEpochNs"] = std::to_string(*base_);
  md["import_skipped_events"] = std::to_string(skipped_);
  md["import_invalid_events"] = std::to_string(invalid_);
  if (!firstInvalid_.empty()) md["import_first_error"] = firstInvalid_;
  for (const auto& [r, info] : store_.ranks()) {
    md["import_time_shift_ns." + std::to_string(r)] = std::to_string(base_.value_or(0));
    md["import_fractional_ts." + std::to_string(r)] = "0";
    md["import_process." + std::to_string(r)] = "pid " + std::to_string(info.pid);
  }
  store_.flush();
}

Result<TraceStore> Reader::run() {
  if (Status st = openFile(); !st) return st;
  if (Status st = readVersion(); !st) return st;
  const bool any = tables_.count(kKernel) || tables_.count(kMemcpy) || tables_.count(kMemset) ||
                   tables_.count(kRuntime) || tables_.count(kNvtx);
  if (!any)
    return Status(ErrorCode::BadTrace, name_ + ": no Nsight Systems activity tables (CUPTI_ACTIVITY_KIND_KERNEL, "
                                               "_MEMCPY, _MEMSET, _RUNTIME, NVTX_EVENTS): not an nsys export, or "
                                               "a capture without CUDA or NVTX tracing");
  if (Status st = readStrings(); !st) return st;
  readThreadNames();
  readSessionInfo();
  if (Status st = readNvtx(); !st) return st;
  if (Status st = readRuntime(); !st) return st;
  if (rankOfPid_.size() == 1) onlyPid_ = rankOfPid_.begin()->first;  // GPU rows without globalPid
  if (Status st = readKernels(); !st) return st;
  if (Status st = readCopies(false); !st) return st;
  if (Status st = readCopies(true); !st) return st;
  appendCollectives();
  finish();
  return std::move(store_);
}

}  // namespace

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
  auto q = tsdb::prepare(db.get(),
                         "SELECT count(*) FROM sqlite_master WHERE type='table' AND name IN "
                         "('StringIds','CUPTI_ACTIVITY_KIND_KERNEL','CUPTI_ACTIVITY_KIND_RUNTIME','NVTX_EVENTS',"
                         "'CUPTI_ACTIVITY_KIND_MEMCPY','CUPTI_ACTIVITY_KIND_MEMSET','META_DATA_EXPORT')",
                         path);
  return q && sqlite3_step(q->get()) == SQLITE_ROW && sqlite3_column_int(q->get(), 0) >= 2;
}

Result<TraceStore> importNsysSqlite(const fs::path& path, const NsysImportOptions& options) {
  try {
    return Reader(path, options.partial).run();
  } catch (const std::bad_alloc&) {
    return Status(ErrorCode::Io, path.string() + ": out of memory while importing");
  } catch (const std::exception& e) {
    return Status(ErrorCode::BadTrace, path.string() + ": " + e.what());
  }
}

}  // namespace trainscope::core
