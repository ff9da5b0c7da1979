#include "trainscope/core/tune/compare.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <utility>
#include <nlohmann/json.hpp>

namespace trainscope::core {

namespace {

Spread spreadOf(const std::vector<double>& v) {
  Spread s;
  s.n = static_cast<int>(v.size());
  if (v.empty()) return s;
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  if (v.size() >= 2) {
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.sd = std::sqrt(ss / static_cast<double>(v.size() - 1));
  }
  return s;
}

bool inWindow(int64_t step, int64_t a, int64_t b) {
  return step >= a && step <= b;
}

nlohmann::ordered_json num(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}

}  // namespace

std::vector<int64_t> completeSteps(const AnalysisResult& a) {
  std::vector<int64_t> v;
  for (const StepStat& s : a.steps.perStep) v.push_back(s.step);
  return v;
}

WindowMetrics measureWindow(const AnalysisResult& a, const TraceStore& store, int64_t fromStep, int64_t toStep) {
  WindowMetrics w;
  w.fromStep = fromStep;
  w.toStep = toStep;
  std::vector<double> stepMs;
  for (const StepStat& s : a.steps.perStep)
    if (inWindow(s.step, fromStep, toStep)) stepMs.push_back(s.timeMs);
  w.steps = static_cast<int>(stepMs.size());
  w.stepMs = spreadOf(stepMs);

  // Bubble: per step, the mean over stages of each stage's (rank, step) windows.
  std::map<int64_t, std::pair<double, int>> bubble;
  for (const StageResult& st : a.pipeline.perStage) {
    std::map<int64_t, std::pair<double, int>> perStage;
    for (const StageStep& x : st.perStep)
      if (inWindow(x.step, fromStep, toStep) && std::isfinite(x.bubbleFraction)) {
        perStage[x.step].first += x.bubbleFraction;
        ++perStage[x.step].second;
      }
    for (const auto& [step, v] : perStage) {
      bubble[step].first += v.first / v.second;
      ++bubble[step].second;
    }
  }
  std::vector<double> bub;
  for (const auto& [step, v] : bubble) bub.push_back(v.first / v.second);
  w.bubbleFraction = spreadOf(bub);

  std::vector<double> over;
  for (const DpStep& d : a.dataParallel.perStep)
    if (inWindow(d.step, fromStep, toStep) && d.commMs > 0)
      over.push_back(std::clamp((d.commMs - d.exposedCommMs) / d.commMs, 0.0, 1.0));
  w.overlapRatio = spreadOf(over);

  // Exposed communication and the windows each rank's steps occupy.
  std::map<int64_t, std::pair<double, int>> exposed;
  std::map<RankId, std::vector<std::tuple<int64_t, int64_t, int64_t>>> windows;  // (start, end, step)
  for (const RankBreakdown& r : a.breakdown)
    for (const BreakdownStep& b : r.perStep) {
      if (!inWindow(b.step, fromStep, toStep)) continue;
      exposed[b.step].first += b.exposedCommMs;
      ++exposed[b.step].second;
      windows[r.rank].push_back({b.startNs, b.endNs, b.step});
    }
  std::vector<double> exp;
  for (const auto& [step, v] : exposed) exp.push_back(v.first / v.second);
  w.exposedCommMs = spreadOf(exp);
  for (auto& [r, v] : windows) std::sort(v.begin(), v.end());

  // Bytes and loss from the events, by the rank's step window each falls in.
  const StringId lossName = store.strings().find("loss").value_or(UINT32_MAX);
  // The transport's count where the trace has it (trainscope-train: `bytes_sent` on the bucket
  // collectives whose messages it chooses), else the event's Bytes.
  const uint32_t sentKey =
      kCustomAttrBase + store.strings().find("bytes_sent").value_or(UINT32_MAX - kCustomAttrBase);
  // trainscope-train's what-if calibration (docs/TUNING.md) is the tool's traffic, not the
  // training's: left out of the bytes per step.
  const std::vector<bool> calibrate = store.strings().withPrefix("calibrate");
  std::map<int64_t, std::map<RankId, double>> bytes;
  std::map<int64_t, std::pair<double, int>> loss;
  // Only the events around the window's steps are read: from one window length before its
  // first step to one after its last (a step's loss counter may be stamped just after the step).
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (const auto& [r, v] : windows)
    for (const auto& [s0, s1, n] : v) {
      lo = std::min(lo, s0);
      hi = std::max(hi, s1);
    }
  const int64_t margin = lo < hi ? hi - lo : 0;
  for (TrackId t = 0; t < store.trackCount() && lo <= hi; ++t) {
    const RankId r = store.track(t).rank;
    auto wit = windows.find(r);
    if (wit == windows.end()) continue;
    const auto& win = wit->second;
    const TrackEvents& ev = store.rawEvents(t);
    ev.forEachOverlapping(lo - margin, hi + margin + 1, [&](size_t i) {
      const EventKind k = ev.kind(i);
      const bool isBytes =
          (k == EventKind::Collective || k == EventKind::P2PSend) &&
          !(ev.name(i) < calibrate.size() && calibrate[ev.name(i)]);
      const bool isLoss = k == EventKind::Counter && ev.name(i) == lossName;
      if (!isBytes && !isLoss) return;
      int64_t step = INT64_MIN;
      if (const Attr* s = ev.findAttr(i, AttrKey::Step); s && isLoss) {
        step = s->asInt();
        if (!inWindow(step, fromStep, toStep)) return;
      } else {
        auto it = std::upper_bound(win.begin(), win.end(), std::tuple{ev.start(i), INT64_MAX, INT64_MAX});
        if (it == win.begin()) return;
        --it;
        if (ev.start(i) > std::get<1>(*it)) return;
        step = std::get<2>(*it);
      }
      if (isBytes) {
        const Attr* b = ev.findAttr(i, AttrKey::Bytes);
        double n = b ? static_cast<double>(b->asInt()) : 0.0;
        for (const Attr& x : ev.attrs(i))
          if (x.key == sentKey) n = static_cast<double>(x.asInt());
        bytes[step][r] += n;
      } else if (const Attr* v = ev.findAttr(i, AttrKey::Value)) {
        loss[step].first += v->type == AttrType::Double ? v->asDouble() : static_cast<double>(v->asInt());
        ++loss[step].second;
      }
    });
  }
  std::vector<double> by;
  for (const auto& [step, perRank] : bytes) {
    double sum = 0;
    for (const auto& [r, b] : perRank) sum += b;
    by.push_back(sum / static_cast<double>(windows.size()));
  }
  w.bytes = spreadOf(by);
  std::vector<double> ls, xs;
  for (const auto& [step, v] : loss) {
    ls.push_back(v.first / v.second);
    xs.push_back(static_cast<double>(step));
  }
  w.loss = spreadOf(ls);
  if (ls.size() >= 2) {
    double mx = 0, my = 0;
    for (size_t i = 0; i < ls.size(); ++i) mx += xs[i], my += ls[i];
    mx /= static_cast<double>(ls.size());
    my /= static_cast<double>(ls.size());
    double sxy = 0, sxx = 0;
    for (size_t i = 0; i < ls.size(); ++i) sxy += (xs[i] - mx) * (ls[i] - my), sxx += (xs[i] - mx) * (xs[i] - mx);
    if (sxx > 0) w.lossSlopePerStep = sxy / sxx;
  }
  return w;
}

int64_t medianStep(const AnalysisResult& a, int64_t fromStep, int64_t toStep) {
  std::vector<std::pair<double, int64_t>> v;
  for (const StepStat& s : a.steps.perStep)
    if (inWindow(s.step, fromStep, toStep)) v.push_back({s.timeMs, s.step});
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2].second;
}

std::vector<StepOp> stepTimeline(const TraceStore& store, RankId rank, int64_t step) {
  std::vector<StepOp> out;
  // The rank's window of the step.
  int64_t a = INT64_MAX, b = INT64_MIN;
  for (TrackId t = 0; t < store.trackCount(); ++t) {
    if (store.track(t).rank != rank) continue;
    const TrackEvents& ev = store.events(t);
    for (size_t i = 0; i < ev.size(); ++i)
      if (ev.kind(i) == EventKind::Step && ev.end(i) > ev.start(i))
        if (const Attr* s = ev.findAttr(i, AttrKey::Step); s && s->asInt() == step)
          a = std::min(a, ev.start(i)), b = std::max(b, ev.end(i));
  }
  if (a >= b) return out;
  for (TrackId t = 0; t < store.trackCount(); ++t) {
    const TrackInfo& info = store.track(t);
    if (info.rank != rank) continue;
    const std::string lane = "rank " + std::to_string(rank) + " · " + std::string(info.name);
    const TrackEvents& ev = store.events(t);
    for (size_t i = 0; i < ev.size(); ++i) {
      const EventKind k = ev.kind(i);
      StepOp::Kind kind = StepOp::Kind::Compute;
      std::string l = lane;
      switch (k) {
        case EventKind::Kernel:
        case EventKind::MicroBatchF:
        case EventKind::MicroBatchB:
        case EventKind::MicroBatchW:
          break;
        case EventKind::Collective:
        case EventKind::P2PSend:
        case EventKind::P2PRecv:
          kind = StepOp::Kind::Communication;
          break;
        case EventKind::Memcpy:
        case EventKind::Memset:
          kind = StepOp::Kind::Other;
          break;
        case EventKind::Phase:
          kind = StepOp::Kind::Other;
          l = "rank " + std::to_string(rank) + " · phases";
          break;
        default:
          continue;
      }
      if (ev.start(i) < a || ev.start(i) >= b) continue;
      out.push_back({l, std::string(store.str(ev.name(i))), kind, static_cast<double>(ev.start(i) - a) / 1e6,
                     static_cast<double>(std::min(ev.end(i), b) - a) / 1e6});
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const StepOp& x, const StepOp& y) { return x.lane < y.lane; });
  return out;
}

std::string windowMetricsJson(const WindowMetrics& w) {
  auto spread = [](const Spread& s) {
    nlohmann::ordered_json j;
    j["mean"] = num(s.mean);
    j["sd"] = num(s.sd);
    j["n"] = s.n;
    return j;
  };
  nlohmann::ordered_json j;
  j["from_step"] = w.fromStep;
  j["to_step"] = w.toStep;
  j["steps"] = w.steps;
  j["step_time_ms"] = spread(w.stepMs);
  j["bubble_fraction"] = spread(w.bubbleFraction);
  j["overlap_ratio"] = spread(w.overlapRatio);
  j["exposed_comm_ms"] = spread(w.exposedCommMs);
  j["bytes"] = spread(w.bytes);
  j["loss"] = spread(w.loss);
  j["loss_slope_per_step"] = num(w.lossSlopePerStep);
  return j.dump();
}

}  // namespace trainscope::core
