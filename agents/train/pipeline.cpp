#include "pipeline.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "models.h"
#include "segments.h"
#include "stage_runner.h"
#include "trace_scope.h"
#include "trainscope/agent.h"

namespace trainscope::train {
namespace {

bool sameParams(const core::ScheduleParams& a, const core::ScheduleParams& b) {
  return a.kind == b.kind && a.stages == b.stages && a.microBatches == b.microBatches &&
         a.virtualStages == b.virtualStages && a.segments == b.segments;
}

std::string describe(const core::ScheduleParams& p) {
  std::string s = "pp.schedule=" + std::string(core::scheduleName(p.kind)) + " pp.microbatches=" +
                  std::to_string(p.microBatches) + " pp.virtual_stages=" + std::to_string(p.virtualStages);
  if (p.kind == core::ScheduleKind::Seq1F1B) s += " pp.segments=" + std::to_string(p.segments);
  return s;
}

}  // namespace

PipeGrid::PipeGrid(Backend& be, const Options& o) {
  const int world = be.world->size(), rank = be.world->rank();
  stages = pipelineStages(o, world);
  replicas = world / stages;
  stage = rank % stages;
  replica = rank / stages;
  pipe = be.world->split(replica, stage);
  dp = be.world->split(stage, replica);
}

PipelineTrainer::PipelineTrainer(Backend& be, const Options& o, const PpKnobs* knobs)
    : PipeGrid(be, o),
      Trainer(be, o, *dp, [](Compute&) { return std::make_unique<Model>(std::vector<std::unique_ptr<Layer>>{}, 0); }),
      knobs_(knobs) {
  {  // the whole model's layout (reverse layer order, as Model), for moving and dumping parameters
    const auto all = makeLayers(compute_, o);
    layers_ = static_cast<int>(all.size());
    globalCount_.resize(all.size());
    globalOffset_.resize(all.size());
    size_t total = 0;
    for (size_t i = all.size(); i-- > 0;) {
      globalCount_[i] = all[i]->paramCount();
      globalOffset_[i] = total;
      total += globalCount_[i];
    }
  }
  params_ = knobs ? knobs->read(o, stages) : PpKnobs{}.read(o, stages);
  if (knobs) good_ = knobs->values();
  if (o.partition == "auto")
    autoBounds_ = profiledSplit(*be.compute, *be.world, o, stages, replicas,
                                o.batch / replicas / std::max(1, params_.microBatches));
  schedule_ = core::generateSchedule(params_).value();  // validated with the options
  segBounds_ = segmentsFor(params_);
  buildStage(boundsFor(params_), {}, {});
  if (rank_ == 0)
    std::printf("pipeline: %d stage(s) x %d replica(s), %s%s\n", stages, replicas, describe(params_).c_str(),
                segmentNote().c_str());
}

// seq1f1b on the transformer: FLOPs-balanced cuts of the sequence, with P = the parameters of
// every layer but the embedding (layer 0, a lookup), L = --layers, d = --width.
std::vector<int> PipelineTrainer::segmentsFor(const core::ScheduleParams& p) const {
  if (p.segments <= 1 || o_.model != "transformer") return {};
  double params = 0;
  for (size_t l = 1; l < globalCount_.size(); ++l) params += static_cast<double>(globalCount_[l]);
  return segmentBounds(o_, p.segments, params);
}

std::string PipelineTrainer::segmentNote() const {
  return segBounds_.empty() ? std::string() : ", segments " + describeSegments(segBounds_);
}

LayerBounds PipelineTrainer::boundsFor(const core::ScheduleParams& p) const {
  if (p.virtualStages > 1) return evenSplit(layers_, stages * p.virtualStages);
  return autoBounds_.empty() ? evenSplit(layers_, stages) : autoBounds_;
}

std::vector<int> PipelineTrainer::ownedLayers() const {
  std::vector<int> out;
  const int v = static_cast<int>(bounds_.size() - 1) / stages;
  for (int c = 0; c < v; ++c) {
    const auto vs = static_cast<size_t>(core::virtualStage(stage, c, stages));
    for (int l = bounds_[vs]; l < bounds_[vs + 1]; ++l) out.push_back(l);
  }
  return out;
}

// The stage's model for `bounds`; parameters and momentum from the whole-model buffers when
// given (a repartition), from the initialisation otherwise.
void PipelineTrainer::buildStage(const LayerBounds& bounds, std::span<const float> params,
                                 std::span<const float> velocity) {
  bounds_ = bounds;
  const std::vector<int> owned = ownedLayers();
  auto all = makeLayers(compute_, o_);
  std::vector<std::unique_ptr<Layer>> mine;
  for (int l : owned) mine.push_back(std::move(all[static_cast<size_t>(l)]));
  model_ = std::make_unique<Model>(std::move(mine), o_.seed, owned);
  velocity_.assign(model_->params().size(), 0.0f);
  nameF_.clear();
  nameB_.clear();
  nameW_.clear();
  for (int i = 0; i < model_->layerCount(); ++i) {
    const auto g = static_cast<size_t>(owned[static_cast<size_t>(i)]);
    const std::string k = model_->layer(i).kind();
    nameF_.push_back(ts_name(("F " + k).c_str()));
    nameB_.push_back(ts_name(("B " + k).c_str()));
    nameW_.push_back(ts_name(("W " + k).c_str()));
    if (params.empty()) continue;
    std::copy_n(params.begin() + static_cast<std::ptrdiff_t>(globalOffset_[g]), globalCount_[g],
                model_->params().begin() + static_cast<std::ptrdiff_t>(model_->offsetOf(i)));
    std::copy_n(velocity.begin() + static_cast<std::ptrdiff_t>(globalOffset_[g]), globalCount_[g],
                velocity_.begin() + static_cast<std::ptrdiff_t>(model_->offsetOf(i)));
  }
  chunkStart_.assign(1, 0);
  const int v = static_cast<int>(bounds_.size() - 1) / stages;
  for (int c = 0; c < v; ++c) {
    const auto vs = static_cast<size_t>(core::virtualStage(stage, c, stages));
    chunkStart_.push_back(chunkStart_.back() + bounds_[vs + 1] - bounds_[vs]);
  }
  sync_.modelChanged();
}

std::vector<float> PipelineTrainer::gather(std::span<const float> local) {
  std::vector<float> all(globalOffset_.empty() ? 0 : globalOffset_[0] + globalCount_[0], 0.0f);
  const std::vector<int> owned = ownedLayers();
  for (int i = 0; i < model_->layerCount(); ++i) {
    const auto g = static_cast<size_t>(owned[static_cast<size_t>(i)]);
    std::copy_n(local.begin() + static_cast<std::ptrdiff_t>(model_->offsetOf(i)), globalCount_[g],
                all.begin() + static_cast<std::ptrdiff_t>(globalOffset_[g]));
  }
  RequestPtr r = pipe->iallreduceSum(all.data(), all.size());
  waitFor(*r);
  return all;
}

std::string PipelineTrainer::checkParams(const core::ScheduleParams& p) const {
  if (core::Status st = core::validateSchedule(p); !st) return st.message();
  if (core::Status st = core::validateLayerSplit(p, layers_); !st) return st.message();
  const int b = o_.batch / replicas;
  if (b % p.microBatches != 0)
    return "the replica batch of " + std::to_string(b) + " samples does not split into " +
           std::to_string(p.microBatches) + " micro-batches";
  return checkSegments(o_, b / p.microBatches, p.segments);
}

// What-if calibration (TUNING.md, Pipelines): each of this stage's layers alone, forward, input
// gradient and weight gradient (and the weight gradient deferred, below), at the samples per
// micro-batch of 1, 2, 4, 8 and 16 micro-batches
// (whole samples only), 3 times each (once where that took over 5 ms), traced as kernels "calibrate pp F|B|W <samples>" (Layer =
// the stage's layer index, as its F/B/W kernels). An op's kernels do not scale with its samples exactly: on the 8-layer CPU job a
// 16-sample micro-batch takes 0.53-0.57 of a 32-sample one's time, not 0.5 (BENCHMARKS.md), so
// what-if moves them by these times. Between steps, on the slot evaluate() uses; the weight
// gradients it adds are cleared by the next step's zeroGrads(). Inputs: the held-out rows for
// the model's input layer, zeros for the others (a gemm's time does not depend on the values).
void PipelineTrainer::calibrate() {
  if (!o_.calibrate) return;
  TS_RANGE("calibrate pp");
  const int b = o_.batch / replicas, rps = rowsPerSample(o_);
  const int slot = params_.microBatches * params_.segments;
  std::vector<int> sizes;
  for (int m : {1, 2, 4, 8, 16})
    if (b % m == 0 && (sizes.empty() || sizes.back() != b / m)) sizes.push_back(b / m);
  const int chunks = static_cast<int>(chunkStart_.size()) - 1;
  const std::vector<int> owned = ownedLayers();  // the model's layer of each of this stage's (local) layers
  // A layer's input at `rows` rows: held-out rows for the model's input layer (false where there
  // are none), zeros for the others.
  auto inputFor = [&](int l, int rows, Mat& x) {
    if (owned[static_cast<size_t>(l)] != 0) {
      x.resize(rows, o_.width);
      return true;
    }
    const Mat& h = heldOut_.x;
    if (h.rows == 0) return false;
    x.resize(rows, h.cols);
    for (int r = 0; r < rows; ++r) std::copy_n(h.row(r % h.rows), h.cols, x.row(r));
    return true;
  };
  for (int samples : sizes) {
    const int rows = samples * rps;
    const std::string tag = " " + std::to_string(samples);
    const uint32_t nf = ts_name(("calibrate pp F" + tag).c_str()), nb = ts_name(("calibrate pp B" + tag).c_str()),
                   nw = ts_name(("calibrate pp W" + tag).c_str());
    for (int c = 0; c < chunks; ++c)
      for (int l = chunkStart_[static_cast<size_t>(c)]; l < chunkStart_[static_cast<size_t>(c) + 1]; ++l) {
        Layer& layer = model_->layer(l);
        Mat x, y, dy, dx;
        std::chrono::steady_clock::time_point t0;
        const bool input = owned[static_cast<size_t>(l)] == 0;  // the model's input layer
        if (!inputFor(l, rows, x)) continue;
        for (int rep = 0; rep < 3; ++rep) {
          // A layer whose three ops took over 5 ms at this size is timed once: a big replica
          // batch's largest sizes would otherwise stall the change's step for most of a second.
          if (rep == 1 && std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(5)) break;
          if (rep == 0) t0 = std::chrono::steady_clock::now();
          {
            KernelScope k(nf, l);
            layer.forward(slot, x, y);
          }
          dy.resize(y.rows, y.cols);
          if (!input) {
            KernelScope k(nb, l);
            layer.backwardInput(slot, dy, dx);
          }
          {
            KernelScope k(nw, l);
            layer.backwardWeight(slot, dy);
          }
          layer.release(slot);
        }
      }
    // A split schedule's deferred W (zb-h1, zbv): the weight gradient runs after other ops, its
    // activations and output gradients read back from memory, where the pass above runs it right
    // after the layer's B. Per chunk: the forward and the B of all its layers, another
    // micro-batch's forward (the op a split schedule typically runs between), then each layer's
    // W, traced as "calibrate pp D <samples>" (twice; once where that took over 5 ms). On the
    // 8-layer job zb-h1 at 1 and 2 micro-batches had been predicted 7-19 % fast (BENCHMARKS.md,
    // "Two visits per cell").
    const uint32_t nd = ts_name(("calibrate pp D" + tag).c_str());
    for (int c = 0; c < chunks; ++c) {
      const int lo = chunkStart_[static_cast<size_t>(c)], hi = chunkStart_[static_cast<size_t>(c) + 1];
      if (hi <= lo) continue;
      const bool input = owned[static_cast<size_t>(lo)] == 0;
      std::vector<Mat> acts(static_cast<size_t>(hi - lo) + 1), dys(static_cast<size_t>(hi - lo));
      if (!inputFor(lo, rows, acts[0])) continue;
      std::chrono::steady_clock::time_point t0;
      for (int rep = 0; rep < 2; ++rep) {
        if (rep == 1 && std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(5)) break;
        if (rep == 0) t0 = std::chrono::steady_clock::now();
        for (int l = lo; l < hi; ++l)
          model_->layer(l).forward(slot, acts[static_cast<size_t>(l - lo)], acts[static_cast<size_t>(l - lo) + 1]);
        Mat dy, dx;
        dy.resize(acts.back().rows, acts.back().cols);
        for (int l = hi - 1; l >= lo; --l) {
          dys[static_cast<size_t>(l - lo)] = dy;
          if (l > lo || !input) {
            model_->layer(l).backwardInput(slot, dy, dx);
            std::swap(dy, dx);
          }
        }
        Mat y;
        for (int l = lo; l < hi; ++l) {  // another micro-batch's forward in between
          model_->layer(l).forward(slot + 1, l == lo ? acts[0] : y, dx);
          std::swap(y, dx);
        }
        for (int l = hi - 1; l >= lo; --l) {
          KernelScope k(nd, l);
          model_->layer(l).backwardWeight(slot, dys[static_cast<size_t>(l - lo)]);
        }
        for (int l = lo; l < hi; ++l) model_->layer(l).release(slot), model_->layer(l).release(slot + 1);
      }
    }
  }
}

void PipelineTrainer::atStepBoundary(int64_t s) {
  if (!knobs_) return;
  if (!calibrated_) {
    calibrated_ = true;
    calibrate();
  }
  const core::ScheduleParams want = knobs_->read(o_, stages);
  if (sameParams(want, params_)) {
    good_ = knobs_->values();  // e.g. pp.virtual_stages changed under a schedule that ignores it
    return;
  }
  if (const std::string why = checkParams(want); !why.empty()) {  // every rank decides alike
    if (rank_ == 0)
      std::printf("step %lld: refused %s: %s; keeping %s\n", static_cast<long long>(s), describe(want).c_str(),
                  why.c_str(), describe(params_).c_str());
    std::fflush(stdout);
    const std::string mark = "refused " + describe(want) + ": " + why;
    ts_marker(ts_name(mark.c_str()));
    knobs_->restore(good_);  // the knobs show the schedule that runs
    return;
  }
  TS_RANGE("apply pipeline knobs");
  params_ = want;
  good_ = knobs_->values();
  schedule_ = core::generateSchedule(params_).value();
  segBounds_ = segmentsFor(params_);
  if (LayerBounds b = boundsFor(params_); b != bounds_) {
    const std::vector<float> p = gather(model_->params()), v = gather(velocity_);
    buildStage(b, p, v);
  }
  std::printf("rank %d applied %s at step %lld%s\n", rank_, describe(params_).c_str(),
              static_cast<long long>(s), segmentNote().c_str());
  std::fflush(stdout);
  calibrate();
}

double PipelineTrainer::step(int64_t s) {
  model_->zeroGrads();
  sync_.beginStep(*model_, s);
  const int b = o_.batch / replicas;
  StageSetup setup{model_.get(), data_.get(), &sync_, pipe.get(), &schedule_, stage, chunkStart_,
                   nameF_, nameB_, nameW_, s * o_.batch + int64_t{replica} * b, b, rowsPerSample(o_),
                   segBounds_, o_.width, replica * stages};
  StageRunner runner(std::move(setup));
  if (runner.needsData()) {  // this step's pieces, then the next step's, made on the loader thread
    const int64_t first = s * o_.batch + int64_t{replica} * b;
    data_->discardBefore(first);
    for (const int64_t f : {first, first + o_.batch})
      for (const auto& [pf, pc] : runner.dataPieces(f)) data_->prefetch(pf, pc);
  }
  if (core::Status st = core::runStage(schedule_, stage, runner); !st) {
    std::fprintf(stderr, "trainscope-train: rank %d step %lld: %s\n", rank_, static_cast<long long>(s),
                 st.message().c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  {
    TS_RANGE("wait gradients");
    sync_.finish();
  }
  ts_phase_begin(TS_PHASE_OPTIMIZER);
  optimizer();
  ts_phase_end(TS_PHASE_OPTIMIZER);
  return pipe->allreduceMaxDouble(runner.loss());  // the last stage's; the others hold 0
}

// Held-out accuracy: the held-out set goes through the virtual stages one after another
// (blocking point-to-point; no step's messages are in flight here).
double PipelineTrainer::evaluate() {
  TS_RANGE("evaluate");
  const int nv = static_cast<int>(bounds_.size()) - 1, slot = params_.microBatches * params_.segments;
  Mat a, y;
  double acc = 0;
  for (int vs = 0; vs < nv; ++vs) {
    if (vs % stages != stage) continue;
    const int c = vs / stages;
    if (vs == 0) {
      a = heldOut_.x;
    } else {
      a.resize(static_cast<int>(heldOut_.labels.size()), o_.width);
      RequestPtr r = pipe->irecv(a.data(), a.size() * sizeof(float), (vs - 1) % stages, vs);
      waitFor(*r);
    }
    for (int l = chunkStart_[static_cast<size_t>(c)]; l < chunkStart_[static_cast<size_t>(c) + 1]; ++l) {
      model_->layer(l).forward(slot, a, y);
      model_->layer(l).release(slot);
      std::swap(a, y);
    }
    if (vs + 1 < nv) {
      RequestPtr r = pipe->isend(a.data(), a.size() * sizeof(float), (vs + 1) % stages, vs + 1);
      waitFor(*r);
    } else {
      int correct = 0;
      softmaxCrossEntropy(a, heldOut_.labels, nullptr, &correct);
      acc = static_cast<double>(correct) / static_cast<double>(heldOut_.labels.size());
    }
  }
  return pipe->allreduceMaxDouble(acc);
}

bool PipelineTrainer::writeParams(const std::string& path) {
  const std::vector<float> all = gather(model_->params());
  return writeFloats(path, all);
}

}  // namespace trainscope::train
