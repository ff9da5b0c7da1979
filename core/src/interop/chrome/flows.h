// Which events of a store the Chrome exporter links with flow arrows.
//
// Two sources: events that share an AttrKey::FlowId value (any kinds, any number of events),
// and point-to-point pairs without a flow id, matched in order: the n-th P2PSend on rank a with
// peer b (by start time over all of a's tracks) goes with the n-th P2PRecv on rank b with peer a.
// That is the order MPI and NCCL match messages of one (source, destination) pair in when tags
// are not used; traces with tags should carry flow ids.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "trainscope/core/model/trace_store.h"

namespace trainscope::core::chrome {

struct FlowEndpoint {
  TrackId track = 0;
  uint32_t index = 0;  // event index in the (flushed) track
  int64_t start = 0;
  int64_t end = 0;
  EventKind kind = EventKind::Range;
  uint32_t tid = 0;  // set by the exporter when it writes the event (0: not exported)
};

struct FlowPlan {
  std::vector<FlowEndpoint> endpoints;
  // Each group is one chain of arrows, in arrow order (sends first, receives last, otherwise by
  // start time), as indices into endpoints.
  std::vector<std::vector<uint32_t>> groups;
  // Per track: (event index, endpoint index), sorted, so the exporter finds them in one walk.
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> byTrack;
};

// Flushes the store's tracks as a side effect.
FlowPlan planFlows(const TraceStore& store);

}  // namespace trainscope::core::chrome
