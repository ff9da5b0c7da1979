#include "trainscope/core/tune/whatif.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <set>

#include "trainscope/core/analysis/analysis.h"
#include "trainscope/core/sched/schedule.h"
#include "trainscope/core/sched/schedule_sim.h"
#include "trainscope/core/tune/config.h"

namespace trainscope::core {

namespace {

constexpr double kNsPerMs = 1e6;

struct Iv {
  int64_t a = 0, b = 0;
};

double mean(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// A calibration's estimator: of (start, ms) repetitions, the fastest of the last k (a latency
// benchmark's estimator: the repetitions a busy machine did not interrupt).
double fastestOfLast(std::vector<std::pair<int64_t, double>>& v, size_t k) {
  std::sort(v.begin(), v.end());
  double fastest = INFINITY;
  for (size_t j = v.size() > k ? v.size() - k : 0; j < v.size(); ++j) fastest = std::min(fastest, v[j].second);
  return fastest;
}

// The median (upper for an even count) of a non-empty vector, which it reorders.
double medianOf(std::vector<double>& v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// Of (start, ms) repetitions, the median of the last k.
double medianOfLast(std::vector<std::pair<int64_t, double>>& v, size_t k) {
  std::sort(v.begin(), v.end());
  std::vector<double> last;
  for (size_t j = v.size() > k ? v.size() - k : 0; j < v.size(); ++j) last.push_back(v[j].second);
  return medianOf(last);
}

// A DISCO layer's calibration (sparsity -> (compute, exchange) ms) at sparsity x: linear between
// the calibrated sparsities around it, the nearest one's outside them. At least one entry.
std::pair<double, double> calibAt(const std::map<double, std::pair<double, double>>& c, double x) {
  auto hi = c.lower_bound(x);
  if (hi == c.end()) return std::prev(hi)->second;
  if (hi->first == x || hi == c.begin()) return hi->second;
  auto lo = std::prev(hi);
  const double f = (x - lo->first) / (hi->first - lo->first);
  return {lo->second.first + f * (hi->second.first - lo->second.first),
          lo->second.second + f * (hi->second.second - lo->second.second)};
}

// Length of the union of intervals.
double unionLength(std::vector<std::pair<double, double>> v) {
  std::sort(v.begin(), v.end());
  double total = 0, curA = 0, curB = -1e300;
  for (const auto& [a, b] : v) {
    if (a > curB) {
      if (curB > curA) total += curB - curA;
      curA = a;
      curB = b;
    } else {
      curB = std::max(curB, b);
    }
  }
  if (curB > curA) total += curB - curA;
  return total;
}

// Length of union(v) ∩ [lo, hi].
double unionWithin(std::vector<std::pair<double, double>> v, double lo, double hi) {
  for (auto& [a, b] : v) a = std::max(a, lo), b = std::min(b, hi);
  v.erase(std::remove_if(v.begin(), v.end(), [](const auto& p) { return p.second <= p.first; }), v.end());
  return unionLength(std::move(v));
}

size_t codecPayload(const std::string& codec, size_t n, double ratio) {
  if (codec == "fp16" || codec == "bf16") return 2 * n;
  if (codec == "int8") return 4 + n;
  if (codec == "onebit-ef") return 4 + (n + 7) / 8;
  if (codec == "topk-ef") {
    if (n == 0) return 0;
    const auto k = static_cast<size_t>(std::ceil(ratio * static_cast<double>(n)));
    return 8 * std::clamp<size_t>(k, 1, n);
  }
  return 4 * n;
}

// Mean wire bytes per rank of one bucket of n values (trainscope-train's collectives.cpp).
double wireFormula(const std::string& algorithm, const std::string& codec, double ratio, size_t n, int P) {
  if (P <= 1) return 0;
  if (algorithm == "decentralized")
    return static_cast<double>(std::min(2, P - 1) * codecPayload(codec, n, ratio));
  if (codec != "none" && algorithm == "recursive-doubling")  // an encoded bucket per exchange
    return std::ceil(std::log2(P)) * static_cast<double>(codecPayload(codec, n, ratio));
  if (codec != "none") {  // ring and scatter-reduce: 2(p-1) encoded chunks
    const size_t chunk = (n + static_cast<size_t>(P) - 1) / static_cast<size_t>(P);
    return 2.0 * (P - 1) * static_cast<double>(codecPayload(codec, chunk, ratio));
  }
  if (algorithm == "recursive-doubling") return std::ceil(std::log2(P)) * 4.0 * static_cast<double>(n);
  return 2.0 * (P - 1) / P * 4.0 * static_cast<double>(n);
}

std::string traceKey(const std::string& algorithm, const std::string& codec) {
  if (codec == "none") return algorithm;
  // As trainscope-train names what runs (collectives.cpp opName): allreduce with a codec is the
  // scatter-reduce; ring, recursive doubling and decentralized keep their names.
  return (algorithm == "allreduce" ? std::string("scatter-reduce") : algorithm) + "+" + codec;
}

// The prior crossover size of a bucket reduction (latency = bandwidth time), used when a window
// has one message size and the split cannot be fitted, and without a calibration to move costs
// to other sizes: 64 KiB, a prior of the order of
// the points where MPI transports and NCCL protocols change from latency- to bandwidth-bound
// (docs/TUNING.md; bench/tune_bench.py measures what it gives).
constexpr double kHalfPowerBytes = 65536;

// A knob's value in a setting, or d where the setting has no such knob.
std::string knobOr(const std::map<std::string, std::string>& m, const char* k, const char* d) {
  auto it = m.find(k);
  return it == m.end() ? std::string(d) : it->second;
}

std::string fmt(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

std::string pipeLabel(EventKind k, int64_t mb, int64_t chunk) {
  std::string l = k == EventKind::MicroBatchF ? "F" : k == EventKind::MicroBatchB ? "B" : "W";
  l += std::to_string(mb);
  if (chunk > 0) l += "c" + std::to_string(chunk);
  return l;
}

}  // namespace

struct WhatIfModel::State {
  std::map<std::string, std::string> knobs;
  int64_t fromStep = -1, toStep = -1;
  int world = 1;
  bool dp = false, pp = false, disco = false;
  WhatIfPrediction measured;
  // DISCO (--mode disco sessions): per split layer the window's analysis (ANALYSIS.md, DISCO):
  // ranks exchanging it, the sparsity it ran, per (rank, step) the union of its kernels and of
  // its exchanges, its bytes, and the paper's dense extrapolations of both (background.md 1).
  struct DiscoLayerModel {
    int64_t layer = 0;
    int nodes = 1;
    double sparsity = 0, commMs = 0, compMs = 0, bytes = 0, commDenseMs = NAN, compDenseMs = 0;
    double overlapMs = 0;  // the window's |exchanges ∩ kernels| per step
    // The share of the shorter of exchange and compute that pipelining hid in the window
    // (overlap / min(L_comm, L_comp)): 1 is the paper's max(), 0 a job whose exchanges and
    // kernels never ran together (trainscope-train's CPU job: one thread, MPI progressing only
    // inside its calls). NaN: the window ran wait (nothing to measure).
    double overlapShare = NAN;
    // trainscope-train's calibration of the layer ("calibrate disco <S>" passes, TUNING.md):
    // sparsity -> (compute ms, exchange ms) per pass; empty where the job did not calibrate.
    std::map<double, std::pair<double, double>> calib;
  };
  double discoOverlapShare = NAN;  // over all layers: for a layer whose own share is unknown
  std::vector<DiscoLayerModel> discoLayers;
  double discoRestMs = 0;  // measured step - the layers' modelled time at the measured setting
  // Knob changes inside a chosen window ("name=value at step N"): the model is built from steps
  // that ran different settings (its knobs are those of the first step).
  std::vector<std::string> windowChanges;
  // Data parallel.
  int layers = 0;
  std::vector<double> layerMs;     // [layer] B+W compute without the overlap slowdown
  std::vector<double> layerBytes;  // [layer] gradient payload bytes (4 x values)
  std::vector<bool> layerBytesExact;
  double forwardMs = 0, optimizerMs = 0, restMs = 0, waitOverheadMs = 0;
  double slowdown = 0;
  bool slowdownMeasured = false;
  // trainscope-train's calibration of the backward's compute ("calibrate dp B|W" kernels, with no
  // reduction in flight): when present, layerMs is it and the window's kernel times (their sum
  // per step as measured: windowComputeMs) only tell how much the reductions slowed them.
  bool computeCalibrated = false;
  double windowComputeMs = 0;
  double gapBusyMs = 0, gapIdleMs = 0;  // per layer: time between kernels, channel busy / idle
  // The backward's extra time per bucket reduced while layers were still to compute (kappa):
  // the measured backward minus its compute alone and its idle gaps, over those buckets.
  double perBucketMs = 0;
  bool perBucketMeasured = false;
  bool oneSize = false;  // the window's reductions had one size: the alpha/beta split is a prior
  // trainscope-train's calibration (docs/TUNING.md), per algorithm the calibrated sizes (payload,
  // ms) in payload order, at least two, from the latest calibration before the window's end:
  // the isolated reduction time ("calibrate" collectives), the rank's own work on a reduction
  // polled between stretches of busy work as a step's layers poll it ("calibrate work": what the
  // backward's cost per bucket moves by), and per codec its CPU work alone on a bucket ("calibrate
  // codec": described, not used by the prediction, whose codec cost is the calibrated difference).
  // The prediction interpolates between neighbouring sizes (a regime per size range: 1 KiB to
  // 64 KiB, 64 KiB to 1 MiB); --describe gives the line through the smallest and largest.
  std::map<std::string, std::vector<std::pair<double, double>>> calibPts, workPts, codecPts;
  // The window's mean bucket and last-bucket payloads, at which the measured costs are moved to
  // another algorithm or size.
  double meanPayload = 0, lastPayload = 0;
  double meanDurationMs = 0;  // the window's mean bucket reduction, start to end
  // The measured tail split: the last reduction's own time and the queue before it (earlier
  // buckets still reducing when the backward ended), per early bucket.
  double lastOwnMs = 0, queueMs = 0, earlyBuckets = 0;
  // Early buckets per step whose reduction was still running when the backward ended: their
  // remaining work is in the tail.
  double tailBuckets = 0;
  // The observer (the recorder or GUI that took the session) where it shared the ranks' cores
  // with none to spare (session metadata observer_*: its host is the ranks' host and it had no
  // more CPUs than ranks there): its CPU per event comes out of the ranks' steps. Measured on the
  // 2-core VM, 48-layer job (bench/recording_cost.py, four runs): recording cost 0.38-0.50 ms a
  // step at 255 events per rank and step and 0.21-0.27 ms at 159, where the recorder took
  // 0.82-0.92 us per event (docs/TUNING.md). A setting with other buckets changes the events per
  // step by the window's events per bucket. Data parallel only (see the pipeline model's note).
  double observerMsPerEvent = 0;  // 0: the observer did not share the ranks' cores (or unknown)
  double observerCpus = 0;
  int observerRanks = 0;          // ranks on the observer's host
  double bucketEventsPerBucket = 0;  // per rank: Bucket and Collective events per bucket reduced
  double bucketsPerStep = 0;         // per rank and step, the window's mean
  double lastWireBytes = 0;  // the window's mean last-bucket wire bytes
  std::map<std::string, WhatIfFit> fits;
  double wireCalibration = 1;  // measured wire bytes / formula at the measured setting
  // Pipeline.
  int stages = 0;
  std::vector<double> fMs, bMs, wMs;  // [stage] per micro-batch at the measured m, whole stage
  int chunks = 1;                     // distinct chunks per stage seen (the analysis' v)
  bool measuredSplit = false;
  // [stage] the weight-gradient share of an unsplit backward, from the traced kernels
  // (trainscope-train: "B <layer>" input gradient, "W <layer>" weight gradient); NaN: not traced.
  std::vector<double> wShare;
  // [stage] the share of each op kind's time (F, B, W) spent in its traced per-layer kernels
  // ("F/B/W <layer>"): that part scales with the samples of a micro-batch, the rest of the op
  // (the layer loop, stashing, the agent's events) is a fixed cost per op. 1 where no kernels
  // are traced (PyTorch recordings): the whole op scales.
  std::vector<std::array<double, 3>> kernelShare;
  // A hand-off: the sender posts it for sendCostMs of its stage time (the `pp send` interval),
  // and the receiver can start sendLatencyMs after that: the measured hand-off latency (send
  // start to the end of a receive that waited for it, the analysis' handoff_latency_us) less
  // the posting. On a CPU job the latency is the receiver being woken and scheduled, which
  // 1F1B's alternation pays on every op and GPipe's batched forward mostly hides.
  double sendCostMs = 0, sendLatencyMs = 0;
  double pipeRestMs = 0;  // measured step - simulated makespan at the measured setting
  // The part of that rest the analysis counted as bubble (its idle time in the step window less
  // the simulated idle at the measured setting, within [0, rest]), so the replay's bubble is the
  // measured one; -1: all of the rest (no measured bubble).
  double pipeRestIdleMs = -1;
  // [stage] trainscope-train's calibration of the stage's layers alone ("calibrate pp F|B|W|D
  // <samples>" kernels): per op kind (F, B, W right after B, D: W deferred past the B of the
  // stage's other layers and another micro-batch's forward, as a split schedule runs it) the
  // stage's time (summed over its layers) at each calibrated samples-per-micro-batch; empty
  // where the job did not calibrate (D: before Nov 25).
  std::vector<std::array<std::map<int64_t, double>, 4>> ppCalib;
  // Drawing.
  double restBeforeMs = 0;  // data parallel: step start to forward start, mean
  double fwdToBwdMs = 0;    // data parallel: forward end to backward start, mean (part of restMs)
  std::vector<StepOp> measuredTimeline;
  int64_t measuredTimelineStep = -1;
};

WhatIfModel::WhatIfModel() : s_(std::make_unique<State>()) {}
WhatIfModel::~WhatIfModel() = default;
WhatIfModel::WhatIfModel(WhatIfModel&&) noexcept = default;
WhatIfModel& WhatIfModel::operator=(WhatIfModel&&) noexcept = default;
const std::map<std::string, std::string>& WhatIfModel::baseKnobs() const {
  return s_->knobs;
}
WhatIfPrediction WhatIfModel::measured() const {
  return s_->measured;
}
const std::vector<StepOp>& WhatIfModel::measuredTimeline() const {
  return s_->measuredTimeline;
}
int64_t WhatIfModel::measuredTimelineStep() const {
  return s_->measuredTimelineStep;
}

const std::vector<std::string>& WhatIfModel::windowChanges() const {
  return s_->windowChanges;
}

std::string WhatIfModel::windowNote() const {
  if (s_->windowChanges.empty()) return {};
  std::string list;
  for (const auto& c : s_->windowChanges) list += (list.empty() ? "" : ", ") + c;
  return "the window's steps ran different settings (" + list +
         "): the model takes the first step's knobs and mixes the costs of both; choose a window within one "
         "setting (--from-step after the change)";
}
int64_t WhatIfModel::fromStep() const {
  return s_->fromStep;
}
int64_t WhatIfModel::toStep() const {
  return s_->toStep;
}

namespace {

struct RankStep {
  Iv step, fwd, bwd, opt;
  bool hasFwd = false, hasBwd = false, hasOpt = false;
  struct K {
    int64_t layer;
    bool weight;
    std::string name;
    Iv iv;
  };
  std::vector<K> kernels;
  struct C {
    int64_t bucket;
    Iv iv;
    double wire;
    std::string algo;
  };
  std::vector<C> comms;
  std::map<int64_t, std::pair<int64_t, double>> buckets;  // bucket -> (ready ns, payload bytes)
};

}  // namespace

Result<WhatIfModel> WhatIfModel::fromSession(const TraceStore& store, const WhatIfOptions& options) {
  WhatIfModel m;
  State& s = *m.s_;
  if (options.fromStep < 0) {
    // The default window: the settings in force at the end and their steps.
    auto cfg = configFromSession(store, "session");
    if (!cfg) return cfg.status();
    s.knobs = cfg->knobs;
    s.world = std::max(1, cfg->job.worldSize);
    s.fromStep = cfg->measured.fromStep;
    s.toStep = options.toStep >= 0 ? options.toStep : cfg->measured.toStep;
  } else {
    // A chosen window (the tuner's, on a live store): no whole-session analysis.
    const auto& md = store.metadata();
    s.world = md.count("world_size") ? std::atoi(md.at("world_size").c_str()) : 0;
    if (s.world <= 0) s.world = std::max<int>(1, static_cast<int>(store.ranks().size()));
    s.fromStep = options.fromStep;
    s.toStep = options.toStep >= 0 ? options.toStep : INT64_MAX;
  }
  // The knob values in force over the chosen window: those at its first step.
  if (options.fromStep >= 0) {
    for (const auto& [k, v] : store.metadata())
      if (k.rfind("knob.", 0) == 0) s.knobs[k.substr(5)] = v;
    std::vector<std::tuple<int64_t, int64_t, std::string, std::string>> evs;
    for (TrackId t = 0; t < store.trackCount(); ++t) {
      const TrackEvents& ev = store.events(t);
      for (size_t i = 0; i < ev.size(); ++i) {
        if (ev.kind(i) != EventKind::KnobChange) continue;
        const Attr* n = ev.findAttr(i, AttrKey::Knob);
        const Attr* v = ev.findAttr(i, AttrKey::KnobValue);
        const Attr* st = ev.findAttr(i, AttrKey::Step);
        if (n && v && st && st->asInt() <= s.toStep)
          evs.emplace_back(st->asInt(), ev.start(i), std::string(store.str(n->asString())),
                           std::string(store.str(v->asString())));
      }
    }
    std::sort(evs.begin(), evs.end());
    std::map<std::string, std::string> now;
    for (const auto& [st, t, n, v] : evs) {
      if (st <= s.fromStep) {
        s.knobs[n] = v;
        now[n] = v;
      } else if (auto it = now.find(n); it == now.end() || it->second != v) {
        // A change inside the window: its steps ran different settings (noted in every
        // prediction; per rank the same change, listed once).
        now[n] = v;
        s.windowChanges.push_back(n + "=" + v + " at step " + std::to_string(st));
      }
    }
  }
  for (const auto& [k, v] : s.knobs) {
    s.dp |= k.rfind("dp.", 0) == 0;
    s.pp |= k.rfind("pp.", 0) == 0;
    s.disco |= k.rfind("disco.", 0) == 0;
  }
  if (!s.dp && !s.pp && !s.disco)
    return Status(ErrorCode::InvalidArgument,
                  "what-if models data-parallel (dp.*), pipeline (pp.*) and DISCO (disco.*) jobs; this session has "
                  "none of these knob families");

  // Per (rank, step) in the window.
  std::map<std::pair<RankId, int64_t>, RankStep> rs;
  std::map<RankId, std::vector<std::pair<int64_t, int64_t>>> stepStarts;  // (start, step)
  for (TrackId t = 0; t < store.trackCount(); ++t) {
    const RankId r = store.track(t).rank;
    const TrackEvents& ev = store.events(t);
    for (size_t i = 0; i < ev.size(); ++i)
      if (ev.kind(i) == EventKind::Step && ev.end(i) > ev.start(i)) {
        const Attr* a = ev.findAttr(i, AttrKey::Step);
        if (!a || a->asInt() < s.fromStep || a->asInt() > s.toStep) continue;
        rs[{r, a->asInt()}].step = {ev.start(i), ev.end(i)};
        stepStarts[r].push_back({ev.start(i), a->asInt()});
      }
  }
  for (auto& [r, v] : stepStarts) std::sort(v.begin(), v.end());
  if (s.toStep == INT64_MAX && !rs.empty()) {
    s.toStep = s.fromStep;
    for (const auto& [key, x] : rs) s.toStep = std::max(s.toStep, key.second);
  }
  if (rs.empty())
    return Status(ErrorCode::InvalidArgument, "no complete steps in the chosen window (steps " +
                                                  std::to_string(s.fromStep) + " to " +
                                                  std::to_string(s.toStep) + ")");
  const StringId fwdName = store.strings().find("forward").value_or(UINT32_MAX);
  const StringId bwdName = store.strings().find("backward").value_or(UINT32_MAX);
  const StringId optName = store.strings().find("optimizer").value_or(UINT32_MAX);
  // The transport's count of a bucket (trainscope-train since issue 18: Bytes is the payload).
  const uint32_t sentKey = kCustomAttrBase + store.strings().find("bytes_sent").value_or(UINT32_MAX - kCustomAttrBase);
  for (TrackId t = 0; t < store.trackCount(); ++t) {
    const RankId r = store.track(t).rank;
    auto ss = stepStarts.find(r);
    if (ss == stepStarts.end()) continue;
    const TrackEvents& ev = store.events(t);
    for (size_t i = 0; i < ev.size(); ++i) {
      const EventKind k = ev.kind(i);
      if (k != EventKind::Phase && k != EventKind::Kernel && k != EventKind::Collective &&
          k != EventKind::Bucket)
        continue;
      auto it = std::upper_bound(ss->second.begin(), ss->second.end(), std::pair{ev.start(i), INT64_MAX});
      if (it == ss->second.begin()) continue;
      auto found = rs.find({r, std::prev(it)->second});
      if (found == rs.end()) continue;
      RankStep& x = found->second;
      if (ev.start(i) >= x.step.b) continue;
      const Iv iv{ev.start(i), ev.end(i)};
      if (k == EventKind::Phase) {
        if (ev.name(i) == fwdName) x.fwd = iv, x.hasFwd = true;
        if (ev.name(i) == bwdName) x.bwd = iv, x.hasBwd = true;
        if (ev.name(i) == optName) x.opt = iv, x.hasOpt = true;
      } else if (k == EventKind::Kernel) {
        const std::string_view n = store.str(ev.name(i));
        const Attr* l = ev.findAttr(i, AttrKey::Layer);
        if (!l || !(n.starts_with("B ") || n.starts_with("W "))) continue;
        x.kernels.push_back({l->asInt(), n.starts_with("W "), std::string(n), iv});
      } else if (const Attr* b = ev.findAttr(i, AttrKey::Bucket)) {
        const Attr* bytes = ev.findAttr(i, AttrKey::Bytes);
        if (k == EventKind::Collective) {
          const Attr* al = ev.findAttr(i, AttrKey::Algorithm);
          const std::string algo = al ? std::string(store.str(al->asString())) : std::string();
          double wire = bytes ? static_cast<double>(bytes->asInt()) : 0.0;
          bool counted = false;
          for (const Attr& a : ev.attrs(i))
            if (a.key == sentKey) wire = static_cast<double>(a.asInt()), counted = true;
          // MPI's own reductions are not counted: their nominal share of the payload, as the
          // traces carried it before the bytes were counted.
          if (!counted && (algo == "allreduce" || algo == "hierarchical") && s.world > 1)
            wire *= 2.0 * (s.world - 1) / s.world;
          x.comms.push_back({b->asInt(), iv, wire, algo});
        } else {
          x.buckets[b->asInt()] = {ev.start(i), bytes ? static_cast<double>(bytes->asInt()) : 0.0};
        }
      }
    }
  }

  // Calibration: per rank, the "calibrate" collectives that started before the window's last
  // step ended; per (algorithm, payload) the fastest of each rank's last seven (a latency
  // benchmark's estimator: the repetitions a busy machine did not interrupt), median over ranks;
  // per algorithm the sizes with their times, where it has at least two. The same for the
  // codecs' CPU work alone ("calibrate codec", per codec) and for "calibrate work" (the rank's
  // own work per reduction, docs/TUNING.md), where a collective's value is not its span but the
  // counter of that name the rank recorded right after it (the first at or after its end, within
  // 1 ms).
  // Per rank the end of its last step in the window: calibrations before it count.
  std::map<RankId, int64_t> windowEnd;
  for (const auto& [key, x] : rs) {
    auto [it, fresh] = windowEnd.try_emplace(key.first, x.step.b);
    if (!fresh) it->second = std::max(it->second, x.step.b);
  }
  std::map<RankId, std::vector<std::pair<int64_t, double>>> workCounters;
  if (const auto wn = store.strings().find("calibrate work")) {
    for (TrackId t = 0; t < store.trackCount(); ++t) {
      const TrackEvents& ev = store.events(t);
      for (size_t i = 0; i < ev.size(); ++i)
        if (ev.kind(i) == EventKind::Counter && ev.name(i) == *wn)
          if (const Attr* v = ev.findAttr(i, AttrKey::Value))
            workCounters[store.track(t).rank].push_back(
                {ev.start(i), v->type == AttrType::Double ? v->asDouble() : static_cast<double>(v->asInt())});
    }
    for (auto& [r, v] : workCounters) std::sort(v.begin(), v.end());
  }
  auto calibration = [&](const char* name) {
    const bool work = std::string_view(name) == "calibrate work";
    std::map<std::string, std::vector<std::pair<double, double>>> pts;  // algo -> (payload, median ms)
    auto calName = store.strings().find(name);
    if (!calName) return pts;
    std::map<std::pair<std::string, int64_t>, std::vector<double>> pooled;
    for (TrackId t = 0; t < store.trackCount(); ++t) {
      const RankId r = store.track(t).rank;
      const auto we = windowEnd.find(r);
      if (we == windowEnd.end()) continue;
      std::map<std::pair<std::string, int64_t>, std::vector<std::pair<int64_t, double>>> mine;
      const TrackEvents& ev = store.events(t);
      for (size_t i = 0; i < ev.size(); ++i) {
        if (ev.kind(i) != EventKind::Collective || ev.name(i) != *calName || ev.start(i) >= we->second) continue;
        const Attr* al = ev.findAttr(i, AttrKey::Algorithm);
        const Attr* by = ev.findAttr(i, AttrKey::Bytes);
        if (!al || !by || ev.end(i) <= ev.start(i)) continue;
        double ms = static_cast<double>(ev.end(i) - ev.start(i)) / kNsPerMs;
        if (work) {
          const auto wc = workCounters.find(r);
          if (wc == workCounters.end()) continue;
          const auto at = std::lower_bound(wc->second.begin(), wc->second.end(),
                                           std::pair<int64_t, double>{ev.end(i), -INFINITY});
          if (at == wc->second.end() || at->first > ev.end(i) + 1'000'000) continue;
          ms = at->second;
        }
        mine[{std::string(store.str(al->asString())), by->asInt()}].push_back({ev.start(i), ms});
      }
      for (auto& [k, v] : mine) pooled[k].push_back(fastestOfLast(v, 7));
    }
    // pooled is ordered by (algorithm, payload): each algorithm's sizes arrive in payload order.
    for (auto& [k, v] : pooled) pts[k.first].push_back({static_cast<double>(k.second), medianOf(v)});
    std::erase_if(pts, [](const auto& kv) { return kv.second.size() < 2; });
    return pts;
  };
  s.calibPts = calibration("calibrate");
  s.workPts = calibration("calibrate work");
  s.codecPts = calibration("calibrate codec");

  std::vector<double> stepMs;
  for (const auto& [key, x] : rs) stepMs.push_back(static_cast<double>(x.step.b - x.step.a) / kNsPerMs);
  s.measured.knobs = s.knobs;
  s.measured.stepTimeMs = mean(stepMs);

  if (s.dp && !s.pp) {
    // Layers and the overlap slowdown.
    std::set<int64_t> layerSet;
    std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> byKernel;  // alone, overlapped
    for (const auto& [key, x] : rs) {
      std::vector<std::pair<double, double>> comm;
      for (const auto& c : x.comms)
        comm.push_back({static_cast<double>(c.iv.a), static_cast<double>(c.iv.b)});
      for (const auto& k : x.kernels) {
        layerSet.insert(k.layer);
        const bool over = unionWithin(comm, static_cast<double>(k.iv.a), static_cast<double>(k.iv.b)) > 0;
        auto& e = byKernel[k.name + "#" + std::to_string(k.layer)];
        (over ? e.second : e.first).push_back(static_cast<double>(k.iv.b - k.iv.a) / kNsPerMs);
      }
    }
    if (layerSet.empty() || *layerSet.begin() != 0)
      return Status(
          ErrorCode::InvalidArgument,
          "the session has no per-layer backward kernels (B/W with a Layer attribute): what-if needs "
          "trainscope-train's trace (docs/TRACE_CONVENTIONS.md)");
    s.layers = static_cast<int>(*layerSet.rbegin()) + 1;
    double wsum = 0, wn = 0;
    for (const auto& [k, e] : byKernel)
      if (e.first.size() >= 2 && e.second.size() >= 2 && mean(e.first) > 0) {
        const double n = static_cast<double>(std::min(e.first.size(), e.second.size()));
        wsum += n * (mean(e.second) / mean(e.first) - 1);
        wn += n;
      }
    if (wn > 0) {
      s.slowdown = std::max(0.0, wsum / wn);
      s.slowdownMeasured = true;
    }
    // The backward's compute alone as trainscope-train calibrated it ("calibrate dp B|W" kernels
    // with no reduction in flight, TUNING.md): per rank, per layer and kind, the median of the last
    // three passes before the window's end. The window's own estimate (overlapped kernels divided
    // by 1 + the slowdown of the same kernel seen alone) is biased where nearly every kernel ran
    // overlapped: a 2 KiB window of the 48-layer job put it at 0.648 ms, a one-bucket step
    // measured 0.526. The calibration runs between steps and reads 2-8 % below the same kernels
    // alone inside a step (the data loader's thread then shares the core), so its level is set by
    // the window's kernels that ran alone (calLevel); a one-bucket window's replay stays exact.
    // A rank counts where every layer's weight gradient was calibrated.
    std::map<RankId, std::map<std::pair<int64_t, bool>, double>> calRank;  // rank -> (layer, W) -> ms
    {
      std::map<RankId, std::map<std::pair<int64_t, bool>, std::vector<std::pair<int64_t, double>>>> cal;
      const std::optional<StringId> cb = store.strings().find("calibrate dp B"),
                                    cw = store.strings().find("calibrate dp W");
      if (cb || cw)
        for (TrackId t = 0; t < store.trackCount(); ++t) {
          const RankId r = store.track(t).rank;
          const auto we = windowEnd.find(r);
          if (we == windowEnd.end()) continue;
          const TrackEvents& ev = store.events(t);
          for (size_t i = 0; i < ev.size(); ++i) {
            if (ev.kind(i) != EventKind::Kernel || ev.start(i) >= we->second || ev.end(i) <= ev.start(i)) continue;
            const bool w = cw && ev.name(i) == *cw;
            if (!w && !(cb && ev.name(i) == *cb)) continue;
            const Attr* l = ev.findAttr(i, AttrKey::Layer);
            if (!l || l->asInt() < 0 || l->asInt() >= s.layers) continue;
            cal[r][{l->asInt(), w}].push_back({ev.start(i), static_cast<double>(ev.end(i) - ev.start(i)) / kNsPerMs});
          }
        }
      for (auto& [r, byLayer] : cal) {
        std::map<std::pair<int64_t, bool>, double> mine;
        int weights = 0;
        for (auto& [lk, v] : byLayer) {
          mine[lk] = medianOfLast(v, 3);
          weights += lk.second ? 1 : 0;
        }
        if (weights == s.layers) calRank[r] = std::move(mine);
      }
    }
    double aloneMs = 0, calMatched = 0, calLevel = 1;
    // Per (rank, step): layer compute, phases, bucket groups, channel service times.
    s.layerMs.assign(static_cast<size_t>(s.layers), 0);
    std::vector<double> wMsPerLayer(static_cast<size_t>(s.layers), 0);
    std::vector<double> fwd, opt, rest, restBefore, fwdToBwd, waitOver, gapBusy, gapIdle, exposed, overlap, wire, tailBuckets;
    int64_t gapCount = 0;
    std::map<std::vector<int64_t>, double> groupBytes;                  // layers of a bucket -> payload bytes
    std::map<std::string, std::vector<std::pair<double, double>>> svc;  // algo -> (wire, duration ms)
    // Per step: backward length, its compute alone, gaps, buckets started with layers to go.
    struct BwdStep {
      RankId rank;
      double bwdMs, computeMs;
      int64_t gaps;
      int64_t earlyBuckets;
    };
    std::vector<BwdStep> bwdSteps;
    std::vector<double> lastWire;  // per step: the last bucket's wire bytes
    std::vector<double> bucketPayloads, lastPayloads;
    int n = 0;
    for (const auto& [key, x] : rs) {
      if (!x.hasFwd || !x.hasBwd || !x.hasOpt) continue;
      ++n;
      std::vector<std::pair<double, double>> comm;
      for (const auto& c : x.comms)
        comm.push_back({static_cast<double>(c.iv.a), static_cast<double>(c.iv.b)});
      double computeAlone = 0;
      for (const auto& k : x.kernels) {
        if (k.iv.a < x.bwd.a || k.iv.b > x.bwd.b + 1) continue;
        double d = static_cast<double>(k.iv.b - k.iv.a) / kNsPerMs;
        s.windowComputeMs += d;
        if (unionWithin(comm, static_cast<double>(k.iv.a), static_cast<double>(k.iv.b)) > 0) {
          d /= 1 + s.slowdown;
        } else if (auto cr = calRank.find(key.first); cr != calRank.end()) {
          if (auto c = cr->second.find({k.layer, k.weight}); c != cr->second.end()) aloneMs += d, calMatched += c->second;
        }
        s.layerMs[static_cast<size_t>(k.layer)] += d;
        computeAlone += d;
        if (k.weight) wMsPerLayer[static_cast<size_t>(k.layer)] += d;
      }
      const int64_t gapsBefore = gapCount;
      // The backward's time between kernels (the progress calls: MPI_Test on every bucket in
      // flight), split by whether communication was in flight.
      {
        std::vector<Iv> ks;
        for (const auto& k : x.kernels)
          if (k.iv.a >= x.bwd.a && k.iv.b <= x.bwd.b + 1) ks.push_back(k.iv);
        std::sort(ks.begin(), ks.end(), [](const Iv& p, const Iv& q) { return p.a < q.a; });
        int64_t cursor = x.bwd.a;
        auto gapTo = [&](int64_t until) {
          if (until > cursor) {
            const double g = static_cast<double>(until - cursor) / kNsPerMs;
            const bool busy = unionWithin(comm, static_cast<double>(cursor), static_cast<double>(until)) > 0;
            (busy ? gapBusy : gapIdle).push_back(g);
            ++gapCount;
          }
          cursor = std::max(cursor, until);
        };
        for (const Iv& k : ks) {
          gapTo(k.a);
          cursor = std::max(cursor, k.b);
        }
        gapTo(x.bwd.b);
      }
      bwdSteps.push_back({key.first, static_cast<double>(x.bwd.b - x.bwd.a) / kNsPerMs, computeAlone, gapCount - gapsBefore,
                          std::max<int64_t>(0, static_cast<int64_t>(x.buckets.size()) - 1)});
      fwd.push_back(static_cast<double>(x.fwd.b - x.fwd.a) / kNsPerMs);
      opt.push_back(static_cast<double>(x.opt.b - x.opt.a) / kNsPerMs);
      double lastEnd = static_cast<double>(x.bwd.b);
      for (const auto& c : x.comms) lastEnd = std::max(lastEnd, static_cast<double>(c.iv.b));
      const double exp = (lastEnd - static_cast<double>(x.bwd.b)) / kNsPerMs;
      exposed.push_back(exp);
      {
        // Early buckets still reducing when the backward ended (all but the last-started one).
        int64_t after = 0;
        const RankStep::C* last = nullptr;
        for (const auto& c : x.comms)
          if (!last || c.iv.a > last->iv.a) last = &c;
        for (const auto& c : x.comms)
          if (&c != last && c.iv.b > x.bwd.b) ++after;
        tailBuckets.push_back(static_cast<double>(after));
      }
      {
        // The last bucket's wire bytes (the reduction that starts after layer 0).
        const RankStep::C* last = nullptr;
        for (const auto& c : x.comms)
          if (!last || c.iv.a > last->iv.a) last = &c;
        lastWire.push_back(last ? last->wire : 0.0);
        for (const auto& [b, info] : x.buckets) bucketPayloads.push_back(info.second);
        if (!x.buckets.empty()) lastPayloads.push_back(x.buckets.rbegin()->second.second);
      }
      waitOver.push_back(std::max(0.0, static_cast<double>(x.opt.a - x.bwd.b) / kNsPerMs - exp));
      // The rest: before the forward, between the forward and the backward (zeroing the
      // gradients, preparing the step's buckets: 28-50 us on the 48-layer CPU job, which the
      // replay missed before Nov 25 and came out 1.2-2.9 % short), after the optimizer.
      const int64_t between = std::max<int64_t>(0, x.bwd.a - x.fwd.b);
      rest.push_back(static_cast<double>((x.fwd.a - x.step.a) + between + (x.step.b - x.opt.b)) / kNsPerMs);
      restBefore.push_back(static_cast<double>(x.fwd.a - x.step.a) / kNsPerMs);
      fwdToBwd.push_back(static_cast<double>(between) / kNsPerMs);
      const double total = unionLength(comm);
      if (total > 0)
        overlap.push_back(unionWithin(comm, static_cast<double>(x.bwd.a), static_cast<double>(x.bwd.b)) /
                          total);
      double w = 0;
      for (const auto& c : x.comms) w += c.wire;
      wire.push_back(w);
      // Bucket groups: a bucket's lowest layer is the one whose W ended last before it was ready.
      std::vector<std::pair<int64_t, int64_t>> wEnds;  // (end, layer)
      for (const auto& k : x.kernels)
        if (k.weight) wEnds.push_back({k.iv.b, k.layer});
      std::sort(wEnds.begin(), wEnds.end());
      int64_t upper = s.layers - 1;
      for (const auto& [b, info] : x.buckets) {
        auto it = std::upper_bound(wEnds.begin(), wEnds.end(), std::pair{info.first, INT64_MAX});
        int64_t lowest = it == wEnds.begin() ? 0 : std::prev(it)->second;
        if (std::next(x.buckets.find(b)) == x.buckets.end()) lowest = 0;
        std::vector<int64_t> group;
        for (int64_t l = upper; l >= lowest; --l) group.push_back(l);
        if (!group.empty()) groupBytes[group] = info.second;
        upper = lowest - 1;
      }
      // A bucket's reduction from its start to its end: buckets run concurrently (every bucket
      // in flight is progressed) and complete in order (their collective stages are ordered).
      for (const auto& c : x.comms) svc[c.algo].push_back({c.wire, static_cast<double>(c.iv.b - c.iv.a) / kNsPerMs});
    }
    if (n == 0)
      return Status(
          ErrorCode::InvalidArgument,
          "no step in the window has forward, backward and optimizer phases (trainscope-train's dp mode)");
    for (auto& v : s.layerMs) v /= n;
    for (auto& v : wMsPerLayer) v /= n;
    s.windowComputeMs /= n;
    if (!calRank.empty()) {
      // The calibration's level: the window's kernels that ran with no reduction in flight over
      // the calibration of the same kernels (1 where the window has none).
      if (calMatched > 0) calLevel = aloneMs / calMatched;
      s.computeCalibrated = true;
      s.layerMs.assign(static_cast<size_t>(s.layers), 0);
      for (const auto& [r, byLayer] : calRank)
        for (const auto& [lk, ms] : byLayer)
          s.layerMs[static_cast<size_t>(lk.first)] += calLevel * ms / static_cast<double>(calRank.size());
      for (BwdStep& b : bwdSteps)
        if (auto it = calRank.find(b.rank); it != calRank.end()) {
          b.computeMs = 0;
          for (const auto& [lk, ms] : it->second) b.computeMs += calLevel * ms;
        }
      const double calSum = std::accumulate(s.layerMs.begin(), s.layerMs.end(), 0.0);
      if (calSum > 0) s.slowdown = std::max(0.0, s.windowComputeMs / calSum - 1), s.slowdownMeasured = true;
    }
    // The backward's time between kernels (progress calls) spread evenly over the layers.
    // Gaps per layer, each at its measured mean for a busy or an idle channel (a kind never seen
    // takes the other's mean).
    const double gapsPerLayer = static_cast<double>(gapCount) / n / s.layers;
    const double busyMean = gapBusy.empty() ? mean(gapIdle) : mean(gapBusy);
    // A window where a reduction was always in flight has no idle gap: its gaps are all the
    // reductions' cost (kappa below), none is the bare progress call.
    const double idleMean = gapIdle.empty() ? 0.0 : mean(gapIdle);
    s.gapBusyMs = gapsPerLayer * busyMean;
    s.gapIdleMs = gapsPerLayer * idleMean;
    {
      // kappa: what the backward took beyond its compute (alone) and its idle progress calls,
      // per bucket whose reduction ran while layers were still to compute (all but the last,
      // which starts after layer 0). On a CPU job that is the reductions' own CPU time and the
      // ranks' waits for each other; on a GPU job the kernels' slowdown under communication.
      double extra = 0, early = 0;
      for (const BwdStep& b : bwdSteps) {
        extra += std::max(0.0, b.bwdMs - b.computeMs - static_cast<double>(b.gaps) * idleMean);
        early += static_cast<double>(b.earlyBuckets);
      }
      if (early > 0) {
        s.perBucketMs = extra / early;
        s.perBucketMeasured = true;
      }
    }
    s.forwardMs = mean(fwd);
    s.optimizerMs = mean(opt);
    s.restMs = mean(rest);
    s.restBeforeMs = mean(restBefore);
    s.fwdToBwdMs = mean(fwdToBwd);
    {
      // The observer's share of the step (see State::observerMsPerEvent): its CPU per event from
      // the session's observer_* metadata, where its host held ranks of the window and no more
      // CPUs than those ranks; per bucket a Bucket and a Collective event per rank.
      const auto& md = store.metadata();
      auto num = [&](const char* k) { return md.count(k) ? std::atof(md.at(k).c_str()) : 0.0; };
      const double cpuS = num("observer_cpu_seconds"), events = num("observer_events");
      s.observerCpus = num("observer_cpus");
      const auto host = md.find("observer_host");
      std::set<RankId> onHost;
      double bucketEvents = 0, buckets = 0, rankSteps = 0;
      for (const auto& [key, x] : rs) {
        if (auto ri = store.ranks().find(key.first);
            host != md.end() && !host->second.empty() && ri != store.ranks().end() && ri->second.host == host->second)
          onHost.insert(key.first);
        if (!x.hasFwd || !x.hasBwd || !x.hasOpt) continue;
        bucketEvents += static_cast<double>(x.comms.size() + x.buckets.size());
        buckets += static_cast<double>(x.buckets.size());
        ++rankSteps;
      }
      s.observerRanks = static_cast<int>(onHost.size());
      if (cpuS > 0 && events > 0 && s.observerRanks > 0 && s.observerCpus > 0 && s.observerCpus <= s.observerRanks)
        s.observerMsPerEvent = cpuS * 1e3 / events;
      if (buckets > 0) s.bucketEventsPerBucket = bucketEvents / buckets;
      if (rankSteps > 0) s.bucketsPerStep = buckets / rankSteps;
    }
    // The drawn measured step: the lowest rank's step of median length.
    {
      std::vector<std::pair<int64_t, const RankStep*>> cand;  // (length, step)
      const RankId lowest = rs.begin()->first.first;
      int64_t stepId = -1;
      for (const auto& [key, x] : rs)
        if (key.first == lowest && x.hasFwd && x.hasBwd && x.hasOpt) cand.push_back({x.step.b - x.step.a, &x});
      std::sort(cand.begin(), cand.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      if (!cand.empty()) {
        const RankStep& x = *cand[cand.size() / 2].second;
        for (const auto& [key, y] : rs)
          if (&y == &x) stepId = key.second;
        auto rel = [&](int64_t t) { return static_cast<double>(t - x.step.a) / kNsPerMs; };
        auto& tl = s.measuredTimeline;
        tl.push_back({"compute", "forward", StepOp::Kind::Compute, rel(x.fwd.a), rel(x.fwd.b)});
        for (const auto& k : x.kernels)
          if (k.iv.a >= x.bwd.a && k.iv.b <= x.bwd.b + 1)
            tl.push_back({"compute", k.name.substr(0, 1) + " " + std::to_string(k.layer), StepOp::Kind::Compute,
                          rel(k.iv.a), rel(k.iv.b)});
        for (const auto& c : x.comms)
          tl.push_back({"gradient sync", "bucket " + std::to_string(c.bucket), StepOp::Kind::Communication,
                        rel(c.iv.a), rel(c.iv.b)});
        tl.push_back({"compute", "optimizer", StepOp::Kind::Compute, rel(x.opt.a), rel(x.opt.b)});
        s.measuredTimelineStep = stepId;
      }
    }
    s.waitOverheadMs = mean(waitOver);
    s.measured.exposedCommMs = mean(exposed);
    s.meanPayload = mean(bucketPayloads);
    {
      double sum = 0, cnt = 0;
      for (const auto& [algo, pts] : svc)
        for (const auto& [x, y] : pts) sum += y, ++cnt;
      s.meanDurationMs = cnt > 0 ? sum / cnt : 0;
    }
    {
      // The last reduction's own time: the window's mean reduction (at most the tail); what
      // the tail measured beyond it is the queue.
      const double E = s.measured.exposedCommMs;
      s.lastOwnMs = std::min(E, s.meanDurationMs);
      s.queueMs = std::max(0.0, E - s.lastOwnMs);
      s.tailBuckets = mean(tailBuckets);
    }
    s.lastPayload = mean(lastPayloads);
    {
      s.lastWireBytes = mean(lastWire);
    }
    {
      double early = 0;
      for (const BwdStep& b : bwdSteps) early += static_cast<double>(b.earlyBuckets);
      s.earlyBuckets = bwdSteps.empty() ? 0 : early / static_cast<double>(bwdSteps.size());
    }
    s.measured.overlapRatio = overlap.empty() ? -1 : mean(overlap);
    s.measured.bytes = mean(wire);
    // Per-layer bytes: exact from single-layer buckets, the rest split by W time.
    s.layerBytes.assign(static_cast<size_t>(s.layers), 0);
    s.layerBytesExact.assign(static_cast<size_t>(s.layers), false);
    for (const auto& [g, b] : groupBytes)
      if (g.size() == 1)
        s.layerBytes[static_cast<size_t>(g[0])] = b, s.layerBytesExact[static_cast<size_t>(g[0])] = true;
    for (const auto& [g, b] : groupBytes) {
      if (g.size() == 1) continue;
      double known = 0, wt = 0;
      for (int64_t l : g)
        if (s.layerBytesExact[static_cast<size_t>(l)])
          known += s.layerBytes[static_cast<size_t>(l)];
        else
          wt += wMsPerLayer[static_cast<size_t>(l)];
      for (int64_t l : g)
        if (!s.layerBytesExact[static_cast<size_t>(l)])
          s.layerBytes[static_cast<size_t>(l)] = wt > 0
                                                     ? (b - known) * wMsPerLayer[static_cast<size_t>(l)] / wt
                                                     : (b - known) / static_cast<double>(g.size());
    }
    // Fits: service ms = alpha + msPerByte * wire bytes (least squares; alpha >= 0).
    for (const auto& [algo, pts] : svc) {
      WhatIfFit f;
      f.key = algo;
      f.samples = static_cast<int>(pts.size());
      double sx = 0, sy = 0, sxx = 0, sxy = 0;
      for (const auto& [x, y] : pts) sx += x, sy += y, sxx += x * x, sxy += x * y;
      const double N = static_cast<double>(pts.size());
      const double den = N * sxx - sx * sx;
      if (pts.size() >= 2 && den > 1e-9 * N * sxx) {
        f.msPerByte = (N * sxy - sx * sy) / den;
        f.alphaMs = (sy - f.msPerByte * sx) / N;
      }
      // Sizes within a factor 2 of each other do not constrain the slope: a line through them
      // is the noise's (a 2 KiB ring window fitted 0.3 ms per KiB with its intercept at 0).
      double lo = INFINITY, hi = 0;
      for (const auto& [x, y] : pts) lo = std::min(lo, x), hi = std::max(hi, x);
      const bool twoSizes = pts.size() >= 2 && den > 1e-9 * N * sxx && hi >= 2 * lo;
      if (!twoSizes) {
        // One message size: latency and bandwidth cannot be told apart. Split the measured time
        // T at size S with a prior crossover size n1/2 (latency = bandwidth time there):
        // alpha = T n1/2 / (n1/2 + S), beta = T / (n1/2 + S). Small buckets stay latency-bound,
        // large ones bandwidth-bound (docs/TUNING.md).
        const double S = N > 0 ? sx / N : 0, T = N > 0 ? sy / N : 0;
        f.alphaMs = T * kHalfPowerBytes / (kHalfPowerBytes + S);
        f.msPerByte = T / (kHalfPowerBytes + S);
        s.oneSize = true;
      } else if (f.alphaMs < 0 || f.msPerByte < 0) {
        // Non-negative least squares: the optimum lies on a boundary, a line through the
        // origin (bandwidth only) or a constant (latency only: on a CPU/MPI job a bucket
        // completes at a progress point); keep the one with the smaller squared residual.
        const double slope = sxx > 0 ? std::max(0.0, sxy / sxx) : 0;
        const double level = sy / N;
        double resOrigin = 0, resLevel = 0;
        for (const auto& [x, y] : pts) {
          resOrigin += (y - slope * x) * (y - slope * x);
          resLevel += (y - level) * (y - level);
        }
        if (resLevel < resOrigin) {
          f.alphaMs = level;
          f.msPerByte = 0;
        } else {
          f.alphaMs = 0;
          f.msPerByte = slope;
          if (slope <= 0) f.alphaMs = level;
        }
      }
      s.fits[algo] = f;
    }
    // Wire-bytes calibration: what the trace says over what the formula says, same setting.
    double formula = 0;
    {
      const std::string alg = knobOr(s.knobs, "dp.algorithm", "allreduce");
      const std::string codec = knobOr(s.knobs, "dp.compression", "none");
      const double ratio = std::atof(knobOr(s.knobs, "dp.topk_ratio", "0.01").c_str());
      const int64_t bb = std::atoll(knobOr(s.knobs, "dp.bucket_bytes", "1048576").c_str());
      double acc = 0;
      for (int l = s.layers - 1; l >= 0; --l) {
        acc += s.layerBytes[static_cast<size_t>(l)];
        if (acc >= static_cast<double>(bb) || l == 0) {
          formula += wireFormula(alg, codec, ratio, static_cast<size_t>(std::llround(acc / 4)), s.world);
          acc = 0;
        }
      }
    }
    if (formula > 0 && s.measured.bytes > 0) s.wireCalibration = s.measured.bytes / formula;
  }

  if (s.pp) {
    // Per stage over the window's steps only: a recording that ran other settings before (other
    // micro-batch sizes, other schedules) must not enter this setting's op times (before Nov 24
    // these were the whole session's means, so a model of one cell of a grid recording mixed in
    // every cell's micro-batch size).
    AnalysisResult a = analyzeStore(store, s.fromStep, s.toStep);
    if (!a.pipeline.present || a.pipeline.perStage.empty())
      return Status(ErrorCode::InvalidArgument,
                    "the session's pp.* knobs are set but it has no pipeline events");
    s.stages = static_cast<int>(a.pipeline.perStage.size());
    s.chunks = std::max(1, a.pipeline.virtualStages);
    // The analysis' op means are per op, i.e. per chunk when a stage holds several chunks; the
    // model's times are per micro-batch and whole stage (the simulator gives a chunk op 1/v).
    const double perStage = static_cast<double>(s.chunks);
    for (const StageResult& st : a.pipeline.perStage) {
      s.fMs.push_back(std::isfinite(st.fMs) ? st.fMs * perStage : 0);
      s.bMs.push_back(std::isfinite(st.bMs) ? st.bMs * perStage : 0);
      s.wMs.push_back(std::isfinite(st.wMs) ? st.wMs * perStage : 0);
      if (std::isfinite(st.wMs) && st.wMs > 0) s.measuredSplit = true;
    }
    int64_t winLo = INT64_MAX, winHi = INT64_MIN;
    for (const auto& [key, x] : rs) winLo = std::min(winLo, x.step.a), winHi = std::max(winHi, x.step.b);
    // Per stage over its ranks in the window: the F, B and W ops' time and the per-layer kernels'
    // ("F/B/W <layer>"). The kernels' share of each op kind scales with the samples (F kernels in
    // F ops; B kernels, and W kernels of an unsplit backward, in B ops; W kernels in W ops); the W
    // kernels' share of an unsplit backward is what a split schedule would move into its W ops.
    {
      struct Sums {
        std::array<double, 3> op{};  // F, B, W ops
        double f = 0, b = 0, w = 0;  // F, B, W kernels
      };
      std::map<RankId, Sums> sums;
      for (TrackId t = 0; t < store.trackCount(); ++t) {
        Sums& x = sums[store.track(t).rank];
        const TrackEvents& ev = store.events(t);
        ev.forEachOverlapping(winLo, winHi, [&](size_t i) {
          if (ev.start(i) < winLo || ev.end(i) <= ev.start(i)) return;
          const double d = static_cast<double>(ev.end(i) - ev.start(i)) / kNsPerMs;
          switch (ev.kind(i)) {
            case EventKind::MicroBatchF: x.op[0] += d; break;
            case EventKind::MicroBatchB: x.op[1] += d; break;
            case EventKind::MicroBatchW: x.op[2] += d; break;
            case EventKind::Kernel: {
              const std::string_view n = store.str(ev.name(i));
              if (n.starts_with("F ")) x.f += d;
              else if (n.starts_with("B ")) x.b += d;
              else if (n.starts_with("W ")) x.w += d;
              break;
            }
            default: break;
          }
        });
      }
      for (const StageResult& st : a.pipeline.perStage) {
        Sums z;
        for (RankId r : st.ranks) {
          const Sums& x = sums[r];
          for (int k = 0; k < 3; ++k) z.op[k] += x.op[k];
          z.f += x.f, z.b += x.b, z.w += x.w;
        }
        const std::array<double, 3> kern{z.f, s.measuredSplit ? z.b : z.b + z.w, s.measuredSplit ? z.w : 0};
        std::array<double, 3> share{1, 1, 1};
        for (int k = 0; k < 3; ++k)
          if (z.op[k] > 0 && kern[k] > 0) share[k] = std::clamp(kern[k] / z.op[k], 0.0, 1.0);
        s.kernelShare.push_back(share);
        s.wShare.push_back(z.b > 0 && z.w > 0 ? z.w / (z.b + z.w) : NAN);
      }
    }
    // Calibration of the stage's layers alone at several samples per micro-batch: per rank, per
    // (op kind, samples, layer), the fastest of the last three before the window's end; per
    // stage the sum over its layers, the median over its ranks (replicas).
    {
      std::map<RankId, std::map<std::pair<int, int64_t>, std::map<int64_t, std::vector<std::pair<int64_t, double>>>>> cal;
      for (TrackId t = 0; t < store.trackCount(); ++t) {
        const RankId rank = store.track(t).rank;
        const TrackEvents& ev = store.events(t);
        for (size_t i = 0; i < ev.size(); ++i) {
          if (ev.kind(i) != EventKind::Kernel || ev.start(i) >= winHi || ev.end(i) <= ev.start(i)) continue;
          const std::string_view n = store.str(ev.name(i));
          if (!n.starts_with("calibrate pp ") || n.size() < 16) continue;
          const int kind = n[13] == 'F' ? 0 : n[13] == 'B' ? 1 : n[13] == 'W' ? 2 : n[13] == 'D' ? 3 : -1;
          const int64_t samples = std::atoll(std::string(n.substr(15)).c_str());
          const Attr* l = ev.findAttr(i, AttrKey::Layer);
          if (kind < 0 || samples < 1 || !l) continue;
          cal[rank][{kind, samples}][l->asInt()].push_back(
              {ev.start(i), static_cast<double>(ev.end(i) - ev.start(i)) / kNsPerMs});
        }
      }
      for (const StageResult& st : a.pipeline.perStage) {
        std::array<std::map<int64_t, double>, 4> stage;
        std::map<std::pair<int, int64_t>, std::vector<double>> perRank;
        for (RankId r : st.ranks) {
          auto it = cal.find(r);
          if (it == cal.end()) continue;
          for (auto& [key, layers] : it->second) {
            double sum = 0;
            for (auto& [layer, v] : layers) sum += fastestOfLast(v, 3);
            perRank[key].push_back(sum);
          }
        }
        for (auto& [key, v] : perRank) stage[static_cast<size_t>(key.first)][key.second] = medianOf(v);
        s.ppCalib.push_back(stage);
      }
    }
    // Hand-off: the mean P2P send interval (the time the sender spends posting it), in the window.
    std::vector<double> sends;
    for (TrackId t = 0; t < store.trackCount(); ++t) {
      const TrackEvents& ev = store.events(t);
      for (size_t i = 0; i < ev.size() && sends.size() < 100000; ++i)
        if (ev.kind(i) == EventKind::P2PSend && ev.start(i) >= winLo && ev.start(i) < winHi &&
            store.str(ev.name(i)) == "pp send")
          sends.push_back(static_cast<double>(ev.end(i) - ev.start(i)) / kNsPerMs);
    }
    s.sendCostMs = mean(sends);
    double waited = 0, handoffs = 0;
    for (const StageResult& st : a.pipeline.perStage)
      if (std::isfinite(st.handoffLatencyUs) && std::isfinite(st.handoffsPerStep) && st.handoffsPerStep > 0)
        waited += st.handoffLatencyUs / 1e3 * st.handoffsPerStep, handoffs += st.handoffsPerStep;
    s.sendLatencyMs = handoffs > 0 ? std::max(0.0, waited / handoffs - s.sendCostMs) : 0.0;
    // The drawn measured step: the step of median length (over ranks), every stage's ops.
    {
      std::map<int64_t, std::vector<std::pair<RankId, Iv>>> byStep;
      for (const auto& [key, x] : rs) byStep[key.second].push_back({key.first, x.step});
      std::vector<std::pair<int64_t, int64_t>> lens;  // (span, step), steps every rank finished
      size_t ranksMax = 0;
      for (const auto& [st, v] : byStep) ranksMax = std::max(ranksMax, v.size());
      for (const auto& [st, v] : byStep) {
        if (v.size() < ranksMax) continue;
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        for (const auto& [r, iv] : v) lo = std::min(lo, iv.a), hi = std::max(hi, iv.b);
        lens.push_back({hi - lo, st});
      }
      std::sort(lens.begin(), lens.end());
      if (!lens.empty()) {
        const int64_t st = lens[lens.size() / 2].second;
        std::map<RankId, Iv> win;
        int64_t origin = INT64_MAX;
        for (const auto& [r, iv] : byStep[st]) win[r] = iv, origin = std::min(origin, iv.a);
        for (TrackId t = 0; t < store.trackCount(); ++t) {
          auto w = win.find(store.track(t).rank);
          if (w == win.end()) continue;
          const TrackEvents& ev = store.events(t);
          for (size_t i = 0; i < ev.size(); ++i) {
            const EventKind k = ev.kind(i);
            if (k != EventKind::MicroBatchF && k != EventKind::MicroBatchB && k != EventKind::MicroBatchW &&
                k != EventKind::P2PSend)
              continue;
            if (ev.start(i) < w->second.a || ev.start(i) >= w->second.b) continue;
            const Attr* stage = ev.findAttr(i, AttrKey::Stage);
            const Attr* mb = ev.findAttr(i, AttrKey::MicroBatch);
            const Attr* chunk = ev.findAttr(i, AttrKey::Chunk);
            const std::string lane =
                "stage " + std::to_string(stage ? stage->asInt() : static_cast<int64_t>(w->first));
            const double t0 = static_cast<double>(ev.start(i) - origin) / kNsPerMs;
            const double t1 = static_cast<double>(ev.end(i) - origin) / kNsPerMs;
            if (k == EventKind::P2PSend)
              s.measuredTimeline.push_back({lane, "send", StepOp::Kind::Communication, t0, t1});
            else
              s.measuredTimeline.push_back({lane, pipeLabel(k, mb ? mb->asInt() : 0, chunk ? chunk->asInt() : 0),
                                            StepOp::Kind::Compute, t0, t1});
          }
        }
        s.measuredTimelineStep = st;
      }
    }
    s.measured.bubbleFraction = std::isfinite(a.pipeline.bubbleFraction) ? a.pipeline.bubbleFraction : -1;
    s.pipeRestMs = 0;
    auto sim = m.predict({});
    if (!sim) return sim.status();
    s.pipeRestMs = s.measured.stepTimeMs - sim->stepTimeMs;
    // No observer term here (State::observerMsPerEvent): a pipeline's ranks wait in their
    // bubbles, where the observer's CPU need not delay the critical path. Counted per step as
    // for data parallel (kernels with m, ops and hand-offs with the schedule's ops), it put the
    // m = 8 cells of the pipeline grid 3 % higher (+3.4 … +12.4 % instead of +0.5 … +9) and the
    // m = 1 cells 2 % lower (BENCHMARKS.md, "fp16 in hardware, the observer's share…").
    if (s.measured.bubbleFraction >= 0 && s.pipeRestMs > 0)
      s.pipeRestIdleMs = std::clamp(s.measured.bubbleFraction * s.measured.stepTimeMs -
                                        sim->bubbleFraction * sim->stepTimeMs,
                                    0.0, s.pipeRestMs);
  }
  if (s.disco) {
    AnalysisResult a = analyzeStore(store, s.fromStep, s.toStep);
    for (const DiscoLayer& l : a.disco) {
      if (!std::isfinite(l.lCompMs)) continue;
      State::DiscoLayerModel d;
      d.layer = l.layer;
      d.nodes = std::max(1, l.nodes);
      d.sparsity = l.sparsity;
      d.commMs = std::isfinite(l.lCommMs) ? l.lCommMs : 0;
      d.compMs = l.lCompMs;
      d.bytes = std::isfinite(l.bytes) ? l.bytes : 0;
      d.commDenseMs = l.commDenseMs;  // NaN at sparsity 1: nothing was sent
      d.compDenseMs = std::isfinite(l.compDenseMs) ? l.compDenseMs : l.lCompMs;
      d.overlapMs = std::isfinite(l.lOverlapMs) ? l.lOverlapMs : 0;
      s.discoLayers.push_back(d);
      s.measured.bytes += d.bytes;
    }
    // Calibration: per rank, the passes ("calibrate disco <S>" ranges) that started before the
    // window's end; per pass and split layer the union of its "calibrate disco F|B" kernels and
    // of its "calibrate disco exchange" events; per (layer, S) the fastest of the last five
    // passes (one calibration), the median over ranks.
    {
      int64_t winHi = INT64_MIN;
      for (const auto& [key, x] : rs) winHi = std::max(winHi, x.step.b);
      struct Pass {
        int64_t a, b;
        double sparsity;
      };
      std::map<RankId, std::vector<Pass>> passes;
      for (TrackId t = 0; t < store.trackCount(); ++t) {
        const TrackEvents& ev = store.events(t);
        for (size_t i = 0; i < ev.size(); ++i) {
          if (ev.kind(i) != EventKind::Range || ev.start(i) >= winHi || ev.end(i) <= ev.start(i)) continue;
          const std::string_view n = store.str(ev.name(i));
          constexpr std::string_view kPass = "calibrate disco ";
          if (!n.starts_with(kPass)) continue;
          const std::string num(n.substr(kPass.size()));
          char* end = nullptr;
          const double sp = std::strtod(num.c_str(), &end);
          if (num.empty() || *end || !(sp >= 0 && sp <= 1)) continue;
          passes[store.track(t).rank].push_back({ev.start(i), ev.end(i), sp});
        }
      }
      for (auto& [r, v] : passes) std::sort(v.begin(), v.end(), [](const Pass& x, const Pass& y) { return x.a < y.a; });
      const std::optional<StringId> nf = store.strings().find("calibrate disco F"),
                                    nb = store.strings().find("calibrate disco B"),
                                    nx = store.strings().find("calibrate disco exchange");
      // [rank][pass][layer] -> (kernel intervals, exchange intervals)
      std::map<RankId, std::map<size_t, std::map<int64_t, std::array<std::vector<std::pair<double, double>>, 2>>>> in;
      for (TrackId t = 0; t < store.trackCount() && !passes.empty(); ++t) {
        auto pv = passes.find(store.track(t).rank);
        if (pv == passes.end()) continue;
        const TrackEvents& ev = store.events(t);
        for (size_t i = 0; i < ev.size(); ++i) {
          const StringId name = ev.name(i);
          const int which = (nf && name == *nf) || (nb && name == *nb) ? 0 : nx && name == *nx ? 1 : -1;
          if (which < 0 || ev.end(i) <= ev.start(i)) continue;
          const Attr* l = ev.findAttr(i, AttrKey::Layer);
          if (!l) continue;
          const auto& v = pv->second;
          auto it = std::upper_bound(v.begin(), v.end(), ev.start(i), [](int64_t x, const Pass& p) { return x < p.a; });
          if (it == v.begin() || ev.start(i) >= std::prev(it)->b) continue;
          in[pv->first][static_cast<size_t>(std::prev(it) - v.begin())][l->asInt()][static_cast<size_t>(which)].push_back(
              {static_cast<double>(ev.start(i)), static_cast<double>(ev.end(i))});
        }
      }
      // [layer][S] -> per rank ((start, comp ms), (start, comm ms)) of each pass
      std::map<int64_t, std::map<double, std::map<RankId, std::array<std::vector<std::pair<int64_t, double>>, 2>>>> per;
      for (auto& [r, byPass] : in)
        for (auto& [k, layers] : byPass) {
          const Pass& pass = passes[r][k];
          for (auto& [layer, iv] : layers)
            for (size_t w = 0; w < 2; ++w)
              per[layer][pass.sparsity][r][w].push_back({pass.a, unionLength(iv[w]) / kNsPerMs});
        }
      for (State::DiscoLayerModel& d : s.discoLayers) {
        auto pl = per.find(d.layer);
        if (pl == per.end()) continue;
        for (auto& [sp, ranks] : pl->second) {
          std::vector<double> comp, comm;
          for (auto& [r, v] : ranks) {
            // A pass that sent nothing (S = 1) has no exchange events: 0 ms.
            if (!v[0].empty()) comp.push_back(fastestOfLast(v[0], 5));
            comm.push_back(v[1].empty() ? 0.0 : fastestOfLast(v[1], 5));
          }
          if (!comp.empty()) d.calib[sp] = {medianOf(comp), medianOf(comm)};
        }
      }
    }
    // The drawn measured step (the ghost's partner): the median-length step of the lowest rank,
    // each split layer's kernels and exchanges on its lane, from the step's start.
    {
      std::vector<std::pair<int64_t, int64_t>> lens;  // (length, step)
      RankId r0 = rs.empty() ? 0 : rs.begin()->first.first;
      for (const auto& [key, x] : rs)
        if (key.first == r0) lens.push_back({x.step.b - x.step.a, key.second});
      std::sort(lens.begin(), lens.end());
      std::set<int64_t> layers;
      for (const auto& d : s.discoLayers) layers.insert(d.layer);
      const StringId exName = store.strings().find("disco exchange").value_or(UINT32_MAX);
      if (!lens.empty() && !layers.empty()) {
        const int64_t st = lens[lens.size() / 2].second;
        const Iv w = rs.at({r0, st}).step;
        for (TrackId t = 0; t < store.trackCount(); ++t) {
          if (store.track(t).rank != r0) continue;
          const TrackEvents& ev = store.events(t);
          for (size_t i = 0; i < ev.size(); ++i) {
            if (ev.start(i) < w.a || ev.start(i) >= w.b || ev.end(i) <= ev.start(i)) continue;
            const bool exchange = ev.name(i) == exName;
            if (!exchange && ev.kind(i) != EventKind::Kernel) continue;
            const Attr* l = ev.findAttr(i, AttrKey::Layer);
            if (!l || !layers.count(l->asInt())) continue;
            s.measuredTimeline.push_back({"layer " + std::to_string(l->asInt()), exchange ? "exchange" : "compute",
                                          exchange ? StepOp::Kind::Communication : StepOp::Kind::Compute,
                                          static_cast<double>(ev.start(i) - w.a) / kNsPerMs,
                                          static_cast<double>(ev.end(i) - w.a) / kNsPerMs});
          }
        }
        s.measuredTimelineStep = st;
      }
    }
    if (knobOr(s.knobs, "disco.mode", "pipelined") == "pipelined") {
      double hidden = 0, hideable = 0;
      for (auto& d : s.discoLayers) {
        const double hideable1 = std::min(d.commMs, d.compMs);
        if (hideable1 > 0) d.overlapShare = std::clamp(d.overlapMs / hideable1, 0.0, 1.0);
        hidden += d.overlapMs, hideable += hideable1;
      }
      if (hideable > 0) s.discoOverlapShare = std::clamp(hidden / hideable, 0.0, 1.0);
    }
    // No layer exchanged anything in the window (every split layer at sparsity 1): the model
    // replays the step and flags every change (the layers' exchange costs are unknown).
    s.discoRestMs = 0;
    auto sim = m.predict({});
    if (!sim) return sim.status();
    s.discoRestMs = s.measured.stepTimeMs - sim->stepTimeMs;
    s.measured.exposedCommMs = sim->exposedCommMs;  // the model's, at the measured setting
  }
  return m;
}

Result<WhatIfPrediction> WhatIfModel::predict(const std::map<std::string, std::string>& changes) const {
  const State& s = *s_;
  WhatIfPrediction p;
  p.knobs = s.knobs;
  for (const auto& [k, v] : changes) {
    if (!s.knobs.count(k))
      return Status(
          ErrorCode::InvalidArgument, "the session has no knob " + k + " (it has: " + [&] {
            std::string names;
            for (const auto& [n, x] : s.knobs) names += (names.empty() ? "" : ", ") + n;
            return names;
          }() + ")");
    p.knobs[k] = v;
  }
  if (std::string note = windowNote(); !note.empty()) p.notes.push_back(std::move(note));
  auto get = [&](const char* k, const char* d) { return knobOr(p.knobs, k, d); };
  if (s.pp) {
    auto kind = parseSchedule(get("pp.schedule", "1f1b"));
    if (!kind) return kind.status();
    const int m0 = std::max(1, std::atoi(knobOr(s.knobs, "pp.microbatches", "1").c_str()));
    ScheduleParams sp;
    sp.kind = *kind;
    sp.stages = s.stages;
    sp.microBatches = std::atoi(get("pp.microbatches", "1").c_str());
    sp.virtualStages =
        *kind == ScheduleKind::Interleaved1F1B ? std::atoi(get("pp.virtual_stages", "1").c_str()) : 1;
    // PyTorch's zero-bubble schedules have no pp.virtual_stages knob: the chunks the session ran
    // (zbv always 2, its V)
    if (*kind == ScheduleKind::InterleavedZb)
      sp.virtualStages = p.knobs.count("pp.virtual_stages") ? std::atoi(get("pp.virtual_stages", "1").c_str())
                                                            : s.chunks;
    if (*kind == ScheduleKind::Zbv) sp.virtualStages = 2;
    sp.segments = *kind == ScheduleKind::Seq1F1B ? std::atoi(get("pp.segments", "1").c_str()) : 1;
    if (Status st = validateSchedule(sp); !st) return st;
    auto sched = generateSchedule(sp);
    if (!sched) return sched.status();
    // Per-op times scale with the micro-batch size (samples per micro-batch: m0 / m of the measured).
    const double scale = static_cast<double>(m0) / sp.microBatches;
    const bool split = sched->splitBackward;
    const bool sharesTraced =
        !s.wShare.empty() && std::all_of(s.wShare.begin(), s.wShare.end(), [](double x) { return std::isfinite(x); });
    if (split && !s.measuredSplit && sharesTraced) {
      p.notes.push_back("the session ran no split backward: the split schedule's B and W divide the measured B as "
                        "its traced input- and weight-gradient kernels do");
    } else if (split && !s.measuredSplit) {
      p.extrapolated = true;
      p.notes.push_back(
          "the session ran no split backward: the split schedule's B and W are taken as halves of the measured B");
    }
    // The kernels' time at another micro-batch size: by the stage's calibrated time of that op
    // kind at the new samples per micro-batch over the measured one, interpolated linearly
    // between calibrated sizes (the replica batch: the largest calibrated size); the sample
    // ratio where the job did not calibrate, or with sequence segments.
    // The window's segments: pp.segments acts under seq1f1b only (trainscope-train runs every
    // other schedule with k = 1). Read regardless of the schedule (until Nov 25), the demo's
    // default pp.segments=2 turned the calibration off for every 1F1B/GPipe/ZB window and put
    // m = 1 and 2 on the sample ratio: +12 and +10 % in the pipeline grid (BENCHMARKS.md).
    auto kind0 = parseSchedule(knobOr(s.knobs, "pp.schedule", "1f1b"));
    const bool seq0 = kind0.isOk() && *kind0 == ScheduleKind::Seq1F1B;
    const int segments0 = seq0 ? std::max(1, std::atoi(knobOr(s.knobs, "pp.segments", "1").c_str())) : 1;
    auto calAt = [](const std::map<int64_t, double>& c, double samples) {
      auto hi = c.lower_bound(static_cast<int64_t>(std::ceil(samples)));
      if (hi != c.end() && static_cast<double>(hi->first) == samples) return hi->second;
      if (hi == c.begin()) return hi->second * samples / static_cast<double>(hi->first);
      if (hi == c.end()) return std::prev(hi)->second * samples / static_cast<double>(std::prev(hi)->first);
      auto lo = std::prev(hi);
      const double f = (samples - static_cast<double>(lo->first)) / static_cast<double>(hi->first - lo->first);
      return lo->second + f * (hi->second - lo->second);
    };
    bool calibratedKernels = false;
    // The kernels' calibrated time of op kinds `now` at the new samples per micro-batch over that
    // of kinds `then` at the window's. A W deferred as split schedules run it (D) is slower than
    // one right after its B (W) where a micro-batch's activations leave the caches: a split
    // schedule's W moves by D, and from a window that ran no split backward by D over W (its W
    // was part of a fused B); without D (older jobs) as W.
    auto kernelRatio = [&](size_t stage, std::initializer_list<int> nowKinds, std::initializer_list<int> thenKinds) {
      if (stage >= s.ppCalib.size() || sp.segments != 1 || segments0 != 1) return scale;
      const auto& cal = s.ppCalib[stage];
      auto at = [&](int k, int m) -> double {
        if (k == 3 && cal[3].empty()) k = 2;
        const auto& c = cal[static_cast<size_t>(k)];
        if (c.empty()) return NAN;
        return calAt(c, static_cast<double>(c.rbegin()->first) / m);
      };
      double now = 0, then = 0;
      for (int k : nowKinds) now += at(k, sp.microBatches);
      for (int k : thenKinds) then += at(k, m0);
      if (!std::isfinite(now) || !std::isfinite(then) || !(then > 0)) return scale;
      calibratedKernels = true;
      return now / then;
    };
    OpDurations base;
    base.sendLatency = s.sendLatencyMs;
    base.sendCost = s.sendCostMs;
    auto dur = [&](int stage, const PipeOp& op) {
      const auto i = static_cast<size_t>(stage);
      // Each op kind's time in a fixed part (per op) and a part that scales with the samples per
      // micro-batch: its traced kernels' share (all of it where no kernels are traced).
      const std::array<double, 3> ks = i < s.kernelShare.size() ? s.kernelShare[i] : std::array<double, 3>{1, 1, 1};
      const double f = s.fMs[i], b = s.bMs[i], w = s.wMs[i];
      double fixed = 0, scaled = 0;
      if (op.kind == OpKind::Forward) {
        fixed = f * (1 - ks[0]), scaled = f * ks[0];
      } else {
        double bFixed = b * (1 - ks[1]), bScaled = b * ks[1], wFixed = w * (1 - ks[2]), wScaled = w * ks[2];
        if (!s.measuredSplit && split) {  // W takes its kernels' share of the measured B
          const double share = sharesTraced ? s.wShare[i] : 0.5;
          wFixed = bFixed * share, wScaled = bScaled * share;
          bFixed *= 1 - share, bScaled *= 1 - share;
        }
        if (s.measuredSplit && !split) bFixed += wFixed, bScaled += wScaled, wFixed = wScaled = 0;
        if (op.kind == OpKind::Backward) fixed = bFixed, scaled = bScaled;
        else fixed = wFixed, scaled = wScaled;
      }
      const bool was = s.measuredSplit;
      const double r = op.kind == OpKind::Forward ? kernelRatio(i, {0}, {0})
                       : op.kind == OpKind::Weight ? (was ? kernelRatio(i, {3}, {3}) : kernelRatio(i, {3}, {2}))
                       : split                     ? kernelRatio(i, {1}, {1})
                       : was                       ? kernelRatio(i, {1, 2}, {1, 3})
                                                   : kernelRatio(i, {1, 2}, {1, 2});
      return (fixed + scaled * r) / (sp.virtualStages * sp.segments);
    };
    auto sim = simulateSchedule(*sched, base, dur);
    if (!sim) return sim.status();
    p.stepTimeMs = sim->makespan + s.pipeRestMs;
    // The analysis counts a stage's bubble over its whole step window (docs/ANALYSIS.md): of the
    // rest of the step outside the simulated makespan (optimizer, batch loading, the job's own
    // pauses) the part it counted idle at the measured setting stays idle, so the replay
    // equals the measured bubble.
    p.bubbleFraction = sim->bubbleFraction;
    if (s.pipeRestMs > 0 && p.stepTimeMs > 0)
      p.bubbleFraction = (sim->bubbleFraction * sim->makespan + (s.pipeRestIdleMs >= 0 ? s.pipeRestIdleMs : s.pipeRestMs)) /
                         p.stepTimeMs;
    for (size_t st = 0; st < sched->stages.size() && st < sim->stages.size(); ++st) {
      const auto& ops = sched->stages[st];
      const auto& times = sim->stages[st].opTimes;
      for (size_t i = 0; i < ops.size() && i < times.size(); ++i) {
        const PipeOp& op = ops[i];
        if (op.kind == OpKind::Recv) continue;
        if (op.kind == OpKind::Send && times[i].end <= times[i].start) continue;
        p.timeline.push_back({"stage " + std::to_string(st), op.kind == OpKind::Send ? "send" : opLabel(op),
                              op.kind == OpKind::Send ? StepOp::Kind::Communication : StepOp::Kind::Compute,
                              times[i].start, times[i].end});
      }
    }
    p.exposedCommMs = 0;
    {
      const bool traced = std::any_of(s.kernelShare.begin(), s.kernelShare.end(), [](const auto& x) {
        return x[0] < 1 || x[1] < 1 || x[2] < 1;
      });
      p.notes.push_back(calibratedKernels
                            ? "pipeline: the ops' traced kernels moved by the job's calibration of each stage's layers "
                              "at the new samples per micro-batch over the measured (the rest of each op is a fixed "
                              "cost per op)"
                            : "pipeline: per-op times scaled by " + fmt(scale) + " from the measured micro-batch size" +
                                  (traced ? " (their traced kernels; the rest of each op is a fixed cost per op)"
                                          : " (the whole op: no per-layer kernels traced)"));
    }
    return p;
  }
  if (s.disco) {
    // background.md 1, per split layer at sparsity S over N ranks: L_comm = F_s/B (1 - S),
    // L_comp = C_c/(N C) (1 - (N-1)/N S), the dense terms from the window's measurement;
    // pipelined: L = max(L_comm, L_comp), wait: L = L_comm + L_comp, the paper's two ends.
    // Between them, what the job's pipelining achieves, measured: L = L_comm + L_comp - h
    // min(L_comm, L_comp), h the window's overlap share (1: the paper's max; 0: nothing hidden);
    // from a wait window the paper's h = 1, flagged. The step = the measured step - the layers'
    // L at the measured setting + theirs at the new one (the replay is exact).
    // disco.sparsity sets every layer; disco.sparsity.<l> in the same change wins for layer l
    // (trainscope-train's rule, TRAINER.md).
    const std::string mode = get("disco.mode", "pipelined");
    if (mode != "pipelined" && mode != "wait")
      return Status(ErrorCode::InvalidArgument, "disco.mode is pipelined or wait, not " + mode);
    // Every sparsity asked for, checked before anything is predicted (also those of layers the
    // window has no exchanges of).
    std::map<std::string, double> sparsity;  // disco.sparsity[.<l>] -> value
    for (const auto& [k, v] : changes) {
      if (k.rfind("disco.sparsity", 0) != 0) continue;
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (v.empty() || end == v.c_str() || *end || !(x >= 0 && x <= 1))
        return Status(ErrorCode::InvalidArgument, k + " is a number in [0, 1], not " + v);
      sparsity[k] = x;
    }
    p.bytes = 0;
    p.stepTimeMs = s.discoRestMs;
    bool commUnknown = false, calibrated = false;

    double t = 0;
    for (const State::DiscoLayerModel& d : s.discoLayers) {
      double sp = d.sparsity;
      if (auto it = sparsity.find("disco.sparsity"); it != sparsity.end()) sp = it->second;
      if (auto it = sparsity.find("disco.sparsity." + std::to_string(d.layer)); it != sparsity.end()) sp = it->second;
      const double n = d.nodes;
      double comm = d.commMs, comp = d.compMs;
      if (sp != d.sparsity && d.calib.size() >= 2) {
        // The job's calibration: each measured cost plus the calibrated one at the new sparsity
        // less the calibrated one at the window's (a difference, never a ratio: what does not
        // depend on the sparsity, such as waiting for the other ranks, stays).
        // At S = 1 the layer exchanges nothing, so the ranks no longer wait for each other there
        // either: its exchange goes, waiting included (the 2-rank CPU job's S = 1 cells ran
        // 20 % faster than the waiting kept would say, BENCHMARKS.md).
        const auto at = calibAt(d.calib, sp), was = calibAt(d.calib, d.sparsity);
        comp = std::max(0.0, d.compMs + at.first - was.first);
        comm = sp >= 1 ? 0.0 : std::max(0.0, d.commMs + at.second - was.second);
        calibrated = true;
      } else if (sp != d.sparsity) {
        if (std::isfinite(d.commDenseMs))
          comm = d.commDenseMs * (1 - sp);
        else if (sp < 1)
          commUnknown = true, comm = 0;
        comp = d.compDenseMs * (1 - (n - 1) / n * sp);
      }
      const double share = std::isfinite(d.overlapShare)        ? d.overlapShare
                           : std::isfinite(s.discoOverlapShare) ? s.discoOverlapShare
                                                                : 1.0;
      const double hidden = mode == "wait" ? 0.0 : share * std::min(comm, comp);
      const double layerMs = comm + comp - hidden;
      p.stepTimeMs += layerMs;
      p.bytes += d.sparsity < 1 ? d.bytes * (1 - sp) / (1 - d.sparsity) : 0;
      const std::string lane = "layer " + std::to_string(d.layer);
      p.timeline.push_back({lane, "compute", StepOp::Kind::Compute, t, t + comp});
      const double c0 = t + comp - hidden;
      if (comm > 0) p.timeline.push_back({lane, "exchange", StepOp::Kind::Communication, c0, c0 + comm});
      t += layerMs;
      p.exposedCommMs += comm - hidden;
    }
    if (calibrated)
      p.notes.push_back("DISCO: each layer's measured exchange and compute moved by the job's calibration at the "
                        "new sparsity less its calibration at the window's (trainscope-train's passes at 0, 0.25, "
                        "0.5, 0.75 and 1, interpolated between them)");
    else if (std::any_of(s.discoLayers.begin(), s.discoLayers.end(), [](const auto& d) { return d.calib.size() < 2; }))
      p.notes.push_back("DISCO: no calibration of the layers in the session; exchange and compute scaled by "
                        "background.md 1's formulas");
    if (s.discoLayers.empty() && !changes.empty()) {
      p.extrapolated = true;
      p.notes.push_back("no layer exchanged features in the window (all at sparsity 1): the layers' exchange "
                        "and compute costs are unknown, the step is the measured one");
    }
    if (commUnknown) {
      p.extrapolated = true;
      p.notes.push_back("a layer ran at sparsity 1 in the window (nothing sent): its exchange time at a lower "
                        "sparsity is unknown and taken as 0");
    }
    if (mode == "pipelined" && !std::isfinite(s.discoOverlapShare) && !s.discoLayers.empty()) {
      p.extrapolated = true;
      p.notes.push_back("disco.mode pipelined from a window that ran wait: how much of the exchange pipelining "
                        "hides is not measured; the paper's max of exchange and compute per layer");
    } else if (mode == "pipelined" && !s.discoLayers.empty()) {
      p.notes.push_back("disco.mode pipelined: of the shorter of exchange and compute per layer the share the window "
                        "hid (" + fmt(100 * s.discoOverlapShare) + " % over its layers; the paper's max() hides all)");
    }
    return p;
  }
  // Data parallel.
  const std::string alg = get("dp.algorithm", "allreduce");
  const std::string codec = get("dp.compression", "none");
  const double ratio = std::atof(get("dp.topk_ratio", "0.01").c_str());
  const int64_t bucketBytes = std::atoll(get("dp.bucket_bytes", "1048576").c_str());
  if (bucketBytes < 1) return Status(ErrorCode::InvalidArgument, "dp.bucket_bytes must be >= 1");
  const std::string key = traceKey(alg, codec);
  const WhatIfFit* fit = nullptr;
  if (auto it = s.fits.find(key); it != s.fits.end()) fit = &it->second;
  // With trainscope-train's calibration of both the window's pair (algorithm, codec) and this
  // one, each measured cost moves by the difference of the two calibrated collectives at the
  // sizes involved: the new pair's at the new bucket less the window's at the window's bucket.
  // Additive, not a ratio: the measured costs hold the step's own waiting (progress calls
  // between layers, the peer's timing, the finish's polling), which no algorithm or size
  // changes, and the calibrated difference is the work that changes (the transfer, and a
  // codec's encodes and decodes as the algorithm runs them: a 2-rank ring encodes its bucket once
  // and decodes it 1.5 times). Ratios (before Nov 24 18:10 UTC) scaled 0.2 ms of mostly
  // waiting by the 1.26 of MPI's allreduce over ring at 16 KiB (4.6 against 3.7 us) and put
  // allreduce 20 % slow where it ran 12 % fast; a codec's work alone ("calibrate codec", one
  // encode and one decode) put fp16 on the scatter-reduce 24 % fast (34 us per bucket where the
  // backward's cost per bucket grew by 55; the calibrated difference says 62).
  const std::string baseKey =
      traceKey(knobOr(s.knobs, "dp.algorithm", "allreduce"), knobOr(s.knobs, "dp.compression", "none"));
  const auto calA = s.calibPts.find(baseKey), calB = s.calibPts.find(key);
  const bool calibrated = calA != s.calibPts.end() && calB != s.calibPts.end() && s.meanPayload > 0;
  // A calibrated time at `payload`: linear between the two calibrated sizes around it (each size
  // range its own latency and time per byte: a line through 1 KiB and 1 MiB put a 16 KiB
  // reduction's work on MPI's allreduce 2 us above ring's, where the 64 KiB point puts it
  // level); beyond the smallest or largest size the nearest range's line, never falling.
  auto rangeAt = [](const std::vector<std::pair<double, double>>& v, double payload) {  // v[i - 1], v[i]
    size_t i = 1;
    while (i + 1 < v.size() && payload > v[i].first) ++i;
    return i;
  };
  auto calTime = [&](const std::vector<std::pair<double, double>>& v, double payload) {
    const size_t i = rangeAt(v, payload);
    const auto& [x0, y0] = v[i - 1];
    const auto& [x1, y1] = v[i];
    double slope = (y1 - y0) / (x1 - x0);
    if (payload < x0 || payload > x1) slope = std::max(0.0, slope);
    return std::max(0.0, y0 + slope * (payload - x0));
  };
  // A codec's work is not linear in the bucket (top-k's partial sort is n log k: 2.7, 5.4 and 8.0
  // ns a value at 1, 64 and 768 KiB, bench_codec), and the compressed reductions are calibrated
  // at 1 and 64 KiB only (a reduction at 1 MiB under every codec made a calibration 2x as long):
  // between and beyond those sizes their line misses the codec's curve. The job also times each
  // codec alone at 1, 4, 16, 64 KiB and 1 MiB ("calibrate codec"): the bend, what the codec's own
  // time at `payload` lies above (or below) its line through the two sizes the reduction's time
  // is read between, is added to the reduction. (The 72-cell grid put every one-bucket top-k and
  // int8 cell 3-9 % under its measurement without it, BENCHMARKS.md "Two visits per cell".)
  const std::string baseCodec = knobOr(s.knobs, "dp.compression", "none");
  // A reduction's calibrated time `v` at `payload` under codec `name`, bent.
  auto calWith = [&](const std::vector<std::pair<double, double>>& v, const std::string& name, double payload) {
    const auto it = s.codecPts.find(name);
    if (name == "none" || it == s.codecPts.end() || it->second.size() < 3) return calTime(v, payload);
    const size_t i = rangeAt(v, payload);
    const double xa = v[i - 1].first, xb = v[i].first;
    const double ca = calTime(it->second, xa), cb = calTime(it->second, xb);
    return calTime(v, payload) + calTime(it->second, payload) - (ca + (cb - ca) / (xb - xa) * (payload - xa));
  };
  // The calibrated work a bucket of `payload` adds over the window's bucket of `at`.
  auto addedAt = [&](double payload, double at) {
    return calibrated ? calWith(calB->second, codec, payload) - calWith(calA->second, baseCodec, at) : 0.0;
  };
  // Without a calibration the size dependence of a cost is the prior: alpha at n1/2 = beta x n1/2.
  auto priorRatio = [](double payload, double at) { return (kHalfPowerBytes + payload) / (kHalfPowerBytes + at); };
  // The backward's cost per bucket moves by the difference of the rank's own work ("calibrate
  // work"), where both pairs have it: the waiting inside a reduction's latency is hidden by the
  // layers still to compute. (The latency difference put MPI's allreduce ~2 us per small bucket
  // above ring on Nov 24, 20:00 UTC, where the step ran it ~4 us below.)
  const auto wkA = s.workPts.find(baseKey), wkB = s.workPts.find(key);
  const bool workCalibrated = calibrated && wkA != s.workPts.end() && wkB != s.workPts.end();
  auto kappaAt = [&](double payload) {
    if (workCalibrated)
      return std::max(0.0, s.perBucketMs + calWith(wkB->second, codec, payload) -
                               calWith(wkA->second, baseCodec, s.meanPayload));
    if (calibrated) return std::max(0.0, s.perBucketMs + addedAt(payload, s.meanPayload));
    return s.perBucketMs * (s.meanPayload > 0 ? priorRatio(payload, s.meanPayload) : 1.0);
  };
  if (calibrated) {
    p.notes.push_back("costs moved by the job's calibration: " + key + " at the new bucket sizes less " + baseKey +
                      " at the window's" +
                      (workCalibrated ? " (the backward's cost per bucket by the ranks' own work on a reduction, "
                                        "the reductions' times by their latency)"
                                      : ""));
  } else if (!fit) {
    // The nearest measured: the same codec family first, else the largest sample.
    for (const auto& [k, f] : s.fits)
      if (!fit || f.samples > fit->samples) fit = &f;
    if (!fit)
      return Status(ErrorCode::InvalidArgument, "the session has no gradient bucket communication to fit");
    p.extrapolated = true;
    p.notes.push_back(key + " never ran in the session: its time per byte is " + fit->key +
                      "'s (codec compute not measured)");
  }
  // Plan buckets as trainscope-train does: whole layers from the last, close at >= bucket bytes.
  struct B {
    int lowest;
    double payload;
  };
  std::vector<B> buckets;
  double acc = 0;
  for (int l = s.layers - 1; l >= 0; --l) {
    acc += s.layerBytes[static_cast<size_t>(l)];
    if (acc >= static_cast<double>(bucketBytes) || l == 0) {
      buckets.push_back({l, acc});
      acc = 0;
    }
  }
  // The backward layer by layer: the idle progress gap, the compute; each bucket starts when
  // its lowest layer is done and, while layers are still to compute, costs the backward kappa;
  // reductions run concurrently and complete in order: end = max(start + alpha + beta w,
  // previous end).
  double t = 0, chanEnd = 0;
  size_t next = 0;
  std::vector<std::pair<double, double>> comm;
  std::vector<int> commBucket;
  std::vector<std::pair<int, std::pair<double, double>>> layerOps;  // (layer, [a, b]) from backward start
  double bytes = 0;
  for (int l = s.layers - 1; l >= 0; --l) {
    const double d = s.layerMs[static_cast<size_t>(l)];
    t += s.gapIdleMs;
    const double layerStart = t;
    t += d;
    layerOps.push_back({l, {layerStart, t}});
    while (next < buckets.size() && buckets[next].lowest >= l) {
      const double w = wireFormula(alg, codec, ratio,
                                   static_cast<size_t>(std::llround(buckets[next].payload / 4)), s.world) *
                       s.wireCalibration;
      const double start = t;
      const double payload = buckets[next].payload;
      const double dur = calibrated ? std::max(0.0, s.meanDurationMs + addedAt(payload, s.meanPayload))
                                    : fit->alphaMs + fit->msPerByte * w;
      chanEnd = std::max(chanEnd, start + dur);
      comm.push_back({start, chanEnd});
      commBucket.push_back(static_cast<int>(next));
      bytes += w;
      if (l > 0) t += kappaAt(payload);
      ++next;
    }
    if (l > 0 && !layerOps.empty()) layerOps.back().second.second = t;  // the layer's share drawn with it
  }
  const double bwdEnd = t;
  // Exposed: the measured tail after the backward, changed for the new last bucket (its bytes,
  // its algorithm). The reductions' drawn intervals end by then: a fitted duration extrapolated
  // far from the window's sizes must not decide the step (a 2 KiB window's line put a 16 KiB
  // ring reduction at 48 ms).
  double lastWire = 0;
  if (!buckets.empty())
    lastWire = wireFormula(alg, codec, ratio, static_cast<size_t>(std::llround(buckets.back().payload / 4)),
                           s.world) *
               s.wireCalibration;
  // The queue scales with the buckets still reducing (all but the last); those still reducing
  // when the backward ends (as many per early bucket as the window measured: ~4 of 48 on the
  // 48-layer CPU job under every algorithm and codec) do their changed work in the tail, on the
  // rank's thread. The last reduction's own time: the measured one plus the calibrated
  // difference (the new pair at the new last bucket less the window's at its last bucket);
  // scaling all of it by the sizes (before Nov 24 15:05 UTC) put one 786 KiB ring bucket's
  // tail, from a 8 KiB one's 0.22 ms, at 0.58 ms (measured 0.36; the difference gives 0.35).
  const double early = buckets.empty() ? 0.0 : static_cast<double>(buckets.size() - 1);
  double earlyPayload = 0;
  for (size_t i = 0; i + 1 < buckets.size(); ++i) earlyPayload += buckets[i].payload;
  if (early > 0) earlyPayload /= early;
  const double queue =
      s.earlyBuckets > 0
          ? std::max(0.0, (s.queueMs + s.tailBuckets * addedAt(earlyPayload, s.meanPayload)) * early / s.earlyBuckets)
          : 0.0;
  double own = 0;
  if (!buckets.empty())
    own = calibrated ? std::max(0.0, s.lastOwnMs + addedAt(buckets.back().payload, s.lastPayload))
                     : s.lastOwnMs * priorRatio(lastWire, s.lastWireBytes);
  const double tail = queue + own;
  for (auto& c : comm) c.second = std::min(c.second, bwdEnd + tail);
  if (!comm.empty()) comm.back().second = bwdEnd + tail;
  chanEnd = comm.empty() ? bwdEnd : bwdEnd + tail;
  const double total = unionLength(comm);
  p.exposedCommMs = std::max(0.0, chanEnd - bwdEnd);
  p.overlapRatio = total > 0 ? unionWithin(comm, 0, bwdEnd) / total : -1;
  p.stepTimeMs = s.restMs + s.forwardMs + bwdEnd + p.exposedCommMs + s.waitOverheadMs + s.optimizerMs;
  // The observer's CPU for the events the new buckets add or remove, where it shared the cores.
  const double observerMs = s.observerMsPerEvent * s.bucketEventsPerBucket * s.observerRanks *
                            (static_cast<double>(buckets.size()) - s.bucketsPerStep);
  if (observerMs != 0) {
    p.stepTimeMs = std::max(0.0, p.stepTimeMs + observerMs);
    char note[200];
    std::snprintf(note, sizeof note,
                  "the recorder shared the ranks' %g CPUs: %+.3f ms a step for its %+.0f events (%.2f us each)",
                  s.observerCpus, observerMs, observerMs / s.observerMsPerEvent, s.observerMsPerEvent * 1e3);
    p.notes.push_back(note);
  }
  p.bytes = bytes;
  p.buckets = static_cast<int>(buckets.size());
  {
    // Drawn as the measured step is: forward after the step's preamble, the backward layer by
    // layer, each bucket's reduction from ready to done, the optimizer after the wait.
    const double f0 = s.restBeforeMs, b0 = f0 + s.forwardMs + s.fwdToBwdMs;
    p.timeline.push_back({"compute", "forward", StepOp::Kind::Compute, f0, f0 + s.forwardMs});
    for (const auto& [l, iv] : layerOps)
      p.timeline.push_back({"compute", "B+W " + std::to_string(l), StepOp::Kind::Compute, b0 + iv.first, b0 + iv.second});
    for (size_t i = 0; i < comm.size(); ++i)
      p.timeline.push_back({"gradient sync", "bucket " + std::to_string(commBucket[i]),
                            StepOp::Kind::Communication, b0 + comm[i].first, b0 + comm[i].second});
    const double o0 = b0 + bwdEnd + p.exposedCommMs + s.waitOverheadMs;
    p.timeline.push_back({"compute", "optimizer", StepOp::Kind::Compute, o0, o0 + s.optimizerMs});
  }
  if (!s.slowdownMeasured) p.notes.push_back("overlap slowdown not measurable in the session (taken as 0)");
  if (!s.perBucketMeasured)
    p.notes.push_back("the window reduced one bucket per step: the cost of reductions during the backward is "
                      "not measurable (taken as 0)");
  if (s.oneSize && !calibrated)
    p.notes.push_back("the window's reductions had one size: latency and time per byte split by the 64 KiB prior");
  return p;
}

std::string WhatIfModel::describeJson() const {
  const State& s = *s_;
  auto orNull = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(); };  // NaN: unknown
  nlohmann::ordered_json j;
  j["from_step"] = s.fromStep;
  j["to_step"] = s.toStep;
  j["world_size"] = s.world;
  nlohmann::ordered_json knobs = nlohmann::ordered_json::object();
  for (const auto& [k, v] : s.knobs) knobs[k] = v;
  j["knobs"] = knobs;
  j["changes_in_window"] = s.windowChanges;
  j["measured_step_time_ms"] = s.measured.stepTimeMs;
  if (s.dp && !s.pp) {
    j["forward_ms"] = s.forwardMs;
    j["optimizer_ms"] = s.optimizerMs;
    j["rest_ms"] = s.restMs;
    j["forward_to_backward_ms"] = s.fwdToBwdMs;
    j["wait_overhead_ms"] = s.waitOverheadMs;
    j["backward_gap_busy_ms"] = s.gapBusyMs;
    j["backward_gap_idle_ms"] = s.gapIdleMs;
    j["backward_ms_per_bucket"] = s.perBucketMs;
    j["tail_last_reduction_ms"] = s.lastOwnMs;
    j["tail_queue_ms"] = s.queueMs;
    j["early_buckets_per_step"] = s.earlyBuckets;
    j["tail_buckets_per_step"] = s.tailBuckets;
    j["mean_bucket_payload_bytes"] = s.meanPayload;
    j["last_bucket_payload_bytes"] = s.lastPayload;
    j["mean_bucket_reduction_ms"] = s.meanDurationMs;
    // Each calibration as alpha + ms per MB through its smallest and largest size (slope >= 0).
    auto lines = [](const std::map<std::string, std::vector<std::pair<double, double>>>& pts, const char* key) {
      nlohmann::ordered_json out = nlohmann::ordered_json::array();
      for (const auto& [k, v] : pts) {
        const auto& [x0, y0] = v.front();
        const auto& [x1, y1] = v.back();
        const double slope = std::max(0.0, (y1 - y0) / (x1 - x0));
        out.push_back({{key, k}, {"alpha_ms", std::max(0.0, y0 - slope * x0)}, {"ms_per_mb_payload", slope * 1048576.0}});
      }
      return out;
    };
    j["calibration"] = lines(s.calibPts, "algorithm");
    j["calibration_work"] = lines(s.workPts, "algorithm");
    j["codec_cpu"] = lines(s.codecPts, "codec");
    j["backward_ms_per_bucket_measured"] = s.perBucketMeasured;
    j["one_message_size"] = s.oneSize;
    j["overlap_slowdown"] = s.slowdown;
    j["overlap_slowdown_measured"] = s.slowdownMeasured;
    j["backward_compute_calibrated"] = s.computeCalibrated;
    j["backward_compute_ms"] = std::accumulate(s.layerMs.begin(), s.layerMs.end(), 0.0);
    j["backward_compute_window_ms"] = s.windowComputeMs;
    j["wire_calibration"] = s.wireCalibration;
    j["observer_shares_cores"] = s.observerMsPerEvent > 0;
    j["observer_us_per_event"] = s.observerMsPerEvent * 1e3;
    j["observer_cpus"] = s.observerCpus;
    j["observer_ranks_on_host"] = s.observerRanks;
    j["bucket_events_per_bucket"] = s.bucketEventsPerBucket;
    j["buckets_per_step"] = s.bucketsPerStep;
    j["layer_backward_ms"] = s.layerMs;
    j["layer_gradient_bytes"] = s.layerBytes;
    nlohmann::ordered_json fits = nlohmann::ordered_json::array();
    for (const auto& [k, f] : s.fits)
      fits.push_back({{"algorithm", k},
                      {"alpha_ms", f.alphaMs},
                      {"ms_per_mb", f.msPerByte * 1048576.0},
                      {"samples", f.samples}});
    j["collective_fits"] = fits;
  }
  if (s.disco) {
    nlohmann::json layers = nlohmann::json::array();
    for (const auto& d : s.discoLayers) {
      nlohmann::json cal = nlohmann::json::array();
      for (const auto& [sp, c] : d.calib) cal.push_back({{"sparsity", sp}, {"comp_ms", c.first}, {"comm_ms", c.second}});
      layers.push_back({{"layer", d.layer},
                        {"nodes", d.nodes},
                        {"sparsity", d.sparsity},
                        {"l_comm_ms", d.commMs},
                        {"l_comp_ms", d.compMs},
                        {"l_overlap_ms", d.overlapMs},
                        {"overlap_share", orNull(d.overlapShare)},
                        {"bytes", d.bytes},
                        {"comm_dense_ms", orNull(d.commDenseMs)},
                        {"comp_dense_ms", d.compDenseMs},
                        {"calibration", cal}});
    }
    j["disco_layers"] = layers;
    j["rest_ms"] = s.discoRestMs;
    j["overlap_share"] = orNull(s.discoOverlapShare);
  }
  if (s.pp) {
    j["stages"] = s.stages;
    j["f_ms"] = s.fMs;
    j["b_ms"] = s.bMs;
    j["w_ms"] = s.wMs;
    nlohmann::json shares = nlohmann::json::array();
    for (double x : s.wShare) shares.push_back(orNull(x));
    j["w_share"] = shares;
    nlohmann::json ks = nlohmann::json::array();
    for (const auto& x : s.kernelShare) ks.push_back({{"f", x[0]}, {"b", x[1]}, {"w", x[2]}});
    j["kernel_share"] = ks;
    nlohmann::json pc = nlohmann::json::array();
    for (const auto& st : s.ppCalib) {
      nlohmann::json o = nlohmann::json::object();
      const char* kinds[4] = {"f", "b", "w", "w_deferred"};
      for (int k = 0; k < 4; ++k) {
        nlohmann::json m = nlohmann::json::object();
        for (const auto& [samples, ms] : st[static_cast<size_t>(k)]) m[std::to_string(samples)] = ms;
        o[kinds[k]] = m;
      }
      pc.push_back(o);
    }
    j["kernel_calibration_ms"] = pc;
    j["send_cost_ms"] = s.sendCostMs;
    j["send_latency_ms"] = s.sendLatencyMs;
    j["rest_ms"] = s.pipeRestMs;
    j["rest_idle_ms"] = s.pipeRestIdleMs;
  }
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

double kendallTau(const std::vector<double>& a, const std::vector<double>& b) {
  const size_t n = std::min(a.size(), b.size());
  double conc = 0, disc = 0, tiesA = 0, tiesB = 0;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j) {
      const double x = a[i] - a[j], y = b[i] - b[j];
      if (x == 0 && y == 0) continue;
      if (x == 0) {
        ++tiesA;
      } else if (y == 0) {
        ++tiesB;
      } else if ((x > 0) == (y > 0)) {
        ++conc;
      } else {
        ++disc;
      }
    }
  const double den = std::sqrt((conc + disc + tiesA) * (conc + disc + tiesB));
  return den > 0 ? (conc - disc) / den : 0;
}

}  // namespace trainscope::core
