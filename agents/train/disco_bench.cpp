#include "disco_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "disco.h"
#include "trainscope/agent.h"

namespace trainscope::train {
namespace {

struct Row {
  double sparsity = 0;
  bool independent = false;
  int64_t trainSteps = 0;
  uint64_t keptSubRows = 0, bytes = 0, gatherBytes = 0;
  double pipelinedMs = 0, waitMs = 0, accuracy = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

uint64_t sumOverRanks(Communicator& world, uint64_t v) {
  std::vector<uint64_t> all(static_cast<size_t>(world.size()));
  RequestPtr r = world.iallgather(&v, all.data(), sizeof v);
  waitFor(*r);
  return std::accumulate(all.begin(), all.end(), uint64_t{0});
}

std::vector<Batch> slices(const Batch& all, int batch) {
  std::vector<Batch> out;
  for (int first = 0; first + batch <= all.x.rows; first += batch) {
    Batch b;
    b.x.resize(batch, all.x.cols);
    std::copy_n(all.x.row(first), b.x.size(), b.x.data());
    b.labels.assign(all.labels.begin() + first, all.labels.begin() + first + batch);
    out.push_back(std::move(b));
  }
  return out;
}

// Milliseconds per inference of one pass over the batches: from a common start to the slowest
// rank's end. Pipelined and wait passes alternate so that drifting load hits both alike.
void measureLatency(DiscoTrainer& t, Communicator& world, const std::vector<Batch>& batches, int reps,
                    Row& row) {
  std::vector<double> ms[2];
  for (int r = 0; r < reps; ++r)
    for (const bool pipelined : {true, false}) {
      world.allreduceMaxDouble(0);  // common start
      const auto t0 = std::chrono::steady_clock::now();
      for (const Batch& b : batches) t.infer(b.x, b.labels, pipelined);
      const double local =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      ms[pipelined ? 0 : 1].push_back(world.allreduceMaxDouble(local) / static_cast<double>(batches.size()));
    }
  row.pipelinedMs = median(ms[0]);
  row.waitMs = median(ms[1]);
}

Row measure(DiscoTrainer& t, Communicator& world, const Options& o, double sparsity, bool independent,
            int64_t steps) {
  TS_RANGE("disco inference benchmark");
  Row row;
  row.sparsity = sparsity;
  row.independent = independent;
  row.trainSteps = steps;
  row.keptSubRows = t.keptSubRows();
  const Batch& held = t.heldOut();
  const auto pipelined = t.infer(held.x, held.labels, true), waited = t.infer(held.x, held.labels, false);
  if (pipelined.correct != waited.correct && world.rank() == 0)
    std::fprintf(stderr, "trainscope-train: pipelined and wait inference disagree (%d vs %d correct)\n",
                 pipelined.correct, waited.correct);
  row.accuracy = static_cast<double>(pipelined.correct) / static_cast<double>(held.labels.size());
  const std::vector<Batch> batches = slices(held, o.benchBatch);
  row.bytes = sumOverRanks(world, t.infer(batches[0].x, batches[0].labels, true).bytes);  // also a warm-up
  const auto n = static_cast<uint64_t>(world.size());
  row.gatherBytes =
      n * (n - 1) * static_cast<uint64_t>(o.benchBatch) * static_cast<uint64_t>(o.width) / n * 4;
  measureLatency(t, world, batches, o.benchReps, row);
  if (world.rank() == 0)  // the row, for a recording of the run
    for (const auto& [name, v] : {std::pair<const char*, double>{"disco_bench_sparsity", sparsity},  // first
                                  {"disco_bench_independent", independent ? 1.0 : 0.0},
                                  {"disco_bench_bytes", static_cast<double>(row.bytes)},
                                  {"disco_bench_latency_pipelined_ms", row.pipelinedMs},
                                  {"disco_bench_latency_wait_ms", row.waitMs},
                                  {"disco_bench_accuracy", row.accuracy}})
      ts_counter(ts_name(name), v);
  return row;
}

const char* const kHeader =
    "ranks,batch,sparsity,independent,train_steps,kept_subrows,bytes,gather_bytes,latency_pipelined_ms,"
    "latency_wait_ms,accuracy";

std::string csvLine(const Row& r, int ranks, int batch) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%d,%d,%.4g,%d,%lld,%llu,%llu,%llu,%.6f,%.6f,%.6f", ranks, batch, r.sparsity,
                r.independent ? 1 : 0, static_cast<long long>(r.trainSteps),
                static_cast<unsigned long long>(r.keptSubRows), static_cast<unsigned long long>(r.bytes),
                static_cast<unsigned long long>(r.gatherBytes), r.pipelinedMs, r.waitMs, r.accuracy);
  return buf;
}

void printTable(const std::vector<Row>& rows, int ranks, int batch) {
  std::printf("DISCO inference trade-off: %d ranks, %d sample(s) per inference\n", ranks, batch);
  std::printf("%-22s %6s %10s %12s %14s %10s %9s\n", "sparsity", "steps", "bytes", "gather_bytes",
              "pipelined_ms", "wait_ms", "accuracy");
  for (const Row& r : rows) {
    char label[32];
    std::snprintf(label, sizeof label, "%.4g%s", r.sparsity, r.independent ? " (independent)" : "");
    std::printf("%-22s %6lld %10llu %12llu %14.4f %10.4f %9.4f\n", label,
                static_cast<long long>(r.trainSteps), static_cast<unsigned long long>(r.bytes),
                static_cast<unsigned long long>(r.gatherBytes), r.pipelinedMs, r.waitMs, r.accuracy);
  }
  std::fflush(stdout);
}

}  // namespace

int runDiscoBench(Backend& be, const Options& o) {
  Communicator& world = *be.world;
  std::vector<Row> rows;
  int64_t steps = o.steps;
  {
    DiscoTrainer t(be, o, nullptr);
    t.run(nullptr);  // dense
    for (const double s : o.benchSparsities) {
      t.pruneAll(s);
      t.runSteps(nullptr, steps, steps + o.finetuneSteps);
      steps += o.finetuneSteps;
      rows.push_back(measure(t, world, o, s, false, steps));
    }
  }
  Options scratch = o;
  scratch.discoSparsity = 1;  // independent branches from the first step
  DiscoTrainer t(be, scratch, nullptr);
  t.numberStepsFrom(steps);  // the trace's steps go on; the data are those the pruned model saw
  t.runSteps(nullptr, steps, 2 * steps);
  rows.push_back(measure(t, world, o, 1.0, true, steps));
  if (world.rank() != 0) return 0;
  printTable(rows, world.size(), o.benchBatch);
  std::ofstream f(o.discoBench);
  f << kHeader << '\n';
  for (const Row& r : rows) f << csvLine(r, world.size(), o.benchBatch) << '\n';
  if (!f) {
    std::fprintf(stderr, "trainscope-train: cannot write %s\n", o.discoBench.c_str());
    return 1;
  }
  std::printf("table written to %s\n", o.discoBench.c_str());
  return 0;
}

}  // namespace trainscope::train
