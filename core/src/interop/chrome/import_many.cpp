// Several Chrome/Kineto trace files (one per rank, as torch.profiler writes them) into one
// TraceStore. Which rank each file is, how their clocks relate and the merge are shared with the
// Nsight Systems importer (interop/merge/rank_merge.h; docs/FORMATS.md, "Several files").
#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "interop/merge/rank_merge.h"
#include "trainscope/core/base/json_depth.h"
#include "trainscope/core/interop/chrome_trace.h"

namespace trainscope::core {
namespace {

namespace fs = std::filesystem;

bool isTraceFileName(const std::string& n) {
  return n.ends_with(".json") || n.ends_with(".json.gz");
}

std::optional<RankId> rankFromDistributedInfo(const TraceStore& s) {
  auto it = s.metadata().find("distributedInfo");
  if (it == s.metadata().end() || jsonNestedDeeperThan(it->second)) return std::nullopt;
  auto j = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("rank") || !j["rank"].is_number_integer()) return std::nullopt;
  const int64_t r = j["rank"].get<int64_t>();
  if (r < 0 || r >= (1 << 20)) return std::nullopt;
  return static_cast<RankId>(r);
}

}  // namespace

Result<std::vector<fs::path>> expandTraceInputs(const std::vector<fs::path>& inputs) {
  std::vector<fs::path> files;
  for (const fs::path& p : inputs) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<fs::path> found;
      for (const auto& e : fs::directory_iterator(p, ec))
        if (e.is_regular_file() && isTraceFileName(e.path().filename().string())) found.push_back(e.path());
      if (ec) return Status(ErrorCode::Io, p.string() + ": cannot list: " + ec.message());
      if (found.empty())
        return Status(ErrorCode::NotFound,
                      p.string() + ": no trace files (*.json, *.json.gz) in this directory");
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      files.push_back(p);
    }
  }
  return files;
}

Result<MultiImport> importChromeTraceFiles(const std::vector<fs::path>& inputs,
                                           const ChromeImportOptions& options) {
  auto expanded = expandTraceInputs(inputs);
  if (!expanded) return expanded.status();
  const std::vector<fs::path>& files = expanded.value();
  if (files.empty()) return Status(ErrorCode::InvalidArgument, "no input files");
  std::vector<interop::LoadedFile> loaded;
  std::vector<std::string> skipped;
  for (const fs::path& p : files) {
    auto s = importChromeTraceFile(p, options);
    if (!s) {
      if (!options.partial) return s.status();
      skipped.push_back(s.status().message());
      continue;
    }
    loaded.push_back({p.string(), std::move(s.value())});
  }
  interop::MergeRules rules{.timeBaseKey = "baseTimeNanoseconds",
                            .rankFromContent = rankFromDistributedInfo,
                            .rankFromContentLabel = "distributedInfo",
                            .copyKeys = {"import_format", "schemaVersion", "displayTimeUnit"}};
  return interop::mergeRankFiles(std::move(loaded), std::move(skipped), files.size(), rules);
}

}  // namespace trainscope::core
