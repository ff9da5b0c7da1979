// `trainscope-cli export FILE --format chrome --out OUT`: a session as Chrome trace JSON
// (opens in Perfetto UI and chrome://tracing).
// `export FILE|--job ID --format config|ddp|deepspeed|megatron|nccl-tuner|train-args --out OUT`:
// the knob values in force at the end of a session (or now, in a live job, measured for
// --seconds) as a tuned configuration (docs/FORMATS.md) or its translation (docs/TUNING.md).
// FILE may also be a tuned configuration (.json) to translate.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <shared_mutex>
#include <thread>

#include "commands.h"
#include "live.h"
#include "load.h"
#include "out_path.h"
#include "trainscope/core/interop/chrome_trace.h"
#include "trainscope/core/tune/config.h"

namespace trainscope::cli {
namespace {

struct ExportOptions {
  std::string file;
  std::string job;
  std::string format = "chrome";
  std::string out;
  bool force = false;
  std::optional<int64_t> fromNs, toNs;
  double seconds = 3;
  std::string dtype = "fp32";
  int64_t globalBatch = 0;
};

bool isTunedConfigFile(const std::string& path) {
  std::ifstream in(path);
  char buf[512] = {};
  in.read(buf, sizeof buf - 1);
  return std::string(buf).find(core::kTunedConfigSchema) != std::string::npos;
}

}  // namespace

core::Result<core::TunedConfig> liveConfig(const std::string& jobId, double seconds) {
  auto entries = core::LiveSession::entriesOf(jobId, false);
  if (!entries) return entries.status();
  core::LiveOptions lo;
  lo.client.clientName = "trainscope-cli";
  lo.createdBy = std::string("trainscope-cli export ") + TRAINSCOPE_VERSION;
  core::TraceStore store;
  std::shared_mutex mutex;
  core::LiveSession live(std::move(entries).value(), lo);
  live.setStore({&store, &mutex, {}, {}});
  live.start();
  // Measure for `seconds` once every rank is attached (give up waiting for that after 20 s).
  const int64_t giveUp = core::monotonicNowNs() + 20'000'000'000;
  int64_t deadline = INT64_MAX;
  while (live.streaming()) {
    const int64_t now = core::monotonicNowNs();
    if (deadline == INT64_MAX) {
      if (live.snapshot().state == core::LiveState::Live)
        deadline = now + static_cast<int64_t>(seconds * 1e9);
      else if (now > giveUp)
        break;
    } else if (now >= deadline) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  live.detach();
  std::unique_lock lock(mutex);
  store.flush();
  auto c = core::configFromSession(store, "job " + jobId);
  if (c) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "live: %.1f s of job ", seconds);
    c->measured.method = buf + jobId;
  }
  return c;
}

namespace {

// The input file (if any): --out may not be it, nor any existing file, without --force.
core::Result<OutputFile> outputFor(const ExportOptions& o) {
  std::vector<std::string> inputs;
  if (!o.file.empty()) inputs.push_back(o.file);
  return OutputFile::create(o.out, inputs, o.force);
}

int runConfigExport(const ExportOptions& o) {
  // Refused before the (maybe long) work: an output that would replace an input or a file.
  auto output = outputFor(o);
  if (!output) return fail(output.status());
  core::Result<core::TunedConfig> cfg = core::Status(core::ErrorCode::InvalidArgument, "no input");
  if (!o.job.empty()) {
    cfg = liveConfig(o.job, o.seconds);
  } else if (isTunedConfigFile(o.file)) {
    cfg = core::readConfigFile(o.file);
  } else {
    auto store = loadTrace(o.file);
    if (!store) return fail(store.status());
    cfg = core::configFromSession(store.value(), o.file);
  }
  if (!cfg) return fail(cfg.status());
  if (cfg->createdBy.empty()) cfg->createdBy = std::string("trainscope-cli export ") + TRAINSCOPE_VERSION;
  core::ExportParams ep;
  ep.dtypeName = o.dtype;
  ep.dtypeBytes = o.dtype == "fp32" ? 4 : 2;
  ep.globalBatch = o.globalBatch;
  auto text = core::exportConfig(cfg.value(), o.format, ep);
  if (!text) return fail(text.status());
  if (core::Status st = output->writeText(text.value()); !st) return fail(st);
  std::printf("wrote %s: %s, %zu knobs", o.out.c_str(), o.format.c_str(), cfg->knobs.size());
  if (cfg->measured.stepTimeMs >= 0)
    std::printf(", measured step time %.3f ms over %d steps", cfg->measured.stepTimeMs, cfg->measured.steps);
  std::printf("\n");
  return kExitOk;
}

int runExport(const ExportOptions& o) {
  if (o.file.empty() == o.job.empty())
    return fail({core::ErrorCode::InvalidArgument, "export needs a FILE or --job ID (one of them)"});
  if (o.format != "chrome") return runConfigExport(o);
  if (!o.job.empty())
    return fail(
        {core::ErrorCode::InvalidArgument, "--format chrome exports a session file: record the job first"});
  auto output = outputFor(o);
  if (!output) return fail(output.status());
  auto store = loadTrace(o.file);
  if (!store) return fail(store.status());
  core::ChromeExportOptions eo;
  eo.fromNs = o.fromNs;
  eo.toNs = o.toNs;
  // Into the temporary file, renamed over --out once complete (the input is read by then).
  auto stats = core::exportChromeTraceFile(store.value(), output->writePath(), eo);
  if (!stats) return fail(stats.status());
  if (core::Status st = output->commit(); !st) return fail(st);
  std::printf("wrote %s: %s events, %s flows, %s extra lanes\n", o.out.c_str(),
              withThousands(stats->events).c_str(), withThousands(stats->flows).c_str(),
              withThousands(stats->lanes).c_str());
  if (stats->endBeforeStart > 0)
    std::fprintf(stderr,
                 "note: %s events of %s end before they start (a damaged or hand-made session): written as "
                 "instants at their start\n",
                 withThousands(stats->endBeforeStart).c_str(), o.file.c_str());
  return kExitOk;
}

}  // namespace

void addExportCommand(CLI::App& app, Runner& run) {
  auto opts = std::make_shared<ExportOptions>();
  CLI::App* cmd = app.add_subcommand(
      "export", "Export a session as Chrome trace JSON (Perfetto UI) or a tuned configuration");
  cmd->add_option(
      "FILE", opts->file,
      "Session file (.tsdb, or a Chrome .json); for configuration formats also a tuned configuration "
      ".json to translate");
  cmd->add_option("--job", opts->job,
                  "Configuration formats: the knobs of this running job, measured for --seconds");
  cmd->add_option("--format", opts->format,
                  "chrome | config | ddp | deepspeed | megatron | nccl-tuner | train-args")
      ->check(CLI::IsMember({"chrome", "config", "ddp", "deepspeed", "megatron", "nccl-tuner", "train-args"}))
      ->capture_default_str();
  cmd->add_option("--seconds", opts->seconds, "--job: seconds of steps to measure")->capture_default_str();
  cmd->add_option("--dtype", opts->dtype, "Gradient type for element/parameter counts (deepspeed, megatron)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  cmd->add_option("--global-batch", opts->globalBatch,
                  "Global batch size (megatron/deepspeed micro-batch settings)");
  cmd->add_option("--out,-o", opts->out, "Output file (not an existing file, unless --force)")->required();
  cmd->add_flag("--force", opts->force,
                "Replace --out when it exists (also when it is the input: written beside it, renamed over it "
                "once complete)");
  cmd->add_option("--from-ns", opts->fromNs, "Only events overlapping [from, to) (session clock, ns)");
  cmd->add_option("--to-ns", opts->toNs, "End of the exported window (ns)");
  cmd->callback([opts, &run] { run = [opts] { return runExport(*opts); }; });
}

}  // namespace trainscope::cli
