// The same NCCL collective on several ranks. The NCCL profiler plugin gives every collective its
// communicator hash and NCCL's per-communicator sequence number (docs/TRACE_CONVENTIONS.md), so
// Collective events with equal (CommHash, Seq) on different ranks are one operation.
//
// Their ends are a common instant: a collective cannot complete on any rank before every rank
// has joined it, and ring/tree collectives finish within microseconds of each other everywhere
// (the plugin ends them when the last kernel channel is done). So the median of
// (end on rank r - end on the reference rank) over many collectives estimates how far rank r's
// timeline is still off after clock alignment -- an anchor independent of the ping-based sync.
#pragma once

#include <cstdint>
#include <vector>

#include "trainscope/core/model/events.h"
#include "trainscope/core/model/trace_store.h"

namespace trainscope::core {

struct CollectiveOccurrence {
  RankId rank = 0;
  TrackId track = 0;
  int64_t startNs = 0;
  int64_t endNs = 0;
};

struct MatchedCollective {
  int64_t commHash = 0;
  int64_t seq = 0;
  std::vector<CollectiveOccurrence> ranks;  // one per rank, by rank
};

// Collectives that carry CommHash and Seq and were seen on at least two ranks, sorted by
// (commHash, seq). A rank that reports the same (CommHash, Seq) twice keeps the one met first in
// its tracks' stored order.
std::vector<MatchedCollective> matchCollectives(const TraceStore& store);

struct CollectiveSkew {
  RankId rank = 0;
  int64_t offsetNs = 0;  // median(end on rank - end on reference): > 0, the rank's timeline is late
  int64_t madNs = 0;     // median absolute deviation around it: the estimate's spread
  size_t samples = 0;    // collectives shared with the reference
};

// One entry per rank (other than reference) that shares at least one collective with it.
std::vector<CollectiveSkew> estimateSkewFromCollectives(const std::vector<MatchedCollective>& matched,
                                                        RankId reference);

}  // namespace trainscope::core
