// Which rank held each step back, by how much, and why: straggler attribution by last arrival
// (docs/ANALYSIS.md, "Straggler attribution"; `trainscope-cli doctor`, `analyze`).
//
// In a collective every rank waits for the last one to enter, so the rank that made a step late
// is the one that arrived last at its collectives -- not the one whose collective took longest
// (the others' collectives are long because they waited). Collectives are matched across ranks
// by (communicator hash, sequence number) where the trace has them (NCCL's profiler plugin),
// otherwise by (step, name or bucket, n-th of its kind in the step on that rank): every rank of a
// data-parallel job runs the same collectives in the same order. The cause of a late arrival is
// read from the late rank's own time since it left its previous collective, compared with the
// other ranks' median: more compute (kernels), more host time (ranges, gaps: a data loader,
// Python, a stall), more communication (other collectives, or leaving the previous one late) or
// waiting for a peer (point-to-point receives).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/core/model/events.h"
#include "trainscope/core/model/trace_store.h"

namespace trainscope::core {

struct StragglerOptions {
  // A last arrival is reported when it is later than the other ranks' median arrival by at
  // least minLateMs and by at least minLateFraction of the median step time.
  double minLateMs = 2.0;
  double minLateFraction = 0.05;
  // ... and, when > 0, by at least noiseFactor times the noise floor (StragglerReport::noiseMs).
  // Off by default: on an oversubscribed machine (4-32 ranks on 2 cores) the floor measured
  // 8-80 ms and hid a 20 ms straggler; on a core per rank it is well under a millisecond.
  double noiseFactor = 0;
  // Keep the last this many matched collectives with every rank's arrival (doctor --collectives).
  int keepCollectives = 0;
};

// One collective matched across ranks: when each rank entered and left it.
struct MatchedArrivals {
  std::string op;
  int64_t step = -1;
  int64_t bytes = -1;
  struct Rank {
    RankId rank = -1;
    int64_t enterNs = 0, leaveNs = 0;  // session clock
  };
  std::vector<Rank> ranks;  // by rank
  RankId lastRank = -1;
  double lateMs = 0;  // the last arrival minus the others' median
};

// One matched collective whose last rank arrived late.
struct LateArrival {
  int64_t step = -1;
  std::string op;  // "bucket allreduce [bucket 3]", "nccl:all_reduce", ...
  int64_t bytes = -1;
  RankId rank = -1;       // the last to arrive
  double lateMs = 0;      // its arrival minus the median arrival of the others
  std::string cause;      // compute | host | communication | waiting | unknown
  std::string what;       // the late rank's longest event of that cause in the window ("" if none)
  int ranks = 0;          // ranks that took part
};

// One rank that held the job back: the steps where it arrived last, late enough to report, in at
// least 2 steps and 5 % of the steps seen (a single late step stays in perStep only).
struct Straggler {
  RankId rank = -1;
  std::vector<int64_t> steps;
  double lateMs = 0;     // mean over those steps
  double maxLateMs = 0;
  std::string cause;     // the most common cause over those steps
  std::string what;
};

struct StragglerReport {
  int ranks = 0;
  int steps = 0;              // steps with at least one matched collective
  int matchedCollectives = 0;
  double medianStepMs = 0;
  double thresholdMs = 0;
  double noiseMs = 0;  // p95 of how late the second-to-last rank arrives (0: fewer than 3 ranks)
  std::vector<LateArrival> perStep;  // the latest arrival of each step over the threshold, step order
  std::vector<Straggler> stragglers; // by number of steps, then lateness
  std::vector<MatchedArrivals> collectives;  // the last keepCollectives matched ones, in time order
};

StragglerReport findStragglers(const TraceStore& store, const StragglerOptions& options = {});

// The report as JSON (docs/ANALYSIS.md): {"ranks", "steps", "matched_collectives",
// "median_step_ms", "threshold_ms", "stragglers": [{rank, steps, late_ms, max_late_ms, cause,
// what}], "per_step": [{step, rank, late_ms, cause, what, op, bytes}]}, and with kept collectives
// "collectives": [{op, step, bytes, last_rank, late_ms, ranks: [{rank, enter_ms, leave_ms}]}]
// (times from the collective's first arrival).
std::string stragglerReportJson(const StragglerReport& report, int indent = 2);

}  // namespace trainscope::core
