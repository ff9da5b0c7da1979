// Nsight Systems SQLite exports (`nsys export --type sqlite report.nsys-rep`): CUDA kernels,
// memcpy / memset, CUDA runtime API calls, NVTX ranges and marks, NCCL kernels as collectives.
// docs/FORMATS.md ("Nsight Systems SQLite") has every rule; in short:
//
// - names come from StringIds (kernels: demangledName, else shortName; runtime calls: nameId;
//   NVTX: text, else textId); globalTid / globalPid decode as pid = (id >> 24) & 0xFFFFFF,
//   tid = id & 0xFFFFFF;
// - one CpuThread track per (process, thread) for runtime calls and NVTX; one CudaStream track per
//   (process, device, stream) for kernels, copies and sets;
// - kernels whose names start with ncclKernel / ncclDevKernel are Collectives (the collective,
//   algorithm and protocol parsed from the name), other kernels Kernel, copies Memcpy, sets Memset;
//   NVTX ranges named ProfilerStep#N (or step N / iteration N) are steps; runtime calls and other
//   NVTX ranges are Range; runtime launches and the GPU work they started share correlation_id and
//   flow_id; NCCL all-reduces in a step are numbered as gradient buckets (data_parallel);
// - each process with events is a rank (in pid order); timestamps get
//   TARGET_INFO_SESSION_START_TIME.utcEpochNs added when the file has it (metadata utcEpochNs).
//
// The schema version (META_DATA_EXPORT, or EXPORT_META_DATA in older exports:
// EXPORT_SCHEMA_VERSION) must have a major version this build knows (2 or 3); a file without it
// is read by its tables' columns. Errors name the file and, for a bad row, the table and rowid:
// NotSqlite (not SQLite; a .nsys-rep gets the export command as a hint), Truncated, Corrupt,
// BadTrace (unknown schema version, missing table or column, a value of the wrong type).
#pragma once

#include <filesystem>
#include <vector>

#include "trainscope/core/base/status.h"
#include "trainscope/core/interop/chrome_trace.h"  // MultiImport
#include "trainscope/core/model/trace_store.h"

namespace trainscope::core {

struct NsysImportOptions {
  // Rows that break the schema (a wrong-typed value, an end before its start) and the unreadable
  // rest of a damaged table are skipped instead of failing the import; metadata
  // import_invalid_events / import_first_error say what was lost. An unknown schema version is
  // refused even then.
  bool partial = false;
};

// The file starts with SQLite's header ("SQLite format 3\0").
bool hasSqliteHeader(const std::filesystem::path& path);
// An SQLite file with Nsight Systems' tables (StringIds and an activity table); a .tsdb is not.
bool looksLikeNsysExport(const std::filesystem::path& path);
// A .nsys-rep / .qdrep report by its name: not SQLite, it needs `nsys export --type sqlite` first.
bool isNsysReportName(const std::filesystem::path& path);

// One export, as it is (every process a rank). Usable as a fuzz target: never throws.
Result<TraceStore> importNsysSqlite(const std::filesystem::path& path, const NsysImportOptions& options = {});

// Several exports (or directories of *.sqlite) into one session, one process per file: the rank
// from the file name (rank3, _3.sqlite), else the order given; clocks related through utcEpochNs
// when every file has it, else aligned on the first NCCL collective matched across ranks
// (metadata clock_alignment says which). With a single file the store is that file's, unchanged.
Result<MultiImport> importNsysSqliteFiles(const std::vector<std::filesystem::path>& inputs,
                                          const NsysImportOptions& options = {});

}  // namespace trainscope::core
