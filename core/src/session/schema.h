// The .tsdb schema (docs/FORMATS.md, "## .tsdb session files") and the checks a file passes
// before SQLite is allowed to look at it.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "trainscope/core/base/status.h"

namespace trainscope::core::tsdb {

// Version 1 was the first development layout: version 2 without the segments table and without
// ranks.dropped_events. It is still read (with defaults for what it lacks).
inline constexpr int kOldestReadableSchema = 1;

// Creates the current schema in an empty database: pragmas application_id and user_version,
// tables, lookup rows (kinds, track_kinds) and views. Runs in one transaction.
Status createSchema(sqlite3* db, const std::filesystem::path& path);

// Cheap checks on the raw file, before SQLite opens it: NotFound, Io, NotSqlite (wrong first
// 16 bytes), Truncated (shorter than the header's page count x page size), Corrupt (impossible
// page size). Reads the 100-byte header and stats the file; never reads the body.
// A file shorter than its header says but with a non-empty write-ahead log beside it is not
// called truncated: a checkpoint that ran out of disk space (or was killed) writes page 1 before
// the pages that grow the file, and the log still holds every committed page, which SQLite reads
// with the file. Then `walNote` (when given) says so, and the caller reports Truncated only if
// SQLite cannot read the session after all.
Status checkFileHeader(const std::filesystem::path& path, std::string* walNote = nullptr);

// Name of the time index of one segment over `column` ("rank" or "track"): events_s<id>_<column>.
std::string segmentIndexName(int64_t segment, const char* column);

}  // namespace trainscope::core::tsdb
