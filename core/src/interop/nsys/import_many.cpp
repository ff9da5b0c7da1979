// Several Nsight Systems exports (one per rank, as `nsys profile` per rank writes them) into one
// session: the shared rank/clock rules of interop/merge/rank_merge.h with nsys's time base.
#include <algorithm>

#include "interop/merge/rank_merge.h"
#include "trainscope/core/interop/nsys/nsys_import.h"

namespace trainscope::core {

namespace fs = std::filesystem;

Result<MultiImport> importNsysSqliteFiles(const std::vector<fs::path>& inputs,
                                          const NsysImportOptions& options) {
  std::vector<fs::path> files;
  for (const fs::path& p : inputs) {
    std::error_code ec;
    if (!fs::is_directory(p, ec)) {
      files.push_back(p);
      continue;
    }
    std::vector<fs::path> found;
    for (const auto& e : fs::directory_iterator(p, ec))
      if (e.is_regular_file() && e.path().extension() == ".sqlite") found.push_back(e.path());
    if (ec) return Status(ErrorCode::Io, p.string() + ": cannot list: " + ec.message());
    if (found.empty())
      return Status(ErrorCode::NotFound, p.string() + ": no nsys exports (*.sqlite) in this directory");
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  if (files.empty()) return Status(ErrorCode::InvalidArgument, "no input files");
  std::vector<interop::LoadedFile> loaded;
  std::vector<std::string> skipped;
  for (const fs::path& p : files) {
    auto s = importNsysSqlite(p, options);
    if (!s) {
      // --partial: a file that fails (an unknown schema version too) is left out and listed.
      if (!options.partial) return s.status();
      skipped.push_back(s.status().message());
      continue;
    }
    loaded.push_back({p.string(), std::move(s.value())});
  }
  interop::MergeRules rules{
      .timeBaseKey = "utcEpochNs",
      .rankFromContent = {},
      .rankFromContentLabel = {},
      .copyKeys = {"import_format", "nsys_export_schema_version", "nsys_product_version"}};
  return interop::mergeRankFiles(std::move(loaded), std::move(skipped), files.size(), rules);
}

}  // namespace trainscope::core
