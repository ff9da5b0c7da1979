// Agent hot path: the cost of one range (ts_range_push + ts_range_pop, two 32-byte records)
// through the exported C API, with 1 and 2 threads, next to an empty loop of the same shape
// (two calls into non-inlined functions). "Stored" runs pause every 4096 ranges so the drain
// keeps up and every record lands in the ring; "saturated" runs never pause, so most records
// take the ring-full path (dropped and counted) -- the cost the job pays when the drain falls
// behind. The drop fraction is reported as a counter. The *Monotonic variants restart the agent
// with TRAINSCOPE_CLOCK=monotonic (clock_gettime on the hot path instead of rdtsc) for a
// side-by-side comparison; the others run with the default clock selection.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "trainscope/agent.h"

namespace {

__attribute__((noinline)) void emptyPush(uint32_t id) { asm volatile("" : : "r"(id) : "memory"); }
__attribute__((noinline)) void emptyPop() { asm volatile("" : : : "memory"); }

constexpr int kChunk = 4096;

std::string g_defaultClock;  // TRAINSCOPE_CLOCK as given to the program ("" = auto)
std::string g_clock;         // the running agent's TRAINSCOPE_CLOCK

bool startAgent(const std::string& clock) {
  if (clock.empty())
    ::unsetenv("TRAINSCOPE_CLOCK");
  else
    ::setenv("TRAINSCOPE_CLOCK", clock.c_str(), 1);
  ts_init_params p = TS_INIT_PARAMS_DEFAULT;
  p.job_id = "bench-agent";
  g_clock = clock;
  return ts_init(&p) >= 0;
}

// Called by thread 0 before the timed loop (the other threads wait at the loop's start barrier):
// restarts the agent when the benchmark wants another clock.
void useClock(benchmark::State& state, const std::string& clock) {
  if (state.thread_index() != 0 || clock == g_clock) return;
  ts_shutdown();
  if (!startAgent(clock)) state.SkipWithError("ts_init failed");
}

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

void rangeStored(benchmark::State& state, const std::string& clock) {
  useClock(state, clock);
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

// The two clocks alone, two reads per iteration like one range.
void BM_ClockGettimeX2(benchmark::State& state) {
  timespec t;
  for (auto _ : state) {
    clock_gettime(CLOCK_MONOTONIC, &t);
    benchmark::DoNotOptimize(t);
    clock_gettime(CLOCK_MONOTONIC, &t);
    benchmark::DoNotOptimize(t);
  }
}

#if defined(__x86_64__)
void BM_RdtscX2(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(__rdtsc());
    benchmark::DoNotOptimize(__rdtsc());
  }
}
#endif

void BM_RangeStored(benchmark::State& state) { rangeStored(state, g_defaultClock); }
void BM_RangeStoredMonotonic(benchmark::State& state) { rangeStored(state, "monotonic"); }

void rangeSaturated(benchmark::State& state, const std::string& clock) {
  useClock(state, clock);
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

void BM_RangeSaturated(benchmark::State& state) { rangeSaturated(state, g_defaultClock); }
void BM_RangeSaturatedMonotonic(benchmark::State& state) { rangeSaturated(state, "monotonic"); }

}  // namespace

BENCHMARK(BM_EmptyLoop)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_ClockGettimeX2)->Threads(1)->UseRealTime();
#if defined(__x86_64__)
BENCHMARK(BM_RdtscX2)->Threads(1)->UseRealTime();
#endif
BENCHMARK(BM_RangeStored)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_RangeStoredMonotonic)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_RangeSaturated)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_RangeSaturatedMonotonic)->Threads(1)->Threads(2)->UseRealTime();

int main(int argc, char** argv) {
  ::setenv("TRAINSCOPE_LISTEN", "none", 0);  // capture and drain only: no server, no files
  if (const char* c = std::getenv("TRAINSCOPE_CLOCK")) g_defaultClock = c;
  if (!startAgent(g_defaultClock)) return 1;
  benchmark::AddCustomContext("agent_clock", g_defaultClock.empty() ? "auto (rdtsc when the TSC is invariant)"
                                                                     : g_defaultClock);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  ts_shutdown();
  return 0;
}
