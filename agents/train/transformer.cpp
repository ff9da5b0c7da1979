// A small causal (GPT-style, pre-LN) transformer with hand-written forward and backward:
// embedding (+ learned positions) -> [attention block, MLP block] x layers -> LN -> vocab.
// Activations are (batch * seqLen) x d row-major matrices; the attention reshapes per sequence.
// Each block's B computes the input gradient and keeps the intermediate gradients W needs.
#include <algorithm>
#include <cmath>

#include "linear.h"
#include "models.h"

namespace trainscope::train {
namespace {

// ---- layer norm over rows (helpers shared by the blocks) --------------------------------
struct LnCache {
  Mat xhat;
  std::vector<float> rstd;
};

void lnForward(const Mat& x, const float* g, const float* b, LnCache& c, Mat& y) {
  const int d = x.cols;
  c.xhat.resize(x.rows, d);
  c.rstd.assign(static_cast<size_t>(x.rows), 0.0f);
  y.resize(x.rows, d);
  for (int r = 0; r < x.rows; ++r) {
    const float* xr = x.row(r);
    double mean = 0, var = 0;
    for (int j = 0; j < d; ++j) mean += xr[j];
    mean /= d;
    for (int j = 0; j < d; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    const auto rstd = static_cast<float>(1.0 / std::sqrt(var / d + 1e-5));
    c.rstd[static_cast<size_t>(r)] = rstd;
    for (int j = 0; j < d; ++j) {
      const float xh = (xr[j] - static_cast<float>(mean)) * rstd;
      c.xhat.row(r)[j] = xh;
      y.row(r)[j] = xh * g[j] + b[j];
    }
  }
}

// dx (+)= LN'(dy): dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * g.
void lnBackwardInput(const Mat& dy, const float* g, const LnCache& c, Mat& dx, bool accumulate) {
  const int d = dy.cols;
  if (!accumulate) dx.resize(dy.rows, d);
  for (int r = 0; r < dy.rows; ++r) {
    double m1 = 0, m2 = 0;
    for (int j = 0; j < d; ++j) {
      const double dxh = dy.row(r)[j] * g[j];
      m1 += dxh;
      m2 += dxh * c.xhat.row(r)[j];
    }
    m1 /= d;
    m2 /= d;
    for (int j = 0; j < d; ++j) {
      const double dxh = dy.row(r)[j] * g[j];
      dx.row(r)[j] += static_cast<float>(c.rstd[static_cast<size_t>(r)] * (dxh - m1 - c.xhat.row(r)[j] * m2));
    }
  }
}

void lnBackwardWeight(const Mat& dy, const LnCache& c, float* dg, float* db) {
  for (int r = 0; r < dy.rows; ++r)
    for (int j = 0; j < dy.cols; ++j) {
      dg[j] += dy.row(r)[j] * c.xhat.row(r)[j];
      db[j] += dy.row(r)[j];
    }
}

void addBias(Mat& y, const float* b) {
  for (int r = 0; r < y.rows; ++r)
    for (int j = 0; j < y.cols; ++j) y.row(r)[j] += b[j];
}
void biasGrad(const Mat& dy, float* db) {
  for (int r = 0; r < dy.rows; ++r)
    for (int j = 0; j < dy.cols; ++j) db[j] += dy.row(r)[j];
}
void initNormal(float* w, size_t n, float scale, Rng& rng) {
  for (size_t i = 0; i < n; ++i) w[i] = scale * rng.normal();
}

// ---- embedding --------------------------------------------------------------------------
class Embedding final : public Layer {
 public:
  Embedding(int vocab, int len, int d) : vocab_(vocab), len_(len), d_(d) {}
  std::string kind() const override { return "embedding"; }
  size_t paramCount() const override { return static_cast<size_t>(vocab_ + len_) * static_cast<size_t>(d_); }
  void bind(float* p, float* g) override {
    p_ = p;
    g_ = g;
  }
  void init(Rng& rng) override { initNormal(p_, paramCount(), 0.1f, rng); }
  void forward(int slot, const Mat& x, Mat& y) override {
    ids_.at(slot) = x;
    y.resize(x.rows * len_, d_);
    for (int b = 0; b < x.rows; ++b)
      for (int t = 0; t < len_; ++t) {
        const float* tok = p_ + tokOffset(x.row(b)[t]);
        const float* pos = p_ + static_cast<size_t>(vocab_ + t) * static_cast<size_t>(d_);
        float* out = y.row(b * len_ + t);
        for (int j = 0; j < d_; ++j) out[j] = tok[j] + pos[j];
      }
  }
  void backwardInput(int, const Mat&, Mat& dx) override { dx.resize(0, 0); }  // token ids: no gradient
  void backwardWeight(int slot, const Mat& dy) override {
    const Mat& x = ids_.at(slot);
    for (int b = 0; b < x.rows; ++b)
      for (int t = 0; t < len_; ++t) {
        float* gt = g_ + tokOffset(x.row(b)[t]);
        float* gp = g_ + static_cast<size_t>(vocab_ + t) * static_cast<size_t>(d_);
        const float* d = dy.row(b * len_ + t);
        for (int j = 0; j < d_; ++j) gt[j] += d[j], gp[j] += d[j];
      }
  }
  void release(int slot) override { ids_.release(slot); }

 private:
  size_t tokOffset(float id) const {
    return static_cast<size_t>(std::clamp(static_cast<int>(id), 0, vocab_ - 1)) * static_cast<size_t>(d_);
  }
  int vocab_, len_, d_;
  float *p_ = nullptr, *g_ = nullptr;
  Slots<Mat> ids_;
};

// ---- final layer norm ---------------------------------------------------------------------
class LayerNorm final : public Layer {
 public:
  explicit LayerNorm(int d) : d_(d) {}
  std::string kind() const override { return "layernorm"; }
  size_t paramCount() const override { return 2 * static_cast<size_t>(d_); }
  void bind(float* p, float* g) override { p_ = p, g_ = g; }
  void init(Rng&) override {
    for (int j = 0; j < d_; ++j) p_[j] = 1.0f, p_[d_ + j] = 0.0f;
  }
  void forward(int slot, const Mat& x, Mat& y) override { lnForward(x, p_, p_ + d_, c_.at(slot), y); }
  void backwardInput(int slot, const Mat& dy, Mat& dx) override {
    lnBackwardInput(dy, p_, c_.at(slot), dx, false);
  }
  void backwardWeight(int slot, const Mat& dy) override { lnBackwardWeight(dy, c_.at(slot), g_, g_ + d_); }
  void release(int slot) override { c_.release(slot); }

 private:
  int d_;
  float *p_ = nullptr, *g_ = nullptr;
  Slots<LnCache> c_;
};

// ---- x + attention(LN(x)), causal, multi-head ----------------------------------------------
class AttentionBlock final : public Layer {
 public:
  AttentionBlock(Compute& c, int len, int d, int heads)
      : c_(c), len_(len), d_(d), heads_(heads), dh_(d / heads) {}
  std::string kind() const override { return "attention"; }
  size_t paramCount() const override {
    return 2 * sz(d_) + 3 * sz(d_) * sz(d_) + 3 * sz(d_) + sz(d_) * sz(d_) + sz(d_);
  }
  void bind(float* p, float* g) override {
    float* q[] = {p, g};
    for (int i = 0; i < 2; ++i) {
      float* x = q[i];
      P& t = i ? g_ : p_;
      t.gamma = x, x += d_;
      t.beta = x, x += d_;
      t.wqkv = x, x += 3 * sz(d_) * sz(d_);
      t.bqkv = x, x += 3 * d_;
      t.wo = x, x += sz(d_) * sz(d_);
      t.bo = x;
    }
  }
  void init(Rng& rng) override {
    for (int j = 0; j < d_; ++j) p_.gamma[j] = 1.0f, p_.beta[j] = 0.0f;
    initNormal(p_.wqkv, 3 * sz(d_) * sz(d_), 1.0f / std::sqrt(static_cast<float>(d_)), rng);
    initNormal(p_.wo, sz(d_) * sz(d_), 0.5f / std::sqrt(static_cast<float>(d_)), rng);
    for (int j = 0; j < 3 * d_; ++j) p_.bqkv[j] = 0.0f;
    for (int j = 0; j < d_; ++j) p_.bo[j] = 0.0f;
  }
  void forward(int slot, const Mat& x, Mat& y) override {
    S& s = s_.at(slot);
    const int n = x.rows, seqs = n / len_;
    lnForward(x, p_.gamma, p_.beta, s.ln, s.h);
    s.qkv.resize(n, 3 * d_);
    addBias(s.qkv, p_.bqkv);
    c_.gemm(false, true, n, 3 * d_, d_, 1.0f, s.h.data(), d_, p_.wqkv, d_, 1.0f, s.qkv.data(), 3 * d_);
    s.probs.resize(seqs * heads_ * len_, len_);
    s.o.resize(n, d_);
    const float sc = 1.0f / std::sqrt(static_cast<float>(dh_));
    for (int b = 0; b < seqs; ++b)
      for (int hd = 0; hd < heads_; ++hd) {
        float* pr = s.probs.row((b * heads_ + hd) * len_);
        c_.gemm(false, true, len_, len_, dh_, sc, q(s, b, hd, 0), 3 * d_, q(s, b, hd, 1), 3 * d_, 0.0f, pr,
                len_);
        for (int t = 0; t < len_; ++t) {  // causal softmax
          float* row = pr + t * len_;
          float mx = -1e30f;
          for (int u = 0; u <= t; ++u) mx = std::max(mx, row[u]);
          float sum = 0;
          for (int u = 0; u < len_; ++u) sum += (row[u] = u <= t ? std::exp(row[u] - mx) : 0.0f);
          for (int u = 0; u <= t; ++u) row[u] /= sum;
        }
        c_.gemm(false, false, len_, dh_, len_, 1.0f, pr, len_, q(s, b, hd, 2), 3 * d_, 0.0f,
                s.o.row(b * len_) + hd * dh_, d_);
      }
    y.resize(n, d_);
    addBias(y, p_.bo);
    c_.gemm(false, true, n, d_, d_, 1.0f, s.o.data(), d_, p_.wo, d_, 1.0f, y.data(), d_);
    for (size_t i = 0; i < y.size(); ++i) y.v[i] += x.v[i];
  }
  void backwardInput(int slot, const Mat& dy, Mat& dx) override {
    S& s = s_.at(slot);
    const int n = dy.rows, seqs = n / len_;
    Mat dO;
    dO.resize(n, d_);
    c_.gemm(false, false, n, d_, d_, 1.0f, dy.data(), d_, p_.wo, d_, 0.0f, dO.data(), d_);
    s.dqkv.resize(n, 3 * d_);
    Mat dp;
    dp.resize(len_, len_);
    const float sc = 1.0f / std::sqrt(static_cast<float>(dh_));
    for (int b = 0; b < seqs; ++b)
      for (int hd = 0; hd < heads_; ++hd) {
        const float* pr = s.probs.row((b * heads_ + hd) * len_);
        const float* dOb = dO.row(b * len_) + hd * dh_;
        // dV = P^T dO ; dP = dO V^T ; dS = P * (dP - rowsum(dP * P)) ; dQ = dS K sc ; dK = dS^T Q sc
        c_.gemm(true, false, len_, dh_, len_, 1.0f, pr, len_, dOb, d_, 0.0f, dq(s, b, hd, 2), 3 * d_);
        c_.gemm(false, true, len_, len_, dh_, 1.0f, dOb, d_, q(s, b, hd, 2), 3 * d_, 0.0f, dp.data(), len_);
        for (int t = 0; t < len_; ++t) {
          float* row = dp.row(t);
          const float* prow = pr + t * len_;
          float dot = 0;
          for (int u = 0; u <= t; ++u) dot += row[u] * prow[u];
          for (int u = 0; u < len_; ++u) row[u] = u <= t ? prow[u] * (row[u] - dot) : 0.0f;
        }
        c_.gemm(false, false, len_, dh_, len_, sc, dp.data(), len_, q(s, b, hd, 1), 3 * d_, 0.0f,
                dq(s, b, hd, 0), 3 * d_);
        c_.gemm(true, false, len_, dh_, len_, sc, dp.data(), len_, q(s, b, hd, 0), 3 * d_, 0.0f,
                dq(s, b, hd, 1), 3 * d_);
      }
    s.dh.resize(n, d_);
    c_.gemm(false, false, n, d_, 3 * d_, 1.0f, s.dqkv.data(), 3 * d_, p_.wqkv, d_, 0.0f, s.dh.data(), d_);
    dx = dy;  // residual
    lnBackwardInput(s.dh, p_.gamma, s.ln, dx, true);
  }
  void backwardWeight(int slot, const Mat& dy) override {
    S& s = s_.at(slot);
    const int n = dy.rows;
    c_.gemm(true, false, d_, d_, n, 1.0f, dy.data(), d_, s.o.data(), d_, 1.0f, g_.wo, d_);
    biasGrad(dy, g_.bo);
    c_.gemm(true, false, 3 * d_, d_, n, 1.0f, s.dqkv.data(), 3 * d_, s.h.data(), d_, 1.0f, g_.wqkv, d_);
    biasGrad(s.dqkv, g_.bqkv);
    lnBackwardWeight(s.dh, s.ln, g_.gamma, g_.beta);
  }
  void release(int slot) override { s_.release(slot); }

 private:
  struct P {
    float *gamma = nullptr, *beta = nullptr, *wqkv = nullptr, *bqkv = nullptr, *wo = nullptr, *bo = nullptr;
  };
  struct S {
    LnCache ln;
    Mat h, qkv, probs, o, dqkv, dh;
  };
  static size_t sz(int v) { return static_cast<size_t>(v); }
  // Q (which 0), K (1), V (2) of sequence b, head hd: a len x dh block with row stride 3d.
  float* q(S& s, int b, int hd, int which) { return s.qkv.row(b * len_) + which * d_ + hd * dh_; }
  float* dq(S& s, int b, int hd, int which) { return s.dqkv.row(b * len_) + which * d_ + hd * dh_; }
  Compute& c_;
  int len_, d_, heads_, dh_;
  P p_, g_;
  Slots<S> s_;
};

// ---- x + W2 relu(W1 LN(x) + b1) + b2 --------------------------------------------------------
class MlpBlock final : public Layer {
 public:
  MlpBlock(Compute& c, int d) : d_(d), up_(c, d, 4 * d, true), down_(c, 4 * d, d, false) {}
  std::string kind() const override { return "mlp"; }
  size_t paramCount() const override {
    return 2 * static_cast<size_t>(d_) + up_.paramCount() + down_.paramCount();
  }
  void bind(float* p, float* g) override {
    gamma_ = p, beta_ = p + d_, dgamma_ = g, dbeta_ = g + d_;
    up_.bind(p + 2 * d_, g + 2 * d_);
    down_.bind(p + 2 * d_ + up_.paramCount(), g + 2 * d_ + up_.paramCount());
  }
  void init(Rng& rng) override {
    for (int j = 0; j < d_; ++j) gamma_[j] = 1.0f, beta_[j] = 0.0f;
    up_.init(rng);
    down_.init(rng);
  }
  void forward(int slot, const Mat& x, Mat& y) override {
    S& s = s_.at(slot);
    lnForward(x, gamma_, beta_, s.ln, s.h);
    up_.forward(slot, s.h, s.a);
    down_.forward(slot, s.a, y);
    for (size_t i = 0; i < y.size(); ++i) y.v[i] += x.v[i];
  }
  void backwardInput(int slot, const Mat& dy, Mat& dx) override {
    S& s = s_.at(slot);
    down_.backwardInput(slot, dy, s.da);
    up_.backwardInput(slot, s.da, s.dh);
    dx = dy;
    lnBackwardInput(s.dh, gamma_, s.ln, dx, true);
  }
  void backwardWeight(int slot, const Mat& dy) override {
    S& s = s_.at(slot);
    down_.backwardWeight(slot, dy);
    up_.backwardWeight(slot, s.da);
    lnBackwardWeight(s.dh, s.ln, dgamma_, dbeta_);
  }
  void release(int slot) override {
    s_.release(slot);
    up_.release(slot);
    down_.release(slot);
  }

 private:
  struct S {
    LnCache ln;
    Mat h, a, da, dh;
  };
  int d_;
  Linear up_, down_;
  float *gamma_ = nullptr, *beta_ = nullptr, *dgamma_ = nullptr, *dbeta_ = nullptr;
  Slots<S> s_;
};

}  // namespace

std::unique_ptr<Model> makeTransformer(Compute& c, const Options& o) {
  return std::make_unique<Model>(makeTransformerLayers(c, o), o.seed);
}

std::vector<std::unique_ptr<Layer>> makeTransformerLayers(Compute& c, const Options& o) {
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<Embedding>(o.vocab, o.seqLen, o.width));
  for (int i = 0; i < o.layers; ++i) {
    layers.push_back(std::make_unique<AttentionBlock>(c, o.seqLen, o.width, o.heads));
    layers.push_back(std::make_unique<MlpBlock>(c, o.width));
  }
  layers.push_back(std::make_unique<LayerNorm>(o.width));
  layers.push_back(std::make_unique<Linear>(c, o.width, o.vocab, false));
  return layers;
}

}  // namespace trainscope::train
