#include "task.h"

#include <algorithm>
#include <cmath>

namespace trainscope::train {
namespace {

constexpr uint64_t kTrainStream = 1, kHeldOutStream = 2;

class TeacherTask final : public Task {
 public:
  TeacherTask(uint64_t seed, int in, int classes) : seed_(seed), in_(in), classes_(classes) {
    Rng rng(hashOf(seed, 0x7eac4e5));
    w1_.resize(kHidden, in_);
    w2_.resize(classes_, kHidden);
    for (float& v : w1_.v) v = rng.normal() / std::sqrt(static_cast<float>(in_));
    for (float& v : w2_.v) v = rng.normal() / std::sqrt(static_cast<float>(kHidden));
  }
  std::string name() const override { return "teacher"; }
  Batch train(int64_t first, int count) const override { return make(kTrainStream, first, count); }
  Batch heldOut(int count) const override { return make(kHeldOutStream, 0, count); }

 private:
  static constexpr int kHidden = 32;
  Batch make(uint64_t stream, int64_t first, int count) const {
    Batch b;
    b.x.resize(count, in_);
    b.labels.resize(static_cast<size_t>(count));
    std::vector<float> h(kHidden);
    for (int r = 0; r < count; ++r) {
      Rng rng(hashOf(seed_, stream, static_cast<uint64_t>(first + r)));
      float* x = b.x.row(r);
      for (int j = 0; j < in_; ++j) x[j] = rng.normal();
      for (int k = 0; k < kHidden; ++k) {
        float s = 0;
        for (int j = 0; j < in_; ++j) s += w1_.row(k)[j] * x[j];
        h[static_cast<size_t>(k)] = std::tanh(s);
      }
      int best = 0;
      float bestV = -1e30f;
      for (int c = 0; c < classes_; ++c) {
        float s = 0;
        for (int k = 0; k < kHidden; ++k) s += w2_.row(c)[k] * h[static_cast<size_t>(k)];
        if (s > bestV) bestV = s, best = c;
      }
      b.labels[static_cast<size_t>(r)] = best;
    }
    return b;
  }
  uint64_t seed_;
  int in_, classes_;
  Mat w1_, w2_;
};

class SequenceTask final : public Task {
 public:
  SequenceTask(uint64_t seed, int len, int vocab) : seed_(seed), len_(len), vocab_(vocab) {}
  std::string name() const override { return "sequence"; }
  Batch train(int64_t first, int count) const override { return make(kTrainStream, first, count); }
  Batch heldOut(int count) const override { return make(kHeldOutStream, 0, count); }

 private:
  Batch make(uint64_t stream, int64_t first, int count) const {
    Batch b;
    b.x.resize(count, len_);
    b.labels.resize(static_cast<size_t>(count) * static_cast<size_t>(len_));
    std::vector<int> seq(static_cast<size_t>(len_) + 1);
    for (int r = 0; r < count; ++r) {
      Rng rng(hashOf(seed_, stream + 16, static_cast<uint64_t>(first + r)));
      seq[0] = static_cast<int>(rng.next() % static_cast<uint64_t>(vocab_));
      seq[1] = static_cast<int>(rng.next() % static_cast<uint64_t>(vocab_));
      for (size_t t = 2; t < seq.size(); ++t) seq[t] = (seq[t - 1] + seq[t - 2]) % vocab_;
      for (int t = 0; t < len_; ++t) {
        b.x.row(r)[t] = static_cast<float>(seq[static_cast<size_t>(t)]);
        b.labels[static_cast<size_t>(r) * static_cast<size_t>(len_) + static_cast<size_t>(t)] =
            seq[static_cast<size_t>(t) + 1];
      }
    }
    return b;
  }
  uint64_t seed_;
  int len_, vocab_;
};

}  // namespace

std::unique_ptr<Task> makeTeacherTask(uint64_t seed, int inputDim, int classes) {
  return std::make_unique<TeacherTask>(seed, inputDim, classes);
}
std::unique_ptr<Task> makeSequenceTask(uint64_t seed, int seqLen, int vocab) {
  return std::make_unique<SequenceTask>(seed, seqLen, vocab);
}

}  // namespace trainscope::train
