// TraceStore benchmarks: append throughput (in order, and with out-of-order batches that need a
// sort-merge), memory per event, and range queries. Targets (issue #2): >= 20 M events/s on one
// core, <= 32 bytes per plain event.
#include <benchmark/benchmark.h>

#include <random>

#include "trainscope/core/model/trace_store.h"

using namespace trainscope::core;

namespace {

// Plain events (no attributes) on 8 tracks, in time order per track, as an agent delivers them.
void BM_AppendInOrder(benchmark::State& state) {
  const auto n = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    TraceStore store;
    TrackId tracks[8];
    for (int t = 0; t < 8; ++t) tracks[t] = store.findOrAddTrack(t / 2, TrackKind::CudaStream, t, "s");
    const StringId name = store.intern("kernel");
    int64_t ts = 0;
    for (size_t i = 0; i < n; ++i) {
      ts += 100;
      store.append(tracks[i & 7], {ts, ts + 80, name, EventKind::Kernel});
    }
    benchmark::DoNotOptimize(store.eventCount());
    state.PauseTiming();
    store.shrinkToFit();
    state.counters["bytes_per_event"] = static_cast<double>(store.memoryBytes()) / static_cast<double>(n);
    state.ResumeTiming();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_AppendInOrder)->Arg(10'000'000)->Unit(benchmark::kMillisecond)->UseRealTime();

// Anchor, side by side: the simplest store there is -- one std::vector of 24-byte structs per
// track, push_back -- doing the same appends (no sorting state, no attributes).
void BM_AnchorVectorOfStructs(benchmark::State& state) {
  struct Plain {
    int64_t start, end;
    uint32_t name;
    uint8_t kind;
  };
  const auto n = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    std::vector<std::vector<Plain>> tracks(8);
    int64_t ts = 0;
    for (size_t i = 0; i < n; ++i) {
      ts += 100;
      tracks[i & 7].push_back({ts, ts + 80, 1, 0});
    }
    benchmark::DoNotOptimize(tracks[3].size());
    size_t bytes = 0;
    for (const auto& t : tracks) bytes += t.capacity() * sizeof(Plain);
    state.counters["bytes_per_event"] = static_cast<double>(bytes) / static_cast<double>(n);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_AnchorVectorOfStructs)->Arg(10'000'000)->Unit(benchmark::kMillisecond)->UseRealTime();

// Memory while live (before shrinkToFit): what growth slack costs.
void BM_LiveMemory(benchmark::State& state) {
  const auto n = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    TraceStore store;
    const TrackId t = store.findOrAddTrack(0, TrackKind::CudaStream, 0, "s");
    for (size_t i = 0; i < n; ++i) store.append(t, {int64_t(i) * 10, int64_t(i) * 10 + 5, 1, EventKind::Kernel});
    state.counters["bytes_per_event"] = static_cast<double>(store.memoryBytes()) / static_cast<double>(n);
  }
}
BENCHMARK(BM_LiveMemory)->Arg(1'000'000)->Arg(10'000'000)->Unit(benchmark::kMillisecond)->Iterations(1);

// Batches of 4096 events arrive with timestamps jittered up to 50 us back in time (late
// batches from another thread); flush() sort-merges the overlapping tail.
void BM_AppendOutOfOrderAndFlush(benchmark::State& state) {
  const auto n = static_cast<size_t>(state.range(0));
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> jitter(0, 50'000);
  std::vector<int64_t> starts(n);
  for (size_t i = 0; i < n; ++i) starts[i] = static_cast<int64_t>(i) * 100 - jitter(rng);
  for (auto _ : state) {
    TraceStore store;
    const TrackId t = store.findOrAddTrack(0, TrackKind::CpuThread, 0, "main");
    for (size_t i = 0; i < n; ++i) {
      store.append(t, {starts[i], starts[i] + 50, 1, EventKind::Range});
      if ((i & 4095) == 4095) store.flush();
    }
    store.flush();
    benchmark::DoNotOptimize(store.events(t).size());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_AppendOutOfOrderAndFlush)->Arg(1'000'000)->Unit(benchmark::kMillisecond)->UseRealTime();

// Events with three attributes (e.g. kernels with correlation id, stream, device).
void BM_AppendWithAttrs(benchmark::State& state) {
  const auto n = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    TraceStore store;
    const TrackId t = store.findOrAddTrack(0, TrackKind::CudaStream, 7, "s");
    for (size_t i = 0; i < n; ++i) {
      const Attr a[] = {Attr::ofInt(AttrKey::CorrelationId, int64_t(i)), Attr::ofInt(AttrKey::Stream, 7),
                        Attr::ofInt(AttrKey::Device, 0)};
      store.append(t, {int64_t(i) * 10, int64_t(i) * 10 + 5, 1, EventKind::Kernel}, a);
    }
    benchmark::DoNotOptimize(store.eventCount());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_AppendWithAttrs)->Arg(1'000'000)->Unit(benchmark::kMillisecond)->UseRealTime();

// Overlap query of a 1 ms window in a 10 M-event track.
void BM_RangeQuery(benchmark::State& state) {
  TraceStore store;
  const TrackId t = store.findOrAddTrack(0, TrackKind::CudaStream, 0, "s");
  const size_t n = 10'000'000;
  for (size_t i = 0; i < n; ++i) store.append(t, {int64_t(i) * 100, int64_t(i) * 100 + 80, 1, EventKind::Kernel});
  const auto& ev = store.events(t);
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<int64_t> pos(0, int64_t(n) * 100);
  size_t found = 0;
  for (auto _ : state) {
    const int64_t t0 = pos(rng);
    ev.forEachOverlapping(t0, t0 + 1'000'000, [&](size_t) { ++found; });
  }
  benchmark::DoNotOptimize(found);
  state.counters["events_per_query"] = static_cast<double>(found) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_RangeQuery)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
