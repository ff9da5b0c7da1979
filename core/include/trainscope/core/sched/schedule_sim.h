// A discrete-event simulator for pipeline schedules (schedule.h): runs every stage's op list
// with given op durations, each stage one op at a time in list order, a Recv waiting until the
// matching Send's data has arrived. Reports per stage when each op ran, the busy (compute) and
// idle (bubble) intervals, the step's makespan and the peak number of in-flight activations;
// a schedule that cannot finish is reported as a deadlock naming every stuck op.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "trainscope/core/sched/schedule.h"

namespace trainscope::core {

struct TimeInterval {
  double start = 0;
  double end = 0;
};

struct StageSimulation {
  std::vector<TimeInterval> opTimes;  // [op index] -> when it ran (a Recv: from arriving at it
                                      // until its data was there)
  std::vector<TimeInterval> busy;     // compute ops (F, B, W), merged where they touch
  std::vector<TimeInterval> idle;     // [0, makespan] minus busy: the bubbles
  double busyTime = 0;
  double bubbleFraction = 0;  // idle time / makespan
  // Most (micro-batch, chunk, segment) units whose F has run and whose last backward op (W when
  // the schedule splits the backward, else B) has not: the activations the stage holds.
  int peakInFlight = 0;
};

struct ScheduleSimulation {
  std::vector<StageSimulation> stages;
  double makespan = 0;        // step start (0) until the last op of any stage ends
  double bubbleFraction = 0;  // mean over stages (design.md's pipeline.bubble_fraction)
};

// Duration of one op on one stage; when given it replaces the OpDurations rule for compute ops.
using OpDurationFn = std::function<double(int stage, const PipeOp& op)>;

// Checks the schedule (checkSchedule) and durations (finite, >= 0), then simulates. Errors:
// invalid-argument for a bad schedule or duration; for a deadlock, a message listing per stuck
// stage the op it waits at, e.g. "deadlock: stage 0 waits at op 4 recv-grad B0 <-1; ...".
Result<ScheduleSimulation> simulateSchedule(const Schedule& schedule, const OpDurations& durations = {},
                                            const OpDurationFn& duration = {});

// The simulated step as text, one row per stage, `unit` time per cell of `cellWidth` characters:
// a compute op shows its label (opLabel, cut or space-padded to the cell) in its first cell
// and '-' in the rest, idle time '.'. Times are rounded to whole cells. Example (1f1b, p=2, m=2, F=B=1):
//   stage 0 |F0F1..B0..B1|
//   stage 1 |..F0B0F1B1..|
std::string renderTimeline(const Schedule& schedule, const ScheduleSimulation& simulation, double unit,
                           int cellWidth = 2);

}  // namespace trainscope::core
