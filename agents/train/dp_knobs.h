// The live data-parallel knobs (contract names, ../shared/design.md). Registered only where
// gradients are averaged over more than one replica (dp mode; hybrid with replicas > 1); never
// in pp (one pipeline) or disco mode. A change the job cannot run is refused when it arrives,
// with the reason (ts_knob_set_check): dp.algorithm=hierarchical with a codec (and the codec
// under hierarchical), dp.topk_ratio while dp.compression is not topk-ef.
#pragma once

#include "grad_sync.h"
#include "options.h"
#include "trainscope/agent.h"

namespace trainscope::train {

struct DpKnobs {
  ts_knob_t bucketBytes = nullptr, algorithm = nullptr, compression = nullptr, topkRatio = nullptr;
  DpConfig read() const;
  bool registered() const { return bucketBytes != nullptr; }
  // Puts the knobs back to c (every rank alike, at the step boundary): after two changes that
  // were each fine alone but not together arrived in the same step.
  void restore(const DpConfig& c) const;
  // The step about to begin: changes are applied inside ts_step_begin and printed with it.
  static void noteStep(int64_t step);
};

// Registers the knobs with the options' values as defaults; prints every applied change.
// *rank is read when a change is printed (it is known only after MPI_Init).
DpKnobs registerDpKnobs(const Options& o, const int* rank);

}  // namespace trainscope::train
