// Indexing shared by the schedule checker and simulator: a (micro-batch, chunk, segment) unit
// of one stage as a dense index, and the virtual stage a Send/Recv talks to.
#pragma once

#include <cstddef>

#include "trainscope/core/sched/schedule.h"

namespace trainscope::core::sched_detail {

inline size_t unitIndex(const ScheduleParams& sp, int microBatch, int chunk, int segment) {
  return (static_cast<size_t>(microBatch) * static_cast<size_t>(sp.virtualStages) +
          static_cast<size_t>(chunk)) *
             static_cast<size_t>(sp.segments) +
         static_cast<size_t>(segment);
}
inline size_t unitIndex(const ScheduleParams& sp, const PipeOp& op) {
  return unitIndex(sp, op.microBatch, op.chunk, op.segment);
}
inline size_t unitCount(const ScheduleParams& sp) {
  return static_cast<size_t>(sp.microBatches) * static_cast<size_t>(sp.virtualStages) *
         static_cast<size_t>(sp.segments);
}

// The virtual stage on the other side of a Send/Recv: activations flow to u + 1 and come
// from u - 1, gradients the other way.
inline int peerVirtualStage(const ScheduleParams& sp, int stage, const PipeOp& op) {
  const int u = virtualStage(sp, stage, op.chunk);
  const bool towardsEnd = (op.kind == OpKind::Send) == (op.payload == Payload::Activation);
  return towardsEnd ? u + 1 : u - 1;
}

}  // namespace trainscope::core::sched_detail
