// Which layers each virtual stage of a pipeline runs: `even` (equal counts; interleaved-1f1b
// always, as Megatron-LM) or `auto` (PipeDream's DP, core/partition.h, fed by a short profiling
// run of the job's own layers: forward + backward time per layer, activation and weight bytes).
#pragma once

#include <vector>

#include "backend.h"
#include "options.h"
#include "trainscope/core/sched/schedule.h"

namespace trainscope::train {

// bounds[i] .. bounds[i+1]-1 are the layers of virtual stage i; bounds.size() = p * v + 1.
using LayerBounds = std::vector<int>;

LayerBounds evenSplit(int layers, int parts);

// Times every layer of the model on one micro-batch (min of a few runs) on this rank, takes the
// maximum over `world` (so every rank gets the same numbers, the same partition) and runs
// partitionStages for `stages` stages of `replicas` replicas each. Collective over world.
LayerBounds profiledSplit(Compute& compute, Communicator& world, const Options& o, int stages, int replicas,
                          int microBatchSamples);

}  // namespace trainscope::train
