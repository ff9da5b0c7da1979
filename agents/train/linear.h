// Dense layer y = act(x W^T + b), W: out x in, act = ReLU or identity.
#pragma once

#include "layer.h"

namespace trainscope::train {

class Linear final : public Layer {
 public:
  Linear(Compute& c, int in, int out, bool relu) : c_(c), in_(in), out_(out), relu_(relu) {}
  std::string kind() const override { return relu_ ? "linear+relu" : "linear"; }
  size_t paramCount() const override { return static_cast<size_t>(out_) * static_cast<size_t>(in_ + 1); }
  void bind(float* p, float* g) override;
  void init(Rng& rng) override;
  void forward(int slot, const Mat& x, Mat& y) override;
  void backwardInput(int slot, const Mat& dy, Mat& dx) override;
  void backwardWeight(int slot, const Mat& dy) override;
  void release(int slot) override { saved_.release(slot); }

 private:
  struct Saved {
    Mat x, y, dz;
    bool haveDz = false;
  };
  const Mat& dz(Saved& s, const Mat& dy);  // dy through the activation, computed once

  Compute& c_;
  int in_, out_;
  bool relu_;
  float *w_ = nullptr, *b_ = nullptr, *gw_ = nullptr, *gb_ = nullptr;
  Slots<Saved> saved_;
};

}  // namespace trainscope::train
