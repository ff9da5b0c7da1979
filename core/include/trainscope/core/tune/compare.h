// Before/after comparison of two step windows (of one session or of two): the numbers the GUI's
// Knobs dock shows per change (predicted next to measured) and `trainscope-cli compare` prints.
// Each metric is a mean over the window's steps with its spread (sample standard deviation), so
// a difference can be read against the step-to-step noise (docs/TUNING.md "Comparing").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/core/analysis/analysis.h"
#include "trainscope/core/model/trace_store.h"
#include "trainscope/core/tune/whatif.h"

namespace trainscope::core {

struct Spread {
  double mean = kNaN, sd = kNaN;  // sd: sample standard deviation (NaN with fewer than 2 values)
  int n = 0;                      // steps with a value
};

struct WindowMetrics {
  int64_t fromStep = 0, toStep = 0;  // inclusive
  int steps = 0;                     // complete steps in the window
  Spread stepMs;                     // step time, mean over ranks per step
  Spread bubbleFraction;             // pipelines: mean over stages per step
  Spread overlapRatio;               // data parallel: per step (comm - exposed) / comm of gradients
  Spread exposedCommMs;              // per step, mean over ranks (breakdown's exposed communication)
  Spread bytes;                      // per step and rank: collectives and sends, the transport's
                                     // count (bytes_sent) where traced, else Bytes
  Spread loss;                       // the `loss` counter, mean over ranks per step
  double lossSlopePerStep = kNaN;    // least-squares slope of loss over the window's steps
};

// The metrics of steps [fromStep, toStep] of an analysed store: step times, bubbles, overlap and
// exposed communication from `a` (analyzeStore(store), or a live tab's incremental analysis of it);
// only bytes and loss are read from the store, and only its events around the window's steps.
// Reads only (a flushed store: its owner flushes before it publishes).
WindowMetrics measureWindow(const AnalysisResult& a, const TraceStore& store, int64_t fromStep, int64_t toStep);

// The steps with a complete window in `a`, in order.
std::vector<int64_t> completeSteps(const AnalysisResult& a);

// The step of median length among the complete steps of `a` in [fromStep, toStep]; -1 if none.
int64_t medianStep(const AnalysisResult& a, int64_t fromStep, int64_t toStep);

// One rank's step drawn as ops (for two steps side by side, aligned on their start): the events
// that start inside the rank's window of `step` -- phases, kernels, memory copies, collectives,
// sends and receives, pipeline ops -- one lane per track ("rank 0 · main"), phases on their own
// lane, ms from the step's start. Empty when the rank has no such step.
std::vector<StepOp> stepTimeline(const TraceStore& store, RankId rank, int64_t step);

// {"from_step", "to_step", "steps", "step_time_ms": {"mean", "sd", "n"}, ...} (null for NaN).
std::string windowMetricsJson(const WindowMetrics& w);

}  // namespace trainscope::core
