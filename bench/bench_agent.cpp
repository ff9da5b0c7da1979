// Agent hot path: the cost of one range (ts_range_push + ts_range_pop, two 32-byte records)
// through the exported C API, with 1 and 2 threads, next to an empty loop of the same shape
// (two calls into non-inlined functions). "Stored" runs pause every 4096 ranges so the drain
// keeps up and every record lands in the ring; "saturated" runs never pause, so most records
// take the ring-full path (dropped and counted) -- the cost the job pays when the drain falls
// behind. The drop fraction is reported as a counter.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "trainscope/agent.h"

namespace {

__attribute__((noinline)) void emptyPush(uint32_t id) { asm volatile("" : : "r"(id) : "memory"); }
__attribute__((noinline)) void emptyPop() { asm volatile("" : : : "memory"); }

constexpr int kChunk = 4096;

void pauseForDrain(benchmark::State& state) {
  state.PauseTiming();
  std::this_thread::sleep_for(std::chrono::milliseconds(4));
  state.ResumeTiming();
}

void BM_EmptyLoop(benchmark::State& state) {
  const uint32_t id = 7;
  for (auto _ : state) {
    emptyPush(id);
    emptyPop();
  }
}

void BM_RangeStored(benchmark::State& state) {
  static const uint32_t id = ts_name("bench-range");
  const uint64_t dropped0 = ts_dropped_events();
  int n = 0;
  for (auto _ : state) {
    ts_range_push(id);
    ts_range_pop();
    if (++n == kChunk) {
      n = 0;
      pauseForDrain(state);
    }
  }
  if (state.thread_index() == 0)
    state.counters["dropped_fraction"] =
        static_cast<double>(ts_dropped_events() - dropped0) / (2.0 * static_cast<double>(state.iterations()) * state.threads());
}

void BM_RangeSaturated(benchmark::State& state) {
  static const uint32_t id = ts_name("bench-range");
  const uint64_t dropped0 = ts_dropped_events();
  for (auto _ : state) {
    ts_range_push(id);
    ts_range_pop();
  }
  if (state.thread_index() == 0)
    state.counters["dropped_fraction"] =
        static_cast<double>(ts_dropped_events() - dropped0) / (2.0 * static_cast<double>(state.iterations()) * state.threads());
}

}  // namespace

BENCHMARK(BM_EmptyLoop)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_RangeStored)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_RangeSaturated)->Threads(1)->Threads(2)->UseRealTime();

int main(int argc, char** argv) {
  ::setenv("TRAINSCOPE_LISTEN", "none", 0);  // capture and drain only: no server, no files
  ts_init_params p = TS_INIT_PARAMS_DEFAULT;
  p.job_id = "bench-agent";
  if (ts_init(&p) < 0) return 1;
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  ts_shutdown();
  return 0;
}
