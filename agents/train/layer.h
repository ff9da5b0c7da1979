// A layer of a model with a hand-written backward split in two, as zero-bubble pipeline
// schedules need it: B (input gradient: dx from dy) and W (weight gradient: accumulate dW).
// Each call names a slot (a micro-batch): forward(slot) saves what B/W of that slot need, so a
// pipeline can keep several micro-batches in flight; release(slot) frees it.
//
// Seq1F1B cuts sequences along time: setSpan(slot) says, before forward(slot), that the slot
// holds positions [offset, offset + length) of every sequence of micro-batch `group`, whose
// earlier positions went through forward() in earlier slots (causal order) and whose backward
// comes in reverse position order. Layers that mix positions (attention: keys/values of the
// earlier segments; embedding: position ids) keep what a group needs across its slots; row-wise
// layers ignore spans. A slot without a span (or released since) holds whole sequences.
//
// Parameters and gradients are views into the model's flat buffers (bind), so gradient buckets
// are contiguous slices of one buffer and need no copy to be flattened.
#pragma once

#include <string>
#include <vector>

#include "backend.h"
#include "tensor.h"

namespace trainscope::train {

// The part of every sequence of a slot; group < 0: whole sequences.
struct SeqSpan {
  int group = -1;  // the micro-batch whose segments share keys/values
  int offset = 0;  // first position
  int length = 0;  // positions
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string kind() const = 0;  // "linear", "attention", ... (trace names)
  virtual size_t paramCount() const = 0;
  virtual void bind(float* params, float* grads) = 0;
  virtual void init(Rng& rng) = 0;
  virtual void forward(int slot, const Mat& x, Mat& y) = 0;
  virtual void backwardInput(int slot, const Mat& dy, Mat& dx) = 0;  // B
  virtual void backwardWeight(int slot, const Mat& dy) = 0;          // W (grads +=)
  virtual void release(int slot) = 0;
  virtual void setSpan(int /*slot*/, const SeqSpan& /*span*/) {}  // row-wise layers: nothing to do
};

// Per-slot saved state of a layer, grown on demand.
template <typename T>
class Slots {
 public:
  T& at(int slot) {
    if (static_cast<size_t>(slot) >= s_.size()) s_.resize(static_cast<size_t>(slot) + 1);
    return s_[static_cast<size_t>(slot)];
  }
  void release(int slot) {
    if (static_cast<size_t>(slot) < s_.size()) s_[static_cast<size_t>(slot)] = T{};
  }

 private:
  std::vector<T> s_;
};

}  // namespace trainscope::train
