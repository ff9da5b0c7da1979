// DiscoTrainer's forward and backward with the sparse feature exchange (disco.h).
#include <algorithm>

#include "disco.h"
#include "trace_scope.h"

namespace trainscope::train {
namespace {

void biasAct(Mat& y, const float* b, bool relu) {
  for (int r = 0; r < y.rows; ++r) {
    float* v = y.row(r);
    for (int c = 0; c < y.cols; ++c) v[c] = relu ? std::max(0.0f, v[c] + b[c]) : v[c] + b[c];
  }
}

void addColSums(const Mat& d, float* g) {
  for (int r = 0; r < d.rows; ++r)
    for (int c = 0; c < d.cols; ++c) g[c] += d.row(r)[c];
}

void reluMask(Mat& d, const Mat& h) {
  for (size_t i = 0; i < d.v.size(); ++i)
    if (!(h.v[i] > 0)) d.v[i] = 0;
}

// Columns cols[k] - base of x, packed (rows x cols.size()).
Mat pack(const Mat& x, const std::vector<int>& cols, int base) {
  Mat p;
  p.resize(x.rows, static_cast<int>(cols.size()));
  for (int r = 0; r < x.rows; ++r)
    for (size_t k = 0; k < cols.size(); ++k) p.row(r)[k] = x.row(r)[cols[k] - base];
  return p;
}

}  // namespace

// One pass; train = false: forward only (held-out). The exchanges of layer l use tag 2l
// (features) and 2l+1 (gradients); at most one message per pair and tag.
double DiscoTrainer::forwardBackward(const Mat& x, const std::vector<int>& labels, bool train, int* correct) {
  Compute& c = compute_;
  const int B = x.rows, n = part_, L = o_.layers, o0 = me_ * n, in0 = o_.inputDim, C = o_.classes;
  auto P = [&](int l) { return model_->params().data() + model_->offsetOf(l); };
  auto G = [&](int l) { return model_->grads().data() + model_->offsetOf(l); };
  auto K = [&](int l, int recv, int send) -> const std::vector<int>& {
    return kept_[static_cast<size_t>(l - 1)][static_cast<size_t>(recv * n_ + send)];
  };
  auto bytesOf = [](const Mat& m) { return m.size() * sizeof(float); };
  // Wk = W_l[O_me, cols] (n x k): the weights that read the kept features of another rank.
  auto gatherCols = [&](int l, const std::vector<int>& cols) {
    Mat m;
    m.resize(n, static_cast<int>(cols.size()));
    for (int r = 0; r < n; ++r)
      for (size_t k = 0; k < cols.size(); ++k)
        m.row(r)[k] = P(l)[static_cast<size_t>(o0 + r) * static_cast<size_t>(w_) + static_cast<size_t>(cols[k])];
    return m;
  };
  // Posts the sends and receives of one exchange; returns when the sends are posted.
  struct Exchange {
    std::vector<RequestPtr> sends, recvs;
    std::vector<int> from;
  };
  auto waitRecvs = [&](Exchange& ex, std::vector<Mat>& in, int l) {
    for (size_t k = 0; k < ex.recvs.size(); ++k) {
      ts_comm_begin_layer(TS_COMM_RECV, nameEx_, bytesOf(in[static_cast<size_t>(ex.from[k])]), ex.from[k], l);
      waitFor(*ex.recvs[k]);
      ts_comm_end();
    }
  };
  auto waitSends = [](Exchange& ex) {
    for (auto& r : ex.sends) waitFor(*r);
  };

  std::vector<Mat> h(static_cast<size_t>(L));
  std::vector<std::vector<Mat>> got(static_cast<size_t>(L), std::vector<Mat>(static_cast<size_t>(n_)));
  {  // layer 0: the input is replicated, no exchange
    KernelScope k(kernF_, 0);
    h[0].resize(B, n);
    c.gemm(false, true, B, n, in0, 1, x.data(), in0, P(0) + static_cast<size_t>(o0) * in0, in0, 0, h[0].data(), n);
    biasAct(h[0], P(0) + static_cast<size_t>(n_ * n) * in0 + o0, true);
  }
  for (int l = 1; l < L; ++l) {
    const auto li = static_cast<size_t>(l);
    Exchange ex;
    std::vector<Mat> out(static_cast<size_t>(n_));
    for (int j = 0; j < n_; ++j) {
      if (j == me_) continue;
      if (!K(l, me_, j).empty()) {
        got[li][static_cast<size_t>(j)].resize(B, static_cast<int>(K(l, me_, j).size()));
        Mat& g = got[li][static_cast<size_t>(j)];
        ex.recvs.push_back(be_.world->irecv(g.data(), bytesOf(g), j, 2 * l));
        ex.from.push_back(j);
      }
      if (!K(l, j, me_).empty()) {
        out[static_cast<size_t>(j)] = pack(h[li - 1], K(l, j, me_), o0);
        const Mat& m = out[static_cast<size_t>(j)];
        ts_comm_begin_layer(TS_COMM_SEND, nameEx_, bytesOf(m), j, l);
        ex.sends.push_back(be_.world->isend(m.data(), bytesOf(m), j, 2 * l));
        ts_comm_end();
        bytes_ += bytesOf(m);
      }
    }
    if (!pipelined_) waitRecvs(ex, got[li], l);
    h[li].resize(B, n);
    {
      KernelScope k(kernF_, l);  // the local block while the remote features travel
      c.gemm(false, true, B, n, n, 1, h[li - 1].data(), n, P(l) + static_cast<size_t>(o0) * w_ + o0, w_, 0,
             h[li].data(), n);
    }
    if (pipelined_) waitRecvs(ex, got[li], l);
    {
      KernelScope k(kernF_, l);
      for (int j : ex.from) {
        // Gathered once per training step (the backward reuses them) and once per weights for
        // inference (the cache is cleared when the optimizer or a pruning changes them).
        Mat& wk = wkCache_[static_cast<size_t>(l - 1)][static_cast<size_t>(j)];
        if (train || wk.v.empty()) wk = gatherCols(l, K(l, me_, j));
        c.gemm(false, true, B, n, wk.cols, 1, got[li][static_cast<size_t>(j)].data(), wk.cols, wk.data(), wk.cols, 1,
               h[li].data(), n);
      }
      biasAct(h[li], P(l) + static_cast<size_t>(w_) * w_ + o0, true);
    }
    waitSends(ex);
  }
  // output layer, replicated: allgather the last hidden features (dense)
  Mat blocks, H, logits, dl;
  blocks.resize(n_ * B, n);
  ts_comm_begin(TS_COMM_COLLECTIVE, nameGather_, bytesOf(h[static_cast<size_t>(L - 1)]), -1, 0);
  RequestPtr gr = be_.world->iallgather(h[static_cast<size_t>(L - 1)].data(), blocks.data(), bytesOf(h[static_cast<size_t>(L - 1)]));
  waitFor(*gr);
  ts_comm_end();
  H.resize(B, w_);
  for (int j = 0; j < n_; ++j)
    for (int r = 0; r < B; ++r) std::copy_n(blocks.row(j * B + r), n, H.row(r) + j * n);
  logits.resize(B, C);
  c.gemm(false, true, B, C, w_, 1, H.data(), w_, P(L), w_, 0, logits.data(), C);
  biasAct(logits, P(L) + static_cast<size_t>(C) * w_, false);
  const double loss = softmaxCrossEntropy(logits, labels, train ? &dl : nullptr, correct);
  if (!train) return loss;

  Mat dH, dh;
  {
    KernelScope k(kernB_, L);
    c.gemm(true, false, C, w_, B, 1, dl.data(), C, H.data(), w_, 1, G(L), w_);
    addColSums(dl, G(L) + static_cast<size_t>(C) * w_);
    dH.resize(B, w_);
    c.gemm(false, false, B, w_, C, 1, dl.data(), C, P(L), w_, 0, dH.data(), w_);
    dh.resize(B, n);
    for (int r = 0; r < B; ++r) std::copy_n(dH.row(r) + o0, n, dh.row(r));
  }
  for (int l = L - 1; l >= 1; --l) {
    const auto li = static_cast<size_t>(l);
    Exchange ex;
    std::vector<Mat> part(static_cast<size_t>(n_)), back(static_cast<size_t>(n_));
    Mat din;
    {
      KernelScope k(kernB_, l);
      reluMask(dh, h[li]);
      float* gw = G(l) + static_cast<size_t>(o0) * w_;
      c.gemm(true, false, n, n, B, 1, dh.data(), n, h[li - 1].data(), n, 1, gw + o0, w_);
      addColSums(dh, G(l) + static_cast<size_t>(w_) * w_ + o0);
      for (int j = 0; j < n_; ++j) {
        if (j == me_ || K(l, me_, j).empty()) continue;
        const std::vector<int>& cols = K(l, me_, j);
        Mat dwk;  // n x k: the kept sub-rows' weight gradients, scattered into W's columns
        dwk.resize(n, static_cast<int>(cols.size()));
        c.gemm(true, false, n, dwk.cols, B, 1, dh.data(), n, got[li][static_cast<size_t>(j)].data(), dwk.cols, 0,
               dwk.data(), dwk.cols);
        for (int r = 0; r < n; ++r)
          for (size_t q = 0; q < cols.size(); ++q) gw[static_cast<size_t>(r) * w_ + static_cast<size_t>(cols[q])] += dwk.row(r)[q];
        const Mat& wk = wkCache_[static_cast<size_t>(l - 1)][static_cast<size_t>(j)];  // from the forward
        part[static_cast<size_t>(j)].resize(B, wk.cols);
        c.gemm(false, false, B, wk.cols, n, 1, dh.data(), n, wk.data(), wk.cols, 0, part[static_cast<size_t>(j)].data(),
               wk.cols);
      }
    }
    for (int j = 0; j < n_; ++j) {
      if (j == me_) continue;
      if (!K(l, j, me_).empty()) {
        back[static_cast<size_t>(j)].resize(B, static_cast<int>(K(l, j, me_).size()));
        ex.recvs.push_back(be_.world->irecv(back[static_cast<size_t>(j)].data(), bytesOf(back[static_cast<size_t>(j)]), j, 2 * l + 1));
        ex.from.push_back(j);
      }
      if (!part[static_cast<size_t>(j)].v.empty()) {
        const Mat& m = part[static_cast<size_t>(j)];
        ts_comm_begin_layer(TS_COMM_SEND, nameEx_, bytesOf(m), j, l);
        ex.sends.push_back(be_.world->isend(m.data(), bytesOf(m), j, 2 * l + 1));
        ts_comm_end();
        bytes_ += bytesOf(m);
      }
    }
    {
      KernelScope k(kernB_, l);
      din.resize(B, n);
      c.gemm(false, false, B, n, n, 1, dh.data(), n, P(l) + static_cast<size_t>(o0) * w_ + o0, w_, 0, din.data(), n);
    }
    waitRecvs(ex, back, l);
    for (int j : ex.from) {
      const std::vector<int>& cols = K(l, j, me_);
      const Mat& m = back[static_cast<size_t>(j)];
      for (int r = 0; r < B; ++r)
        for (size_t q = 0; q < cols.size(); ++q) din.row(r)[cols[q] - o0] += m.row(r)[q];
    }
    waitSends(ex);
    dh = std::move(din);
  }
  {
    KernelScope k(kernB_, 0);
    reluMask(dh, h[0]);
    c.gemm(true, false, n, in0, B, 1, dh.data(), n, x.data(), in0, 1, G(0) + static_cast<size_t>(o0) * in0, in0);
    addColSums(dh, G(0) + static_cast<size_t>(n_ * n) * in0 + o0);
  }
  return loss;
}

}  // namespace trainscope::train
