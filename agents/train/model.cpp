#include "model.h"

#include <algorithm>
#include <cmath>

namespace trainscope::train {

Model::Model(std::vector<std::unique_ptr<Layer>> layers, uint64_t seed) : Model(std::move(layers), seed, {}) {}

Model::Model(std::vector<std::unique_ptr<Layer>> layers, uint64_t seed, const std::vector<int>& initIds)
    : layers_(std::move(layers)) {
  size_t total = 0;
  offset_.assign(layers_.size(), 0);
  for (size_t i = layers_.size(); i-- > 0;) {
    offset_[i] = total;
    total += layers_[i]->paramCount();
  }
  params_.assign(total, 0.0f);
  grads_.assign(total, 0.0f);
  for (size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->bind(params_.data() + offset_[i], grads_.data() + offset_[i]);
    const uint64_t id = i < initIds.size() ? static_cast<uint64_t>(initIds[i]) : i;
    Rng rng(hashOf(seed, 0x1a7e5, id));  // each layer's init depends only on (seed, index)
    layers_[i]->init(rng);
  }
}

void Model::zeroGrads() {
  std::fill(grads_.begin(), grads_.end(), 0.0f);
}

double softmaxCrossEntropy(const Mat& logits, const std::vector<int>& labels, Mat* dlogits, int* correct) {
  if (dlogits) dlogits->resize(logits.rows, logits.cols);
  double loss = 0;
  int hits = 0;
  const float inv = 1.0f / static_cast<float>(std::max(1, logits.rows));
  for (int r = 0; r < logits.rows; ++r) {
    const float* z = logits.row(r);
    const int y = labels[static_cast<size_t>(r)];
    const int arg = static_cast<int>(std::max_element(z, z + logits.cols) - z);
    hits += arg == y;
    const float mx = z[arg];
    double sum = 0;
    for (int j = 0; j < logits.cols; ++j) sum += std::exp(static_cast<double>(z[j] - mx));
    loss += std::log(sum) - static_cast<double>(z[y] - mx);
    if (dlogits) {
      float* d = dlogits->row(r);
      for (int j = 0; j < logits.cols; ++j)
        d[j] = static_cast<float>(std::exp(static_cast<double>(z[j] - mx)) / sum) * inv;
      d[y] -= inv;
    }
  }
  if (correct) *correct = hits;
  return loss / std::max(1, logits.rows);
}

}  // namespace trainscope::train
