// Live autotuning (docs/TUNING.md): drives a running job through core::LiveSession. Per trial it
// sets the candidate's knob values (applied by every rank at one step), skips `warmupSteps`
// steps, then takes `measureSteps` step times from the streamed Step events (per step the mean
// over ranks of the step window, as `analyze` counts it). Knobs are tuned one at a time
// (coordinate descent); for each knob the what-if simulator, built from the incumbent's
// measured steps, ranks the candidates, and those it predicts clearly slower than the incumbent
// are skipped (unless the model does not fit: it misses the incumbent's measured time by more
// than 2x). A candidate replaces the incumbent only when the confidence interval of the gain
// (Welch's t, stats.h) lies wholly above the minimum practical effect, and only after the
// incumbent was measured again after it (baseline, candidate, baseline: drift on a shared machine
// moves both alike); an undecided one is measured again, alternating with the incumbent. A value
// the job refuses is recorded and left: the job keeps its setting. At the end the best setting is
// applied (if it is not what runs) and returned with its measurements and the confidence of its
// gain, or the statement that nothing beat the running setting beyond the measured noise.
#pragma once

#include <functional>
#include <map>
#include <shared_mutex>
#include <string>
#include <vector>

#include "trainscope/core/base/status.h"
#include "trainscope/core/live/live_session.h"
#include "trainscope/core/model/trace_store.h"
#include "trainscope/core/tune/config.h"
#include "trainscope/core/tune/stats.h"

namespace trainscope::core {

struct TuneOptions {
  std::vector<std::string> knobs;  // knobs to tune, in order
  std::map<std::string, std::vector<std::string>>
      values;                // candidates per knob (default: from the descriptor)
  int budgetSteps = 0;       // steps the trials may use in all (0: no step budget)
  double budgetSeconds = 0;  // wall seconds (0: none); at least one budget must be set
  int warmupSteps = 2;
  int measureSteps = 6;
  double confidence = 0.95;  // of the interval of a candidate's gain (Welch's t)
  // A candidate must gain at least this share of the incumbent's step time (percent) with the
  // whole interval: a change that buys less is not worth making, however sure.
  double minEffectPct = 1.0;
  double z = 0;  // > 0: a fixed critical value instead of Student's t at `confidence` (old --z)
  // A prediction this many times off the measurement (either way) means the what-if model does
  // not fit this machine/run: said in the log and the result, and not used to skip candidates.
  double misfitFactor = 2.0;
  // A round's fastest candidate that beats the incumbent on average but not beyond z standard
  // errors is measured again, alternating with the incumbent, up to this many times while the
  // budget allows (samples pooled): steps go where a decision is open, not to every candidate.
  int repeats = 2;
  double skipFactor = 1.5;  // skip candidates the simulator predicts this much slower than the incumbent
  bool useSimulator = true;
  double stepTimeoutSeconds = 60;               // give up when the job makes no step for this long
  std::function<void(const std::string&)> log;  // progress lines
};

struct TuneTrial {
  std::map<std::string, std::string> setting;  // the whole tuned setting
  bool incumbent = false;                      // a (re-)measurement of the incumbent
  bool skipped = false, refused = false;
  std::string why;  // skipped / refused reason
  int64_t appliedStep = -1;
  std::vector<double> stepMs;  // the measured steps less the periodic ones (below)
  double meanMs = -1, stderrMs = -1;
  // Steps over twice the trial's median, left out of stepMs: a job's periodic work (trainscope-
  // train's held-out evaluation every 10 steps takes 4-5x a step) falls into some 6-step trials
  // and not others, and would decide the comparison instead of the knob. At most a fifth of the
  // trial (at least 1): more slow steps than that are load, and all are kept.
  int periodicSteps = 0;
  double allStepsMeanMs = -1;  // the mean of every measured step, periodic ones included
  std::vector<int64_t> steps;  // the step numbers of stepMs
  double predictedMs = -1;     // the what-if model's (incumbent trials: its replay)
  double predictionOff = -1;   // max(predicted / measured, measured / predicted); -1 without one
  bool modelFits = true;       // predictionOff <= TuneOptions::misfitFactor (or no prediction)
};

// One round's decision: the round's fastest candidate against the incumbent, on every step
// measured of each (pooled over their trials).
struct TuneDecision {
  std::string knob;
  std::map<std::string, std::string> incumbent, candidate;
  Difference diff;           // baseline = the incumbent
  bool interleaved = false;  // the incumbent was measured again after the candidate
  bool accepted = false;     // diff.better && interleaved: the candidate became the incumbent
  std::string verdict;       // one line
};

struct TuneResult {
  std::map<std::string, std::string> initial, best;
  double initialMs = -1, bestMs = -1;
  bool changed = false;      // best differs from the initial setting
  int64_t appliedStep = -1;  // where the best setting was applied at the end (-1: it was running)
  int stepsUsed = 0;
  double seconds = 0;
  std::vector<TuneTrial> trials;
  std::vector<TuneDecision> decisions;
  // The best against the initial setting on all their measured steps (when changed), or the
  // closest contender's comparison (when not; valid false when no candidate was measured).
  Difference win;
  SampleSummary bestSteps;  // the best setting's measured steps
  double confidence = 0.95;
  // "best: ... 0.412 ms faster (95% CI ...)" or "no setting is better than the current one beyond
  // the measured noise (+-X ms, 95%)".
  std::string verdict;
  bool modelFits = true;               // no prediction was more than misfitFactor off
  std::vector<std::string> modelNotes;  // where and how far it was off
  TunedConfig config;  // the tuned configuration (schema of config.h)
};

// A trial's steps less those over twice its (lower) median, into kept; returns how many were
// left out (TuneTrial::periodicSteps). When more than max(1, n / 5) are over, none is left out
// (that is the machine's load, not periodic work).
int dropPeriodicSteps(const std::vector<double>& stepMs, std::vector<double>& kept);

// The candidates tune tries for a knob by default: an enum's choices, a geometric ladder inside
// an int/float range (dp.bucket_bytes: 1 KiB x 4^k up to 64 MiB), always with the current value.
std::vector<std::string> defaultCandidates(const wire::KnobDescriptor& d);

// `live` streams into `store` (guarded by `mutex`) and is started already.
Result<TuneResult> autotune(LiveSession& live, TraceStore& store, std::shared_mutex& mutex,
                            const TuneOptions& options);

// The per-step times (ms, mean over ranks of complete step windows) of steps [from, to] that
// every one of `ranks` has completed. Reads the store under a shared lock (no flush).
std::map<int64_t, double> stepTimes(const TraceStore& store, int ranks, int64_t from, int64_t to);

}  // namespace trainscope::core
