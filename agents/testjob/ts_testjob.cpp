// trainscope-testjob: a small real MPI job that exercises the agent end to end -- steps,
// phases, ranges, a traced MPI_Allreduce, markers, a counter and three live knobs whose
// changes all ranks apply at the same step (agreement through MPI_Allreduce MIN).
//
//   mpirun -np 4 --oversubscribe build/bin/trainscope-testjob --steps 200 --step-ms 5
//
// Benchmark options (bench/bench_overhead.sh, bench/bench_knob_latency.sh): --work-us X sets
// test.work_us's initial value, --ranges N splits each step's compute into N traced ranges,
// --start-delay-ms X waits (after ts_init, before step 0) so a client can attach, and
// --report-steps makes rank 0 print one "steptime <step> <begin CLOCK_MONOTONIC ns> <us>" line
// per step at the end (step time = ts_step_begin .. after ts_step_end, Allreduce included);
// --steps-file PATH writes those lines to PATH instead (mpirun may interleave the ranks' stdout).
#include <mpi.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "trainscope/agent.h"

namespace {

int g_rank = 0;
int64_t g_step = -1;

int64_t agreeMin(int64_t local, void* /*ctx*/) {
  int64_t global = local;
  MPI_Allreduce(&local, &global, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
  return global;
}

const char* const kModes[] = {"fast", "slow"};

void printApplied(ts_knob_t k, void* ctx) {
  const int kind = static_cast<int>(reinterpret_cast<intptr_t>(ctx));
  char value[64];
  if (kind == 0) std::snprintf(value, sizeof value, "%lld", static_cast<long long>(ts_knob_get_int(k)));
  if (kind == 1) std::snprintf(value, sizeof value, "%s", kModes[ts_knob_get_enum(k)]);
  if (kind == 2) std::snprintf(value, sizeof value, "%g", ts_knob_get_float(k));
  std::printf("rank %d applied %s=%s at step %lld\n", g_rank, ts_knob_name(k), value, static_cast<long long>(g_step));
  std::fflush(stdout);
}

// Busy work for us microseconds: its cost shows up as step time (the observable effect of
// the test.work_us knob), unlike sleep which an idle core would hide.
double busyWork(int64_t us, double x) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (std::chrono::steady_clock::now() < until)
    for (int i = 0; i < 100; ++i) x = x * 0.9999999 + 1e-7;  // converges to 1: no overflow in long runs
  return x;
}

long argValue(int argc, char** argv, const char* name, long def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::strtol(argv[i + 1], nullptr, 10);
  return def;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0) {
      std::printf("usage: trainscope-testjob [--steps N] [--step-ms X] [--linger-ms X] [--work-us X]\n"
                  "       [--ranges N] [--start-delay-ms X] [--report-steps] [--steps-file PATH]\n"
                  "knobs: test.work_us (int 0..100000), test.mode (fast|slow), test.scale (float 0..10)\n");
      return 0;
    }
  }
  const long steps = argValue(argc, argv, "--steps", 200);
  const long stepMs = argValue(argc, argv, "--step-ms", 0);
  const long lingerMs = argValue(argc, argv, "--linger-ms", 0);
  const long initialWorkUs = argValue(argc, argv, "--work-us", 2000);
  const long rangesPerStep = std::max(0L, argValue(argc, argv, "--ranges", 0));  // 0: no inner ranges
  const long startDelayMs = argValue(argc, argv, "--start-delay-ms", 0);
  bool reportSteps = false;
  const char* stepsFile = nullptr;
  for (int i = 1; i < argc; ++i) {
    reportSteps |= std::strcmp(argv[i], "--report-steps") == 0;
    if (std::strcmp(argv[i], "--steps-file") == 0 && i + 1 < argc) stepsFile = argv[i + 1];
  }
  reportSteps |= stepsFile != nullptr;

  MPI_Init(&argc, &argv);
  int world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);

  ts_knob_t workUs = ts_knob_int("test.work_us", 0, 100000, initialWorkUs, "busy work per step (us)", 0);
  ts_knob_t mode = ts_knob_enum("test.mode", kModes, 2, 0, "slow doubles the work", 0);
  ts_knob_t scale = ts_knob_float("test.scale", 0.0, 10.0, 1.0, "multiplies the update", TS_KNOB_CHANGES_MATH);
  ts_knob_on_change(workUs, printApplied, reinterpret_cast<void*>(intptr_t{0}));
  ts_knob_on_change(mode, printApplied, reinterpret_cast<void*>(intptr_t{1}));
  ts_knob_on_change(scale, printApplied, reinterpret_cast<void*>(intptr_t{2}));
  ts_set_agree_fn(agreeMin, nullptr);

  ts_init_params params = TS_INIT_PARAMS_DEFAULT;
  params.rank = g_rank;
  params.world_size = world;
  const int rc = ts_init(&params);  // TS_ALREADY_INITIALIZED when LD_PRELOAD/env started it
  if (rc < 0 && g_rank == 0) std::fprintf(stderr, "testjob: ts_init returned %d\n", rc);

  const uint32_t nAllreduce = ts_name("allreduce");
  const uint32_t nAlgo = ts_name("mpi");
  const uint32_t nChunk = ts_name("layer");
  std::vector<float> grad(1024, 1.0f), sum(1024);
  std::vector<int64_t> stepBeginNs, stepUs;
  if (reportSteps) {
    stepBeginNs.reserve(static_cast<size_t>(steps));
    stepUs.reserve(static_cast<size_t>(steps));
  }
  if (startDelayMs > 0) std::this_thread::sleep_for(std::chrono::milliseconds(startDelayMs));
  MPI_Barrier(MPI_COMM_WORLD);
  double x = 1.0;
  for (long s = 0; s < steps; ++s) {
    g_step = s;
    timespec t0{};
    if (reportSteps) clock_gettime(CLOCK_MONOTONIC, &t0);
    ts_step_begin(s);
    const int64_t work = ts_knob_get_int(workUs) * (ts_knob_get_enum(mode) == 1 ? 2 : 1);
    {
      TS_RANGE("compute");
      // The compute split into rangesPerStep traced ranges (a third forward, the rest backward).
      // rangesPerStep == 0 keeps the phases without inner ranges.
      const long fwdRanges = rangesPerStep == 0 ? 1 : std::max(1L, rangesPerStep / 3);
      const long bwdRanges = rangesPerStep == 0 ? 1 : std::max(1L, rangesPerStep - fwdRanges);
      ts_phase_begin(TS_PHASE_FORWARD);
      for (long r = 0; r < fwdRanges; ++r) {
        if (rangesPerStep > 0) ts_range_push(nChunk);
        x = busyWork((work / 3) / fwdRanges, x);
        if (rangesPerStep > 0) ts_range_pop();
      }
      ts_phase_end(TS_PHASE_FORWARD);
      ts_phase_begin(TS_PHASE_BACKWARD);
      for (long r = 0; r < bwdRanges; ++r) {
        if (rangesPerStep > 0) ts_range_push(nChunk);
        x = busyWork((work - work / 3) / bwdRanges, x);
        if (rangesPerStep > 0) ts_range_pop();
      }
      ts_phase_end(TS_PHASE_BACKWARD);
    }
    ts_comm_begin(TS_COMM_COLLECTIVE, nAllreduce, grad.size() * sizeof(float), -1, nAlgo);
    MPI_Allreduce(grad.data(), sum.data(), static_cast<int>(grad.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    ts_comm_end();
    ts_phase_begin(TS_PHASE_OPTIMIZER);
    x += ts_knob_get_float(scale) * static_cast<double>(sum[0]) * 1e-6;
    ts_phase_end(TS_PHASE_OPTIMIZER);
    TS_COUNTER("loss", 1.0 / static_cast<double>(s + 1));
    if (s % 10 == 0) TS_MARKER("checkpoint");
    if (stepMs > 0) std::this_thread::sleep_for(std::chrono::milliseconds(stepMs));
    ts_step_end(s);
    if (reportSteps) {
      timespec t1{};
      clock_gettime(CLOCK_MONOTONIC, &t1);
      const int64_t b = int64_t{t0.tv_sec} * 1000000000 + t0.tv_nsec;
      stepBeginNs.push_back(b);
      stepUs.push_back((int64_t{t1.tv_sec} * 1000000000 + t1.tv_nsec - b) / 1000);
    }
  }
  if (reportSteps && g_rank == 0) {
    FILE* f = stepsFile ? std::fopen(stepsFile, "w") : stdout;
    if (!f) f = stdout;
    for (size_t i = 0; i < stepUs.size(); ++i)
      std::fprintf(f, "steptime %zu %lld %lld\n", i, static_cast<long long>(stepBeginNs[i]),
                   static_cast<long long>(stepUs[i]));
    if (f != stdout) std::fclose(f);
    std::fflush(stdout);
  }
  if (lingerMs > 0) std::this_thread::sleep_for(std::chrono::milliseconds(lingerMs));
  std::printf("rank %d done steps=%ld dropped=%llu x=%g\n", g_rank, steps,
              static_cast<unsigned long long>(ts_dropped_events()), x);
  ts_shutdown();
  MPI_Finalize();
  return 0;
}
