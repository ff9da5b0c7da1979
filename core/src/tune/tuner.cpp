#include "trainscope/core/tune/tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <set>
#include <thread>

#include "trainscope/core/tune/whatif.h"
#include "trainscope/core/wire/protocol.h"

namespace trainscope::core {
namespace {

std::string fmtMs(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", v);
  return b;
}

std::string settingText(const std::map<std::string, std::string>& s) {
  std::string out;
  for (const auto& [k, v] : s) out += (out.empty() ? "" : " ") + k + "=" + v;
  return out;
}

void stats(const std::vector<double>& v, double& meanOut, double& stderrOut) {
  meanOut = -1;
  stderrOut = -1;
  if (v.empty()) return;
  double sum = 0;
  for (double x : v) sum += x;
  meanOut = sum / static_cast<double>(v.size());
  if (v.size() < 2) {
    stderrOut = 0;
    return;
  }
  double ss = 0;
  for (double x : v) ss += (x - meanOut) * (x - meanOut);
  stderrOut = std::sqrt(ss / static_cast<double>(v.size() - 1) / static_cast<double>(v.size()));
}

bool sameValue(const std::string& a, const std::string& b) {
  if (a == b) return true;
  char *ea = nullptr, *eb = nullptr;
  const double x = std::strtod(a.c_str(), &ea), y = std::strtod(b.c_str(), &eb);
  return !a.empty() && !b.empty() && ea && *ea == 0 && eb && *eb == 0 && x == y;
}

}  // namespace

int dropPeriodicSteps(const std::vector<double>& stepMs, std::vector<double>& kept) {
  kept.clear();
  std::vector<double> sorted = stepMs;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted.empty() ? 0.0 : sorted[(sorted.size() - 1) / 2];  // the lower middle
  int dropped = 0;
  for (double ms : stepMs)
    if (median > 0 && ms > 2 * median)
      ++dropped;
    else
      kept.push_back(ms);
  return dropped;
}

std::vector<std::string> defaultCandidates(const wire::KnobDescriptor& d) {
  std::vector<std::string> out;
  auto add = [&](const std::string& v) {
    for (const auto& o : out)
      if (sameValue(o, v)) return;
    out.push_back(v);
  };
  add(d.currentValue);
  if (d.type == wire::KnobType::Enum) {
    for (const auto& c : d.choices) add(c);
  } else if (d.type == wire::KnobType::Int) {
    const bool bytes = d.name == "dp.bucket_bytes";
    const double lo = bytes ? 1024 : std::max(1.0, d.min),
                 hi = bytes ? std::min(d.max, 64.0 * 1048576) : d.max;
    for (double v = lo; v <= hi && out.size() < 12; v *= bytes ? 4 : 2)
      if (v >= d.min) add(std::to_string(static_cast<int64_t>(v)));
  } else if (d.type == wire::KnobType::Float) {
    for (double v : {0.001, 0.01, 0.1, 0.25, 0.5, 1.0})
      if (v >= d.min && v <= d.max) {
        char b[32];
        std::snprintf(b, sizeof b, "%g", v);
        add(b);
      }
  } else if (d.type == wire::KnobType::Bool) {
    add("0");
    add("1");
  }
  return out;
}

std::map<int64_t, double> stepTimes(const TraceStore& store, int ranks, int64_t from, int64_t to) {
  std::map<int64_t, std::pair<double, std::set<RankId>>> acc;
  for (TrackId t = 0; t < store.trackCount(); ++t) {
    const RankId r = store.track(t).rank;
    const TrackEvents& ev = store.rawEvents(t);
    for (size_t i = 0; i < ev.size(); ++i) {
      if (ev.kind(i) != EventKind::Step || ev.end(i) <= ev.start(i)) continue;
      const Attr* a = ev.findAttr(i, AttrKey::Step);
      if (!a || a->asInt() < from || a->asInt() > to) continue;
      auto& e = acc[a->asInt()];
      if (e.second.insert(r).second) e.first += static_cast<double>(ev.end(i) - ev.start(i)) / 1e6;
    }
  }
  std::map<int64_t, double> out;
  for (const auto& [s, e] : acc)
    if (static_cast<int>(e.second.size()) >= ranks) out[s] = e.first / static_cast<double>(e.second.size());
  return out;
}

Result<TuneResult> autotune(LiveSession& live, TraceStore& store, std::shared_mutex& mutex,
                            const TuneOptions& o) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto log = [&](const std::string& s) {
    if (o.log) o.log(s);
  };
  if (o.knobs.empty()) return Status(ErrorCode::InvalidArgument, "tune needs at least one knob");
  if (o.budgetSteps <= 0 && o.budgetSeconds <= 0)
    return Status(ErrorCode::InvalidArgument, "tune needs a budget (--budget-steps or --budget-seconds)");
  if (o.measureSteps < 2 || o.warmupSteps < 0)
    return Status(ErrorCode::InvalidArgument, "tune measures at least 2 steps per trial");
  auto list = live.knobList();
  if (!list) return list.status();
  std::map<std::string, wire::KnobDescriptor> desc;
  for (const auto& d : list->knobs) desc[d.name] = d;
  std::map<std::string, std::vector<std::string>> cands;
  for (const auto& k : o.knobs) {
    auto it = desc.find(k);
    if (it == desc.end())
      return Status(ErrorCode::InvalidArgument, "job " + live.jobId() + " has no knob " + k);
    if (auto v = o.values.find(k); v != o.values.end()) {
      cands[k] = v->second;
      for (const auto& x : v->second)
        if (std::string why = validateKnobValue(it->second, x); !why.empty())
          return Status(ErrorCode::InvalidArgument, k + "=" + x + ": " + why);
    } else {
      cands[k] = defaultCandidates(it->second);
    }
  }
  const int ranks = std::max(1, live.worldSize());
  TuneResult res;
  for (const auto& k : o.knobs) res.initial[k] = desc[k].currentValue;
  std::map<std::string, std::string> current = res.initial;  // what the job runs now
  int64_t nextStep = list->currentStep + 1;

  auto budgetLeft = [&](int steps) {
    if (o.budgetSteps > 0 && res.stepsUsed + steps > o.budgetSteps) return false;
    if (o.budgetSeconds > 0 && std::chrono::duration<double>(Clock::now() - t0).count() >= o.budgetSeconds)
      return false;
    return true;
  };

  // One trial: apply (if needed), skip warm-up, measure.
  auto measure = [&](const std::map<std::string, std::string>& setting, bool incumbent) -> Result<TuneTrial> {
    TuneTrial tr;
    tr.setting = setting;
    tr.incumbent = incumbent;
    std::vector<std::pair<std::string, std::string>> changes;
    for (const auto& [k, v] : setting)
      if (!sameValue(current[k], v)) changes.emplace_back(k, v);
    int64_t applied = nextStep;
    if (!changes.empty()) {
      auto a = live.setKnobs(changes, static_cast<int>(o.stepTimeoutSeconds * 1000));
      if (!a) {
        tr.refused = true;
        tr.why = a.status().message();
        return tr;
      }
      applied = 0;
      for (const auto& x : a.value())
        for (const auto& [r, st] : x.stepPerRank) applied = std::max(applied, st);
      // A job may put a combination it cannot run back at the step (ts_knob_restore).
      auto after = live.knobList();
      if (after) {
        for (const auto& d : after->knobs)
          if (setting.count(d.name) && !sameValue(d.currentValue, setting.at(d.name))) {
            tr.refused = true;
            tr.why = "the job kept " + d.name + "=" + d.currentValue;
          }
        for (const auto& d : after->knobs)
          if (current.count(d.name)) current[d.name] = d.currentValue;
        if (tr.refused) return tr;
      }
      for (const auto& [k, v] : changes) current[k] = v;
    }
    tr.appliedStep = applied;
    const int64_t from = applied + o.warmupSteps, to = from + o.measureSteps - 1;
    auto lastProgress = Clock::now();
    size_t have = 0;
    std::map<int64_t, double> times;
    for (;;) {
      {
        std::shared_lock lock(mutex);
        times = stepTimes(store, ranks, from, to);
      }
      if (static_cast<int64_t>(times.size()) >= to - from + 1) break;
      if (times.size() > have) have = times.size(), lastProgress = Clock::now();
      if (!live.streaming())
        return Status(ErrorCode::NotFound, "job " + live.jobId() + " ended during tuning");
      if (std::chrono::duration<double>(Clock::now() - lastProgress).count() > o.stepTimeoutSeconds)
        return Status(ErrorCode::NotFound, "job " + live.jobId() + " made no step for " +
                                               std::to_string(static_cast<int>(o.stepTimeoutSeconds)) + " s");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::vector<double> all;
    for (const auto& [s, ms] : times) all.push_back(ms);
    tr.periodicSteps = dropPeriodicSteps(all, tr.stepMs);
    stats(tr.stepMs, tr.meanMs, tr.stderrMs);
    nextStep = to + 1;
    res.stepsUsed += static_cast<int>(to - applied + 1);
    return tr;
  };
  auto record = [&](const TuneTrial& tr) {
    res.trials.push_back(tr);
    std::string line = "trial " + std::to_string(res.trials.size()) + (tr.incumbent ? " (incumbent) " : " ") +
                       settingText(tr.setting) + ": ";
    if (tr.skipped)
      line += "skipped: " + tr.why;
    else if (tr.refused)
      line += "refused: " + tr.why;
    else
      line += fmtMs(tr.meanMs) + " +- " + fmtMs(tr.stderrMs) + " ms over steps " +
              std::to_string(tr.appliedStep + o.warmupSteps) + ".." +
              std::to_string(tr.appliedStep + o.warmupSteps + o.measureSteps - 1) +
              (tr.periodicSteps > 0 ? " (" + std::to_string(tr.periodicSteps) + " over 2x the median left out)" : "");
    if (tr.predictedMs >= 0) line += " (predicted " + fmtMs(tr.predictedMs) + " ms)";
    log(line);
  };

  std::map<std::string, std::string> inc = res.initial;
  const int trialSteps = o.warmupSteps + o.measureSteps;
  if (!budgetLeft(trialSteps))
    return Status(ErrorCode::InvalidArgument, "the budget is smaller than one trial");
  auto first = measure(inc, true);
  if (!first) return first.status();
  record(first.value());
  std::vector<double> incSamples = first->stepMs;
  res.initialMs = first->meanMs;
  int64_t incFrom = first->appliedStep + o.warmupSteps, incTo = incFrom + o.measureSteps - 1;
  bool out = false;
  for (const auto& knob : o.knobs) {
    if (out) break;
    // Rank this knob's candidates with the simulator built from the incumbent's steps.
    std::vector<std::pair<double, std::string>> order;
    double incPred = -1;
    std::map<std::string, double> pred;
    if (o.useSimulator) {
      std::shared_lock lock(mutex);  // a reader: the engine publishes when it is free
      WhatIfOptions wo;
      wo.fromStep = incFrom;
      wo.toStep = incTo;
      auto model = WhatIfModel::fromSession(store, wo);
      if (model) {
        if (auto p = model->predict({}); p) incPred = p->stepTimeMs;
        for (const auto& c : cands[knob])
          if (auto p = model->predict({{knob, c}}); p) pred[c] = p->stepTimeMs;
      } else {
        log("simulator: " + model.status().message() + " (candidates are measured in order)");
      }
    }
    for (const auto& c : cands[knob]) order.push_back({pred.count(c) ? pred[c] : 0.0, c});
    std::stable_sort(order.begin(), order.end());
    const TuneTrial* bestCand = nullptr;
    std::vector<TuneTrial> round;
    round.reserve(order.size());
    for (const auto& [p, c] : order) {
      if (sameValue(c, inc[knob])) continue;
      auto setting = inc;
      setting[knob] = c;
      TuneTrial tr;
      tr.setting = setting;
      tr.predictedMs = pred.count(c) ? pred[c] : -1;
      if (incPred > 0 && tr.predictedMs > o.skipFactor * incPred) {
        tr.skipped = true;
        tr.why = "predicted " + fmtMs(tr.predictedMs) + " ms vs the incumbent's " + fmtMs(incPred) + " ms";
        record(tr);
        continue;
      }
      if (!budgetLeft(trialSteps)) {
        log("budget spent");
        out = true;
        break;
      }
      auto m = measure(setting, false);
      if (!m) return m.status();
      m->predictedMs = tr.predictedMs;
      record(m.value());
      round.push_back(m.value());
    }
    for (const auto& tr : round)
      if (!tr.refused && (!bestCand || tr.meanMs < bestCand->meanMs)) bestCand = &tr;
    double incMean = 0, incSe = 0;
    stats(incSamples, incMean, incSe);
    if (!bestCand || bestCand->meanMs >= incMean) continue;
    // Measure the incumbent again right before deciding (the machine's load drifts).
    if (budgetLeft(trialSteps)) {
      auto again = measure(inc, true);
      if (!again) return again.status();
      record(again.value());
      incSamples.insert(incSamples.end(), again->stepMs.begin(), again->stepMs.end());
      stats(incSamples, incMean, incSe);
    }
    TuneTrial cand = *bestCand;
    int64_t candFrom = cand.appliedStep + o.warmupSteps;
    auto pooledSe = [&] { return std::sqrt(incSe * incSe + cand.stderrMs * cand.stderrMs); };
    double se = pooledSe();
    // Undecided (faster on average, not beyond the noise): measure the candidate and the
    // incumbent again, alternately; the pooled samples shrink both standard errors.
    for (int rep = 0; rep < o.repeats && cand.meanMs < incMean && incMean - cand.meanMs <= o.z * se &&
                      budgetLeft(2 * trialSteps);
         ++rep) {
      log("undecided: " + settingText(cand.setting) + " " + fmtMs(incMean - cand.meanMs) + " ms faster, <= " +
          fmtMs(o.z) + " x " + fmtMs(se) + " ms: measuring both again");
      auto c2 = measure(cand.setting, false);
      if (!c2) return c2.status();
      record(c2.value());
      if (c2->refused) break;
      cand.stepMs.insert(cand.stepMs.end(), c2->stepMs.begin(), c2->stepMs.end());
      stats(cand.stepMs, cand.meanMs, cand.stderrMs);
      candFrom = c2->appliedStep + o.warmupSteps;
      auto i2 = measure(inc, true);
      if (!i2) return i2.status();
      record(i2.value());
      incSamples.insert(incSamples.end(), i2->stepMs.begin(), i2->stepMs.end());
      stats(incSamples, incMean, incSe);
      se = pooledSe();
    }
    if (incMean - cand.meanMs > o.z * se) {
      log("new incumbent " + settingText(cand.setting) + ": " + fmtMs(cand.meanMs) + " ms vs " + fmtMs(incMean) +
          " ms (difference > " + fmtMs(o.z) + " x " + fmtMs(se) + " ms)");
      inc = cand.setting;
      incSamples = cand.stepMs;
      incFrom = candFrom;
      incTo = incFrom + o.measureSteps - 1;
    } else {
      log("keeping " + settingText(inc) + ": " + settingText(cand.setting) + " is within the noise (" +
          fmtMs(incMean - cand.meanMs) + " ms <= " + fmtMs(o.z) + " x " + fmtMs(se) + " ms)");
    }
  }
  res.best = inc;
  double bm = 0, bs = 0;
  stats(incSamples, bm, bs);
  res.bestMs = bm;
  for (const auto& [k, v] : inc) res.changed |= !sameValue(v, res.initial[k]);
  // Leave the job at the best setting.
  std::vector<std::pair<std::string, std::string>> changes;
  for (const auto& [k, v] : inc)
    if (!sameValue(current[k], v)) changes.emplace_back(k, v);
  if (!changes.empty()) {
    auto a = live.setKnobs(changes, static_cast<int>(o.stepTimeoutSeconds * 1000));
    if (!a) return a.status();
    for (const auto& x : a.value())
      for (const auto& [r, st] : x.stepPerRank) res.appliedStep = std::max(res.appliedStep, st);
    log("applied " + settingText(inc) + " at step " + std::to_string(res.appliedStep));
  }
  res.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  // The configuration: every knob of the job as it runs now, the best trial's measurements.
  {
    std::shared_lock lock(mutex);  // a reader: the engine publishes when it is free
    auto cfg = configFromSession(store, "job " + live.jobId());
    if (cfg) res.config = cfg.value();
  }
  auto now = live.knobList();
  if (now)
    for (const auto& d : now->knobs) res.config.knobs[d.name] = d.currentValue;
  for (const auto& [k, v] : inc) res.config.knobs[k] = v;
  res.config.job.jobId = live.jobId();
  res.config.job.worldSize = live.worldSize();
  TunedMeasurements m;
  m.method = "tune: " + std::to_string(res.trials.size()) + " trials, " + std::to_string(o.warmupSteps) +
             " warm-up + " + std::to_string(o.measureSteps) + " measured steps each";
  m.steps = static_cast<int>(incSamples.size());
  m.fromStep = incFrom;
  m.toStep = incTo;
  m.stepTimeMs = bm;
  std::vector<double> sorted = incSamples;
  std::sort(sorted.begin(), sorted.end());
  if (!sorted.empty())
    m.stepTimeP50Ms = sorted.size() % 2 ? sorted[sorted.size() / 2]
                                        : (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]) / 2;
  res.config.measured = m;
  res.config.source = "job " + live.jobId();
  res.config.notes["initial_step_time_ms"] = fmtMs(res.initialMs);
  res.config.notes["initial_setting"] = settingText(res.initial);
  res.config.notes["tuned_knobs"] = settingText(inc);
  return res;
}

}  // namespace trainscope::core
