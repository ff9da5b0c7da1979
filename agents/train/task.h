// Deterministic synthetic tasks generated in-process. Sample i of a stream depends only on
// (seed, stream, i): every rank can produce its own shard of a global batch, and a one-process
// run on the whole batch sees exactly the same samples.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor.h"

namespace trainscope::train {

struct Batch {
  Mat x;                    // features (classification) or token ids as floats (sequences)
  std::vector<int> labels;  // one per output row of the model
};

class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;
  // count samples starting at sample index first of the training stream.
  virtual Batch train(int64_t first, int count) const = 0;
  virtual Batch heldOut(int count) const = 0;  // a separate stream, never trained on
};

// Classification: x ~ N(0, 1)^inputDim, label = argmax of a fixed random teacher MLP.
std::unique_ptr<Task> makeTeacherTask(uint64_t seed, int inputDim, int classes);
// Sequences of length seqLen over vocab tokens: two random tokens, then
// x[t] = (x[t-1] + x[t-2]) mod vocab; labels are the next tokens (causal LM).
std::unique_ptr<Task> makeSequenceTask(uint64_t seed, int seqLen, int vocab);

}  // namespace trainscope::train
