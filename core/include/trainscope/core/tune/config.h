// Tuned configurations: our own JSON schema ("trainscope.tuned-config", docs/FORMATS.md) that
// `export --format config`, `tune` and the GUI write and `set --from` / `trainscope-train
// --config` read back, plus its translations into other frameworks' settings (`export --format
// ddp|deepspeed|megatron|nccl-tuner|train-args`, docs/TUNING.md).
//
// A configuration is the knob values in force (the knob protocol's text values, typed in JSON as
// numbers where they parse as numbers), the job they belong to, the measurements behind them and
// the versions that wrote it. Every translation lists each knob it has no counterpart for under
// "unsupported" (or a comment line), never drops one silently.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "trainscope/core/base/status.h"
#include "trainscope/core/model/trace_store.h"

namespace trainscope::core {

struct AnalysisResult;  // analysis/analysis.h

inline constexpr std::string_view kTunedConfigSchema = "trainscope.tuned-config";
inline constexpr int kTunedConfigVersion = 1;

struct TunedJob {
  std::string jobId;
  int worldSize = 0;
  std::string mode;     // dp | pp | hybrid | disco (from the knobs present; "" unknown)
  int ppStages = 0;     // pipeline stages (distinct Stage attributes); 1 without a pipeline
  int modelLayers = 0;  // layers of the whole model seen in the trace (0 unknown)
};

// What was measured with these knob values (NaN / 0 when not available). Steps are those
// after the last knob change: the settings the configuration names were in force.
struct TunedMeasurements {
  int steps = 0;
  int64_t fromStep = -1, toStep = -1;
  double stepTimeMs = -1, stepTimeP50Ms = -1;
  double exposedCommMs = -1;     // data_parallel.exposed_comm_ms over those steps
  double overlapRatio = -1;      // data_parallel.overlap_ratio (whole session)
  double bubbleFraction = -1;    // pipeline.bubble_fraction (whole session)
  double wireBytesPerStep = -1;  // gradient bytes a rank sends per step (buckets' Bytes), mean
  int64_t bucketPayloadMin = -1, bucketPayloadMax = -1;  // a bucket's payload bytes (4 x values)
  std::string method;  // "analysis of FILE" | "live: S s of job ID" | "tune: N trials"
  // The tuner's: the step time's standard error and the 95 % confidence interval of its mean
  // (Student's t over the measured steps); -1 when not measured so.
  double stepTimeStderrMs = -1, stepTimeCi95LowMs = -1, stepTimeCi95HighMs = -1;
  // Why a metric above is missing (its JSON key -> the reason), written as "unavailable" so that a
  // null in the file always says why; empty when nothing is missing or nobody said.
  std::map<std::string, std::string> unavailable;
};

struct TunedConfig {
  std::map<std::string, std::string> knobs;  // name -> value as the knob protocol carries it
  TunedJob job;
  TunedMeasurements measured;
  std::string source;                        // the session file or "job ID"
  std::string createdBy;                     // "trainscope-cli export 0.1.0"
  std::string createdAt;                     // ISO 8601 UTC
  std::map<std::string, std::string> notes;  // free-form (tune: trials, baseline)
};

// The settings in force at the end of a session: its `knob.<name>` metadata, then every
// KnobChange event in (step, time) order (a refused change and its restore: the restore wins),
// the job inferred from metadata and trace, and the measurements from the analysis over the
// steps after the last change (all steps when there was none).
Result<TunedConfig> configFromSession(const TraceStore& store, const std::string& source);

// The measurements of exactly the given steps (the tuner's: the chosen setting's measured steps,
// its periodic steps left out) from an analysis of the store: step time (mean, p50), exposed
// communication, overlap (per step (comm - exposed) / comm of the gradient collectives, mean),
// bubble (per step the mean over stages), gradient bytes per step and bucket payloads. A metric
// the steps do not have is -1 with its reason in `unavailable`.
TunedMeasurements measurementsOfSteps(const TraceStore& store, const AnalysisResult& analysis,
                                      const std::set<int64_t>& steps);

std::string configToJson(const TunedConfig& config);
// Parses and checks the schema name and version; errors name the file (`what`) and the key.
Result<TunedConfig> configFromJson(const std::string& text, const std::string& what);
Result<TunedConfig> readConfigFile(const std::string& path);

// Translations. dtypeBytes: bytes per gradient element for formats that count elements or
// parameters (DeepSpeed, Megatron); dtypeName names it ("fp32", "bf16", "fp16").
struct ExportParams {
  int dtypeBytes = 4;
  std::string dtypeName = "fp32";
  int64_t globalBatch = 0;  // Megatron micro-batch settings need it; 0: unknown
};
inline constexpr std::string_view kConfigFormats[] = {"config",   "ddp",        "deepspeed",
                                                      "megatron", "nccl-tuner", "train-args"};
Result<std::string> exportConfig(const TunedConfig& config, std::string_view format,
                                 const ExportParams& params = {});

// The knob -> trainscope-train option mapping (`train-args`, and what --config reads back):
// "dp.bucket_bytes" -> "--bucket-bytes". Empty when the trainer has no option for the knob.
std::string trainOptionForKnob(std::string_view knob);

}  // namespace trainscope::core
