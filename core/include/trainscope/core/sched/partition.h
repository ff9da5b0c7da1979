// Partitioning a model for pipeline parallelism.
//  - PipeDream's dynamic program (Narayanan et al. 2019; docs/SCHEDULES.md, background.md §4):
//    given per-layer compute time, activation bytes and weight bytes, split the layers into
//    consecutive stages (each replicated over some machines) so that the slowest stage -- its
//    compute or weight-sync time, or an activation transfer between stages -- is as fast as
//    possible.
//  - Seq1F1B's sequence partition (Sun et al. 2024): split a sequence into k segments of equal
//    FLOPs (later segments attend to longer prefixes, so they are shorter).
#pragma once

#include <cstdint>
#include <vector>

#include "trainscope/core/base/status.h"

namespace trainscope::core {

struct LayerProfile {
  double computeSec = 0;       // T_l: forward + backward time of one mini-batch through the layer
  double activationBytes = 0;  // a_l: the layer's output (and so its input gradient) per mini-batch
  double weightBytes = 0;      // |w_l|
};

struct PartitionOptions {
  double bandwidth = 1e9;  // bytes/s of the links between machines (> 0)
  // Weight-sync bytes per worker for a layer replicated on m machines: syncFactor (m-1)|w_l|/m.
  // PipeDream's parameter-server value is 4; a ring allreduce moves 2.
  double syncFactor = 4;
};

struct StageAssignment {
  int firstLayer = 0;  // 0-based, inclusive
  int lastLayer = 0;   // inclusive
  int replicas = 1;    // machines running this stage (data parallel inside the stage)
  double time = 0;     // T(first -> last, replicas)
};

struct PipelinePartition {
  std::vector<StageAssignment> stages;
  double slowest = 0;  // the objective: max over stage times and boundary transfers 2 C_i
  // PipeDream's NUM_OPT_ACTIVE_MINIBATCHES: ceil(machines / replicas of the input stage).
  int noam = 1;
};

// T(i -> j, m) = (1/m) max(sum_{l=i..j} T_l, sum_{l=i..j} W_l^m),
// W_l^m = syncFactor (m-1) |w_l| / m / bandwidth (0 for m = 1). Layers 0-based, inclusive.
double stageTime(const std::vector<LayerProfile>& layers, int first, int last, int replicas,
                 const PartitionOptions& options);
// 2 C_i: layer i's activations forward to layer i+1 and their gradient back.
double boundaryTime(const std::vector<LayerProfile>& layers, int layer, const PartitionOptions& options);

// The full PipeDream DP over `machines` machines: stages and replication factors are chosen,
// all machines are used (one stage on all of them = pure data parallelism). O(N^2 M^2).
Result<PipelinePartition> partitionPipeDream(const std::vector<LayerProfile>& layers, int machines,
                                             const PartitionOptions& options = {});

// The same objective with the shape fixed: exactly `stages` stages (each of >= 1 layer), each
// replicated `replicas` times (1 = a plain pipeline; > 1 = a DP x PP grid). What
// `trainscope-train --partition auto` needs. O(N^2 S).
Result<PipelinePartition> partitionStages(const std::vector<LayerProfile>& layers, int stages,
                                          int replicas = 1, const PartitionOptions& options = {});

// Seq1F1B's FLOPs model of a transformer: P parameters, L layers, model width d.
struct SequenceFlopsModel {
  double parameters = 0;  // P
  int layers = 1;         // L
  int modelDim = 1;       // d
};

// FLOPs(S_i) = 2 n_i P + 2 L n_i (offset + n_i) d for the segment of n_i tokens starting at
// offset (it attends to every token up to its end).
double segmentFlops(int64_t offset, int64_t length, const SequenceFlopsModel& model);

// Segment lengths n_1..n_k (each >= 1, summing to `length`) that minimize the largest
// segmentFlops: as close as integers allow to the paper's FLOPs(S_1) = ... = FLOPs(S_k).
// (The paper's FLOPs(S)/k target uses 2 L n^2 d for the whole sequence, while the segments'
// causal terms sum to L d (n^2 + sum n_i^2); equal segment FLOPs is the intent either way.)
Result<std::vector<int64_t>> partitionSequence(int64_t length, int segments, const SequenceFlopsModel& model);

}  // namespace trainscope::core
