// checkSchedule (schedule.h): the static rules every schedule must satisfy before it is
// simulated or executed.
#include <string>
#include <vector>

#include "sched/units.h"

namespace trainscope::core {
namespace {

using namespace sched_detail;

// Positions of each unit's ops on one stage (-1 = absent).
struct UnitPositions {
  int f = -1, b = -1, w = -1;
  int recvAct = -1, recvGrad = -1, sendAct = -1, sendGrad = -1;
};

std::string where(int stage, int index, const PipeOp& op) {
  return "stage " + std::to_string(stage) + " op " + std::to_string(index) + " (" + opLabel(op) + ")";
}

Status bad(std::string message) {
  return {ErrorCode::InvalidArgument, std::move(message)};
}

int* slotOf(UnitPositions& u, const PipeOp& op) {
  const bool act = op.payload == Payload::Activation;
  switch (op.kind) {
    case OpKind::Forward:
      return &u.f;
    case OpKind::Backward:
      return &u.b;
    case OpKind::Weight:
      return &u.w;
    case OpKind::Send:
      return act ? &u.sendAct : &u.sendGrad;
    case OpKind::Recv:
      return act ? &u.recvAct : &u.recvGrad;
  }
  return nullptr;
}

Status checkOp(const ScheduleParams& sp, int stage, int index, const PipeOp& op) {
  if (op.microBatch < 0 || op.microBatch >= sp.microBatches || op.chunk < 0 || op.chunk >= sp.virtualStages ||
      op.segment < 0 || op.segment >= sp.segments)
    return bad(where(stage, index, op) + ": micro-batch, chunk or segment out of range");
  if (op.isCompute())
    return op.payload == Payload::None ? Status::ok()
                                       : bad(where(stage, index, op) + ": payload on a compute op");
  if (op.payload == Payload::None) return bad(where(stage, index, op) + ": send/recv without a payload");
  const int peerU = peerVirtualStage(sp, stage, op);
  if (peerU < 0 || peerU >= sp.stages * sp.virtualStages)
    return bad(where(stage, index, op) + ": no virtual stage on the other side");
  const int peerStage = stageOfVirtual(sp, peerU).stage;
  if (op.peer != peerStage)
    return bad(where(stage, index, op) + ": peer must be stage " + std::to_string(peerStage));
  return Status::ok();
}

// One stage: each op at most once, the required ones present, in a causal order.
Status checkStage(const ScheduleParams& sp, bool split, int stage, const std::vector<PipeOp>& ops,
                  std::vector<UnitPositions>& pos) {
  pos.assign(unitCount(sp), {});
  for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
    const PipeOp& op = ops[static_cast<size_t>(i)];
    if (Status s = checkOp(sp, stage, i, op); !s) return s;
    if (op.kind == OpKind::Weight && !split)
      return bad(where(stage, i, op) + ": W op in a schedule whose B computes the weight gradient");
    int* slot = slotOf(pos[unitIndex(sp, op)], op);
    if (*slot >= 0) return bad(where(stage, i, op) + ": duplicate of op " + std::to_string(*slot));
    *slot = i;
  }
  const int last = sp.stages * sp.virtualStages - 1;
  const std::string st = "stage " + std::to_string(stage);
  for (int mb = 0; mb < sp.microBatches; ++mb)
    for (int c = 0; c < sp.virtualStages; ++c)
      for (int g = 0; g < sp.segments; ++g) {
        const UnitPositions& u = pos[unitIndex(sp, mb, c, g)];
        const int v = virtualStage(sp, stage, c);
        const std::string unit = " of micro-batch " + std::to_string(mb) + " chunk " + std::to_string(c) +
                                 " segment " + std::to_string(g);
        auto need = [&](bool cond, const char* what) {
          return cond ? Status::ok() : bad(st + ": " + what + unit);
        };
        Status s = need(u.f >= 0, "no F");
        if (s) s = need(u.b > u.f, "no B after F");
        if (s && split) s = need(u.w > u.b, "no W after B");
        if (s && v > 0) s = need(u.recvAct >= 0 && u.recvAct < u.f, "no recv-act before F");
        if (s && v < last) s = need(u.sendAct > u.f, "no send-act after F");
        if (s && v < last) s = need(u.recvGrad >= 0 && u.recvGrad < u.b, "no recv-grad before B");
        if (s && v > 0) s = need(u.sendGrad > u.b, "no send-grad after B");
        if (s && v == 0) s = need(u.recvAct < 0 && u.sendGrad < 0, "comm before the first virtual stage");
        if (s && v == last) s = need(u.sendAct < 0 && u.recvGrad < 0, "comm after the last virtual stage");
        if (s && g > 0)
          s = need(pos[unitIndex(sp, mb, c, g - 1)].f < u.f, "F before the previous segment's F");
        if (s && g > 0)
          s = need(pos[unitIndex(sp, mb, c, g - 1)].b > u.b, "B after the previous segment's B");
        if (!s) return s;
      }
  return Status::ok();
}

}  // namespace

Status checkSchedule(const Schedule& schedule) {
  const ScheduleParams& sp = schedule.params;
  if (Status s = validateSchedule(sp); !s) return s;
  if (static_cast<int>(schedule.stages.size()) != sp.stages)
    return bad("schedule has " + std::to_string(schedule.stages.size()) + " stage lists for " +
               std::to_string(sp.stages) + " stages");
  // A Send/Recv present on one stage implies (by checkStage) its partner on the peer: the
  // peer's op list must hold the matching op for every unit it owns, so counts line up.
  std::vector<UnitPositions> pos;
  for (int s = 0; s < sp.stages; ++s)
    if (Status st = checkStage(sp, schedule.splitBackward, s, schedule.stages[static_cast<size_t>(s)], pos);
        !st)
      return st;
  return Status::ok();
}

}  // namespace trainscope::core
