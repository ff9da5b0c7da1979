// Several single-rank trace stores (one file per rank, as torch.profiler and `nsys profile` per
// rank write them) into one session: which rank each file is, how their clocks relate, and the
// merge. Shared by the Chrome/Kineto and the Nsight Systems importers (docs/FORMATS.md, "Several
// files").
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "trainscope/core/base/status.h"
#include "trainscope/core/interop/chrome_trace.h"
#include "trainscope/core/model/trace_store.h"

namespace trainscope::core::interop {

struct LoadedFile {
  std::string path;
  TraceStore store;
};

struct MergeRules {
  // Metadata key holding the time base a file's importer already added to its timestamps (Kineto's
  // baseTimeNanoseconds, nsys's utcEpochNs). When every file has it the clocks are related by it;
  // otherwise it is taken back off and the files are aligned on their first collective.
  std::string timeBaseKey;
  // The rank a file's content names (Kineto: distributedInfo.rank); nullopt: from the file name.
  std::function<std::optional<RankId>(const TraceStore&)> rankFromContent;
  std::string rankFromContentLabel;   // "distributedInfo"
  std::vector<std::string> copyKeys;  // metadata copied from the first file that has it
};

// rank3, rank-3, rank_3 anywhere in the name; else a number right before the extension:
// worker_3.json, x-3.pt.trace.json, node-3.sqlite.
std::optional<RankId> rankFromFileName(const std::string& fileName);

// Appends every track and event of `in` to `out` as rank `rank`, `shift` ns later, strings and
// custom attribute keys re-interned into `out`'s table.
void appendStoreAs(TraceStore& out, const TraceStore& in, RankId fromRank, RankId rank, int64_t shift);

// fileCount: how many files were named (a single file keeps its own ranks). skipped: messages of
// files left out (partial). Files holding more than one rank cannot be combined with others.
Result<MultiImport> mergeRankFiles(std::vector<LoadedFile> loaded, std::vector<std::string> skipped,
                                   size_t fileCount, const MergeRules& rules);

}  // namespace trainscope::core::interop
