// Session metadata as people read it: per-rank keys ("clock_sync_error_ns.3") grouped into one
// row per quantity with readable labels and units, summarised over the ranks (all equal, or the
// range and the rank at its worst), so that 1,024 ranks make a dozen rows, not 10,000.
#pragma once

#include <QString>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace trainscope::app {

std::vector<std::pair<QString, QString>> metadataRows(const std::map<std::string, std::string>& metadata);

}  // namespace trainscope::app
