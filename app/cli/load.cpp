#include "load.h"

#include <algorithm>
#include <cctype>

#include "trainscope/core/interop/chrome_trace.h"
#include "trainscope/core/session/tsdb.h"

namespace trainscope::cli {

bool looksLikeJsonTrace(const std::filesystem::path& path) {
  std::string name = path.filename().string();
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  return name.ends_with(".json") || name.ends_with(".json.gz");
}

core::Result<core::TraceStore> loadTrace(const std::filesystem::path& path) {
  if (looksLikeJsonTrace(path)) return core::importChromeTraceFile(path);
  return core::loadSession(path);
}

}  // namespace trainscope::cli
