// One entry point for every foreign trace format, used by `trainscope-cli import`, the GUI's
// File -> Open and `analyze`/`info` on a trace file: Chrome/Kineto JSON (.json, .json.gz) and
// Nsight Systems SQLite exports (.sqlite, or any file with SQLite's header and nsys's tables).
// A .nsys-rep / .qdrep report is refused with the `nsys export --type sqlite` command to run.
#pragma once

#include <filesystem>
#include <vector>

#include "trainscope/core/base/status.h"
#include "trainscope/core/interop/chrome_trace.h"

namespace trainscope::core {

enum class TraceFormat { ChromeJson, NsysSqlite };

struct TraceImportOptions {
  bool partial = false;  // as ChromeImportOptions / NsysImportOptions
};

// By name and content: .nsys-rep/.qdrep -> error with the export hint; SQLite header -> nsys;
// anything else -> Chrome JSON (whose importer gives its own errors).
Result<TraceFormat> traceFormatOf(const std::filesystem::path& path);

// Directories contribute their *.json, *.json.gz and *.sqlite files (by name). All files must be
// of one format: several ranks' JSON or several ranks' nsys exports.
Result<MultiImport> importTraceFiles(const std::vector<std::filesystem::path>& inputs,
                                     const TraceImportOptions& options = {});

}  // namespace trainscope::core
