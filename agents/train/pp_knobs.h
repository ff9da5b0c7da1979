// The live pipeline knobs (contract names, ../shared/design.md): pp.schedule, pp.microbatches,
// pp.virtual_stages, pp.segments. Registered in the pp and hybrid modes only; the trainer
// validates a new combination at the step boundary and keeps the old schedule when it is invalid.
#pragma once

#include "options.h"
#include "trainscope/agent.h"
#include "trainscope/core/sched/schedule.h"

namespace trainscope::train {

struct PpKnobs {
  ts_knob_t schedule = nullptr, microbatches = nullptr, virtualStages = nullptr, segments = nullptr;
  // The knobs' values (the options' initial values when not registered), for p stages; v is
  // forced to 1 for every schedule but interleaved-1f1b, k to 1 for every schedule but seq1f1b.
  core::ScheduleParams read(const Options& o, int stages) const;

  // The knobs' raw values, and putting them back (ts_knob_restore) after a refused change, so
  // `trainscope-cli knobs` shows what the job runs. Every rank calls restore alike.
  struct Values {
    int schedule = 0;
    int64_t microbatches = 0, virtualStages = 0, segments = 0;
    bool operator==(const Values&) const = default;
  };
  Values values() const;
  void restore(const Values& v) const;
};

// The trainer prints what it applies ("rank r applied pp.schedule=zb-h1 at step s") or refuses.
PpKnobs registerPpKnobs(const Options& o);

}  // namespace trainscope::train
