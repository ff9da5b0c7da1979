// The live data-parallel knobs (contract names, ../shared/design.md).
#pragma once

#include "grad_sync.h"
#include "options.h"
#include "trainscope/agent.h"

namespace trainscope::train {

struct DpKnobs {
  ts_knob_t bucketBytes = nullptr, algorithm = nullptr, compression = nullptr, topkRatio = nullptr;
  DpConfig read() const;
};

// Registers the knobs with the options' values as defaults; prints every applied change.
DpKnobs registerDpKnobs(const Options& o, int rank, const int64_t* currentStep);

}  // namespace trainscope::train
