// Opening what the user names: .json files are Chrome/Kineto traces, anything else a .tsdb.
#pragma once

#include <filesystem>

#include "trainscope/core/base/status.h"
#include "trainscope/core/model/trace_store.h"

namespace trainscope::cli {

bool looksLikeJsonTrace(const std::filesystem::path& path);
core::Result<core::TraceStore> loadTrace(const std::filesystem::path& path);

}  // namespace trainscope::cli
