// The live data-parallel knobs (contract names, ../shared/design.md).
#pragma once

#include "grad_sync.h"
#include "options.h"
#include "trainscope/agent.h"

namespace trainscope::train {

struct DpKnobs {
  ts_knob_t bucketBytes = nullptr, algorithm = nullptr, compression = nullptr, topkRatio = nullptr;
  DpConfig read() const;
  // The step about to begin: changes are applied inside ts_step_begin and printed with it.
  static void noteStep(int64_t step);
};

// Registers the knobs with the options' values as defaults; prints every applied change.
// *rank is read when a change is printed (it is known only after MPI_Init).
DpKnobs registerDpKnobs(const Options& o, const int* rank);

}  // namespace trainscope::train
