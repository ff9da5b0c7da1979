// A small causal (GPT-style, pre-LN) transformer with hand-written forward and backward:
// embedding (+ learned positions) -> [attention block, MLP block] x layers -> LN -> vocab.
// Activations are (batch * seqLen) x d row-major matrices; the attention reshapes per sequence.
// Each block's B computes the input gradient and keeps the intermediate gradients W needs.
// Seq1F1B (Layer::setSpan): a slot may hold a segment of positions of every sequence; the
// embedding offsets its positions and the attention reads and extends a per-micro-batch K/V
// cache, so the segments of a micro-batch compute exactly what whole sequences compute.
#include <algorithm>
#include <cmath>
#include <map>

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
  void setSpan(int slot, const SeqSpan& span) override {
    s_.at(slot).offset = span.group < 0 ? 0 : span.offset;
  }
  // x: token ids, one row per sequence, one column per position of the slot's span.
  void forward(int slot, const Mat& x, Mat& y) override {
    Saved& s = s_.at(slot);
    s.ids = x;
    y.resize(x.rows * x.cols, d_);
    for (int b = 0; b < x.rows; ++b)
      for (int t = 0; t < x.cols; ++t) {
        const float* tok = p_ + tokOffset(x.row(b)[t]);
        const float* pos = p_ + posOffset(s.offset + t);
        float* out = y.row(b * x.cols + t);
        for (int j = 0; j < d_; ++j) out[j] = tok[j] + pos[j];
      }
  }
  void backwardInput(int, const Mat&, Mat& dx) override { dx.resize(0, 0); }  // token ids: no gradient
  void backwardWeight(int slot, const Mat& dy) override {
    const Saved& s = s_.at(slot);
    const Mat& x = s.ids;
    for (int b = 0; b < x.rows; ++b)
      for (int t = 0; t < x.cols; ++t) {
        float* gt = g_ + tokOffset(x.row(b)[t]);
        float* gp = g_ + posOffset(s.offset + t);
        const float* d = dy.row(b * x.cols + t);
        for (int j = 0; j < d_; ++j) gt[j] += d[j], gp[j] += d[j];
      }
  }
  void release(int slot) override { s_.release(slot); }

 private:
  struct Saved {
    Mat ids;
    int offset = 0;  // position of column 0
  };
  size_t posOffset(int t) const {
    return static_cast<size_t>(vocab_ + std::clamp(t, 0, len_ - 1)) * static_cast<size_t>(d_);
  }
  size_t tokOffset(float id) const {
    return static_cast<size_t>(std::clamp(static_cast<int>(id), 0, vocab_ - 1)) * static_cast<size_t>(d_);
  }
  int vocab_, len_, d_;
  float *p_ = nullptr, *g_ = nullptr;
  Slots<Saved> s_;
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
  void setSpan(int slot, const SeqSpan& span) override { s_.at(slot).span = span; }
  // Rows are (sequence, position of the slot's span); queries of the span attend to the keys
  // and values of every position up to their own, this span's and the earlier ones' (cache).
  void forward(int slot, const Mat& x, Mat& y) override {
    S& s = s_.at(slot);
    if (s.span.group < 0) s.span = SeqSpan{-1, 0, len_};
    const int n = x.rows, seg = s.span.length, off = s.span.offset, seqs = n / seg, ctx = off + seg;
    lnForward(x, p_.gamma, p_.beta, s.ln, s.h);
    s.qkv.resize(n, 3 * d_);
    addBias(s.qkv, p_.bqkv);
    c_.gemm(false, true, n, 3 * d_, d_, 1.0f, s.h.data(), d_, p_.wqkv, d_, 1.0f, s.qkv.data(), 3 * d_);
    Kv& kv = kvOf(s);
    if (s.span.group < 0 || off == 0 || kv.k.rows != seqs * len_) kv = Kv(seqs * len_, d_);
    if (s.span.group >= 0) ++kv.live;
    for (int b = 0; b < seqs; ++b)  // this span's keys and values join the cache
      for (int t = 0; t < seg; ++t) {
        const float* r = s.qkv.row(b * seg + t);
        std::copy_n(r + d_, d_, kv.k.row(b * len_ + off + t));
        std::copy_n(r + 2 * d_, d_, kv.v.row(b * len_ + off + t));
      }
    s.probs.resize(seqs * heads_ * seg, ctx);
    s.o.resize(n, d_);
    const float sc = 1.0f / std::sqrt(static_cast<float>(dh_));
    for (int b = 0; b < seqs; ++b)
      for (int hd = 0; hd < heads_; ++hd) {
        float* pr = s.probs.row((b * heads_ + hd) * seg);
        c_.gemm(false, true, seg, ctx, dh_, sc, q(s, b, hd), 3 * d_, at(kv.k, b, hd), d_, 0.0f, pr, ctx);
        for (int t = 0; t < seg; ++t) {  // causal softmax: position off + t sees 0 .. off + t
          float* row = pr + t * ctx;
          const int last = off + t;
          float mx = -1e30f;
          for (int u = 0; u <= last; ++u) mx = std::max(mx, row[u]);
          float sum = 0;
          for (int u = 0; u < ctx; ++u) sum += (row[u] = u <= last ? std::exp(row[u] - mx) : 0.0f);
          for (int u = 0; u <= last; ++u) row[u] /= sum;
        }
        c_.gemm(false, false, seg, dh_, ctx, 1.0f, pr, ctx, at(kv.v, b, hd), d_, 0.0f,
                s.o.row(b * seg) + hd * dh_, d_);
      }
    y.resize(n, d_);
    addBias(y, p_.bo);
    c_.gemm(false, true, n, d_, d_, 1.0f, s.o.data(), d_, p_.wo, d_, 1.0f, y.data(), d_);
    for (size_t i = 0; i < y.size(); ++i) y.v[i] += x.v[i];
  }
  // The span's queries give key/value gradients to every earlier position (accumulated in the
  // cache); the span's own key/value gradients are complete once the later spans' B ran.
  void backwardInput(int slot, const Mat& dy, Mat& dx) override {
    S& s = s_.at(slot);
    Kv& kv = kvOf(s);
    const int n = dy.rows, seg = s.span.length, off = s.span.offset, seqs = n / seg, ctx = off + seg;
    Mat dO;
    dO.resize(n, d_);
    c_.gemm(false, false, n, d_, d_, 1.0f, dy.data(), d_, p_.wo, d_, 0.0f, dO.data(), d_);
    s.dqkv.resize(n, 3 * d_);
    Mat dp;
    dp.resize(seg, ctx);
    const float sc = 1.0f / std::sqrt(static_cast<float>(dh_));
    for (int b = 0; b < seqs; ++b)
      for (int hd = 0; hd < heads_; ++hd) {
        const float* pr = s.probs.row((b * heads_ + hd) * seg);
        const float* dOb = dO.row(b * seg) + hd * dh_;
        // dV += P^T dO ; dP = dO V^T ; dS = P * (dP - rowsum(dP * P)) ; dQ = dS K sc ; dK += dS^T Q sc
        c_.gemm(true, false, ctx, dh_, seg, 1.0f, pr, ctx, dOb, d_, 1.0f, at(kv.dv, b, hd), d_);
        c_.gemm(false, true, seg, ctx, dh_, 1.0f, dOb, d_, at(kv.v, b, hd), d_, 0.0f, dp.data(), ctx);
        for (int t = 0; t < seg; ++t) {
          float* row = dp.row(t);
          const float* prow = pr + t * ctx;
          const int last = off + t;
          float dot = 0;
          for (int u = 0; u <= last; ++u) dot += row[u] * prow[u];
          for (int u = 0; u < ctx; ++u) row[u] = u <= last ? prow[u] * (row[u] - dot) : 0.0f;
        }
        c_.gemm(false, false, seg, dh_, ctx, sc, dp.data(), ctx, at(kv.k, b, hd), d_, 0.0f,
                q(s, b, hd, s.dqkv), 3 * d_);
        c_.gemm(true, false, ctx, dh_, seg, sc, dp.data(), ctx, q(s, b, hd), 3 * d_, 1.0f, at(kv.dk, b, hd),
                d_);
      }
    for (int b = 0; b < seqs; ++b)
      for (int t = 0; t < seg; ++t) {
        float* r = s.dqkv.row(b * seg + t);
        std::copy_n(kv.dk.row(b * len_ + off + t), d_, r + d_);
        std::copy_n(kv.dv.row(b * len_ + off + t), d_, r + 2 * d_);
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
  void release(int slot) override {  // a group's cache goes with the release of its last slot
    const int g = s_.at(slot).span.group;
    if (auto it = groups_.find(g); g >= 0 && it != groups_.end() && --it->second.live <= 0) groups_.erase(it);
    s_.release(slot);
  }

 private:
  struct P {
    float *gamma = nullptr, *beta = nullptr, *wqkv = nullptr, *bqkv = nullptr, *wo = nullptr, *bo = nullptr;
  };
  // Keys and values of a group's sequences ((sequence * len + position) x d) and their
  // gradients, accumulated by the B of every span that attended to them.
  struct Kv {
    Kv() = default;
    Kv(int rows, int d) {
      for (Mat* m : {&k, &v, &dk, &dv}) m->resize(rows, d);
    }
    Mat k, v, dk, dv;
    int live = 0;  // slots of the group not yet released
  };
  struct S {
    SeqSpan span;
    Kv own;  // whole sequences: the slot's own keys and values
    LnCache ln;
    Mat h, qkv, probs, o, dqkv, dh;
  };
  static size_t sz(int v) { return static_cast<size_t>(v); }
  Kv& kvOf(S& s) { return s.span.group < 0 ? s.own : groups_[s.span.group]; }
  // Q of sequence b, head hd in the slot's rows (row stride 3d), in qkv or in dqkv.
  float* q(S& s, int b, int hd) { return q(s, b, hd, s.qkv); }
  float* q(S& s, int b, int hd, Mat& m) { return m.row(b * s.span.length) + hd * dh_; }
  // Head hd of sequence b's rows in a cache matrix (row stride d).
  float* at(Mat& m, int b, int hd) { return m.row(b * len_) + hd * dh_; }
  Compute& c_;
  int len_, d_, heads_, dh_;
  P p_, g_;
  Slots<S> s_;
  std::map<int, Kv> groups_;  // seq1f1b: per micro-batch
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
