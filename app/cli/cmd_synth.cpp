// `trainscope-cli synth --out FILE.tsdb`: a deterministic synthetic session shaped like a
// data-parallel job, for trying the tools before a real job runs and for benchmarks.
#include <cstdio>

#include "commands.h"
#include "out_path.h"
#include "trainscope/core/session/tsdb.h"
#include "trainscope/core/synth/synth.h"

namespace trainscope::cli {
namespace {

int runSynth(const core::SynthOptions& so, const std::string& out, bool force) {
  auto output = OutputFile::create(out, {}, force, {.session = true});
  if (!output) return fail(output.status());
  core::TraceStore store;
  core::synthesizeTrace(store, so);
  store.metadata()["job_id"] = "synthetic";
  if (auto st = core::saveSession(store, output->writePath()); !st) return fail(st);
  if (auto st = output->commit(); !st) return fail(st);
  std::printf("wrote %s: %s events, %zu ranks, %zu tracks\n", out.c_str(),
              withThousands(store.eventCount()).c_str(), store.ranks().size(), store.trackCount());
  return kExitOk;
}

}  // namespace

void addSynthCommand(CLI::App& app, Runner& run) {
  auto so = std::make_shared<core::SynthOptions>();
  auto out = std::make_shared<std::string>();
  auto force = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("synth", "Write a synthetic data-parallel session (no job needed)");
  cmd->add_option("--out,-o", *out, "Session file to write (.tsdb; not an existing file, unless --force)")
      ->required();
  cmd->add_flag("--force", *force, "Replace --out when it exists");
  cmd->add_option("--ranks", so->ranks, "Ranks")->check(CLI::Range(1, 4096))->capture_default_str();
  cmd->add_option("--steps", so->steps, "Training steps")->check(CLI::Range(1, 1'000'000))->capture_default_str();
  cmd->add_option("--kernels", so->kernelsPerStep, "Kernels per phase per step")
      ->check(CLI::Range(1, 1'000'000))->capture_default_str();
  cmd->add_option("--buckets", so->buckets, "Gradient buckets per step")->check(CLI::Range(0, 4096))->capture_default_str();
  cmd->add_option("--seed", so->seed, "Random seed")->capture_default_str();
  cmd->callback([so, out, force, &run] { run = [so, out, force] { return runSynth(*so, *out, *force); }; });
}

}  // namespace trainscope::cli
