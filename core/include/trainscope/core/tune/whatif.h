// The what-if simulator (docs/TUNING.md): a model of one training step built from a recorded
// session's measured costs, evaluated for other knob values.
//
// Data parallel (trainscope-train's step, docs/TRAINER.md): forward, the backward layer by layer
// (measured B+W time per layer, the overlap slowdown taken out), the gradient buckets re-planned
// for dp.bucket_bytes from per-layer gradient bytes (recovered from the recorded buckets); each
// bucket reduced while layers are still to compute costs the backward a measured kappa (its CPU
// work and waits on a CPU job, the kernels' slowdown on a GPU); the exposed tail is the last
// reduction's own time plus the queue before it; costs move to other algorithms and sizes by
// the job's calibration (trainscope-train's "calibrate" collectives) or else by a prior
// crossover size; wire bytes by the codec's payload formula; the optimizer and the measured
// rest of the step (docs/TUNING.md).
//
// Pipelines (pp.* knobs): core/sched's schedule simulator with the measured per-micro-batch F,
// B, W times per stage (scaled by the micro-batch size), the measured hand-off latency, plus the
// measured rest of the step.
//
// Predictions for settings the session never ran (an algorithm or codec without bucket events)
// are extrapolated from the nearest fit and flagged so.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trainscope/core/base/status.h"
#include "trainscope/core/model/trace_store.h"

namespace trainscope::core {

// One op of a drawn step (the GUI's ghost timeline, `whatif --json`'s "timeline"): ms from the
// step's start, on a lane ("compute", "gradient sync", "stage 0").
struct StepOp {
  enum class Kind : uint8_t { Compute, Communication, Other };
  std::string lane;
  std::string label;  // "forward", "B+W 3", "bucket 2", "F3", "B3c1"
  Kind kind = Kind::Compute;
  double startMs = 0, endMs = 0;
};

struct WhatIfPrediction {
  std::map<std::string, std::string> knobs;  // the whole setting predicted
  double stepTimeMs = 0;
  double bubbleFraction = -1;  // pipelines only, else -1
  double overlapRatio = -1;    // data parallel only, else -1
  double exposedCommMs = 0;
  double bytes = 0;  // gradient wire bytes per step and rank
  int buckets = 0;
  bool extrapolated = false;
  std::vector<std::string> notes;
  std::vector<StepOp> timeline;  // the predicted step, op by op (empty for measured())
};

struct WhatIfOptions {
  // Steps of the session the model is built from; default: the steps after the last knob
  // change (the settings in force at the end).
  int64_t fromStep = -1, toStep = -1;
};

struct WhatIfFit {
  std::string key;  // algorithm as traced: "ring", "allreduce", "scatter-reduce+int8"
  double alphaMs = 0, msPerByte = 0;
  int samples = 0;
};

class WhatIfModel {
 public:
  static Result<WhatIfModel> fromSession(const TraceStore& store, const WhatIfOptions& options = {});
  WhatIfModel();
  ~WhatIfModel();
  WhatIfModel(WhatIfModel&&) noexcept;
  WhatIfModel& operator=(WhatIfModel&&) noexcept;

  // The setting the model was measured at, with changes applied. Unknown knobs and values the
  // model cannot represent are errors.
  Result<WhatIfPrediction> predict(const std::map<std::string, std::string>& changes) const;
  const std::map<std::string, std::string>& baseKnobs() const;
  // What was measured over the model's steps (step time mean, exposed comm, overlap, bytes).
  WhatIfPrediction measured() const;
  // One measured step drawn with the same lanes as a prediction's timeline: the step of median
  // length in the model's window (data parallel: the lowest rank's; pipelines: every stage).
  const std::vector<StepOp>& measuredTimeline() const;
  int64_t measuredTimelineStep() const;
  // Knob changes inside the chosen window ("name=value at step N"; empty for the default window,
  // which starts after the last change): its steps ran different settings.
  const std::vector<std::string>& windowChanges() const;
  // What to tell the user about them (every prediction carries it as a note); empty when none.
  std::string windowNote() const;
  int64_t fromStep() const;
  int64_t toStep() const;
  // The fitted parameters as JSON (fits, layer times and bytes, slowdown, rest of the step).
  std::string describeJson() const;

  struct State;

 private:
  std::unique_ptr<State> s_;
};

// Kendall's tau-b between two rankings of the same items (ties count as neither).
double kendallTau(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace trainscope::core
