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
#include <string_view>

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
};

Result<ChromeExportStats> exportChromeTrace(TraceStore& store, std::ostream& out,
                                            const ChromeExportOptions& options = {});
Result<ChromeExportStats> exportChromeTraceFile(TraceStore& store, const std::filesystem::path& path,
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
Result<TraceStore> importChromeTrace(std::string_view json, std::string_view sourceName);
Result<TraceStore> importChromeTraceFile(const std::filesystem::path& path);

}  // namespace trainscope::core
