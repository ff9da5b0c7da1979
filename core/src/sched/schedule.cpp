// Schedule names, validation, labels and the papers' bubble formulas (schedule.h).
#include "trainscope/core/sched/schedule.h"

#include "trainscope/core/sched/schedule_sim.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

namespace trainscope::core {
namespace {

Status invalid(std::string message) {
  return {ErrorCode::InvalidArgument, std::move(message)};
}

}  // namespace

std::string_view scheduleName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::GPipe:
      return "gpipe";
    case ScheduleKind::OneFOneB:
      return "1f1b";
    case ScheduleKind::Interleaved1F1B:
      return "interleaved-1f1b";
    case ScheduleKind::ZbH1:
      return "zb-h1";
    case ScheduleKind::Seq1F1B:
      return "seq1f1b";
    case ScheduleKind::InterleavedZb:
      return "interleaved-zb";
    case ScheduleKind::Zbv:
      return "zbv";
  }
  return "unknown";
}

bool splitsBackward(ScheduleKind kind) {
  return kind == ScheduleKind::ZbH1 || kind == ScheduleKind::InterleavedZb || kind == ScheduleKind::Zbv;
}

std::string scheduleNameList() {
  std::string out;
  auto add = [&out](ScheduleKind k) {
    if (!out.empty()) out += ", ";
    out += scheduleName(k);
  };
  for (ScheduleKind k : kAllSchedules) add(k);
  for (ScheduleKind k : kTorchSchedules) add(k);
  return out;
}

Result<ScheduleKind> parseSchedule(std::string_view name) {
  for (ScheduleKind k : kAllSchedules)
    if (scheduleName(k) == name) return k;
  for (ScheduleKind k : kTorchSchedules)
    if (scheduleName(k) == name) return k;
  return invalid("unknown pipeline schedule '" + std::string(name) + "' (one of: " + scheduleNameList() +
                 ")");
}

Status validateSchedule(const ScheduleParams& sp) {
  const std::string name(scheduleName(sp.kind));
  if (sp.stages < 1) return invalid("stages must be >= 1, got " + std::to_string(sp.stages));
  if (sp.microBatches < 1)
    return invalid("micro-batches must be >= 1, got " + std::to_string(sp.microBatches));
  if (sp.virtualStages < 1)
    return invalid("virtual stages must be >= 1, got " + std::to_string(sp.virtualStages));
  if (sp.segments < 1) return invalid("segments must be >= 1, got " + std::to_string(sp.segments));
  if (sp.stages > kMaxStages)
    return invalid("stages must be <= " + std::to_string(kMaxStages) + ", got " + std::to_string(sp.stages));
  const int64_t units = int64_t{sp.stages} * sp.microBatches * sp.virtualStages * sp.segments;
  if (units > kMaxScheduleUnits)
    return invalid("stages x micro-batches x virtual stages x segments = " + std::to_string(units) +
                   " exceeds " + std::to_string(kMaxScheduleUnits));
  if (sp.kind == ScheduleKind::Interleaved1F1B) {
    if (sp.virtualStages < 2)
      return invalid("interleaved-1f1b needs virtual stages >= 2 (with 1 it is 1f1b), got " +
                     std::to_string(sp.virtualStages));
    if (sp.stages < 2) return invalid("interleaved-1f1b needs at least 2 stages");
    if (sp.microBatches % sp.stages != 0)
      return invalid("interleaved-1f1b needs micro-batches divisible by stages (Megatron-LM's rule), got m=" +
                     std::to_string(sp.microBatches) + ", p=" + std::to_string(sp.stages));
  } else if (sp.kind == ScheduleKind::InterleavedZb) {
    const int rounds = std::max(1, sp.microBatches / sp.stages);
    if (sp.microBatches % rounds != 0)
      return invalid("interleaved-zb needs micro-batches divisible by the rounds max(1, m/p) = " +
                     std::to_string(rounds) + " (PyTorch's rule), got m=" + std::to_string(sp.microBatches) +
                     ", p=" + std::to_string(sp.stages));
  } else if (sp.kind == ScheduleKind::Zbv) {
    if (sp.virtualStages != 2)
      return invalid("zbv needs exactly 2 virtual stages per stage (its V), got " +
                     std::to_string(sp.virtualStages));
  } else if (sp.virtualStages != 1) {
    return invalid("virtual stages apply to interleaved-1f1b, interleaved-zb and zbv only; " + name +
                   " needs 1, got " + std::to_string(sp.virtualStages));
  }
  if (sp.kind != ScheduleKind::Seq1F1B && sp.segments != 1)
    return invalid("sequence segments apply to seq1f1b only; " + name + " needs 1, got " +
                   std::to_string(sp.segments));
  return Status::ok();
}

Status validateLayerSplit(const ScheduleParams& sp, int layers) {
  if (Status s = validateSchedule(sp); !s) return s;
  const int64_t chunks = int64_t{sp.stages} * sp.virtualStages;
  const std::string shape = std::string(scheduleName(sp.kind)) + " with p=" + std::to_string(sp.stages) +
                            (sp.virtualStages > 1 ? " v=" + std::to_string(sp.virtualStages) : "");
  if (layers < chunks)
    return invalid(shape + " needs at least " + std::to_string(chunks) + " layers (one per " +
                   (sp.virtualStages > 1 ? "virtual stage" : "stage") + "), the model has " +
                   std::to_string(layers));
  if (sp.kind == ScheduleKind::Interleaved1F1B && layers % chunks != 0)
    return invalid(shape + " needs the layers divisible by p*v = " + std::to_string(chunks) +
                   " (equal chunks, Megatron-LM's rule), the model has " + std::to_string(layers));
  return Status::ok();
}

std::string opLabel(const PipeOp& op) {
  auto unit = [&op](char letter) {
    std::string s(1, letter);
    s += std::to_string(op.microBatch);
    if (op.chunk != 0) s += "c" + std::to_string(op.chunk);
    if (op.segment != 0) s += "s" + std::to_string(op.segment);
    return s;
  };
  const bool act = op.payload == Payload::Activation;
  switch (op.kind) {
    case OpKind::Forward:
      return unit('F');
    case OpKind::Backward:
      return unit('B');
    case OpKind::Weight:
      return unit('W');
    case OpKind::Send:
      return std::string(act ? "send-act " : "send-grad ") + unit(act ? 'F' : 'B') + " ->" +
             std::to_string(op.peer);
    case OpKind::Recv:
      return std::string(act ? "recv-act " : "recv-grad ") + unit(act ? 'F' : 'B') + " <-" +
             std::to_string(op.peer);
  }
  return "?";
}

std::string formatStageOps(const std::vector<PipeOp>& ops, bool withComm) {
  std::string out;
  for (const PipeOp& op : ops) {
    if (!withComm && !op.isCompute()) continue;
    if (!out.empty()) out += withComm ? ", " : " ";
    out += opLabel(op);
  }
  return out;
}

Result<double> theoreticalBubbleFraction(const ScheduleParams& sp, const OpDurations& d) {
  if (Status s = validateSchedule(sp); !s) return s;
  const double p1 = sp.stages - 1;
  const double m = sp.microBatches;
  switch (sp.kind) {
    case ScheduleKind::GPipe:
    case ScheduleKind::OneFOneB:
      return p1 / (m + p1);
    case ScheduleKind::Interleaved1F1B:
      return p1 / (sp.virtualStages * m + p1);
    case ScheduleKind::Seq1F1B:
      return p1 / (sp.segments * m + p1);
    case ScheduleKind::ZbH1: {
      const double t = d.forward + d.backward + d.weight;
      if (!(d.forward >= 0 && d.backward >= 0 && d.weight >= 0 && t > 0 && std::isfinite(t)))
        return invalid("zb-h1's formula needs finite durations >= 0 with a positive sum");
      const double filled = (std::min(sp.microBatches, sp.stages) - 1) * std::min(d.forward, d.weight);
      const double bubble = p1 * (d.forward + d.backward) - filled;
      return bubble / (m * t + bubble);
    }
    case ScheduleKind::InterleavedZb:
    case ScheduleKind::Zbv: {
      // No closed form for every case (PyTorch's generators are heuristics): the schedule on
      // balanced stages with these durations and no communication time.
      const double t = d.forward + d.backward + d.weight;
      if (!(d.forward >= 0 && d.backward >= 0 && d.weight >= 0 && t > 0 && std::isfinite(t)))
        return invalid(std::string(scheduleName(sp.kind)) + " needs finite durations >= 0 with a positive sum");
      auto sched = generateSchedule(sp);
      if (!sched) return sched.status();
      OpDurations balanced = d;
      balanced.sendLatency = balanced.sendCost = 0;
      auto sim = simulateSchedule(sched.value(), balanced);
      if (!sim) return sim.status();
      return sim.value().bubbleFraction;
    }
  }
  return invalid("unknown schedule");
}

Result<double> theoreticalBubbleFraction(std::string_view schedule, int stages, int microBatches,
                                         int virtualStages, int segments, const OpDurations& durations) {
  auto kind = parseSchedule(schedule);
  if (!kind) return kind.status();
  return theoreticalBubbleFraction(
      ScheduleParams{kind.value(), stages, microBatches, virtualStages, segments}, durations);
}

}  // namespace trainscope::core
