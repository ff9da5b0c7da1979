// Naming the collective a hung job waits in, and the ranks that never entered it (`doctor`).
//
// Every rank answers an Inspect request (its agent's server thread answers even while the job's
// threads are blocked): the operations its threads began and did not end, and what each thread
// is doing as the kernel shows it. A collective open on some ranks for longer than hangAfter
// seconds is the hung one; the ranks that answered but are not in it never entered it -- the
// ranks the job is hung on (what PyTorch's Flight Recorder finds post mortem, here while the job
// stays hung). When every rank is in it, the collective itself does not complete (a link or
// transport problem): the report then names no missing rank and shows every rank.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trainscope/core/model/events.h"
#include "trainscope/core/wire/protocol.h"

namespace trainscope::core {

struct RankInspection {
  RankId rank = -1;
  bool answered = false;
  std::string error;  // why it did not answer
  wire::Inspect inspect;
};

struct HangRank {
  RankId rank = -1;
  bool entered = false;  // waiting in the hung collective
  int64_t step = -1;     // its step now
  std::vector<std::string> lastEvents;  // its last completed events, newest last
  std::vector<std::string> stacks;      // per thread: kernel state, then its open operations, outermost first
};

struct HangReport {
  std::string group;   // "dp buckets", a communicator, or the op's name
  int64_t seq = -1;    // the collective's sequence number on the ranks that entered it (-1: unknown)
  std::string op;      // "bucket allreduce [bucket 0]", ...
  int64_t bytes = -1;
  int64_t step = -1;
  double waitedS = 0;  // how long the first rank has waited in it
  std::vector<RankId> waitingRanks;  // entered it
  std::vector<RankId> missingRanks;  // answered and never entered it
  std::vector<RankId> silentRanks;   // did not answer the Inspect
  std::vector<HangRank> ranks;       // the missing ranks (every rank when none is missing)
};

// The hang, if some collective has been open for at least hangAfterS seconds on some rank, or if
// no rank has finished a step for that long (op "none": stuck outside any collective). lastEvents:
// what the front end has of each rank's last completed events, newest last.
std::optional<HangReport> findHang(const std::vector<RankInspection>& ranks, double hangAfterS,
                                   const std::map<RankId, std::vector<std::string>>& lastEvents = {});

// {"group", "seq", "op", "bytes", "step", "waited_s", "waiting_ranks", "missing_ranks",
//  "silent_ranks", "ranks": [{"rank", "entered", "step", "last_events", "stacks"}]}, or null.
std::string hangReportJson(const std::optional<HangReport>& report, int indent = 2);

}  // namespace trainscope::core
