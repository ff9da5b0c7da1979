// Chrome trace event JSON (the format Perfetto UI, chrome://tracing and PyTorch's profiler
// use): export of a TraceStore and import of Chrome/Kineto traces.
//
// Export: one process per rank (pid = rank), one thread per track; events of a track that
// overlap without nesting go to extra lanes ("<track> #2") because Chrome JSON requires complete
// events on a thread to nest. Timestamps are microseconds relative to the session start (the
// absolute origin travels in otherData.trainscope_origin_ns). Matched send/recv pairs and events
// sharing a flow id become flow arrows. All typed attributes and the event kind travel in args.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "trainscope/core/base/status.h"
#include "trainscope/core/model/trace_store.h"

namespace trainscope::core {

struct ChromeExportOptions {
  std::optional<int64_t> fromNs;  // only events overlapping [fromNs, toNs)
  std::optional<int64_t> toNs;
};

struct ChromeExportStats {
  uint64_t events = 0;  // trace events written (slices, instants, counters)
  uint64_t flows = 0;   // flow arrows written
  uint64_t lanes = 0;   // extra threads created for overlapping events
  // Events that end before they start (a damaged or crafted session): written as instants at
  // their start, never with a negative "dur" (issue 40). Durations and timestamps past what
  // int64 ns can hold saturate instead of wrapping around.
  uint64_t endBeforeStart = 0;
};

Result<ChromeExportStats> exportChromeTrace(const TraceStore& store, std::ostream& out,
                                            const ChromeExportOptions& options = {});
Result<ChromeExportStats> exportChromeTraceFile(const TraceStore& store, const std::filesystem::path& path,
                                                const ChromeExportOptions& options = {});

// Parses Chrome trace JSON (object with traceEvents, or a bare array). sourceName names the
// input in error messages.
//
// Our own exports come back as the same ranks, tracks and typed attributes; Kineto (PyTorch
// profiler) categories map to event kinds, its GPU streams to CudaStream tracks. Errors:
// MalformedJson (with the byte offset) for text that does not parse; BadTrace for JSON that is
// not a trace or an event that breaks the format (no "ph", an "X" without "dur", ..., named by
// its index in traceEvents); NotFound/Io for files. Well-formed events outside our model
// (async phases, an "E" without "B", ...) are skipped and counted in metadata
// "import_skipped_events". docs/FORMATS.md ("Chrome trace JSON") has every rule.
struct ChromeImportOptions {
  // Events that break the format (and the tail of a truncated file) are skipped instead of
  // failing the import; metadata import_invalid_events / import_first_error say what was lost.
  bool partial = false;
  // Read with the reference reader only (nlohmann's SAX parser), not the fast reader that
  // imports use and that hands everything it is unsure of to the reference reader anyway. The
  // result is the same (tst_chrome_fast_reader checks it); for tests and bench_import.
  bool referenceReader = false;
  // For tests and benchmarks: set to whether the reference reader read the input (the fast
  // reader handed it over, or referenceReader), and the fast reader's window in bytes (0: 4 MiB;
  // tests use a few bytes to cross window boundaries everywhere).
  bool* usedReferenceReader = nullptr;
  size_t readWindow = 0;
};

Result<TraceStore> importChromeTrace(std::string_view json, std::string_view sourceName,
                                     const ChromeImportOptions& options = {});
// Streams the file (plain or gzip-compressed, told by its content) through zlib: memory grows
// with the events kept, not with the file's text.
Result<TraceStore> importChromeTraceFile(const std::filesystem::path& path,
                                         const ChromeImportOptions& options = {});

// Several files into one session (docs/FORMATS.md, "Several files"): arguments may be
// directories (their *.json and *.json.gz files, by name). Each file must hold one rank; its
// number is distributedInfo.rank, else from the file name (rank3, rank-3, ..._3.json), else the
// lowest free number in the order given. Clocks: baseTimeNanoseconds when every file has it,
// else the ends of the first collective matched by name across ranks are made equal; metadata
// clock_alignment says which, clock_alignment_shift_ns.<rank> by how much. With a single file
// the store is that file's, unchanged. options.partial: files that fail are skipped and listed.
struct ImportedFile {
  std::string path;
  RankId rank = 0;
  std::string rankFrom;  // "distributedInfo", "file name", "order" ("file" for a single file)
  size_t events = 0;
};
struct MultiImport {
  TraceStore store;
  std::vector<ImportedFile> files;
  std::vector<std::string> skippedFiles;  // error messages of files left out (partial only)
};
Result<std::vector<std::filesystem::path>> expandTraceInputs(
    const std::vector<std::filesystem::path>& inputs);
Result<MultiImport> importChromeTraceFiles(const std::vector<std::filesystem::path>& inputs,
                                           const ChromeImportOptions& options = {});

}  // namespace trainscope::core
