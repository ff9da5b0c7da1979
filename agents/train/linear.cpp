#include "linear.h"

#include <cmath>

namespace trainscope::train {

void Linear::bind(float* p, float* g) {
  w_ = p;
  b_ = p + static_cast<size_t>(out_) * static_cast<size_t>(in_);
  gw_ = g;
  gb_ = g + static_cast<size_t>(out_) * static_cast<size_t>(in_);
}

void Linear::init(Rng& rng) {
  const float scale = std::sqrt((relu_ ? 2.0f : 1.0f) / static_cast<float>(in_));
  for (size_t i = 0; i < static_cast<size_t>(out_) * static_cast<size_t>(in_); ++i)
    w_[i] = scale * rng.normal();
  for (int i = 0; i < out_; ++i) b_[i] = 0.0f;
}

void Linear::forward(int slot, const Mat& x, Mat& y) {
  Saved& s = saved_.at(slot);
  s.x = x;
  s.haveDz = false;
  y.resize(x.rows, out_);
  for (int r = 0; r < y.rows; ++r)
    for (int j = 0; j < out_; ++j) y.row(r)[j] = b_[j];
  c_.gemm(false, true, x.rows, out_, in_, 1.0f, x.data(), in_, w_, in_, 1.0f, y.data(), out_);
  if (relu_)
    for (float& v : y.v) v = v > 0.0f ? v : 0.0f;
  s.y = y;
}

const Mat& Linear::dz(Saved& s, const Mat& dy) {
  if (!s.haveDz) {
    s.dz = dy;
    if (relu_)
      for (size_t i = 0; i < s.dz.size(); ++i)
        if (s.y.v[i] <= 0.0f) s.dz.v[i] = 0.0f;
    s.haveDz = true;
  }
  return s.dz;
}

void Linear::backwardInput(int slot, const Mat& dy, Mat& dx) {
  Saved& s = saved_.at(slot);
  const Mat& d = dz(s, dy);
  dx.resize(d.rows, in_);
  c_.gemm(false, false, d.rows, in_, out_, 1.0f, d.data(), out_, w_, in_, 0.0f, dx.data(), in_);
}

void Linear::backwardWeight(int slot, const Mat& dy) {
  Saved& s = saved_.at(slot);
  const Mat& d = dz(s, dy);
  c_.gemm(true, false, out_, in_, d.rows, 1.0f, d.data(), out_, s.x.data(), in_, 1.0f, gw_, in_);
  for (int r = 0; r < d.rows; ++r)
    for (int j = 0; j < out_; ++j) gb_[j] += d.row(r)[j];
}

}  // namespace trainscope::train
