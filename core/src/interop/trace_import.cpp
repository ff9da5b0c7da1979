#include "trainscope/core/interop/trace_import.h"

#include <algorithm>

#include "trainscope/core/interop/nsys/nsys_import.h"

namespace trainscope::core {

namespace fs = std::filesystem;

Result<TraceFormat> traceFormatOf(const fs::path& path) {
  if (isNsysReportName(path))
    return Status(ErrorCode::NotSqlite,
                  path.string() + ": an Nsight Systems report (" + path.extension().string() +
                      ") is not readable directly; export it to SQLite first: nsys export --type sqlite -o " +
                      (path.parent_path() / path.stem()).string() + ".sqlite " + path.string());
  if (path.extension() == ".sqlite" || hasSqliteHeader(path)) return TraceFormat::NsysSqlite;
  return TraceFormat::ChromeJson;
}

Result<MultiImport> importTraceFiles(const std::vector<fs::path>& inputs, const TraceImportOptions& options) {
  std::vector<fs::path> files;
  for (const fs::path& p : inputs) {
    std::error_code ec;
    if (!fs::is_directory(p, ec)) {
      files.push_back(p);
      continue;
    }
    std::vector<fs::path> found;
    for (const auto& e : fs::directory_iterator(p, ec)) {
      const std::string n = e.path().filename().string();
      if (e.is_regular_file() && (n.ends_with(".json") || n.ends_with(".json.gz") || n.ends_with(".sqlite")))
        found.push_back(e.path());
    }
    if (ec) return Status(ErrorCode::Io, p.string() + ": cannot list: " + ec.message());
    if (found.empty())
      return Status(ErrorCode::NotFound,
                    p.string() + ": no trace files (*.json, *.json.gz, *.sqlite) in this directory");
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  if (files.empty()) return Status(ErrorCode::InvalidArgument, "no input files");
  std::optional<TraceFormat> format;
  std::string first;
  for (const fs::path& f : files) {
    auto fmt = traceFormatOf(f);
    if (!fmt) return fmt.status();
    if (format && *format != *fmt)
      return Status(
          ErrorCode::InvalidArgument,
          f.string() + ": cannot combine " +
              (*fmt == TraceFormat::NsysSqlite ? "an Nsight Systems export" : "a Chrome/Kineto JSON trace") +
              " with " + first + " in one session: import one format at a time");
    if (!format) first = f.string();
    format = *fmt;
  }
  if (*format == TraceFormat::NsysSqlite)
    return importNsysSqliteFiles(files, NsysImportOptions{.partial = options.partial});
  return importChromeTraceFiles(files, ChromeImportOptions{.partial = options.partial});
}

}  // namespace trainscope::core
