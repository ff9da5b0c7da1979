#include "task.h"

#include <algorithm>
#include <cmath>

namespace trainscope::train {
namespace {

constexpr uint64_t kTrainStream = 1, kHeldOutStream = 2;

// A cheap, exactly reproducible standard-normal-like number from 64 random bits: the sum of four
// 16-bit uniforms (Irwin-Hall, n = 4), centred and scaled to unit variance. Its tails stop at
// +-3.46; for synthetic features that is fine, and it is ~20x cheaper than Box-Muller's log and
// sincos (the data loader's cost is most of a pipeline stage's idle time otherwise).
inline float approxNormal(uint64_t bits) {
  const auto sum = static_cast<float>((bits & 0xffff) + ((bits >> 16) & 0xffff) + ((bits >> 32) & 0xffff) + (bits >> 48));
  return (sum * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;  // mean 2, variance 4/12 -> N(0, 1)-like
}

class TeacherTask final : public Task {
 public:
  TeacherTask(uint64_t seed, int in, int classes) : seed_(seed), in_(in), classes_(classes) {
    Rng rng(hashOf(seed, 0x7eac4e5));
    // Stored transposed (w1t: in x hidden, w2t: hidden x classes) so the per-sample products run
    // along contiguous rows that the compiler vectorises, in the same summation order as a
    // plain dot product (each output accumulates its terms in input order).
    w1t_.resize(in_, kHidden);
    w2t_.resize(kHidden, classes_);
    for (int k = 0; k < kHidden; ++k)
      for (int j = 0; j < in_; ++j) w1t_.row(j)[k] = rng.normal() / std::sqrt(static_cast<float>(in_));
    for (int c = 0; c < classes_; ++c)
      for (int k = 0; k < kHidden; ++k) w2t_.row(k)[c] = rng.normal() / std::sqrt(static_cast<float>(kHidden));
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
    std::vector<float> scores(static_cast<size_t>(classes_));
    for (int r = 0; r < count; ++r) {
      Rng rng(hashOf(seed_, stream, static_cast<uint64_t>(first + r)));
      float* x = b.x.row(r);
      for (int j = 0; j < in_; ++j) x[j] = approxNormal(rng.next());
      float h[kHidden] = {};
      for (int j = 0; j < in_; ++j) {
        const float* w = w1t_.row(j);
        const float xj = x[j];
        for (int k = 0; k < kHidden; ++k) h[k] += w[k] * xj;
      }
      for (float& v : h) v = std::tanh(v);
      float* __restrict s = scores.data();
      std::fill_n(s, classes_, 0.0f);
      for (int k = 0; k < kHidden; ++k) {
        const float* __restrict w = w2t_.row(k);
        const float hk = h[k];
        int c = 0;
        for (; c + 8 <= classes_; c += 8)  // fixed-width blocks: vectorised at -O2
          for (int i = 0; i < 8; ++i) s[c + i] += w[c + i] * hk;
        for (; c < classes_; ++c) s[c] += w[c] * hk;
      }
      b.labels[static_cast<size_t>(r)] = static_cast<int>(std::max_element(s, s + classes_) - s);
    }
    return b;
  }
  uint64_t seed_;
  int in_, classes_;
  Mat w1t_, w2t_;
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
