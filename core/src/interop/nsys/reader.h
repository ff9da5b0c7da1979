// The Nsight Systems export reader's state (nsys_import.h has the rules): reader_schema.cpp opens
// the file and checks what it is (header, schema version, tables, columns, value types);
// reader_tables.cpp turns each table's rows into events.
#pragma once

#include <sqlite3.h>

#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "session/sqlite.h"
#include "trainscope/core/base/status.h"
#include "trainscope/core/model/trace_store.h"

namespace trainscope::core::nsys {

namespace fs = std::filesystem;
using tsdb::Stmt;

inline constexpr const char* kKernel = "CUPTI_ACTIVITY_KIND_KERNEL";
inline constexpr const char* kMemcpy = "CUPTI_ACTIVITY_KIND_MEMCPY";
inline constexpr const char* kMemset = "CUPTI_ACTIVITY_KIND_MEMSET";
inline constexpr const char* kRuntime = "CUPTI_ACTIVITY_KIND_RUNTIME";
inline constexpr const char* kNvtx = "NVTX_EVENTS";
inline constexpr int kKnownMajors[] = {2, 3};

// NVTX event types (ENUM_NSYS_EVENT_TYPE).
inline constexpr int64_t kNvtxMark = 34, kNvtxPushPop = 59, kNvtxStartEnd = 60;

inline int64_t pidOf(int64_t globalId) {
  return (globalId >> 24) & 0xFFFFFF;
}
inline int64_t tidOf(int64_t globalId) {
  return globalId & 0xFFFFFF;
}

// "an integer", "text", ... for messages about a value of the wrong type.
const char* typeName(int sqliteType);

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
  std::unordered_map<int64_t, std::string> strings_;      // StringIds
  std::unordered_map<int64_t, StringId> interned_;        // StringIds id -> our id, on first use
  std::unordered_map<int64_t, std::string> threadNames_;  // (pid << 24 | tid) -> name
  std::string host_;
  // ENUM_CUDA_MEMCPY_OPER, when the export has it: id -> (short name "HtoD", label "Host-to-Device").
  std::unordered_map<int64_t, std::pair<std::string, std::string>> copyKinds_;
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
    bool gradient;  // an all-reduce or reduce-scatter: a gradient bucket in a step
  };
  std::vector<Coll> collectives_;
  std::string err_;  // the bad row's problem
  uint64_t invalid_ = 0, skipped_ = 0;
  std::string firstInvalid_;
};

}  // namespace trainscope::core::nsys
