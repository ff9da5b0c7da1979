// A model: a chain of layers whose parameters and gradients live in two flat buffers laid out
// in REVERSE layer order (the last layer first). Backward produces gradients in that order, so
// a data-parallel bucket is a contiguous slice [offset, offset + count) of grads().
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "layer.h"

namespace trainscope::train {

class Model {
 public:
  Model(std::vector<std::unique_ptr<Layer>> layers, uint64_t seed);
  // A part of a larger model (a pipeline stage): layer i is initialised as layer initIds[i] of
  // the whole model, so the parts of a split model start where the unsplit model starts.
  Model(std::vector<std::unique_ptr<Layer>> layers, uint64_t seed, const std::vector<int>& initIds);
  int layerCount() const { return static_cast<int>(layers_.size()); }
  Layer& layer(int i) { return *layers_[static_cast<size_t>(i)]; }
  std::span<float> params() { return params_; }
  std::span<const float> params() const { return params_; }
  std::span<float> grads() { return grads_; }
  size_t offsetOf(int layer) const { return offset_[static_cast<size_t>(layer)]; }
  size_t countOf(int layer) const { return layers_[static_cast<size_t>(layer)]->paramCount(); }
  void zeroGrads();

 private:
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<float> params_, grads_;
  std::vector<size_t> offset_;
};

// Mean softmax cross-entropy over the rows of logits; dlogits = its gradient (already divided
// by the row count). Returns the loss; *correct (may be null) gets the number of argmax hits.
double softmaxCrossEntropy(const Mat& logits, const std::vector<int>& labels, Mat* dlogits, int* correct);

}  // namespace trainscope::train
