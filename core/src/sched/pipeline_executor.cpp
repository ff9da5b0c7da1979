// runStage and messageTag (pipeline_executor.h).
#include "trainscope/core/sched/pipeline_executor.h"

#include <string>

#include "sched/units.h"

namespace trainscope::core {
namespace {

using namespace sched_detail;

Status withContext(const Status& s, int stage, size_t index, const PipeOp& op) {
  return {s.code(), "stage " + std::to_string(stage) + " op " + std::to_string(index) + " (" + opLabel(op) +
                        "): " + s.message()};
}

}  // namespace

int64_t messageTag(const ScheduleParams& sp, int stage, const PipeOp& op) {
  // The receiver's virtual stage names the message on both sides.
  const int receiver = op.kind == OpKind::Recv ? virtualStage(sp, stage, op.chunk)
                                               : peerVirtualStage(sp, stage, op);
  const int64_t payload = op.payload == Payload::Gradient ? 1 : 0;
  return ((payload * sp.microBatches + op.microBatch) * (int64_t{sp.stages} * sp.virtualStages) + receiver) *
             sp.segments +
         op.segment;
}

EventKind traceEventKind(OpKind kind) {
  switch (kind) {
    case OpKind::Forward:
      return EventKind::MicroBatchF;
    case OpKind::Backward:
      return EventKind::MicroBatchB;
    case OpKind::Weight:
      return EventKind::MicroBatchW;
    case OpKind::Send:
      return EventKind::P2PSend;
    case OpKind::Recv:
      return EventKind::P2PRecv;
  }
  return EventKind::Marker;
}

Status runStage(const Schedule& schedule, int stage, StageRunner& runner, const ExecutorOptions& options) {
  if (stage < 0 || stage >= static_cast<int>(schedule.stages.size()))
    return {ErrorCode::InvalidArgument, "stage " + std::to_string(stage) + " is not in the schedule"};
  if (options.recvLookahead < 1) return {ErrorCode::InvalidArgument, "recvLookahead must be >= 1"};
  const std::vector<PipeOp>& ops = schedule.stages[static_cast<size_t>(stage)];
  size_t posted = 0;  // next op index to consider for postRecv
  int ahead = 0;      // posted receives not yet waited on
  auto postMore = [&]() -> Status {
    for (; posted < ops.size() && ahead < options.recvLookahead; ++posted) {
      if (ops[posted].kind != OpKind::Recv) continue;
      if (Status s = runner.postRecv(ops[posted]); !s) return withContext(s, stage, posted, ops[posted]);
      ++ahead;
    }
    return Status::ok();
  };
  if (Status s = postMore(); !s) return s;
  for (size_t i = 0; i < ops.size(); ++i) {
    const PipeOp& op = ops[i];
    Status s;
    switch (op.kind) {
      case OpKind::Forward:
        s = runner.forward(op);
        break;
      case OpKind::Backward:
        s = runner.backward(op);
        break;
      case OpKind::Weight:
        s = runner.weight(op);
        break;
      case OpKind::Send:
        s = runner.send(op);
        break;
      case OpKind::Recv:
        s = runner.waitRecv(op);
        --ahead;
        break;
    }
    if (!s) return withContext(s, stage, i, op);
    if (Status p = postMore(); !p) return p;
  }
  if (Status s = runner.finishSends(); !s)
    return {s.code(), "stage " + std::to_string(stage) + " finishing sends: " + s.message()};
  return Status::ok();
}

}  // namespace trainscope::core
