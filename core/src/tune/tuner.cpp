#include "trainscope/core/tune/tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <set>
#include <thread>

#include "trainscope/core/analysis/analysis.h"
#include "trainscope/core/tune/stats.h"
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
  int over = 0;
  for (double ms : stepMs) over += median > 0 && ms > 2 * median;
  // Periodic work is rare (trainscope-train: one step in 10); more slow steps than a fifth of the
  // trial are the machine's load, which belongs in the sample (and in its interval), not out of
  // it. Under a load average of 40 up to half of a 6-step trial was "periodic" and a 165 ms
  // setting measured 5.8 ms on the rest.
  if (over > std::max<int>(1, static_cast<int>(stepMs.size()) / 5)) {
    kept = stepMs;
    return 0;
  }
  for (double ms : stepMs)
    if (!(median > 0 && ms > 2 * median)) kept.push_back(ms);
  return over;
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
  if (!(o.confidence > 0 && o.confidence < 1))
    return Status(ErrorCode::InvalidArgument, "the confidence is a number in (0, 1), e.g. 0.95");
  if (!(o.minEffectPct >= 0) || !(o.z >= 0) || !(o.misfitFactor > 1))
    return Status(ErrorCode::InvalidArgument,
                  "the minimum effect and z are >= 0 and the misfit factor > 1");
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
    std::vector<int64_t> ids;
    for (const auto& [s, ms] : times) all.push_back(ms), ids.push_back(s);
    tr.periodicSteps = dropPeriodicSteps(all, tr.stepMs);
    if (!all.empty()) {
      double sum = 0;
      for (double x : all) sum += x;
      tr.allStepsMeanMs = sum / static_cast<double>(all.size());
    }
    // The kept steps' numbers (dropPeriodicSteps keeps the order, and a kept value is never one
    // left out: those are over twice the median, the kept ones not).
    for (size_t i = 0, k = 0; i < all.size(); ++i)
      if (k < tr.stepMs.size() && all[i] == tr.stepMs[k]) tr.steps.push_back(ids[i]), ++k;
    stats(tr.stepMs, tr.meanMs, tr.stderrMs);
    nextStep = to + 1;
    res.stepsUsed += static_cast<int>(to - applied + 1);
    return tr;
  };
  using Setting = std::map<std::string, std::string>;
  std::map<Setting, std::vector<double>> samples;  // every measured step of each setting, pooled
  std::map<Setting, std::vector<int64_t>> stepsOf;  // and their step numbers
  std::map<Setting, std::pair<int64_t, int64_t>> lastWindow;  // its latest trial's measured steps
  res.confidence = o.confidence;
  const std::string confText = [&] {
    char b[32];
    std::snprintf(b, sizeof b, "%g%%", o.confidence * 100);
    return std::string(b);
  }();
  auto record = [&](TuneTrial tr) {
    if (!tr.skipped && !tr.refused) {
      // Against the mean of all the trial's steps: the model's window mean includes periodic steps.
      const double measured = tr.allStepsMeanMs > 0 ? tr.allStepsMeanMs : tr.meanMs;
      if (tr.predictedMs > 0 && measured > 0) {
        tr.predictionOff = std::max(tr.predictedMs / measured, measured / tr.predictedMs);
        tr.modelFits = tr.predictionOff <= o.misfitFactor;
      }
      auto& v = samples[tr.setting];
      v.insert(v.end(), tr.stepMs.begin(), tr.stepMs.end());
      auto& st = stepsOf[tr.setting];
      st.insert(st.end(), tr.steps.begin(), tr.steps.end());
      lastWindow[tr.setting] = {tr.appliedStep + o.warmupSteps, tr.appliedStep + o.warmupSteps + o.measureSteps - 1};
    }
    res.trials.push_back(tr);
    std::string line = "trial " + std::to_string(res.trials.size()) + (tr.incumbent ? " (incumbent) " : " ") +
                       settingText(tr.setting) + ": ";
    if (tr.skipped)
      line += "skipped: " + tr.why;
    else if (tr.refused)
      line += "refused: " + tr.why;
    else
      line += "measured " + fmtMs(tr.meanMs) + " +- " + fmtMs(tr.stderrMs) + " ms over steps " +
              std::to_string(tr.appliedStep + o.warmupSteps) + ".." +
              std::to_string(tr.appliedStep + o.warmupSteps + o.measureSteps - 1) +
              (tr.periodicSteps > 0 ? " (" + std::to_string(tr.periodicSteps) + " over 2x the median left out; all " +
                                          "steps " + fmtMs(tr.allStepsMeanMs) + " ms)"
                                    : "");
    if (tr.predictedMs >= 0 && !tr.skipped) {
      line += ", predicted " + fmtMs(tr.predictedMs) + " ms";
      if (!tr.modelFits) {
        char off[32];
        std::snprintf(off, sizeof off, "%.1fx", tr.predictionOff);
        line += std::string(" (") + off + " off: the what-if model does not fit this machine/run)";
        res.modelFits = false;
        res.modelNotes.push_back(settingText(tr.setting) + ": predicted " + fmtMs(tr.predictedMs) + " ms, measured " +
                                 fmtMs(tr.allStepsMeanMs > 0 ? tr.allStepsMeanMs : tr.meanMs) + " ms (" + off + ")");
      }
    }
    log(line);
  };

  Setting inc = res.initial;
  const int trialSteps = o.warmupSteps + o.measureSteps;
  if (!budgetLeft(trialSteps))
    return Status(ErrorCode::InvalidArgument, "the budget is smaller than one trial");
  auto first = measure(inc, true);
  if (!first) return first.status();
  record(first.value());
  res.initialMs = first->meanMs;
  auto minEffect = [&](const Setting& base) {
    const SampleSummary b = summarize(samples[base]);
    return b.mean > 0 ? o.minEffectPct / 100 * b.mean : 0.0;
  };
  bool out = false;
  for (const auto& knob : o.knobs) {
    if (out) break;
    // Rank this knob's candidates with the simulator built from the incumbent's latest steps,
    // unless it misses the incumbent's own measurement by more than misfitFactor.
    double incPred = -1;
    std::map<std::string, double> pred;
    bool trustModel = o.useSimulator;
    if (o.useSimulator) {
      std::shared_lock lock(mutex);  // a reader: the engine publishes when it is free
      WhatIfOptions wo;
      wo.fromStep = lastWindow[inc].first;
      wo.toStep = lastWindow[inc].second;
      auto model = WhatIfModel::fromSession(store, wo);
      if (model) {
        if (auto p = model->predict({}); p) incPred = p->stepTimeMs;
        for (const auto& c : cands[knob])
          if (auto p = model->predict({{knob, c}}); p) pred[c] = p->stepTimeMs;
      } else {
        log("simulator: " + model.status().message() + " (candidates are measured in order)");
        trustModel = false;
      }
    }
    // The replay against the measurement of the very steps it was built from (not the pooled
    // mean: the machine's drift between trials is not the model's error).
    double incLatest = -1;
    for (auto it = res.trials.rbegin(); it != res.trials.rend(); ++it)
      if (it->setting == inc && !it->skipped && !it->refused) {
        incLatest = it->allStepsMeanMs > 0 ? it->allStepsMeanMs : it->meanMs;
        break;
      }
    if (incPred > 0 && incLatest > 0) {
      const double off = std::max(incPred / incLatest, incLatest / incPred);
      if (off > o.misfitFactor) {
        char b[32];
        std::snprintf(b, sizeof b, "%.1fx", off);
        const std::string note = "the what-if model does not fit this machine/run: it puts " + settingText(inc) +
                                 " at " + fmtMs(incPred) + " ms where those steps measured " + fmtMs(incLatest) + " ms (" +
                                 b + " off); its predictions are shown beside the measurements but not used to " +
                                 "order or skip the " + knob + " candidates";
        log(note);
        res.modelFits = false;
        res.modelNotes.push_back(note);
        trustModel = false;
      }
    }
    std::vector<std::pair<double, std::string>> order;
    for (const auto& c : cands[knob]) order.push_back({trustModel && pred.count(c) ? pred[c] : 0.0, c});
    std::stable_sort(order.begin(), order.end());
    std::vector<Setting> round;
    for (const auto& [p, c] : order) {
      if (sameValue(c, inc[knob])) continue;
      auto setting = inc;
      setting[knob] = c;
      TuneTrial tr;
      tr.setting = setting;
      tr.predictedMs = pred.count(c) ? pred[c] : -1;
      if (trustModel && incPred > 0 && tr.predictedMs > o.skipFactor * incPred) {
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
      if (!m->refused && !m->stepMs.empty()) round.push_back(setting);
      if (trustModel && !res.trials.back().modelFits) {
        trustModel = false;
        log("the what-if model does not fit this machine/run (the trial above): the rest of the " + knob +
            " candidates are measured, none skipped by its predictions");
      }
    }
    // The round's fastest candidate (on its measured steps) against the incumbent.
    const Setting* best = nullptr;
    for (const auto& c : round)
      if (!best || summarize(samples[c]).mean < summarize(samples[*best]).mean) best = &c;
    if (!best) continue;
    const Setting cand = *best;
    const double candPred = pred.count(cand.at(knob)) ? pred[cand.at(knob)] : -1;
    TuneDecision dec;
    dec.knob = knob;
    dec.incumbent = inc;
    dec.candidate = cand;
    auto decide = [&] {
      dec.diff = compareToBaseline(samples[inc], samples[cand], o.confidence, minEffect(inc), o.z);
    };
    // Measure the incumbent again after the round's candidates (baseline, candidates, baseline:
    // the machine's load drifts, and the incumbent's earlier steps may come from a quieter or a
    // busier minute than the candidates'), then, while undecided and faster on average, the
    // candidate and the incumbent again, alternately.
    if (budgetLeft(trialSteps)) {
      auto again = measure(inc, true);
      if (!again) return again.status();
      record(again.value());
      dec.interleaved = !again->refused && !again->stepMs.empty();
    }
    decide();
    {
      for (int rep = 0; rep < o.repeats && dec.interleaved && !dec.diff.better && !dec.diff.worse &&
                        dec.diff.diffMs > 0 && budgetLeft(2 * trialSteps);
           ++rep) {
        log("undecided: " + settingText(cand) + " " + dec.diff.text() + ": measuring both again");
        auto c2 = measure(cand, false);
        if (!c2) return c2.status();
        c2->predictedMs = candPred;
        record(c2.value());
        if (c2->refused) break;
        auto i2 = measure(inc, true);
        if (!i2) return i2.status();
        record(i2.value());
        decide();
      }
    }
    dec.accepted = dec.diff.better && dec.interleaved;
    if (dec.accepted)
      dec.verdict = "new incumbent " + settingText(cand) + ": " + dec.diff.text() + " than " + settingText(inc);
    else if (dec.diff.better)
      dec.verdict = "keeping " + settingText(inc) + ": " + settingText(cand) + " measured " + dec.diff.text() +
                    ", but the budget left no trial to measure the incumbent again after it (a drift of the "
                    "machine's load could explain it): not confirmed";
    else if (dec.diff.diffMs <= 0)
      dec.verdict = "keeping " + settingText(inc) + ": the round's fastest candidate, " + settingText(cand) +
                    ", is not faster: " + dec.diff.text();
    else
      dec.verdict = "keeping " + settingText(inc) + ": " + settingText(cand) + " is within the measured noise: " +
                    dec.diff.text();
    log(dec.verdict);
    if (dec.accepted) inc = cand;
    res.decisions.push_back(dec);
  }
  res.best = inc;
  res.bestSteps = summarize(samples[inc]);
  res.bestMs = res.bestSteps.mean;
  for (const auto& [k, v] : inc) res.changed |= !sameValue(v, res.initial[k]);
  if (res.changed) {
    // On all the steps measured of each: for one tuned knob this is the accepted decision.
    res.win = compareToBaseline(samples[res.initial], samples[inc], o.confidence, minEffect(res.initial), o.z);
    res.verdict = "best " + settingText(inc) + ": " + res.win.text() + " than the initial " + settingText(res.initial);
    if (!res.win.better)
      res.verdict += "; over all their steps the gain is not beyond the noise (each change was, in its own round)";
  } else {
    const TuneDecision* closest = nullptr;
    for (const auto& d : res.decisions)
      if (d.diff.valid && (!closest || d.diff.diffMs > closest->diff.diffMs)) closest = &d;
    if (closest) {
      res.win = closest->diff;
      res.verdict = "no setting is better than the current one beyond the measured noise (±" +
                    fmtMs(closest->diff.halfWidthMs) + " ms, " + confText + "); the closest, " +
                    settingText(closest->candidate) + ": " + closest->diff.text();
    } else {
      res.verdict = "no setting is better than the current one: no candidate was measured (skipped, refused or "
                    "out of budget)";
    }
  }
  log(res.verdict);
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
  // The configuration: every knob of the job as it runs now, and the measurements of the best
  // setting's own measured steps (their analysis: overlap, exposed communication, bytes).
  const std::vector<int64_t>& bestSteps = stepsOf[inc];
  TunedMeasurements m;
  {
    std::shared_lock lock(mutex);  // a reader: the engine publishes when it is free
    auto cfg = configFromSession(store, "job " + live.jobId());
    if (cfg) res.config = cfg.value();
    const AnalysisResult a = analyzeStore(store);
    m = measurementsOfSteps(store, a, std::set<int64_t>(bestSteps.begin(), bestSteps.end()));
  }
  auto now = live.knobList();
  if (now)
    for (const auto& d : now->knobs) res.config.knobs[d.name] = d.currentValue;
  for (const auto& [k, v] : inc) res.config.knobs[k] = v;
  res.config.job.jobId = live.jobId();
  res.config.job.worldSize = live.worldSize();
  int bestTrials = 0;
  for (const auto& t : res.trials) bestTrials += !t.skipped && !t.refused && t.setting == inc;
  m.method = "tune: " + std::to_string(res.trials.size()) + " trials, " + std::to_string(o.warmupSteps) +
             " warm-up + " + std::to_string(o.measureSteps) + " measured steps each; the chosen setting's " +
             std::to_string(bestSteps.size()) + " measured steps from " + std::to_string(bestTrials) +
             " trials (periodic steps left out), analysed";
  // The step time as the tuner measured it (the same steps; its mean and interval decided).
  const std::vector<double>& bs = samples[inc];
  m.steps = static_cast<int>(bs.size());
  if (!bestSteps.empty()) {
    m.fromStep = *std::min_element(bestSteps.begin(), bestSteps.end());
    m.toStep = *std::max_element(bestSteps.begin(), bestSteps.end());
  }
  m.stepTimeMs = res.bestSteps.mean;
  std::vector<double> sorted = bs;
  std::sort(sorted.begin(), sorted.end());
  if (!sorted.empty()) {
    m.stepTimeP50Ms = sorted.size() % 2 ? sorted[sorted.size() / 2]
                                        : (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]) / 2;
    m.unavailable.erase("step_time_ms");
  }
  if (res.bestSteps.se >= 0) {
    m.stepTimeStderrMs = res.bestSteps.se;
    const double t = studentTQuantile(0.975, res.bestSteps.n - 1);
    m.stepTimeCi95LowMs = res.bestSteps.mean - t * res.bestSteps.se;
    m.stepTimeCi95HighMs = res.bestSteps.mean + t * res.bestSteps.se;
  }
  res.config.measured = m;
  res.config.source = "job " + live.jobId();
  res.config.notes["initial_step_time_ms"] = fmtMs(res.initialMs);
  res.config.notes["initial_setting"] = settingText(res.initial);
  res.config.notes["tuned_knobs"] = settingText(inc);
  res.config.notes["decision"] = res.verdict;
  if (!res.modelFits) {
    std::string n;
    for (const auto& x : res.modelNotes) n += (n.empty() ? "" : "; ") + x;
    res.config.notes["model_misfit"] = n;
  }
  return res;
}

}  // namespace trainscope::core
