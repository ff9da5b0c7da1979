// trainscope-train's options: command line (CLI11) and a JSON config file whose keys are the
// long option names without dashes (`bucket_bytes` or `bucket-bytes`); the command line wins.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainscope::train {

struct Options {
  int64_t steps = 200;
  uint64_t seed = 1;
  std::string model = "mlp";  // mlp | transformer
  int layers = 4;
  int width = 128;
  int batch = 64;  // global batch (samples); split evenly over the ranks
  double lr = 0.05;
  double momentum = 0.9;
  // mlp / teacher task
  int inputDim = 32;
  int classes = 8;
  // transformer / sequence task
  int seqLen = 16;
  int vocab = 16;
  int heads = 2;
  // data parallel (initial values of the dp.* knobs)
  int64_t bucketBytes = 64 * 1024;
  std::string algorithm = "allreduce";
  std::string compression = "none";
  double topkRatio = 0.01;
  int ranksPerNode = 0;  // hierarchical: 0 = the machine's nodes; n > 0 simulates nodes of n ranks
  std::string backend = "cpu";
  // parallelism: dp | pp (one pipeline over all ranks) | hybrid (DP x PP grid) | disco
  std::string mode = "dp";
  int ppStages = 0;                // hybrid: pipeline stages (ranks per pipeline); pp: the world
  std::string partition = "even";  // even | auto (PipeDream DP on profiled layer times)
  std::string schedule = "1f1b";   // initial pp.schedule
  int microbatches = 4;            // initial pp.microbatches
  int virtualStages = 1;           // initial pp.virtual_stages
  int segments = 2;                // initial pp.segments (seq1f1b: segments per micro-batch)
  double discoSparsity = 0;        // initial disco.sparsity
  std::string discoMode = "pipelined";  // initial disco.mode: pipelined | wait
  // DISCO inference benchmark (disco_bench.h): the table goes to discoBench (CSV)
  std::string discoBench;
  std::vector<double> benchSparsities{0, 0.25, 0.5, 0.75, 0.9, 1.0};  // ascending: pruned in turn
  int finetuneSteps = 20;  // training steps after each pruning
  int benchReps = 5;       // latency: median of this many passes over the held-out set
  int benchBatch = 1;      // samples per inference
  // running
  int evalEvery = 10;
  int heldOut = 256;
  int logEvery = 10;
  std::string dumpParams;  // after the last step; "{rank}" is replaced by the rank
  bool noAgent = false;
  bool prefetch = true;  // the next step's batches made on a loader thread (--no-prefetch: inline)
  // Subnormal floats: "flush" (default) sets flush-to-zero and denormals-are-zero on the job's
  // threads; "keep" computes them as IEEE says, at ~100x the cost per operation (TRAINER.md).
  std::string denormals = "flush";
  int stepDelayMs = 0;
  bool calibrate = true;  // what-if calibration after each change of the gradient sync
  std::string stepsFile;  // rank 0 writes "steptime <step> <us>" per step
  // Faults to inject (docs/TRAINER.md, "Faults to inject"): "straggler:rank=R,ms=X[,every=N]",
  // "hang:rank=R,step=S", "slow-loader:rank=R,ms=X[,every=N]"; --mode dp (the ranks of the world).
  std::vector<std::string> inject;
};

// One --inject, parsed.
struct Injection {
  enum class Kind { Straggler, Hang, SlowLoader };
  Kind kind = Kind::Straggler;
  int rank = -1;
  int ms = 0;
  int every = 1;
  int64_t step = -1;
  // Whether it acts on `rank` at `step`.
  bool at(int r, int64_t s) const {
    // A hang, or a straggler / slow loader with step=S, acts at that one step; else every N steps.
    return r == rank && (kind == Kind::Hang || step >= 0 ? s == step : every > 0 && s % every == 0);
  }
};
// Parses one --inject spec; an error message (naming the spec) when it is not one.
std::string parseInjection(const std::string& spec, Injection* out);

// Parses argv (and --config FILE). Returns false when the program should stop, with *exitCode
// set: 0 after --help, 2 after a usage error (already reported on stderr).
bool parseOptions(int argc, char** argv, Options& o, int* exitCode);
// Checks values that depend on each other and on the world size; empty when fine.
std::string validate(const Options& o, int worldSize);
// Pipeline stages of a pp/hybrid run on worldSize ranks (1 for dp).
int pipelineStages(const Options& o, int worldSize);

}  // namespace trainscope::train
