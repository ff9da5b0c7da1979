// PipeDream's partitioning DP (partition.h).
#include "trainscope/core/sched/partition.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace trainscope::core {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Status invalid(std::string message) {
  return {ErrorCode::InvalidArgument, std::move(message)};
}

bool finiteNonNegative(double x) {
  return std::isfinite(x) && x >= 0;
}

Status checkInput(const std::vector<LayerProfile>& layers, const PartitionOptions& o) {
  if (layers.empty()) return invalid("no layers to partition");
  if (!(std::isfinite(o.bandwidth) && o.bandwidth > 0))
    return invalid("bandwidth must be > 0 bytes/s, got " + std::to_string(o.bandwidth));
  if (!finiteNonNegative(o.syncFactor)) return invalid("sync factor must be >= 0");
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerProfile& p = layers[l];
    if (!finiteNonNegative(p.computeSec) || !finiteNonNegative(p.activationBytes) ||
        !finiteNonNegative(p.weightBytes))
      return invalid("layer " + std::to_string(l) + ": times and sizes must be finite and >= 0");
  }
  return Status::ok();
}

// Prefix sums so that T(i -> j, m) is O(1).
struct Prefix {
  std::vector<double> compute, weights;
  explicit Prefix(const std::vector<LayerProfile>& layers)
      : compute(layers.size() + 1, 0), weights(layers.size() + 1, 0) {
    for (size_t l = 0; l < layers.size(); ++l) {
      compute[l + 1] = compute[l] + layers[l].computeSec;
      weights[l + 1] = weights[l] + layers[l].weightBytes;
    }
  }
  double time(int first, int last, int m, const PartitionOptions& o) const {
    const auto a = static_cast<size_t>(first), b = static_cast<size_t>(last) + 1;
    const double sync = m > 1 ? o.syncFactor * (m - 1) * (weights[b] - weights[a]) / m / o.bandwidth : 0.0;
    return std::max(compute[b] - compute[a], sync) / m;
  }
};

// A choice in a DP table: the last stage starts after layer `split` (-1: the prefix is one
// stage) and runs on `replicas` machines.
struct Choice {
  double value = kInf;
  int split = -1;
  int replicas = 0;
};

PipelinePartition rebuild(const std::vector<std::vector<Choice>>& table, int layers, int machinesOrStages,
                          bool byMachines, int fixedReplicas, const Prefix& prefix,
                          const PartitionOptions& o) {
  PipelinePartition out;
  out.slowest = table[static_cast<size_t>(layers - 1)][static_cast<size_t>(machinesOrStages)].value;
  int j = layers - 1, k = machinesOrStages;
  while (j >= 0) {
    const Choice& c = table[static_cast<size_t>(j)][static_cast<size_t>(k)];
    const int replicas = byMachines ? c.replicas : fixedReplicas;
    out.stages.push_back({c.split + 1, j, replicas, prefix.time(c.split + 1, j, replicas, o)});
    k -= byMachines ? c.replicas : 1;
    j = c.split;
  }
  std::reverse(out.stages.begin(), out.stages.end());
  const int machines = byMachines ? machinesOrStages : machinesOrStages * fixedReplicas;
  out.noam = (machines + out.stages.front().replicas - 1) / out.stages.front().replicas;
  return out;
}

}  // namespace

double stageTime(const std::vector<LayerProfile>& layers, int first, int last, int replicas,
                 const PartitionOptions& options) {
  return Prefix(layers).time(first, last, replicas, options);
}

double boundaryTime(const std::vector<LayerProfile>& layers, int layer, const PartitionOptions& options) {
  return 2 * layers[static_cast<size_t>(layer)].activationBytes / options.bandwidth;
}

Result<PipelinePartition> partitionPipeDream(const std::vector<LayerProfile>& layers, int machines,
                                             const PartitionOptions& o) {
  if (Status s = checkInput(layers, o); !s) return s;
  if (machines < 1) return invalid("machines must be >= 1, got " + std::to_string(machines));
  const int n = static_cast<int>(layers.size());
  const Prefix prefix(layers);
  // A[j][m]: slowest stage of the best pipeline for layers 0..j on exactly m machines.
  std::vector<std::vector<Choice>> a(static_cast<size_t>(n),
                                     std::vector<Choice>(static_cast<size_t>(machines) + 1));
  for (int j = 0; j < n; ++j)
    for (int m = 1; m <= machines; ++m) {
      Choice best{prefix.time(0, j, m, o), -1, m};  // one stage, data parallel on all m
      for (int i = 0; i < j; ++i) {
        const double comm = boundaryTime(layers, i, o);
        for (int mp = 1; mp < m; ++mp) {
          const double v = std::max({a[static_cast<size_t>(i)][static_cast<size_t>(m - mp)].value, comm,
                                     prefix.time(i + 1, j, mp, o)});
          if (v < best.value) best = {v, i, mp};
        }
      }
      a[static_cast<size_t>(j)][static_cast<size_t>(m)] = best;
    }
  return rebuild(a, n, machines, true, 1, prefix, o);
}

Result<PipelinePartition> partitionStages(const std::vector<LayerProfile>& layers, int stages, int replicas,
                                          const PartitionOptions& o) {
  if (Status s = checkInput(layers, o); !s) return s;
  if (stages < 1) return invalid("stages must be >= 1, got " + std::to_string(stages));
  if (replicas < 1) return invalid("replicas must be >= 1, got " + std::to_string(replicas));
  const int n = static_cast<int>(layers.size());
  if (stages > n)
    return invalid("cannot split " + std::to_string(n) + " layers into " + std::to_string(stages) +
                   " stages (each stage needs at least one layer)");
  const Prefix prefix(layers);
  // A[j][s]: slowest stage of the best split of layers 0..j into exactly s stages.
  std::vector<std::vector<Choice>> a(static_cast<size_t>(n),
                                     std::vector<Choice>(static_cast<size_t>(stages) + 1));
  for (int j = 0; j < n; ++j) {
    a[static_cast<size_t>(j)][1] = {prefix.time(0, j, replicas, o), -1, replicas};
    for (int s = 2; s <= std::min(stages, j + 1); ++s) {
      Choice best;
      for (int i = s - 2; i < j; ++i) {
        const double v = std::max({a[static_cast<size_t>(i)][static_cast<size_t>(s - 1)].value,
                                   boundaryTime(layers, i, o), prefix.time(i + 1, j, replicas, o)});
        if (v < best.value) best = {v, i, replicas};
      }
      a[static_cast<size_t>(j)][static_cast<size_t>(s)] = best;
    }
  }
  return rebuild(a, n, stages, false, replicas, prefix, o);
}

}  // namespace trainscope::core
