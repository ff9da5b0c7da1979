// Analysis throughput (issue #8 target: a 10 M-event session analysed in <= 1 s), with an
// anchor side by side: one pass over every event of the store summing durations -- the least
// any analysis that reads each event once must cost. The session is the synthetic DP job
// (core/synth: kernels, phases, bucketed allreduces, p2p) at 4 ranks.
#include <benchmark/benchmark.h>

#include "trainscope/core/analysis.h"
#include "trainscope/core/synth.h"

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

}  // namespace

BENCHMARK_MAIN();
