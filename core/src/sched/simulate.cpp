// simulateSchedule (schedule_sim.h). Sends never block, so a stage only ever waits at a Recv;
// the start time of every op is fixed by its stage's previous op and, for a Recv, by the
// arrival of its message. Sweeping the stages until none can move therefore gives the same
// times in any sweep order, and a sweep that moves nothing while ops remain is a deadlock.
#include "trainscope/core/sched/schedule_sim.h"

#include <cmath>
#include <limits>
#include <string>

#include "sched/units.h"

namespace trainscope::core {
namespace {

using namespace sched_detail;

constexpr double kNotSent = -1;

Status checkDurations(const OpDurations& d) {
  for (double x : {d.forward, d.backward, d.weight, d.sendLatency, d.sendCost})
    if (!std::isfinite(x) || x < 0)
      return {ErrorCode::InvalidArgument, "op durations must be finite and >= 0, got " + std::to_string(x)};
  return Status::ok();
}

class Simulator {
 public:
  Simulator(const Schedule& s, const OpDurations& d, const OpDurationFn& fn) : sched_(s), d_(d), fn_(fn) {
    const ScheduleParams& sp = s.params;
    pieces_ = static_cast<double>(sp.virtualStages) * sp.segments;
    next_.assign(static_cast<size_t>(sp.stages), 0);
    clock_.assign(static_cast<size_t>(sp.stages), 0.0);
    inFlight_.assign(static_cast<size_t>(sp.stages), 0);
    arrival_.assign(static_cast<size_t>(sp.stages) * 2 * unitCount(sp), kNotSent);
    out_.stages.resize(static_cast<size_t>(sp.stages));
    for (size_t i = 0; i < out_.stages.size(); ++i) out_.stages[i].opTimes.resize(s.stages[i].size());
  }

  Result<ScheduleSimulation> run() {
    for (bool moved = true; moved;) {
      moved = false;
      for (int s = 0; s < sched_.params.stages; ++s) moved |= advance(s);
    }
    if (Status st = deadlock(); !st) return st;
    finish();
    return std::move(out_);
  }

 private:
  double& arrival(int stage, Payload payload, size_t unit) {
    const size_t units = unitCount(sched_.params);
    return arrival_[(static_cast<size_t>(stage) * 2 + (payload == Payload::Gradient ? 1 : 0)) * units + unit];
  }

  double computeTime(int stage, const PipeOp& op) const {
    if (fn_) return fn_(stage, op);
    switch (op.kind) {
      case OpKind::Forward:
        return d_.forward / pieces_;
      case OpKind::Backward:
        return (d_.backward + (sched_.splitBackward ? 0.0 : d_.weight)) / pieces_;
      default:
        return d_.weight / pieces_;
    }
  }

  // Runs stage s as far as it can go; true when it ran at least one op.
  bool advance(int s) {
    const auto& ops = sched_.stages[static_cast<size_t>(s)];
    size_t& i = next_[static_cast<size_t>(s)];
    double& clock = clock_[static_cast<size_t>(s)];
    StageSimulation& st = out_.stages[static_cast<size_t>(s)];
    const size_t start = i;
    for (; i < ops.size(); ++i) {
      const PipeOp& op = ops[i];
      const double t0 = clock;
      if (op.kind == OpKind::Recv) {
        const double at = arrival(s, op.payload, unitIndex(sched_.params, op));
        if (at == kNotSent) break;
        clock = std::max(clock, at);
      } else if (op.kind == OpKind::Send) {
        clock += d_.sendCost;
        const StageChunk to = stageOfVirtual(sched_.params, peerVirtualStage(sched_.params, s, op));
        arrival(to.stage, op.payload, unitIndex(sched_.params, op.microBatch, to.chunk, op.segment)) =
            clock + d_.sendLatency;
      } else {
        clock += computeTime(s, op);
        const bool last = op.kind == OpKind::Weight || (op.kind == OpKind::Backward && !sched_.splitBackward);
        int& n = inFlight_[static_cast<size_t>(s)];
        n += op.kind == OpKind::Forward ? 1 : last ? -1 : 0;
        st.peakInFlight = std::max(st.peakInFlight, n);
        if (!st.busy.empty() && st.busy.back().end == t0)
          st.busy.back().end = clock;
        else if (clock > t0)
          st.busy.push_back({t0, clock});
        st.busyTime += clock - t0;
      }
      st.opTimes[i] = {t0, clock};
    }
    return i != start;
  }

  Status deadlock() const {
    std::string stuck;
    for (int s = 0; s < sched_.params.stages; ++s) {
      const size_t i = next_[static_cast<size_t>(s)];
      const auto& ops = sched_.stages[static_cast<size_t>(s)];
      if (i == ops.size()) continue;
      stuck += (stuck.empty() ? "" : "; ") + std::string("stage ") + std::to_string(s) + " waits at op " +
               std::to_string(i) + " " + opLabel(ops[i]);
    }
    if (stuck.empty()) return Status::ok();
    return {ErrorCode::InvalidArgument, "deadlock: " + stuck};
  }

  void finish() {
    for (double c : clock_) out_.makespan = std::max(out_.makespan, c);
    const double span = out_.makespan;
    double sum = 0;
    for (StageSimulation& st : out_.stages) {
      double t = 0;
      for (const TimeInterval& b : st.busy) {
        if (b.start > t) st.idle.push_back({t, b.start});
        t = b.end;
      }
      if (span > t) st.idle.push_back({t, span});
      st.bubbleFraction = span > 0 ? (span - st.busyTime) / span : 0;
      sum += st.bubbleFraction;
    }
    out_.bubbleFraction = out_.stages.empty() ? 0 : sum / static_cast<double>(out_.stages.size());
  }

  const Schedule& sched_;
  const OpDurations& d_;
  const OpDurationFn& fn_;
  double pieces_ = 1;
  std::vector<size_t> next_;
  std::vector<double> clock_;
  std::vector<int> inFlight_;
  std::vector<double> arrival_;  // [stage][payload][unit] -> arrival time of the message
  ScheduleSimulation out_;
};

}  // namespace

Result<ScheduleSimulation> simulateSchedule(const Schedule& schedule, const OpDurations& durations,
                                            const OpDurationFn& duration) {
  if (Status s = checkSchedule(schedule); !s) return s;
  if (Status s = checkDurations(durations); !s) return s;
  if (duration) {
    for (size_t s = 0; s < schedule.stages.size(); ++s)
      for (const PipeOp& op : schedule.stages[s]) {
        if (!op.isCompute()) continue;
        const double t = duration(static_cast<int>(s), op);
        if (!std::isfinite(t) || t < 0)
          return Status{ErrorCode::InvalidArgument, "duration of " + opLabel(op) + " on stage " +
                                                        std::to_string(s) + " must be finite and >= 0, got " +
                                                        std::to_string(t)};
      }
  }
  return Simulator(schedule, durations, duration).run();
}

}  // namespace trainscope::core
