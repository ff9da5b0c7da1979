#include "disco.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "models.h"
#include "trace_scope.h"

namespace trainscope::train {
namespace {

const char* const kModes[] = {"pipelined", "wait"};

}  // namespace

DiscoKnobs registerDiscoKnobs(const Options& o) {
  DiscoKnobs k;
  k.sparsity = ts_knob_float("disco.sparsity", 0.0, 1.0, o.discoSparsity,
                             "fraction of off-diagonal feature sub-rows pruned in every split layer "
                             "(prune at the step boundary, then fine-tune)",
                             TS_KNOB_CHANGES_MATH);
  k.mode = ts_knob_enum("disco.mode", kModes, 2, o.discoMode == "wait" ? 1 : 0,
                        "pipelined: local part computed while remote features arrive; wait: receive first", 0);
  for (int l = 1; l < o.layers; ++l)
    k.perLayer.push_back(ts_knob_float(("disco.sparsity." + std::to_string(l)).c_str(), 0.0, 1.0,
                                       o.discoSparsity,
                                       "this split layer's sparsity (setting disco.sparsity sets every "
                                       "layer's)",
                                       TS_KNOB_CHANGES_MATH));
  return k;
}

DiscoTrainer::DiscoTrainer(Backend& be, const Options& o, const DiscoKnobs* knobs)
    : DiscoSelf(be),
      Trainer(be, o, *self, [&o](Compute& c) { return makeMlp(c, o); }),
      knobs_(knobs),
      n_(be.world->size()),
      me_(be.world->rank()),
      w_(o.width),
      part_(o.width / be.world->size()) {
  nameEx_ = ts_name("disco exchange");
  nameGather_ = ts_name("disco gather");
  kernF_ = ts_name("F disco linear");
  kernB_ = ts_name("B+W disco linear");
  applied_.assign(static_cast<size_t>(std::max(0, o.layers - 1)), -1.0);
  target_.assign(applied_.size(), o.discoSparsity);
  kept_.resize(applied_.size());
  wkCache_.resize(applied_.size());
  pipelined_ = o.discoMode != "wait";
  global_ = knobs ? ts_knob_get_float(knobs->sparsity) : o.discoSparsity;
  for (int l = 1; l < o.layers; ++l) prune(l, sparsityOf(l));
}

double DiscoTrainer::sparsityOf(int l) const {
  if (!knobs_) return target_[static_cast<size_t>(l - 1)];
  return ts_knob_get_float(knobs_->perLayer[static_cast<size_t>(l - 1)]);
}

// Every off-diagonal sub-row of split layer l scored by its L1 norm (all ranks' norms shared by
// one allreduce: collective), lowest first: (norm, receiver, feature).
std::vector<std::tuple<float, int, int>> DiscoTrainer::ranked(int l) {
  const float* W = model_->params().data() + model_->offsetOf(l);
  const int o0 = me_ * part_;
  std::vector<float> norms(static_cast<size_t>(n_) * static_cast<size_t>(w_), 0.0f);
  for (int f = 0; f < w_; ++f) {
    if (f / part_ == me_) continue;
    float s = 0;
    for (int r = 0; r < part_; ++r) s += std::fabs(W[static_cast<size_t>(o0 + r) * static_cast<size_t>(w_) + static_cast<size_t>(f)]);
    norms[static_cast<size_t>(me_) * static_cast<size_t>(w_) + static_cast<size_t>(f)] = s;
  }
  RequestPtr req = be_.world->iallreduceSum(norms.data(), norms.size());
  waitFor(*req);
  std::vector<std::tuple<float, int, int>> cand;  // (norm, receiver, feature)
  for (int i = 0; i < n_; ++i)
    for (int f = 0; f < w_; ++f)
      if (f / part_ != i) cand.emplace_back(norms[static_cast<size_t>(i) * static_cast<size_t>(w_) + static_cast<size_t>(f)], i, f);
  std::sort(cand.begin(), cand.end());
  return cand;
}

// The kept features of every (receiver, sender) pair when the lowest `sparsity` of the ranked
// sub-rows are pruned: [receiver * n + sender] -> the sender's features, sorted.
std::vector<std::vector<int>> DiscoTrainer::keptOf(const std::vector<std::tuple<float, int, int>>& cand,
                                                   double sparsity) const {
  const auto cut = static_cast<size_t>(std::llround(sparsity * static_cast<double>(cand.size())));
  std::vector<std::vector<int>> kept(static_cast<size_t>(n_) * static_cast<size_t>(n_));
  for (size_t c = cut; c < cand.size(); ++c) {
    const auto [norm, i, f] = cand[c];
    kept[static_cast<size_t>(i * n_ + f / part_)].push_back(f);
  }
  for (auto& k : kept) std::sort(k.begin(), k.end());
  return kept;
}

// Keeps the largest (1 - sparsity) of the ranked sub-rows, zeroes the weights and momentum of the
// rest.
void DiscoTrainer::prune(int l, double sparsity) {
  TS_RANGE("disco prune");
  float* W = model_->params().data() + model_->offsetOf(l);
  float* V = velocity_.data() + model_->offsetOf(l);
  const int o0 = me_ * part_;
  const std::vector<std::tuple<float, int, int>> cand = ranked(l);
  const auto cut = static_cast<size_t>(std::llround(sparsity * static_cast<double>(cand.size())));
  for (size_t c = 0; c < cut && c < cand.size(); ++c) {
    const auto [norm, i, f] = cand[c];
    if (i != me_) continue;
    for (int r = 0; r < part_; ++r) {
      const size_t at = static_cast<size_t>(o0 + r) * static_cast<size_t>(w_) + static_cast<size_t>(f);
      W[at] = 0;
      V[at] = 0;
    }
  }
  kept_[static_cast<size_t>(l - 1)] = keptOf(cand, sparsity);
  wkCache_[static_cast<size_t>(l - 1)].assign(static_cast<size_t>(n_), Mat{});
  applied_[static_cast<size_t>(l - 1)] = sparsity;
  reportBytes_ = true;
}

// What-if calibration (TUNING.md, DISCO): the training pass (forward and backward, no optimizer
// step) at sparsities 0, 0.25, 0.5, 0.75 and 1, five times each, on the held-out rows (the
// batch's size, rows repeated), every split layer keeping the sub-rows a pruning to S would keep
// now (prune()'s ranking of the current weights: the pairs' real shares and the features' real
// spread): the real exchanges and gemms of that mask, in the mode in force. Every rank
// alike, each pass after a barrier, traced inside a range "calibrate disco <S>" with the pass's
// own names ("calibrate disco F|B" kernels, "calibrate disco exchange" and "calibrate disco
// gather"), which the analysis does not count as the layers' work. On this CPU job an exchange
// is bound by the ranks waiting for each other rather than by its bytes, and a layer's compute
// falls by a third of what background.md 1's formula says (BENCHMARKS.md), so what-if moves the
// measured costs by these calibrated differences. The weights, momentum and masks are untouched;
// the gradients it adds are cleared by the next step's zeroGrads(), so the losses are the same as
// with --calibrate 0.
void DiscoTrainer::calibrate() {
  if (!o_.calibrate || heldOut_.x.rows == 0 || o_.layers < 2) return;
  TS_RANGE("calibrate disco (what-if)");
  Batch b;
  b.x.resize(o_.batch, heldOut_.x.cols);
  for (int r = 0; r < o_.batch; ++r) {
    std::copy_n(heldOut_.x.row(r % heldOut_.x.rows), heldOut_.x.cols, b.x.row(r));
    b.labels.push_back(heldOut_.labels[static_cast<size_t>(r % heldOut_.x.rows)]);
  }
  const auto keptNow = kept_;
  std::vector<std::vector<std::tuple<float, int, int>>> rank;  // per split layer, as prune() ranks
  for (int l = 1; l < o_.layers; ++l) rank.push_back(ranked(l));
  const uint32_t names[4] = {nameEx_, nameGather_, kernF_, kernB_};
  const uint64_t bytesNow = bytes_;
  nameEx_ = ts_name("calibrate disco exchange");
  nameGather_ = ts_name("calibrate disco gather");
  kernF_ = ts_name("calibrate disco F");
  kernB_ = ts_name("calibrate disco B");
  for (const char* sp : {"0", "0.25", "0.5", "0.75", "1"}) {
    for (size_t l = 0; l < kept_.size(); ++l) kept_[l] = keptOf(rank[l], std::atof(sp));
    const uint32_t pass = ts_name((std::string("calibrate disco ") + sp).c_str());
    for (int rep = 0; rep < 5; ++rep) {
      float zero = 0;  // a barrier: every rank starts the pass together
      RequestPtr barrier = be_.world->iallreduceSum(&zero, 1);
      waitFor(*barrier);
      ts_range_push(pass);
      forwardBackward(b.x, b.labels, true, nullptr);
      ts_range_pop();
    }
  }
  kept_ = keptNow;
  for (auto& layer : wkCache_) layer.assign(static_cast<size_t>(n_), Mat{});  // gathered for the passes' masks
  nameEx_ = names[0], nameGather_ = names[1], kernF_ = names[2], kernB_ = names[3];
  bytes_ = bytesNow;
}

void DiscoTrainer::atStepBoundary(int64_t s) {
  if (!knobs_) return;
  bool changed = !calibrated_;
  calibrated_ = true;
  if (const bool p = ts_knob_get_enum(knobs_->mode) == 0; p != pipelined_) pipelined_ = p, changed = true;
  if (const double g = ts_knob_get_float(knobs_->sparsity); g != global_) {
    global_ = g;  // disco.sparsity sets every split layer whose own knob did not change now
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", g);
    for (int l = 1; l < o_.layers; ++l)
      if (sparsityOf(l) == applied_[static_cast<size_t>(l - 1)]) ts_knob_restore(knobs_->perLayer[static_cast<size_t>(l - 1)], text);
  }
  for (int l = 1; l < o_.layers; ++l)
    if (const double sp = sparsityOf(l); sp != applied_[static_cast<size_t>(l - 1)]) {
      prune(l, sp);
      changed = true;
      std::printf("rank %d applied disco sparsity %.4g to layer %d at step %lld\n", me_, sp, l,
                  static_cast<long long>(s));
      std::fflush(stdout);
    }
  if (changed) calibrate();
}

double DiscoTrainer::step(int64_t s) {
  const int64_t first = (s - stepBase_) * o_.batch;  // every rank: the whole batch (feature split)
  data_->discardBefore(first);                        // a benchmark phase may restart the numbering
  data_->prefetch(first + o_.batch, o_.batch);       // the next step's, made while this one computes
  Batch b = data_->take(first, o_.batch);
  model_->zeroGrads();
  bytes_ = 0;
  const double loss = forwardBackward(b.x, b.labels, true, nullptr);
  ts_phase_begin(TS_PHASE_OPTIMIZER);
  optimizer();
  for (auto& layer : wkCache_) layer.assign(static_cast<size_t>(n_), Mat{});  // gathered from the old weights
  ts_phase_end(TS_PHASE_OPTIMIZER);
  if (reportBytes_) {
    std::printf("rank %d step %lld disco bytes %llu\n", me_, static_cast<long long>(s),
                static_cast<unsigned long long>(bytes_));
    std::fflush(stdout);
    reportBytes_ = false;
  }
  return loss;
}

double DiscoTrainer::evaluate() {
  TS_RANGE("evaluate");
  const int correct = infer(heldOut_.x, heldOut_.labels, pipelined_).correct;
  return static_cast<double>(correct) / static_cast<double>(heldOut_.labels.size());
}

void DiscoTrainer::pruneAll(double sparsity) {
  std::fill(target_.begin(), target_.end(), sparsity);
  for (int l = 1; l < o_.layers; ++l) prune(l, sparsity);
}

DiscoTrainer::Inference DiscoTrainer::infer(const Mat& x, const std::vector<int>& labels, bool pipelined) {
  const bool keepMode = pipelined_;
  const uint64_t keepBytes = bytes_;
  pipelined_ = pipelined;
  bytes_ = 0;
  Inference r;
  forwardBackward(x, labels, false, &r.correct);
  r.bytes = bytes_;
  bytes_ = keepBytes;
  pipelined_ = keepMode;
  return r;
}

uint64_t DiscoTrainer::keptSubRows() const {
  uint64_t n = 0;
  for (const auto& layer : kept_)
    for (const auto& pair : layer) n += pair.size();
  return n;
}

bool DiscoTrainer::writeParams(const std::string& path) {
  std::vector<float> all(model_->params().begin(), model_->params().end());
  for (int l = 0; l < model_->layerCount(); ++l) {
    const bool out = l + 1 == model_->layerCount();
    const int in = l == 0 ? o_.inputDim : w_, rows = out ? o_.classes : w_;
    float* W = all.data() + model_->offsetOf(l);
    for (int r = 0; r < rows; ++r) {
      const bool mine = out ? me_ == 0 : r / part_ == me_;
      if (mine) continue;
      std::fill_n(W + static_cast<size_t>(r) * static_cast<size_t>(in), in, 0.0f);
      W[static_cast<size_t>(rows) * static_cast<size_t>(in) + static_cast<size_t>(r)] = 0;
    }
  }
  RequestPtr req = be_.world->iallreduceSum(all.data(), all.size());
  waitFor(*req);
  return writeFloats(path, all);
}

}  // namespace trainscope::train
