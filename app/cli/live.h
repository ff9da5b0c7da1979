// Helpers shared by the subcommands that talk to running jobs (jobs, record, knobs, set).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "trainscope/core/live/live_session.h"

namespace trainscope::cli {

// A live-session engine connected now to the ranks of jobId found by discovery (knobs, set).
// With requireAllRanks, a job with missing ranks is an error (knob changes must reach every
// rank); otherwise a warning on stderr.
core::Result<std::unique_ptr<core::LiveSession>> connectJob(const std::string& jobId, bool requireAllRanks,
                                                            int timeoutMs);
// "3.2 s", "4 min" -- the age of something stamped with CLOCK_MONOTONIC on this machine.
std::string monotonicAge(int64_t stampNs);

}  // namespace trainscope::cli
