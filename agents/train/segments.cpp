#include "segments.h"

#include "trainscope/core/sched/partition.h"

namespace trainscope::train {

std::string checkSegments(const Options& o, int microBatchSamples, int k) {
  if (k < 1) return "segments must be >= 1, got " + std::to_string(k);
  if (o.model == "transformer") {
    if (k > o.seqLen)
      return "cannot cut sequences of " + std::to_string(o.seqLen) + " tokens into " + std::to_string(k) +
             " non-empty segments";
    return {};
  }
  if (k > microBatchSamples)
    return "a micro-batch of " + std::to_string(microBatchSamples) + " sample(s) does not split into " +
           std::to_string(k) + " segments (the mlp splits samples)";
  return {};
}

std::vector<int> segmentBounds(const Options& o, int k, double params) {
  if (o.model != "transformer" || !checkSegments(o, 1, k).empty()) return {};
  const core::SequenceFlopsModel m{params, o.layers, o.width};
  auto lengths = core::partitionSequence(o.seqLen, k, m);
  if (!lengths) return {};
  std::vector<int> bounds{0};
  for (int64_t n : lengths.value()) bounds.push_back(bounds.back() + static_cast<int>(n));
  return bounds;
}

std::string describeSegments(const std::vector<int>& bounds) {
  if (bounds.empty()) return "samples";
  std::string s = std::to_string(bounds.back()) + " tokens ->";
  for (size_t i = 1; i < bounds.size(); ++i) s += " " + std::to_string(bounds[i] - bounds[i - 1]);
  return s;
}

}  // namespace trainscope::train
