// From per-(rank, step) records to the result: steps, breakdown, data-parallel overlap,
// bandwidth classes, stragglers, DISCO layers, knob changes (pipeline: analysis_pipeline.cpp).
#include <algorithm>
#include <cmath>
#include <set>

#include "analysis/state.h"

namespace trainscope::core {
namespace {

double ms(int64_t ns) {
  return static_cast<double>(ns) / 1e6;
}
double meanOr(double sum, int n) {
  return n > 0 ? sum / n : kNaN;
}

double median(std::vector<double> v) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void aggregateSteps(const AnalyzerState& s, AnalysisResult& out) {
  std::map<int64_t, std::vector<const RankStepRecord*>> bySteps;
  for (const RankStepRecord& r : s.records) bySteps[r.step].push_back(&r);
  std::vector<double> times;
  for (const auto& [step, recs] : bySteps) {
    StepStat st;
    st.step = step;
    st.ranks = static_cast<int>(recs.size());
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    double sum = 0;
    for (const RankStepRecord* r : recs) {
      sum += ms(r->window.length());
      lo = std::min(lo, r->window.start);
      hi = std::max(hi, r->window.end);
    }
    st.timeMs = sum / st.ranks;
    st.spanMs = ms(hi - lo);
    st.startNs = lo;
    times.push_back(st.timeMs);
    out.steps.perStep.push_back(st);
  }
  out.steps.count = static_cast<int>(times.size());
  double total = 0;
  for (double t : times) total += t;
  out.steps.meanMs = meanOr(total, out.steps.count);
  out.steps.p50Ms = median(times);
  out.steps.incomplete = s.incompleteSteps;

  // Stragglers: who computes longest in each step is the one the others wait for.
  double skewSum = 0;
  for (const auto& [step, recs] : bySteps) {
    if (recs.size() < 2) continue;
    StragglerStep st;
    st.step = step;
    double hi = -1, lo = INFINITY, sum = 0;
    for (const RankStepRecord* r : recs) {
      const double c = ms(r->computeOnly + r->overlapped);
      sum += c;
      if (c > hi) {
        hi = c;
        st.straggler = r->rank;
      }
      lo = std::min(lo, c);
    }
    st.skewMs = hi - lo;
    st.waitMs = (hi * static_cast<double>(recs.size()) - sum) / static_cast<double>(recs.size() - 1);
    skewSum += st.skewMs;
    ++out.stragglers.stragglerCounts[st.straggler];
    out.stragglers.perStep.push_back(st);
  }
  out.stragglers.meanSkewMs = meanOr(skewSum, static_cast<int>(out.stragglers.perStep.size()));
  int best = 0;
  for (const auto& [rank, n] : out.stragglers.stragglerCounts)
    if (n > best) {
      best = n;
      out.stragglers.slowestRank = rank;
    }
}

void aggregateBreakdown(const AnalyzerState& s, AnalysisResult& out) {
  for (RankId rank : s.allRanks) {
    RankBreakdown b;
    b.rank = rank;
    double step = 0, comp = 0, ovl = 0, exp = 0, idle = 0;
    int64_t outside = 0;
    for (const RankStepRecord& r : s.records) {
      if (r.rank != rank) continue;
      BreakdownStep st{
          r.step,           r.window.start, r.window.end, ms(r.window.length()), ms(r.computeOnly),
          ms(r.overlapped), ms(r.exposed),  ms(r.idle)};
      step += st.stepMs;
      comp += st.computeMs;
      ovl += st.overlappedCommMs;
      exp += st.exposedCommMs;
      idle += st.idleMs;
      outside += r.outside;
      b.perStep.push_back(st);
    }
    std::sort(b.perStep.begin(), b.perStep.end(), [](auto& x, auto& y) { return x.step < y.step; });
    b.steps = static_cast<int>(b.perStep.size());
    b.stepMs = meanOr(step, b.steps);
    b.computeMs = meanOr(comp, b.steps);
    b.overlappedCommMs = meanOr(ovl, b.steps);
    b.exposedCommMs = meanOr(exp, b.steps);
    b.idleMs = meanOr(idle, b.steps);
    b.computeTotalMs = b.computeMs + b.overlappedCommMs;
    auto tail = s.outsideTail.find(rank);
    b.outsideStepsMs = ms(outside + (tail == s.outsideTail.end() ? 0 : tail->second));
    out.breakdown.push_back(std::move(b));
  }
}

void aggregateDataParallel(const AnalyzerState& s, AnalysisResult& out) {
  struct BucketAcc {
    int samples = 0;
    double bytes = 0, ready = 0, start = 0, end = 0, comm = 0, hidden = 0;
    int readySamples = 0;
    std::map<RankId, std::pair<int64_t, int64_t>> perRank;  // hidden, comm
    std::vector<EventRef> refs;
  };
  std::map<RankId, std::tuple<int64_t, int64_t, int>> ranks;  // hidden, comm, steps
  std::map<int64_t, BucketAcc> buckets;
  for (const RankStepRecord& r : s.records) {
    auto& [hidden, comm, steps] = ranks[r.rank];
    hidden += r.gradHidden;
    comm += r.gradComm;
    ++steps;
    for (const BucketRecord& b : r.buckets) {
      BucketAcc& a = buckets[b.bucket];
      ++a.samples;
      a.bytes += b.bytes;
      if (b.readyRel >= 0) {
        a.ready += ms(b.readyRel);
        ++a.readySamples;
      }
      a.start += ms(b.commStartRel);
      a.end += ms(b.commEndRel);
      a.comm += ms(b.comm);
      a.hidden += ms(b.hidden);
      a.perRank[r.rank].first += b.hidden;
      a.perRank[r.rank].second += b.comm;
      a.refs.insert(a.refs.end(), b.refs.begin(), b.refs.end());
    }
  }
  DataParallelResult& dp = out.dataParallel;
  dp.example = s.dpExample;
  double ratioSum = 0, exposedSum = 0;
  for (const auto& [rank, acc] : ranks) {
    const auto& [hidden, comm, steps] = acc;
    if (comm <= 0) continue;
    DpRank d{rank, static_cast<double>(hidden) / static_cast<double>(comm), ms(comm) / steps,
             ms(comm - hidden) / steps};
    ratioSum += d.overlapRatio;
    exposedSum += d.exposedCommMs;
    dp.perRank.push_back(d);
  }
  dp.present = !dp.perRank.empty();
  std::map<int64_t, std::tuple<int64_t, int64_t, int>> bySteps;  // comm, exposed, ranks
  for (const RankStepRecord& r : s.records) {
    auto it = ranks.find(r.rank);
    if (std::get<1>(it->second) <= 0) continue;  // ranks without gradient communication
    auto& [comm, exposed, n] = bySteps[r.step];
    comm += r.gradComm;
    exposed += r.gradComm - r.gradHidden;
    ++n;
  }
  for (const auto& [step, v] : bySteps)
    dp.perStep.push_back({step, ms(std::get<0>(v)) / std::get<2>(v), ms(std::get<1>(v)) / std::get<2>(v)});
  dp.overlapRatio = meanOr(ratioSum, static_cast<int>(dp.perRank.size()));
  dp.exposedCommMs = meanOr(exposedSum, static_cast<int>(dp.perRank.size()));
  for (auto& [k, a] : buckets) {
    BucketResult b;
    b.bucket = k;
    b.samples = a.samples;
    b.bytes = a.bytes / a.samples;
    b.readyMs = meanOr(a.ready, a.readySamples);
    b.commStartMs = a.start / a.samples;
    b.commEndMs = a.end / a.samples;
    b.commMs = a.comm / a.samples;
    b.hiddenMs = a.hidden / a.samples;
    b.exposedMs = b.commMs - b.hiddenMs;
    double ratio = 0;
    int n = 0;
    for (const auto& [rank, hc] : a.perRank)
      if (hc.second > 0) {
        ratio += static_cast<double>(hc.first) / static_cast<double>(hc.second);
        ++n;
      }
    b.overlapRatio = meanOr(ratio, n);
    out.sources["data_parallel.buckets[" + std::to_string(dp.buckets.size()) + "]"] = std::move(a.refs);
    dp.buckets.push_back(b);
  }
}

void aggregateCollectives(const AnalyzerState& s, AnalysisResult& out) {
  std::map<std::tuple<std::string, int64_t, int>, BwAcc> classes;
  for (const auto& [key, acc] : s.bandwidth) {
    auto it = s.commRanks.find(key.commHash);
    int n = key.commHash != 0 && it != s.commRanks.end() ? static_cast<int>(it->second.size())
                                                         : static_cast<int>(s.allRanks.size());
    BwAcc& c = classes[{key.type, key.sizeClass, n}];
    c.count += acc.count;
    c.bytes += acc.bytes;
    c.time += acc.time;
    c.counted += acc.counted;
    c.sent += acc.sent;
    c.received += acc.received;
    c.countedTime += acc.countedTime;
  }
  for (const auto& [key, acc] : classes) {
    BandwidthClass b;
    std::tie(b.collective, b.sizeClassBytes, b.ranks) = key;
    b.count = acc.count;
    b.bytes = acc.bytes / static_cast<double>(acc.count);
    b.timeMs = ms(acc.time) / static_cast<double>(acc.count);
    b.algbwGBps = acc.time > 0 ? acc.bytes / static_cast<double>(acc.time) : kNaN;  // bytes/ns = GB/s
    b.busbwGBps = b.algbwGBps * busBandwidthFactor(b.collective, b.ranks);
    b.payloadBytes = b.bytes;
    if (acc.counted == acc.count && acc.count > 0) {  // every operation counted at the transport
      b.bytesSent = acc.sent / static_cast<double>(acc.count);
      b.bytesReceived = acc.received / static_cast<double>(acc.count);
      b.wireGBps = acc.time > 0 ? acc.sent / static_cast<double>(acc.time) : kNaN;
    }
    out.collectives.push_back(b);
  }
}

double parseDouble(const std::string& v, double dflt) {
  try {
    return v.empty() ? dflt : std::stod(v);
  } catch (...) {
    return dflt;
  }
}

// The sparsity of split layer l in force at a step (docs/TRAINER.md): disco.sparsity.<l> at that
// step (the job sets every per-layer knob when disco.sparsity changes); where the recording never
// saw that knob, or it holds -1 ("follow disco.sparsity", older recordings), disco.sparsity; 0 when
// neither is known.
double discoSparsityAt(const AnalyzerState& s, int64_t layer, int64_t step) {
  const double own = parseDouble(knobAt(s, "disco.sparsity." + std::to_string(layer), step), -1);
  return own >= 0 ? own : parseDouble(knobAt(s, "disco.sparsity", step), 0);
}

void aggregateDisco(const AnalyzerState& s, AnalysisResult& out) {
  // Accuracy per step: counters carry their step, or fall in (or at the end of) a window.
  std::map<int64_t, std::pair<double, int>> accuracy;
  for (const auto& [key, sv] : s.accuracySamples) {
    int64_t step = sv.first;
    if (step < 0) {
      auto w = s.windows.find(key.first);
      if (w == s.windows.end()) continue;
      for (const auto& [n, win] : w->second)
        if (key.second >= win.start && key.second <= win.end) step = n;
    }
    if (step < 0) continue;
    accuracy[step].first += sv.second;
    ++accuracy[step].second;
  }
  struct PointAcc {
    int samples = 0;
    double comm = 0, comp = 0, overlap = 0, bytes = 0;
    std::set<int64_t> steps;
  };
  struct LayerAcc {
    std::set<RankId> ranks;
    std::map<double, PointAcc> points;
    int64_t lastStep = INT64_MIN;
    double lastSparsity = 0;
    std::vector<EventRef> refs;
  };
  std::map<int64_t, LayerAcc> layers;
  for (const RankStepRecord& r : s.records) {
    for (const LayerRecord& l : r.layers) {
      if (l.comm <= 0) continue;  // only layers with a feature exchange are DISCO layers
      const double sp = discoSparsityAt(s, l.layer, r.step);
      LayerAcc& a = layers[l.layer];
      a.ranks.insert(r.rank);
      PointAcc& p = a.points[sp];
      ++p.samples;
      p.comm += ms(l.comm);
      p.comp += ms(l.comp);
      p.overlap += ms(l.overlap);
      p.bytes += l.bytes;
      p.steps.insert(r.step);
      if (r.step >= a.lastStep) {
        a.lastStep = r.step;
        a.lastSparsity = sp;
      }
      a.refs.insert(a.refs.end(), l.refs.begin(), l.refs.end());
    }
  }
  for (auto& [layer, a] : layers) {
    DiscoLayer d;
    d.layer = layer;
    d.nodes = static_cast<int>(a.ranks.size());
    d.sparsity = a.lastSparsity;
    for (const auto& [sp, p] : a.points) {
      DiscoPoint pt{sp, p.samples, p.comm / p.samples, p.comp / p.samples, p.bytes / p.samples, kNaN,
                    p.overlap / p.samples};
      double accSum = 0;
      int accN = 0;
      for (int64_t st : p.steps) {
        auto it = accuracy.find(st);
        if (it == accuracy.end()) continue;
        accSum += it->second.first / it->second.second;
        ++accN;
      }
      pt.accuracy = meanOr(accSum, accN);
      d.bySparsity.push_back(pt);
      if (sp == a.lastSparsity) {
        d.lCommMs = pt.lCommMs;
        d.lCompMs = pt.lCompMs;
        d.lOverlapMs = pt.lOverlapMs;
        d.bytes = pt.bytes;
      }
    }
    // Equilibrium (background.md 1): measured times give the dense ones, their ratio is A.
    const double n = d.nodes;
    d.bandwidthGBps = d.lCommMs > 0 ? d.bytes / (d.lCommMs * 1e6) : kNaN;
    d.commDenseMs = d.sparsity < 1 ? d.lCommMs / (1 - d.sparsity) : kNaN;
    const double compFactor = 1 - (n - 1) / n * d.sparsity;
    d.compDenseMs = compFactor > 0 ? d.lCompMs / compFactor : kNaN;
    d.ratioA = d.compDenseMs > 0 ? d.commDenseMs / d.compDenseMs : kNaN;
    d.commBound = !std::isnan(d.ratioA) && d.ratioA >= 1;
    d.equilibriumSparsity = discoEquilibriumSparsity(d.ratioA, d.nodes);
    out.sources["disco.layers[" + std::to_string(out.disco.size()) + "]"] = std::move(a.refs);
    out.disco.push_back(std::move(d));
  }
}

// The benchmark's rows (TRACE_CONVENTIONS.md): on the lowest rank that has them, each
// disco_bench_sparsity sample starts a row; the row's other values are each disco_bench_*
// counter's first sample from then until the next row.
void aggregateDiscoInference(const AnalyzerState& s, AnalysisResult& out) {
  for (const auto& rankCounters : s.discoBench) {
    const auto& counters = rankCounters.second;  // not a structured binding: clang 14 (fuzz build) cannot capture one
    auto sp = counters.find("disco_bench_sparsity");
    if (sp == counters.end()) continue;
    auto valueIn = [&counters](const char* name, int64_t from, int64_t to) {
      auto c = counters.find(name);
      if (c == counters.end()) return kNaN;
      auto it = c->second.lower_bound(from);
      return it != c->second.end() && it->first < to ? it->second : kNaN;
    };
    for (auto it = sp->second.begin(); it != sp->second.end(); ++it) {
      const int64_t from = it->first, to = std::next(it) == sp->second.end() ? INT64_MAX : std::next(it)->first;
      DiscoInferencePoint p;
      p.sparsity = it->second;
      p.independent = valueIn("disco_bench_independent", from, to) == 1;
      p.bytes = valueIn("disco_bench_bytes", from, to);
      p.latencyPipelinedMs = valueIn("disco_bench_latency_pipelined_ms", from, to);
      p.latencyWaitMs = valueIn("disco_bench_latency_wait_ms", from, to);
      p.accuracy = valueIn("disco_bench_accuracy", from, to);
      out.discoInference.push_back(p);
    }
    return;
  }
}

void aggregateKnobs(const AnalyzerState& s, AnalysisResult& out) {
  std::map<int64_t, KnobChangeEntry> bySteps;
  for (const KnobEvent& k : s.knobs) {
    auto it = bySteps.try_emplace(k.step, KnobChangeEntry{k.step, k.timeNs, {}}).first;
    it->second.timeNs = std::min(it->second.timeNs, k.timeNs);
    it->second.values[k.knob] = k.value;
  }
  for (auto& [step, e] : bySteps) out.knobChanges.push_back(std::move(e));
}

}  // namespace

AnalysisResult aggregate(const AnalyzerState& s, const TraceStore& store) {
  (void)store;
  AnalysisResult out;
  out.ranks.assign(s.allRanks.begin(), s.allRanks.end());
  aggregateSteps(s, out);
  aggregateBreakdown(s, out);
  aggregatePipeline(s, out);
  aggregateDataParallel(s, out);
  aggregateCollectives(s, out);
  aggregateDisco(s, out);
  aggregateDiscoInference(s, out);
  aggregateKnobs(s, out);
  for (const auto& [step, cp] : s.critical) {
    out.criticalPath.push_back(cp);
    for (const CriticalSegment& seg : cp.segments)
      out.overlays.push_back(
          {OverlayKind::CriticalPath, seg.rank, -1, step, seg.startNs, seg.endNs, seg.name});
  }
  for (const RankStepRecord& r : s.records)
    out.overlays.insert(out.overlays.end(), r.overlays.begin(), r.overlays.end());
  return out;
}

}  // namespace trainscope::core
