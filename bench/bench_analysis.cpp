// Analysis throughput (issue #8 target: a 10 M-event session analysed in <= 1 s), with an
// anchor side by side: one pass over every event of the store summing durations -- the least
// any analysis that reads each event once must cost. The session is the synthetic DP job
// (core/synth: kernels, phases, bucketed allreduces, p2p) at 4 ranks.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "trainscope/core/analysis/analysis.h"
#include "trainscope/core/synth/synth.h"

using namespace trainscope::core;

namespace {

TraceStore& session(int64_t events) {
  static TraceStore store;
  static int64_t made = 0;
  if (made != events) {
    store = TraceStore{};
    // ~ 4K + buckets + 8 events per rank and step with K kernels per phase (launch + kernel).
    const int kernels = 256, ranks = 4;
    const int perStep = ranks * (4 * kernels + 16);
    synthesizeTrace(store, {.ranks = ranks,
                            .steps = static_cast<int>(events / perStep),
                            .kernelsPerStep = kernels,
                            .buckets = 8});
    store.shrinkToFit();
    made = events;
  }
  return store;
}

void BM_AnalyzeStore(benchmark::State& state) {
  TraceStore& store = session(state.range(0));
  for (auto _ : state) {
    AnalysisResult r = analyzeStore(store);
    benchmark::DoNotOptimize(r.steps.count);
  }
  state.counters["events"] = static_cast<double>(store.eventCount());
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * store.eventCount()));
}
BENCHMARK(BM_AnalyzeStore)->Arg(10'000'000)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

// Anchor: read every event's start and end once.
void BM_AnchorScanAll(benchmark::State& state) {
  TraceStore& store = session(state.range(0));
  for (auto _ : state) {
    int64_t sum = 0;
    for (TrackId t = 0; t < store.trackCount(); ++t) {
      const TrackEvents& ev = store.events(t);
      for (size_t i = 0; i < ev.size(); ++i) sum += ev.end(i) - ev.start(i);
    }
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * store.eventCount()));
}
BENCHMARK(BM_AnchorScanAll)->Arg(10'000'000)->Unit(benchmark::kMillisecond)->UseRealTime();

// Live: the session grows one step (4 ranks) at a time, events in time order, and
// Analyzer::update runs after each step. Reports the mean update time over the first and the last
// 50 steps of 400 (latency must not grow with the session), and result() at the end.
void BM_LiveUpdatePerStep(benchmark::State& state) {
  TraceStore full;
  synthesizeTrace(full, {.ranks = 4, .steps = 400, .kernelsPerStep = 256, .buckets = 8});
  struct E {
    int64_t start;
    TrackId t;
    uint32_t i;
  };
  std::vector<E> order;
  for (TrackId t = 0; t < full.trackCount(); ++t)
    for (size_t i = 0; i < full.events(t).size(); ++i)
      order.push_back({full.events(t).start(i), t, static_cast<uint32_t>(i)});
  std::sort(order.begin(), order.end(), [](const E& a, const E& b) { return a.start < b.start; });
  // Step boundaries on rank 0 (Step events), to cut the feed into steps.
  std::vector<int64_t> stepEnds;
  for (TrackId t = 0; t < full.trackCount(); ++t) {
    if (full.track(t).rank != 0) continue;
    const TrackEvents& ev = full.events(t);
    for (size_t i = 0; i < ev.size(); ++i)
      if (ev.kind(i) == EventKind::Step) stepEnds.push_back(ev.end(i));
  }
  std::sort(stepEnds.begin(), stepEnds.end());
  for (auto _ : state) {
    TraceStore live;
    for (const auto& [r, info] : full.ranks()) live.setRank(info);
    for (TrackId t = 0; t < full.trackCount(); ++t) live.addTrack(full.track(t));
    Analyzer a;
    std::vector<double> updateMs;
    size_t pos = 0;
    for (int64_t end : stepEnds) {
      for (; pos < order.size() && order[pos].start < end + 50'000; ++pos) {
        const TrackEvents& ev = full.events(order[pos].t);
        std::vector<Attr> attrs(ev.attrs(order[pos].i).begin(), ev.attrs(order[pos].i).end());
        for (Attr& at : attrs)
          if (at.type == AttrType::String) at.bits = live.intern(full.str(at.asString()));
        live.append(order[pos].t,
                    {ev.start(order[pos].i), ev.end(order[pos].i),
                     live.intern(full.str(ev.name(order[pos].i))), ev.kind(order[pos].i)},
                    attrs);
      }
      const auto t0 = std::chrono::steady_clock::now();
      benchmark::DoNotOptimize(a.update(live));
      updateMs.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    const auto t0 = std::chrono::steady_clock::now();
    AnalysisResult r = a.result(live);
    benchmark::DoNotOptimize(r.steps.count);
    const double resultMs =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    double first = 0, last = 0;
    for (size_t i = 0; i < 50; ++i) {
      first += updateMs[i] / 50;
      last += updateMs[updateMs.size() - 1 - i] / 50;
    }
    state.counters["update_ms_first50"] = first;
    state.counters["update_ms_last50"] = last;
    state.counters["result_ms_at_end"] = resultMs;
    state.counters["steps"] = static_cast<double>(a.analysedSteps());
    state.counters["events_per_step"] =
        static_cast<double>(order.size()) / static_cast<double>(stepEnds.size());
  }
}
BENCHMARK(BM_LiveUpdatePerStep)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
