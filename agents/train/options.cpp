#include "options.h"

#include <charconv>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>

#include "collectives.h"
#include "compress.h"
#include "segments.h"
#include "trainscope/core/base/json_depth.h"
#include "trainscope/core/sched/schedule.h"

namespace trainscope::train {
namespace {

std::string optionText(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// A tuned configuration (docs/FORMATS.md, "trainscope.tuned-config", written by trainscope-cli
// export/tune): its knobs become the options that set their initial values, its job's mode the
// --mode (and --pp-stages). The knob -> option table is core::trainOptionForKnob's (the trainer
// does not link core's tune library; tst_tune checks the two agree through `export --format
// train-args`). Per-layer DISCO sparsities must equal disco.sparsity (there is no start-up option
// per layer); NCCL tuner knobs have no start-up option and are named on stderr.
bool tunedConfigArgs(const nlohmann::json& j, const std::string& path, std::vector<std::string>& out,
                     std::string& err) {
  static const std::map<std::string, std::string> kOption = {
      {"dp.bucket_bytes", "--bucket-bytes"},
      {"dp.algorithm", "--algorithm"},
      {"dp.compression", "--compression"},
      {"dp.topk_ratio", "--topk-ratio"},
      {"pp.schedule", "--schedule"},
      {"pp.microbatches", "--microbatches"},
      {"pp.virtual_stages", "--virtual-stages"},
      {"pp.segments", "--segments"},
      {"disco.sparsity", "--sparsity"},
      {"disco.mode", "--disco-mode"},
  };
  if (j["schema"] != "trainscope.tuned-config") {
    err = "config file " + path + ": unknown schema " + j["schema"].dump() +
          " (expected trainscope.tuned-config)";
    return false;
  }
  if (!j.contains("schema_version") || !j["schema_version"].is_number_integer() || j["schema_version"] != 1) {
    err = "config file " + path + ": tuned configuration schema_version must be 1";
    return false;
  }
  if (!j.contains("knobs") || !j["knobs"].is_object()) {
    err = "config file " + path + ": a tuned configuration needs a \"knobs\" object";
    return false;
  }
  const auto& knobs = j["knobs"];
  for (const auto& [k, v] : knobs.items()) {
    if (!v.is_string() && !v.is_number()) {
      err = "config file " + path + ": knob " + k + " must be a number or a string";
      return false;
    }
    if (auto it = kOption.find(k); it != kOption.end()) {
      out.insert(out.end(), {it->second, optionText(v)});
    } else if (k.rfind("disco.sparsity.", 0) == 0) {
      if (!knobs.contains("disco.sparsity") || optionText(knobs["disco.sparsity"]) != optionText(v)) {
        err = "config file " + path + ": " + k + "=" + optionText(v) +
              " differs from disco.sparsity; per-layer sparsities have no start-up option (set them live)";
        return false;
      }
    } else if (k.rfind("nccl.", 0) == 0) {
      std::fprintf(stderr,
                   "trainscope-train: config %s: %s=%s has no start-up option (the NCCL tuner knob is set "
                   "live: trainscope-cli set --from)\n",
                   path.c_str(), k.c_str(), optionText(v).c_str());
    } else {
      err = "config file " + path + ": knob " + k + " is not a trainscope-train knob";
      return false;
    }
  }
  if (j.contains("job") && j["job"].is_object()) {
    const auto& job = j["job"];
    if (job.contains("mode") && job["mode"].is_string() && !job["mode"].get<std::string>().empty()) {
      out.insert(out.end(), {"--mode", job["mode"].get<std::string>()});
      if (job["mode"] == "hybrid" && job.contains("pp_stages") && job["pp_stages"].is_number_integer())
        out.insert(out.end(), {"--pp-stages", job["pp_stages"].dump()});
    }
  }
  return true;
}

// The config file as arguments placed before the command line's (so those win).
bool configArgs(const std::string& path, std::vector<std::string>& out, const CLI::App& app,
                std::string& err) {
  std::ifstream in(path);
  if (!in) {
    err = "cannot read config file " + path;
    return false;
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Before the parser: nlohmann recurses once per level when it walks or frees a document, and
  // a config nested 70,000 deep overflowed the stack (issue 40; core/base/json_depth.h).
  if (core::jsonNestedDeeperThan(text)) {
    err = path + ": JSON nested deeper than " + std::to_string(core::kMaxJsonNesting) + " levels";
    return false;
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    err = "config file " + path + " is not valid JSON: " + e.what();
    return false;
  }
  if (!j.is_object()) {
    err = "config file " + path + ": expected a JSON object of option names to values";
    return false;
  }
  if (j.contains("schema")) return tunedConfigArgs(j, path, out, err);
  for (const auto& [key, value] : j.items()) {
    std::string name = key;
    for (char& c : name)
      if (c == '_') c = '-';
    if (name == "config" || !app.get_option_no_throw("--" + name)) {
      err = "config file " + path + ": unknown option '" + key + "'";
      return false;
    }
    if (value.is_boolean()) {
      if (value.get<bool>()) out.push_back("--" + name);
    } else if (value.is_string()) {
      out.insert(out.end(), {"--" + name, value.get<std::string>()});
    } else if (value.is_number()) {
      out.insert(out.end(), {"--" + name, value.dump()});
    } else {
      err = "config file " + path + ": option '" + key + "' must be a number, string or boolean";
      return false;
    }
  }
  return true;
}

}  // namespace

bool parseOptions(int argc, char** argv, Options& o, int* exitCode) {
  CLI::App app{
      "trainscope-train: the reference training job (one process per rank, under mpirun): data parallel,\n"
      "pipeline (--mode pp), DP x PP (--mode hybrid), DISCO feature split (--mode disco).\n"
      "Live knobs: dp.bucket_bytes, dp.algorithm, dp.compression, dp.topk_ratio; pp.schedule, "
      "pp.microbatches,\n"
      "pp.virtual_stages (pp, hybrid); disco.sparsity[.<layer>], disco.mode (disco). See docs/TRAINER.md.",
      "trainscope-train"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::string config;
  app.add_option("--config", config, "JSON file of options (keys = long option names)");
  app.add_option("--steps", o.steps, "Training steps")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--seed", o.seed, "Seed of data, initialisation and stochastic rounding")
      ->capture_default_str();
  app.add_option("--model", o.model, "mlp | transformer")->capture_default_str();
  app.add_option("--layers", o.layers, "Hidden layers (mlp) or blocks (transformer)")->capture_default_str();
  app.add_option("--width", o.width, "Hidden width (mlp) or model dimension (transformer)")
      ->capture_default_str();
  app.add_option("--batch", o.batch, "Global batch size, split evenly over the ranks")->capture_default_str();
  app.add_option("--lr", o.lr, "SGD learning rate")->capture_default_str();
  app.add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--input-dim", o.inputDim, "mlp: input features")->capture_default_str();
  app.add_option("--classes", o.classes, "mlp: classes of the teacher task")->capture_default_str();
  app.add_option("--seq-len", o.seqLen, "transformer: sequence length")->capture_default_str();
  app.add_option("--vocab", o.vocab, "transformer: vocabulary size")->capture_default_str();
  app.add_option("--heads", o.heads, "transformer: attention heads")->capture_default_str();
  app.add_option("--bucket-bytes", o.bucketBytes, "Initial dp.bucket_bytes")->capture_default_str();
  app.add_option("--algorithm", o.algorithm, "Initial dp.algorithm")->capture_default_str();
  app.add_option("--compression", o.compression, "Initial dp.compression")->capture_default_str();
  app.add_option("--topk-ratio", o.topkRatio, "Initial dp.topk_ratio")->capture_default_str();
  app.add_option("--ranks-per-node", o.ranksPerNode,
                 "hierarchical: 0 = the machine's nodes (MPI_COMM_TYPE_SHARED); n > 0 simulates nodes of n ranks")
      ->capture_default_str();
  app.add_option("--backend", o.backend, "cpu | cuda")->capture_default_str();
  app.add_option("--mode", o.mode, "dp | pp | hybrid (DP x PP) | disco")->capture_default_str();
  app.add_option("--pp-stages", o.ppStages, "hybrid: pipeline stages (the world divided by it = replicas)")
      ->capture_default_str();
  app.add_option("--partition", o.partition, "even | auto (PipeDream DP on profiled layer times)")
      ->capture_default_str();
  app.add_option("--schedule", o.schedule, "Initial pp.schedule")->capture_default_str();
  app.add_option("--microbatches", o.microbatches, "Initial pp.microbatches")->capture_default_str();
  app.add_option("--virtual-stages", o.virtualStages, "Initial pp.virtual_stages")->capture_default_str();
  app.add_option("--segments", o.segments, "Initial pp.segments (seq1f1b: sequence segments per micro-batch)")
      ->capture_default_str();
  app.add_option("--sparsity", o.discoSparsity, "Initial disco.sparsity")->capture_default_str();
  app.add_option("--disco-mode", o.discoMode, "Initial disco.mode: pipelined | wait")->capture_default_str();
  app.add_option(
      "--disco-bench", o.discoBench,
      "disco: distributed-inference benchmark; train dense, then prune to each --bench-sparsities level "
      "in turn (fine-tune --finetune-steps each), measure latency/bytes/accuracy, write the CSV table "
      "to FILE");
  app.add_option("--bench-sparsities", o.benchSparsities, "--disco-bench: ascending sparsity levels")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->capture_default_str();
  app.add_option("--finetune-steps", o.finetuneSteps, "--disco-bench: training steps after each pruning")
      ->capture_default_str();
  app.add_option("--bench-reps", o.benchReps, "--disco-bench: latency = median of this many passes")
      ->capture_default_str();
  app.add_option("--bench-batch", o.benchBatch, "--disco-bench: samples per inference")
      ->capture_default_str();
  app.add_option("--eval-every", o.evalEvery, "Held-out evaluation every N steps (0: never)")
      ->capture_default_str();
  app.add_flag("!--no-prefetch", o.prefetch,
               "Make each step's batches inline instead of on a loader thread a step ahead");
  app.add_option("--held-out", o.heldOut, "Held-out samples")->capture_default_str();
  app.add_option("--log-every", o.logEvery, "Rank 0 prints the loss every N steps (0: never)")
      ->capture_default_str();
  app.add_option("--dump-params", o.dumpParams,
                 "Write the final parameters (raw float32) to FILE; {rank} is replaced");
  app.add_option("--denormals", o.denormals,
                 "flush | keep: subnormal floats flushed to zero (default) or computed as IEEE says")
      ->capture_default_str()
      ->check(CLI::IsMember({"flush", "keep"}));
  app.add_flag("--no-agent", o.noAgent, "Do not start the agent (knobs keep their initial values)");
  app.add_option("--calibrate", o.calibrate,
                 "After each change of the gradient sync, reduce a scratch buffer with every centralized "
                 "algorithm at 1 KiB, 64 KiB and 1 MiB (7 times each) and with each codec at 1 and 64 KiB (3 times), "
                 "traced as 'calibrate' collectives, and time each codec's encode and decode alone ('calibrate "
                 "codec'), for what-if; in --mode pp|hybrid also each stage's layers alone at 1-16 micro-batches, "
                 "in --mode disco the training pass at sparsities 0-1 "
                 "(docs/TUNING.md); 0 turns it off")
      ->default_val(true);
  app.add_option("--step-delay-ms", o.stepDelayMs, "Sleep this long at the end of every step")
      ->capture_default_str();
  app.add_option("--steps-file", o.stepsFile, "Rank 0 writes 'steptime <step> <us>' lines to FILE");
  app.add_option("--inject", o.inject,
                 "A fault, for tests and demos (--mode dp; repeatable): straggler:rank=R,ms=X[,every=N] (rank R "
                 "computes X ms more every N-th step), hang:rank=R,step=S (rank R stops before step S's "
                 "collectives and never comes back), slow-loader:rank=R,ms=X[,every=N] (rank R waits X ms for "
                 "its batch)");

  std::vector<std::string> args;
  for (int i = argc - 1; i >= 1; --i) args.emplace_back(argv[i]);  // CLI11 wants them reversed
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--config") config = argv[i + 1];
    if (std::string(argv[i]).rfind("--config=", 0) == 0) config = std::string(argv[i]).substr(9);
  }
  if (!config.empty()) {
    std::vector<std::string> extra;
    std::string err;
    if (!configArgs(config, extra, app, err)) {
      std::fprintf(stderr, "trainscope-train: %s\n", err.c_str());
      *exitCode = 2;
      return false;
    }
    args.insert(args.end(), extra.rbegin(), extra.rend());
  }
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    *exitCode = app.exit(e);
    if (*exitCode != 0) *exitCode = 2;
    return false;
  }
  return true;
}

int pipelineStages(const Options& o, int world) {
  if (o.mode == "pp") return world;
  if (o.mode == "hybrid") return o.ppStages;
  return 1;
}

namespace {

std::string validatePipeline(const Options& o, int world) {
  if (o.partition != "even" && o.partition != "auto")
    return "--partition must be even or auto, not '" + o.partition + "'";
  auto kind = core::parseSchedule(o.schedule);
  if (!kind) return "--schedule: " + kind.status().message();
  if (std::find(std::begin(core::kAllSchedules), std::end(core::kAllSchedules), *kind) == std::end(core::kAllSchedules))
    return "--schedule " + o.schedule + " is PyTorch's (analysed in recordings of PyTorch pipelines); the trainer runs gpipe, 1f1b, interleaved-1f1b, zb-h1, seq1f1b";
  if (o.mode == "hybrid" && o.ppStages < 1) return "--mode hybrid needs --pp-stages >= 1";
  if (world == 1) return {};  // the rest depends on the world size
  const int p = pipelineStages(o, world);
  if (world % p != 0)
    return "--pp-stages " + std::to_string(p) + " does not divide the " + std::to_string(world) + " ranks";
  core::ScheduleParams sp{*kind, p, o.microbatches, o.virtualStages,
                          *kind == core::ScheduleKind::Seq1F1B ? o.segments : 1};
  if (core::Status st = core::validateSchedule(sp); !st) return "pipeline: " + st.message();
  const int layers = o.model == "transformer" ? 2 * o.layers + 3 : o.layers + 1;
  if (core::Status st = core::validateLayerSplit(sp, layers); !st) return "pipeline: " + st.message();
  const int replicaBatch = o.batch / (world / p);
  if (replicaBatch % o.microbatches != 0)
    return "--batch " + std::to_string(o.batch) + " over " + std::to_string(world / p) +
           " replica(s) does not split into " + std::to_string(o.microbatches) + " micro-batches";
  if (std::string e = checkSegments(o, replicaBatch / o.microbatches, sp.segments); !e.empty())
    return "--segments: " + e;
  return {};
}

// Options that size buffers (issue 40: --batch 1000000000 died of an uncaught std::bad_alloc).
// Each is bounded alone, then the largest buffer they make (float32 elements) and the
// activations every layer keeps for the backward pass, so that a typo is a usage error instead
// of an allocation of many GiB. The bounds are far above anything this CPU/GPU reference job
// runs in a useful time (docs/TRAINER.md).
inline constexpr int64_t kMaxBufferElements = int64_t{1} << 28;      // 1 GiB of float32
inline constexpr int64_t kMaxActivationElements = int64_t{1} << 31;  // 8 GiB of float32

std::string validateSizes(const Options& o) {
  struct Bound {
    const char* name;
    int64_t value, lo, hi;
  };
  const Bound bounds[] = {
      {"--batch", o.batch, 1, int64_t{1} << 24},        {"--input-dim", o.inputDim, 1, int64_t{1} << 16},
      {"--classes", o.classes, 2, int64_t{1} << 16},    {"--seq-len", o.seqLen, 2, int64_t{1} << 14},
      {"--vocab", o.vocab, 2, int64_t{1} << 20},        {"--heads", o.heads, 1, 1024},
      {"--held-out", o.heldOut, 1, int64_t{1} << 24},   {"--bench-batch", o.benchBatch, 1, int64_t{1} << 24},
      {"--microbatches", o.microbatches, 0, 1 << 16},   {"--segments", o.segments, 1, 1 << 14},
      {"--virtual-stages", o.virtualStages, 1, 1024},   {"--bench-reps", o.benchReps, 1, 1'000'000},
      {"--finetune-steps", o.finetuneSteps, 0, int64_t{1} << 30},
  };
  for (const Bound& b : bounds)
    if (b.value < b.lo || b.value > b.hi)
      return std::string(b.name) + " must be in " + std::to_string(b.lo) + ".." + std::to_string(b.hi) +
             ", not " + std::to_string(b.value);
  // The largest single buffers: inputs, activations and outputs of a batch (or of the held-out
  // set), the weight matrices, the transformer's attention scores and embeddings.
  const bool tf = o.model == "transformer";
  const int64_t rows = std::max<int64_t>(o.batch, o.heldOut) * (tf ? o.seqLen : 1);
  const int64_t cols = std::max<int64_t>({o.width, o.inputDim, o.classes, tf ? o.vocab : 1}) * (tf ? 4 : 1);
  const struct {
    const char* what;
    double elements;
  } buffers[] = {
      {"a batch's activations (--batch or --held-out x --width/--input-dim/--classes; transformer: x --seq-len, "
       "--vocab)",
       static_cast<double>(rows) * static_cast<double>(cols)},
      {"a weight matrix (--width x --width/--input-dim/--classes/--vocab)",
       static_cast<double>(o.width) * static_cast<double>(std::max<int64_t>({o.width, o.inputDim, o.classes, tf ? o.vocab : 1}))},
      {"the attention scores (--batch x --heads x --seq-len^2)",
       tf ? static_cast<double>(std::max(o.batch, o.heldOut)) * o.heads * o.seqLen * o.seqLen : 0.0},
  };
  for (const auto& b : buffers)
    if (b.elements > static_cast<double>(kMaxBufferElements))
      return "sizes too large: " + std::string(b.what) + " would hold " +
             std::to_string(static_cast<long long>(b.elements)) + " values; the limit is " +
             std::to_string(kMaxBufferElements) + " (1 GiB of float32) per buffer";
  // What the backward pass keeps: a batch's activations per layer.
  const double kept = static_cast<double>(o.batch) * (tf ? o.seqLen : 1) * o.width * (tf ? 8 : 1) * (o.layers + 2);
  if (kept > static_cast<double>(kMaxActivationElements))
    return "sizes too large: --batch x --width x --layers" + std::string(tf ? " x --seq-len" : "") + " keeps " +
           std::to_string(static_cast<long long>(kept)) + " activation values; the limit is " +
           std::to_string(kMaxActivationElements) + " (8 GiB of float32)";
  return {};
}

std::string validateDiscoBench(const Options& o) {
  if (o.discoBench.empty()) return {};
  if (o.discoSparsity != 0) return "--disco-bench trains the dense model first: leave --sparsity at 0";
  if (o.benchSparsities.empty()) return "--bench-sparsities needs at least one level";
  for (size_t i = 0; i < o.benchSparsities.size(); ++i) {
    const double s = o.benchSparsities[i];
    if (!(s >= 0 && s <= 1)) return "--bench-sparsities: every level must be in [0, 1]";
    if (i > 0 && s < o.benchSparsities[i - 1])
      return "--bench-sparsities must ascend (each level prunes the previous level's model further)";
  }
  if (o.finetuneSteps < 0 || o.benchReps < 1) return "--finetune-steps must be >= 0 and --bench-reps >= 1";
  if (o.benchBatch < 1 || o.benchBatch > o.heldOut) return "--bench-batch must be in 1..--held-out";
  return {};
}

}  // namespace

std::string validate(const Options& o, int world) {
  if (o.mode != "dp" && o.mode != "pp" && o.mode != "hybrid" && o.mode != "disco")
    return "--mode must be dp, pp, hybrid or disco, not '" + o.mode + "'";
  if (o.mode == "pp" || o.mode == "hybrid")
    if (std::string e = validatePipeline(o, world); !e.empty()) return e;
  if (o.mode == "disco") {
    if (o.model != "mlp") return "--mode disco splits the mlp model only";
    if (o.layers < 2) return "--mode disco needs --layers >= 2 (hidden layers 1.. are split)";
    if (o.width % world != 0)
      return "--width " + std::to_string(o.width) + " does not split over " + std::to_string(world) +
             " ranks";
    if (!(o.discoSparsity >= 0 && o.discoSparsity <= 1)) return "--sparsity must be in [0, 1]";
    if (o.discoMode != "pipelined" && o.discoMode != "wait") return "--disco-mode must be pipelined or wait";
    if (std::string e = validateDiscoBench(o); !e.empty()) return e;
  } else if (!o.discoBench.empty()) {
    return "--disco-bench needs --mode disco";
  }
  if (o.model != "mlp" && o.model != "transformer")
    return "--model must be mlp or transformer, not '" + o.model + "'";
  if (o.layers < 1 || o.layers > 64) return "--layers must be in 1..64";
  if (o.width < 1 || o.width > 8192) return "--width must be in 1..8192";
  if (o.batch < 1) return "--batch must be >= 1";
  if (std::string e = validateSizes(o); !e.empty()) return e;
  if (const int replicas = std::max(1, world / std::max(1, pipelineStages(o, world)));
      o.batch % replicas != 0)
    return "--batch " + std::to_string(o.batch) + " does not split evenly over " + std::to_string(replicas) +
           (o.mode == "dp" ? " ranks" : " data-parallel replicas");
  if (!(o.lr > 0) || o.momentum < 0 || o.momentum >= 1) return "--lr must be > 0 and --momentum in [0, 1)";
  if (o.inputDim < 1 || o.classes < 2) return "--input-dim must be >= 1 and --classes >= 2";
  if (o.model == "transformer") {
    if (o.seqLen < 2 || o.vocab < 2) return "--seq-len and --vocab must be >= 2";
    if (o.heads < 1 || o.width % o.heads != 0) return "--width must be a multiple of --heads";
  }
  if (o.bucketBytes < 1 || o.bucketBytes > (int64_t{1} << 30)) return "--bucket-bytes must be in 1..2^30";
  if (!parseAlgorithm(o.algorithm))
    return "--algorithm must be one of allreduce, ring, recursive-doubling, hierarchical, decentralized, not "
           "'" +
           o.algorithm + "'";
  if (!parseCompression(o.compression))
    return "--compression must be one of none, fp16, int8, onebit-ef, topk-ef, not '" + o.compression + "'";
  if (!(o.topkRatio >= 1e-4) || o.topkRatio > 1) return "--topk-ratio must be in [0.0001, 1]";
  if (o.ranksPerNode < 0) return "--ranks-per-node must be >= 0 (0: the machine's nodes)";
  if (const std::string why = unsupportedCombination(*parseAlgorithm(o.algorithm), *parseCompression(o.compression));
      !why.empty())
    return why;
  if (o.evalEvery < 0 || o.heldOut < 1 || o.logEvery < 0 || o.stepDelayMs < 0)
    return "negative interval or delay";
  for (const std::string& spec : o.inject) {
    Injection inj;
    if (std::string why = parseInjection(spec, &inj); !why.empty()) return why;
    if (o.mode != "dp") return "--inject works with --mode dp only (not '" + o.mode + "')";
    if (world > 1 && inj.rank >= world)
      return "--inject " + spec + ": rank " + std::to_string(inj.rank) + " is not in a world of " +
             std::to_string(world);
  }
  return {};
}

std::string parseInjection(const std::string& spec, Injection* out) {
  const auto bad = [&](const std::string& why) { return "--inject '" + spec + "': " + why; };
  const auto colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  Injection inj;
  if (kind == "straggler")
    inj.kind = Injection::Kind::Straggler;
  else if (kind == "hang")
    inj.kind = Injection::Kind::Hang;
  else if (kind == "slow-loader")
    inj.kind = Injection::Kind::SlowLoader;
  else
    return bad("the kind must be straggler, hang or slow-loader");
  if (colon == std::string::npos) return bad("no parameters (rank=R, ...)");
  std::string rest = spec.substr(colon + 1);
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string kv = rest.substr(0, comma);
    rest = comma == std::string::npos ? std::string() : rest.substr(comma + 1);
    const auto eq = kv.find('=');
    if (eq == std::string::npos) return bad("'" + kv + "' is not key=value");
    const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    long long n = 0;
    const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc() || p != v.data() + v.size() || n < 0 || n > 1'000'000'000)
      return bad("'" + k + "' must be a whole number >= 0, not '" + v + "'");
    if (k == "rank")
      inj.rank = static_cast<int>(n);
    else if (k == "ms" && inj.kind != Injection::Kind::Hang)
      inj.ms = static_cast<int>(std::min<long long>(n, 3'600'000));
    else if (k == "every" && inj.kind != Injection::Kind::Hang)
      inj.every = static_cast<int>(std::max<long long>(n, 1));
    else if (k == "step")  // a hang's step; a straggler's or slow loader's one step (instead of every)
      inj.step = n;
    else
      return bad("unknown key '" + k + "' for " + kind);
  }
  if (inj.rank < 0) return bad("rank=R is required");
  if (inj.kind == Injection::Kind::Hang && inj.step < 0) return bad("step=S is required");
  if (inj.kind != Injection::Kind::Hang && inj.ms <= 0) return bad("ms=X (> 0) is required");
  *out = inj;
  return {};
}

}  // namespace trainscope::train
