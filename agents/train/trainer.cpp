#include "trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <thread>
#include <utility>

#include "dp_knobs.h"
#include "models.h"
#include "trace_scope.h"
#include "trainscope/agent.h"

namespace trainscope::train {

Trainer::Trainer(Backend& be, const Options& o)
    : Trainer(be, o, *be.world, [&o](Compute& c) {
        return o.model == "transformer" ? makeTransformer(c, o) : makeMlp(c, o);
      }) {}

Trainer::Trainer(Backend& be, const Options& o, Communicator& dpComm, const ModelFactory& makeModel)
    : be_(be),
      o_(o),
      dp_(dpComm),
      rank_(be.world->rank()),
      world_(dpComm.size()),
      sync_(dpComm, o.ranksPerNode, o.seed),
      compute_(*be.compute, sync_) {
  task_ = o.model == "transformer" ? makeSequenceTask(o.seed, o.seqLen, o.vocab)
                                   : makeTeacherTask(o.seed, o.inputDim, o.classes);
  data_ = std::make_unique<DataLoader>(*task_, o.prefetch);
  for (const std::string& spec : o.inject) {
    Injection inj;
    if (parseInjection(spec, &inj).empty()) injections_.push_back(inj);
  }
  model_ = makeModel(compute_);
  velocity_.assign(model_->params().size(), 0.0f);
  act_.resize(static_cast<size_t>(model_->layerCount()) + 1);
  grad_.resize(static_cast<size_t>(model_->layerCount()) + 1);
  heldOut_ = task_->heldOut(o.heldOut);
  for (int l = 0; l < model_->layerCount(); ++l) {
    const std::string k = model_->layer(l).kind();
    nameF_.push_back(ts_name(("F " + k).c_str()));
    nameB_.push_back(ts_name(("B " + k).c_str()));
    nameW_.push_back(ts_name(("W " + k).c_str()));
  }
}

DpConfig Trainer::currentConfig(const DpKnobs* knobs) const {
  if (knobs) return knobs->read();
  DpConfig c;
  c.bucketBytes = o_.bucketBytes;
  c.algorithm = *parseAlgorithm(o_.algorithm);
  c.codec.kind = *parseCompression(o_.compression);
  c.codec.topkRatio = o_.topkRatio;
  return c;
}

double Trainer::step(int64_t s) {
  const int local = o_.batch / world_;
  const int64_t first = s * o_.batch + static_cast<int64_t>(dp_.rank()) * local;
  data_->prefetch(first + o_.batch, local);  // the next step's, made while this one computes
  Batch b = data_->take(first, local);
  const int L = model_->layerCount();
  ts_phase_begin(TS_PHASE_FORWARD);
  act_[0] = std::move(b.x);
  for (int l = 0; l < L; ++l) {
    KernelScope k(nameF_[static_cast<size_t>(l)], l);
    model_->layer(l).forward(0, act_[static_cast<size_t>(l)], act_[static_cast<size_t>(l) + 1]);
  }
  const double loss =
      softmaxCrossEntropy(act_[static_cast<size_t>(L)], b.labels, &grad_[static_cast<size_t>(L)], nullptr);
  ts_phase_end(TS_PHASE_FORWARD);

  model_->zeroGrads();
  sync_.beginStep(*model_, s);
  ts_phase_begin(TS_PHASE_BACKWARD);
  for (int l = L - 1; l >= 0; --l) {
    Layer& layer = model_->layer(l);
    const auto i = static_cast<size_t>(l);
    if (l > 0) {
      KernelScope k(nameB_[i], l);
      layer.backwardInput(0, grad_[i + 1], grad_[i]);
    }
    sync_.progress();
    {
      KernelScope k(nameW_[i], l);
      layer.backwardWeight(0, grad_[i + 1]);
    }
    if (l == 0) ts_phase_end(TS_PHASE_BACKWARD);  // the compute is over: starting the last
    sync_.layerReady(l);                          // buckets is communication, not backward
  }
  {
    TS_RANGE("wait gradients");  // outside the backward phase: waiting is not compute
    sync_.finish();
  }
  ts_phase_begin(TS_PHASE_OPTIMIZER);
  optimizer();
  ts_phase_end(TS_PHASE_OPTIMIZER);
  return loss;
}

// Decentralized training leaves every rank with its own parameters (and momentum); a
// centralized algorithm after it would keep them apart forever. Every rank switches at the same
// step, so all average both once, here, and are replicas again.
void Trainer::resynchronize() {
  TS_RANGE("resynchronize replicas");
  const float inv = 1.0f / static_cast<float>(world_);
  for (std::span<float> v : {model_->params(), std::span<float>(velocity_)}) {
    RequestPtr r = dp_.iallreduceSum(v.data(), v.size());
    waitFor(*r);
    for (float& x : v) x *= inv;
  }
}

void Trainer::optimizer() {
  auto p = model_->params();
  auto g = model_->grads();
  const auto lr = static_cast<float>(o_.lr), mu = static_cast<float>(o_.momentum);
  for (size_t i = 0; i < p.size(); ++i) {
    velocity_[i] = mu * velocity_[i] + g[i];
    p[i] -= lr * velocity_[i];
  }
}

double Trainer::evaluate() {
  TS_RANGE("evaluate");
  Mat a = heldOut_.x, y;
  for (int l = 0; l < model_->layerCount(); ++l) {
    model_->layer(l).forward(1, a, y);
    std::swap(a, y);
  }
  int correct = 0;
  softmaxCrossEntropy(a, heldOut_.labels, nullptr, &correct);
  for (int l = 0; l < model_->layerCount(); ++l) model_->layer(l).release(1);
  return static_cast<double>(correct) / static_cast<double>(heldOut_.labels.size());
}

// The backward's compute as a step with one bucket runs it: every reduction finished, so the
// progress calls inside the layers find nothing to do. In a step whose buckets reduce while layers
// compute, those calls do the reductions' work inside the kernels; what-if cannot tell that
// slowdown from the compute when every kernel ran overlapped (a 2 KiB window put the 48-layer
// job's backward compute alone at 0.648 ms where a one-bucket step measured 0.526). A forward
// before each pass, as in a step (a layer's saved state is the forward's). Inputs: the held-out
// rows, as many as the rank's share of the batch; the output gradient zeros (a gemm's time does
// not depend on the values; subnormals are flushed). On slot 1, evaluate()'s; the weight
// gradients it adds are cleared by the next step's zeroGrads().
void Trainer::calibrateCompute() {
  const Mat& h = heldOut_.x;
  if (h.rows == 0 || o_.heldOut <= 0) return;
  TS_RANGE("calibrate dp");
  const int rows = (o_.batch / world_) * std::max(1, h.rows / o_.heldOut);
  const int L = model_->layerCount();
  const uint32_t nb = ts_name("calibrate dp B"), nw = ts_name("calibrate dp W");
  std::vector<Mat> a(static_cast<size_t>(L) + 1);
  a[0].resize(rows, h.cols);
  for (int r = 0; r < rows; ++r) std::copy_n(h.row(r % h.rows), h.cols, a[0].row(r));
  constexpr int kSlot = 1;
  std::vector<double> fastest(static_cast<size_t>(L), INFINITY);  // per layer, B + W in us
  for (int rep = 0; rep < 3; ++rep) {
    for (int l = 0; l < L; ++l)
      model_->layer(l).forward(kSlot, a[static_cast<size_t>(l)], a[static_cast<size_t>(l) + 1]);
    Mat dy, dx;
    dy.resize(a[static_cast<size_t>(L)].rows, a[static_cast<size_t>(L)].cols);
    for (int l = L - 1; l >= 0; --l) {
      Layer& layer = model_->layer(l);
      const auto t0 = std::chrono::steady_clock::now();
      if (l > 0) {
        KernelScope k(nb, l);
        layer.backwardInput(kSlot, dy, dx);
      }
      sync_.progress();
      {
        KernelScope k(nw, l);
        layer.backwardWeight(kSlot, dy);
      }
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      fastest[static_cast<size_t>(l)] = std::min(fastest[static_cast<size_t>(l)], us);
      std::swap(dy, dx);
    }
  }
  for (int l = 0; l < L; ++l) model_->layer(l).release(kSlot);
  if (L > 0) layerPaceUs_ = std::clamp(std::accumulate(fastest.begin(), fastest.end(), 0.0) / L / 2, 1.0, 1000.0);
}

// --inject (docs/TRAINER.md, "Faults to inject"). A straggler computes: a CPU spin inside a
// Kernel event named "inject straggler" on the step's thread, so the analysis sees compute. A slow
// loader waits (sleeps) inside a range "inject slow data loader": host time. A hang stops this rank
// before the step's collectives; the other ranks then wait in them, and this rank's agent goes on
// serving its clients. Each prints once on stderr, so a test or a user sees what was injected.
void Trainer::injectFaults(int64_t step) {
  for (const Injection& inj : injections_) {
    if (!inj.at(rank_, step)) continue;
    switch (inj.kind) {
      case Injection::Kind::Straggler: {
        static const uint32_t name = ts_name("inject straggler");
        KernelScope k(name, -1);
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(inj.ms);
        volatile uint64_t spin = 0;
        while (std::chrono::steady_clock::now() < until) spin = spin + 1;
        break;
      }
      case Injection::Kind::SlowLoader: {
        static const uint32_t name = ts_name("inject slow data loader");
        ts_range_push(name);
        std::this_thread::sleep_for(std::chrono::milliseconds(inj.ms));
        ts_range_pop();
        break;
      }
      case Injection::Kind::Hang: {
        // Inside a range, as a real stall (a data loader, a deadlock) would be: `doctor` shows it
        // open on this rank's thread.
        static const uint32_t name = ts_name("inject hang");
        ts_range_push(name);
        std::fprintf(stderr, "trainscope-train: rank %d hangs before step %lld (--inject); kill the job to end it\n",
                     rank_, static_cast<long long>(step));
        std::fflush(stderr);
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
      }
    }
  }
}

void Trainer::runSteps(const DpKnobs* knobs, int64_t first, int64_t end) {
  const uint32_t nLoss = ts_name("loss"), nAcc = ts_name("accuracy"), nStepMs = ts_name("step_time_ms"),
                 nWire = ts_name("dp_wire_bytes"), nPayload = ts_name("dp_payload_bytes");
  std::vector<std::pair<int64_t, int64_t>> times;
  for (int64_t s = first; s < end; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    DpKnobs::noteStep(s);
    ts_step_begin(s);  // applies knob changes agreed at the previous step's end
    atStepBoundary(s);
    const bool wasDecentralized = sync_.config().algorithm == Algorithm::Decentralized;
    DpConfig want = currentConfig(knobs);
    if (const std::string why = unsupportedCombination(want.algorithm, want.codec.kind); !why.empty() && knobs) {
      // Two changes, each fine alone, arrived for the same step: keep what runs (every rank alike).
      if (rank_ == 0) std::printf("step %lld: refused: %s\n", static_cast<long long>(s), why.c_str());
      knobs->restore(sync_.config());
      want = currentConfig(knobs);
    }
    if (sync_.configure(*model_, want)) {
      if (wasDecentralized && sync_.config().algorithm != Algorithm::Decentralized) resynchronize();
      if (knobs && o_.calibrate) {
        calibrateCompute();  // first: the reductions' work is polled at its layers' pace
        sync_.calibrate(model_->grads(), layerPaceUs_);
      }
      if (rank_ == 0 && s > first)
        std::printf("step %lld: %zu bucket(s), %s\n", static_cast<long long>(s), sync_.buckets().size(),
                    opName(sync_.config().algorithm, sync_.config().codec.kind).c_str());
    }
    injectFaults(s);
    lastLoss_ = step(s);
    ts_counter(nLoss, lastLoss_);
    ts_counter(nWire, static_cast<double>(sync_.wireBytesThisStep()));
    ts_counter(nPayload, static_cast<double>(sync_.payloadBytesThisStep()));
    const bool eval = o_.evalEvery > 0 && ((s + 1) % o_.evalEvery == 0 || s + 1 == end);
    if (eval) {
      lastAcc_ = evaluate();
      ts_counter(nAcc, lastAcc_);
    }
    if (rank_ == 0 && o_.logEvery > 0 && ((s + 1) % o_.logEvery == 0 || s + 1 == end)) {
      std::printf("step %lld loss %.5f accuracy %.4f wire_bytes %llu\n", static_cast<long long>(s), lastLoss_,
                  lastAcc_, static_cast<unsigned long long>(sync_.wireBytesThisStep()));
      std::fflush(stdout);
    }
    if (o_.stepDelayMs > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o_.stepDelayMs));
    const auto us =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
    ts_counter(nStepMs, static_cast<double>(us) / 1000.0);
    ts_step_end(s);  // every rank takes part in the knob agreement here
    if (!o_.stepsFile.empty()) times.emplace_back(s, us);
  }
  if (rank_ == 0 && !o_.stepsFile.empty()) {
    std::ofstream f(o_.stepsFile, first > 0 ? std::ios::app : std::ios::trunc);  // later phases append
    for (const auto& [s, us] : times) f << "steptime " << s << ' ' << us << '\n';
  }
}

bool Trainer::writeParams(const std::string& pattern) {
  return writeFloats(pattern, std::as_const(*model_).params());
}

bool Trainer::writeFloats(const std::string& pattern, std::span<const float> p) const {
  std::string path = pattern;
  if (auto at = path.find("{rank}"); at != std::string::npos)
    path.replace(at, 6, std::to_string(rank_));
  else if (rank_ != 0)
    return true;  // one file: rank 0 writes it
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(p.data()), static_cast<std::streamsize>(p.size() * sizeof(float)));
  return static_cast<bool>(f);
}

}  // namespace trainscope::train
