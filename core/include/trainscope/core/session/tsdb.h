// .tsdb session files: SQLite databases with a versioned schema (docs/FORMATS.md).
//
// SessionWriter appends while a session is live: WAL journal, prepared statements, events
// batched into transactions; time indexes are built when a segment is finished, so live inserts
// do not pay for index maintenance. Other processes may open the file with SessionReader (or the
// sqlite3 shell) at any time and see every committed batch.
//
// SessionReader validates the file before use and names the file and the problem when it is not
// a session it can read: not SQLite, not Trainscope (application_id), newer schema, truncated,
// corrupt. Older schema versions are read with defaults for what they lack.
//
// A SessionWriter or SessionReader belongs to one thread at a time (its SQLite connection is
// opened without SQLite's mutexes); give each thread its own reader.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trainscope/core/base/status.h"
#include "trainscope/core/model/trace_store.h"

namespace trainscope::core {

inline constexpr int kTsdbSchemaVersion = 2;           // PRAGMA user_version of files we write
inline constexpr uint32_t kTsdbApplicationId = 0x54534442;  // PRAGMA application_id, "TSDB"

struct TrackSummary {
  TrackId id = 0;
  TrackInfo info;
  uint64_t eventCount = 0;
};

struct SessionSummary {
  std::filesystem::path path;
  int schemaVersion = 0;
  uint64_t eventCount = 0;
  std::map<EventKind, uint64_t> eventsPerKind;
  int64_t startNs = 0;  // min start over all events (0 when empty)
  int64_t endNs = 0;    // max end over all events
  uint64_t droppedEvents = 0;  // sum over ranks
  std::vector<RankInfo> ranks;
  std::vector<TrackSummary> tracks;
  std::map<std::string, std::string> metadata;
  uint64_t segments = 0;
  bool complete = false;  // the writer closed the session cleanly
};

class SessionWriter {
 public:
  struct Options {
    size_t batchEvents = 100'000;  // events per transaction
    // Also commit the open batch at the first event at least this long after it began (0: only
    // by count). A recorder sets it so that a kill or a full disk loses at most about this much.
    int commitMs = 0;
    bool overwrite = true;         // replace an existing file at path
  };
  static Result<std::unique_ptr<SessionWriter>> create(const std::filesystem::path& path,
                                                       const Options& options);
  static Result<std::unique_ptr<SessionWriter>> create(const std::filesystem::path& path) {
    return create(path, Options{});
  }
  ~SessionWriter();  // closes (finishing the open segment) if close() was not called
  SessionWriter(const SessionWriter&) = delete;
  SessionWriter& operator=(const SessionWriter&) = delete;

  // Ranks, tracks and metadata may be (re)written at any time; they are upserts.
  Status putMetadata(const std::string& key, const std::string& value);
  Status putRank(const RankInfo& rank);
  Status putTrack(TrackId id, const TrackInfo& track);
  // Buffers one event of `store`'s track. Strings are resolved through store.strings(), which is
  // append-only: new strings are persisted before the batch that first uses them.
  Status append(const TraceStore& store, TrackId track, const EventRecord& e, std::span<const Attr> attrs);
  // Writes every event, rank, track and metadata entry of store (flushing it first).
  Status appendStore(const TraceStore& store);
  // Commits what is buffered (one transaction); readers see it afterwards.
  Status commit();
  // Commits, records the segment's extent and builds the time indexes.
  Status finishSegment();
  // Finishes the segment, marks the session complete and closes the file.
  Status close();

  // Events passed to append()/appendStore() so far, committed or still in the open batch.
  uint64_t eventsWritten() const;
  // Events in committed transactions: what the file holds for readers (and after a crash).
  uint64_t eventsCommitted() const;
  // The first error (ok while none): the writer refuses further work after it, and close() then
  // leaves the file as the last commit made it (no checkpoint into a full disk).
  Status failure() const;

  // The PRAGMA statements applied to every new file (page size, WAL, synchronous=NORMAL, cache).
  // Public so that benchmarks can give a bare SQLite loop exactly the same settings.
  static const char* pragmas();

 private:
  SessionWriter();
  struct Impl;
  std::unique_ptr<Impl> d_;
};

class SessionReader {
 public:
  // Opens and validates path; cheap (does not read events).
  static Result<std::unique_ptr<SessionReader>> open(const std::filesystem::path& path);
  ~SessionReader();
  SessionReader(const SessionReader&) = delete;
  SessionReader& operator=(const SessionReader&) = delete;

  int schemaVersion() const;
  Result<SessionSummary> summary();
  // Loads every event into store (which should be empty); ranks, tracks, metadata, strings too.
  Status loadAll(TraceStore& store);
  // Loads into store (empty or from an earlier call) the events of `rank` overlapping
  // [t0, t1); uses the time index when the segment has one.
  // Overlap is TrackEvents::forEachOverlapping's: start < t1 and (end > t0 or an instant at
  // t0 <= start). An event that an earlier call already loaded into the same store is not
  // loaded twice (ranks, tracks and metadata are refreshed on every call).
  Status loadRange(TraceStore& store, RankId rank, int64_t t0, int64_t t1);

 private:
  SessionReader();
  struct Impl;
  std::unique_ptr<Impl> d_;
};

// Whole-store helpers.
Status saveSession(const TraceStore& store, const std::filesystem::path& path);
Result<TraceStore> loadSession(const std::filesystem::path& path);

}  // namespace trainscope::core
