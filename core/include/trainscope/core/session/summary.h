// A SessionSummary computed from an in-memory store (for imported traces and live sessions);
// SessionReader::summary() gives the same for a .tsdb file without loading its events.
#pragma once

#include <string>

#include "trainscope/core/session/tsdb.h"

namespace trainscope::core {

SessionSummary summarizeStore(const TraceStore& store);

// The JSON form printed by `trainscope-cli info --json` (keys documented in docs/FORMATS.md).
std::string summaryToJson(const SessionSummary& summary, int indent = 2);

}  // namespace trainscope::core
