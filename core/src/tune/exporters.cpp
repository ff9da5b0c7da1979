// Translations of a tuned configuration into other frameworks' settings (docs/TUNING.md has the
// table of every knob in every format). Each translation names every knob it cannot express
// ("unsupported" with the reason), so nothing is dropped silently.
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "trainscope/core/tune/config.h"

namespace trainscope::core {
namespace {

using nlohmann::ordered_json;

const std::string* knob(const TunedConfig& c, const std::string& name) {
  auto it = c.knobs.find(name);
  return it == c.knobs.end() ? nullptr : &it->second;
}

int64_t toInt(const std::string& v) {
  return std::strtoll(v.c_str(), nullptr, 10);
}

// Elements (or parameters) of a bucket of `bytes` gradient bytes at dtypeBytes each, rounded up.
int64_t elements(int64_t bytes, int dtypeBytes) {
  return bytes / dtypeBytes + (bytes % dtypeBytes > 0 ? 1 : 0);  // no overflow near INT64_MAX
}

ordered_json header(const TunedConfig& c, const char* format) {
  ordered_json h = ordered_json::object();
  h["format"] = format;
  h["from"] = std::string(kTunedConfigSchema) + " v" + std::to_string(kTunedConfigVersion);
  h["source"] = c.source;
  if (c.measured.stepTimeMs >= 0) h["measured_step_time_ms"] = c.measured.stepTimeMs;
  return h;
}

// Every knob not in `used` goes to unsupported with the reason reasonFor gives.
template <class F>
std::map<std::string, std::string> unsupportedOf(const TunedConfig& c,
                                                 const std::map<std::string, bool>& used, F reasonFor) {
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : c.knobs)
    if (!used.count(k) || !used.at(k)) out[k] = v + ": " + reasonFor(k, v);
  return out;
}

std::string familyReason(const std::string& k, const char* framework) {
  if (k.rfind("disco.", 0) == 0) return std::string(framework) + " has no DISCO feature-split layers";
  if (k.rfind("pp.", 0) == 0) return std::string(framework) + " has no counterpart for this pipeline setting";
  if (k.rfind("nccl.", 0) == 0) return std::string(framework) + " takes NCCL settings from the environment";
  return std::string(framework) + " has no counterpart";
}

std::string exportDdp(const TunedConfig& c) {
  ordered_json j = header(c, "pytorch-ddp");
  std::map<std::string, bool> used;
  ordered_json kwargs = ordered_json::object();
  if (const auto* b = knob(c, "dp.bucket_bytes")) {
    kwargs["bucket_cap_mb"] = static_cast<double>(toInt(*b)) / (1024.0 * 1024.0);  // DDP: MiB
    used["dp.bucket_bytes"] = true;
  }
  j["ddp_kwargs"] = kwargs;
  ordered_json hook = nullptr;
  std::string compressionReason;
  if (const auto* comp = knob(c, "dp.compression")) {
    if (*comp == "none") {
      used["dp.compression"] = true;  // DDP's default allreduce, no hook
    } else if (*comp == "fp16" || *comp == "bf16") {
      hook = {{"module", "torch.distributed.algorithms.ddp_comm_hooks.default_hooks"},
              {"hook", *comp + "_compress_hook"},
              {"state", "process group (None: the default group)"},
              {"register", "model.register_comm_hook(None, default_hooks." + *comp + "_compress_hook)"}};
      used["dp.compression"] = true;
    }
  }
  j["comm_hook"] = hook;
  ordered_json env = ordered_json::object();
  if (const auto* a = knob(c, "dp.algorithm")) {
    if (*a == "allreduce") {
      used["dp.algorithm"] = true;  // the process group's allreduce
    } else if (*a == "ring") {
      env["NCCL_ALGO"] = "Ring";  // the NCCL backend's allreduce as a ring
      used["dp.algorithm"] = true;
    }
  }
  if (const auto* a = knob(c, "nccl.algorithm")) env["NCCL_ALGO"] = *a, used["nccl.algorithm"] = true;
  if (const auto* p = knob(c, "nccl.protocol")) env["NCCL_PROTO"] = *p, used["nccl.protocol"] = true;
  if (const auto* ch = knob(c, "nccl.channels")) {
    env["NCCL_MIN_NCHANNELS"] = *ch;
    env["NCCL_MAX_NCHANNELS"] = *ch;
    used["nccl.channels"] = true;
  }
  j["environment"] = env;
  ordered_json uns = ordered_json::object();
  for (const auto& [k, why] : unsupportedOf(c, used, [](const std::string&k, const std::string&v) {
         if (k == "dp.compression")
           return "DDP has built-in hooks for fp16 and bf16 only (" + v +
                  " would need a custom comm hook, e.g. trainscope's Python DDP hook)";
         if (k == "dp.algorithm") return std::string("DDP's allreduce is the process group's; no ") + v;
         if (k == "dp.topk_ratio") return std::string("DDP has no top-k compression hook");
         return familyReason(k, "PyTorch DDP");
       }))
    uns[k] = why;
  j["unsupported"] = uns;
  j["usage"] =
      "DistributedDataParallel(model, **ddp_kwargs); then comm_hook.register if not null; environment before "
      "init_process_group";
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string exportDeepSpeed(const TunedConfig& c, const ExportParams& p) {
  ordered_json j = ordered_json::object();
  std::map<std::string, bool> used;
  ordered_json zero = ordered_json::object();
  if (const auto* b = knob(c, "dp.bucket_bytes")) {
    const int64_t e = elements(toInt(*b), p.dtypeBytes);
    zero["reduce_bucket_size"] = e;
    zero["allgather_bucket_size"] = e;
    used["dp.bucket_bytes"] = true;
  }
  if (knob(c, "dp.bucket_bytes") || knob(c, "dp.algorithm") || knob(c, "dp.compression")) {
    // trainscope-train always starts a bucket's reduction while the backward goes on.
    zero["overlap_comm"] = true;
    zero["contiguous_gradients"] = true;
  }
  if (!zero.empty()) j["zero_optimization"] = zero;
  if (const auto* comp = knob(c, "dp.compression")) {
    if (*comp == "fp16" || *comp == "bf16") {
      j["communication_data_type"] = *comp;
      used["dp.compression"] = true;
    } else if (*comp == "none") {
      j["communication_data_type"] = p.dtypeName;  // uncompressed: the gradients' own type
      used["dp.compression"] = true;
    }
  }
  if (const auto* a = knob(c, "dp.algorithm"); a && *a == "allreduce") used["dp.algorithm"] = true;
  if (const auto* m = knob(c, "pp.microbatches")) {
    // DeepSpeed's pipeline engine runs gradient_accumulation_steps micro-batches per step.
    j["gradient_accumulation_steps"] = toInt(*m);
    used["pp.microbatches"] = true;
    if (p.globalBatch > 0) {
      const int stages = std::max(1, c.job.ppStages);
      const int dp = std::max(1, c.job.worldSize / stages);
      j["train_batch_size"] = p.globalBatch;
      j["train_micro_batch_size_per_gpu"] = p.globalBatch / (dp * toInt(*m));
    }
  }
  if (const auto* s = knob(c, "pp.schedule"); s && *s == "1f1b") used["pp.schedule"] = true;
  if (const auto* v = knob(c, "pp.virtual_stages"); v && toInt(*v) == 1) used["pp.virtual_stages"] = true;
  if (const auto* seg = knob(c, "pp.segments");
      seg && (toInt(*seg) == 1 || (knob(c, "pp.schedule") && *knob(c, "pp.schedule") != "seq1f1b")))
    used["pp.segments"] = true;
  ordered_json meta = header(c, "deepspeed");
  meta["bucket_units"] = "elements of " + std::to_string(p.dtypeBytes) + " bytes (" + p.dtypeName + ")";
  ordered_json uns = ordered_json::object();
  for (const auto& [k, why] : unsupportedOf(c, used, [](const std::string&k, const std::string&v) {
         if (k == "dp.compression")
           return v == "onebit-ef" ? std::string(
                                         "DeepSpeed's 1-bit compression is an optimizer (OneBitAdam), "
                                         "not a communication setting")
                                   : std::string("DeepSpeed has no ") + v + " gradient communication";
         if (k == "dp.algorithm") return std::string("DeepSpeed's allreduce is its backend's; no ") + v;
         if (k == "pp.schedule") return std::string("DeepSpeed's pipeline engine runs 1f1b only");
         if (k == "pp.virtual_stages") return std::string("DeepSpeed's pipeline has no virtual stages");
         if (k == "dp.topk_ratio") return std::string("DeepSpeed has no top-k gradient compression");
         return familyReason(k, "DeepSpeed");
       }))
    uns[k] = why;
  meta["unsupported"] = uns;
  j["trainscope"] = meta;  // DeepSpeed ignores keys it does not know
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string exportMegatron(const TunedConfig& c, const ExportParams& p) {
  std::ostringstream o;
  std::map<std::string, bool> used;
  o << "# Megatron-LM arguments from " << kTunedConfigSchema << " v" << kTunedConfigVersion;
  if (!c.source.empty()) o << " (" << c.source << ")";
  o << "\n";
  std::vector<std::string> args, notes;
  const int stages = std::max(1, c.job.ppStages);
  if (const auto* b = knob(c, "dp.bucket_bytes")) {
    args.push_back("--ddp-bucket-size " + std::to_string(elements(toInt(*b), p.dtypeBytes)));
    notes.push_back("--ddp-bucket-size counts parameters: " + *b + " bytes / " +
                    std::to_string(p.dtypeBytes) + " bytes per " + p.dtypeName + " gradient");
    used["dp.bucket_bytes"] = true;
  }
  if (knob(c, "dp.bucket_bytes") || knob(c, "dp.algorithm") || knob(c, "dp.compression"))
    args.push_back("--overlap-grad-reduce");
  if (const auto* a = knob(c, "dp.algorithm"); a && *a == "allreduce") used["dp.algorithm"] = true;
  if (const auto* comp = knob(c, "dp.compression")) {
    if (*comp == "none") {
      used["dp.compression"] = true;
    } else if (*comp == "bf16") {
      args.push_back("--grad-reduce-in-bf16");
      used["dp.compression"] = true;
    }
  }
  if (c.job.mode == "pp" || c.job.mode == "hybrid")
    args.push_back("--pipeline-model-parallel-size " + std::to_string(stages));
  const std::string* sched = knob(c, "pp.schedule");
  const std::string* vs = knob(c, "pp.virtual_stages");
  if (sched && *sched == "1f1b") used["pp.schedule"] = true;
  if (sched && *sched == "interleaved-1f1b") {
    // A count read from a file: 0, negative or above the layer count does not split the model
    // (0 divided by zero before, found by fuzz_config).
    const int64_t v = vs ? toInt(*vs) : 1;
    if (v >= 1 && v <= c.job.modelLayers && c.job.modelLayers % (stages * v) == 0) {
      args.push_back("--num-layers " + std::to_string(c.job.modelLayers));
      args.push_back("--num-layers-per-virtual-pipeline-stage " +
                     std::to_string(c.job.modelLayers / (stages * v)));
      used["pp.schedule"] = true;
      if (vs) used["pp.virtual_stages"] = true;
    } else {
      notes.push_back("interleaved-1f1b: --num-layers-per-virtual-pipeline-stage = layers / (" +
                      std::to_string(stages) + " stages x " + std::to_string(v) +
                      " virtual stages); the model's layer count is unknown or does not split");
    }
  }
  if (vs && toInt(*vs) == 1 && (!sched || *sched != "interleaved-1f1b")) used["pp.virtual_stages"] = true;
  // One sequence segment is no sequence splitting: Megatron-LM's default; segments are used by
  // seq1f1b only.
  if (const auto* seg = knob(c, "pp.segments"); seg && (toInt(*seg) == 1 || (sched && *sched != "seq1f1b")))
    used["pp.segments"] = true;
  if (const auto* m = knob(c, "pp.microbatches")) {
    const int dp = std::max(1, c.job.worldSize / stages);
    if (p.globalBatch > 0 && p.globalBatch % (dp * toInt(*m)) == 0) {
      args.push_back("--global-batch-size " + std::to_string(p.globalBatch));
      args.push_back("--micro-batch-size " + std::to_string(p.globalBatch / (dp * toInt(*m))));
      used["pp.microbatches"] = true;
    } else {
      notes.push_back("pp.microbatches=" + *m + ": --micro-batch-size = global batch / (" +
                      std::to_string(dp) + " data-parallel replicas x " + *m +
                      "); give export --global-batch");
    }
  }
  for (const auto& a : args) o << a << "\n";
  for (const auto& n : notes) o << "# note: " << n << "\n";
  for (const auto& [k, why] : unsupportedOf(c, used, [](const std::string&k, const std::string&v) {
         if (k == "dp.compression")
           return std::string("Megatron-LM reduces gradients in fp32 or bf16 only, no ") + v;
         if (k == "dp.algorithm") return std::string("Megatron-LM's reduction is its backend's; no ") + v;
         if (k == "pp.schedule") return std::string("Megatron-LM runs 1f1b or interleaved-1f1b, not ") + v;
         if (k == "pp.microbatches") return std::string("needs the global batch (export --global-batch)");
         return familyReason(k, "Megatron-LM");
       }))
    o << "# unsupported: " << k << "=" << why << "\n";
  return o.str();
}

std::string exportNcclTuner(const TunedConfig& c) {
  std::ostringstream o;
  std::map<std::string, bool> used;
  o << "# NCCL example tuner plugin configuration (NCCL_TUNER_CONFIG_FILE) from " << kTunedConfigSchema
    << " v" << kTunedConfigVersion;
  if (!c.source.empty()) o << " (" << c.source << ")";
  o << "\n# Format: "
       "collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff\n";
  std::string algo, proto = "simple", channels = "-1";
  bool protoGiven = false;
  if (const auto* a = knob(c, "nccl.algorithm")) {
    std::string v = *a;
    for (char& ch : v) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    algo = v;
    used["nccl.algorithm"] = true;
  } else if (const auto* d = knob(c, "dp.algorithm"); d && *d == "ring") {
    algo = "ring";
    used["dp.algorithm"] = true;
  }
  if (const auto* p = knob(c, "nccl.protocol")) {
    proto = *p;
    for (char& ch : proto) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    protoGiven = true;
    used["nccl.protocol"] = true;
  }
  if (const auto* ch = knob(c, "nccl.channels")) channels = *ch, used["nccl.channels"] = true;
  if (!algo.empty()) {
    const int64_t lo = 0;
    // The gradient buckets' payloads as measured, else every size.
    const std::string hi = c.measured.bucketPayloadMax > 0 ? std::to_string(c.measured.bucketPayloadMax)
                                                           : std::string("18446744073709551615");
    if (c.measured.bucketPayloadMax > 0)
      o << "# byte range: 0 up to the largest gradient bucket measured (" << hi << " bytes)\n";
    if (!protoGiven) o << "# protocol: no nccl.protocol knob; simple is the example plugin's default\n";
    o << "allreduce," << lo << "," << hi << "," << algo << "," << proto << "," << channels << ",-1,"
      << (c.job.worldSize > 0 ? std::to_string(c.job.worldSize) : std::string("-1")) << ",-1,-1\n";
  } else {
    o << "# no allreduce rule: the configuration names no NCCL algorithm (NCCL keeps its own choice)\n";
    if (knob(c, "nccl.channels")) used["nccl.channels"] = false;
    if (knob(c, "nccl.protocol")) used["nccl.protocol"] = false;
  }
  if (const auto* d = knob(c, "dp.algorithm"); d && *d == "allreduce") used["dp.algorithm"] = true;
  for (const auto& [k, why] : unsupportedOf(c, used, [](const std::string&k, const std::string&v) {
         if (k == "dp.algorithm") return "NCCL has no " + v + " algorithm";
         if (k.rfind("nccl.", 0) == 0) return std::string("needs nccl.algorithm for a rule");
         return std::string("the NCCL tuner chooses algorithm, protocol and channels only");
       }))
    o << "# unsupported: " << k << "=" << why << "\n";
  return o.str();
}

std::string exportTrainArgs(const TunedConfig& c) {
  std::ostringstream o;
  std::vector<std::string> uns;
  bool first = true;
  for (const auto& [k, v] : c.knobs) {
    const std::string opt = trainOptionForKnob(k);
    if (opt.empty()) {
      uns.push_back(k + "=" + v);
      continue;
    }
    o << (first ? "" : " ") << opt << " " << v;
    first = false;
  }
  if (c.job.mode == "pp" || c.job.mode == "hybrid" || c.job.mode == "disco")
    o << (first ? "" : " ") << "--mode " << c.job.mode;
  if (c.job.mode == "hybrid" && c.job.ppStages > 0) o << " --pp-stages " << c.job.ppStages;
  o << "\n";
  for (const auto& u : uns)
    o << "# unsupported: " << u
      << ": trainscope-train has no start-up option for this knob (set it live: trainscope-cli set)\n";
  return o.str();
}

}  // namespace

Result<std::string> exportConfig(const TunedConfig& config, std::string_view format,
                                 const ExportParams& params) {
  if (params.dtypeBytes < 1) return Status(ErrorCode::InvalidArgument, "dtype bytes must be >= 1");
  if (format == "config") return configToJson(config);
  if (format == "ddp") return exportDdp(config);
  if (format == "deepspeed") return exportDeepSpeed(config, params);
  if (format == "megatron") return exportMegatron(config, params);
  if (format == "nccl-tuner") return exportNcclTuner(config);
  if (format == "train-args") return exportTrainArgs(config);
  return Status(ErrorCode::InvalidArgument,
                "unknown configuration format '" + std::string(format) +
                    "' (config, ddp, deepspeed, megatron, nccl-tuner, train-args)");
}

}  // namespace trainscope::core
