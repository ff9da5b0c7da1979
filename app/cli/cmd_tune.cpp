// `trainscope-cli tune --job ID --knobs A,B,... [--budget-steps N | --budget-seconds S] --out
// tuned.json`: live autotuning (core/tune/tuner.h, docs/TUNING.md) over the live-session engine;
// writes the tuned configuration (docs/FORMATS.md) and leaves the job at the best setting.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <shared_mutex>
#include <thread>

#include "commands.h"
#include "live.h"
#include "out_path.h"
#include "trainscope/core/tune/tuner.h"

namespace trainscope::cli {
namespace {

struct TuneCliOptions {
  std::string job, out, record;
  std::vector<std::string> knobs, values;
  int budgetSteps = 0;
  double budgetSeconds = 0;
  int warmup = 2, measure = 6;
  double z = 0, confidence = 0.95, minEffectPct = 1.0;
  int repeats = 2;
  bool noSimulator = false, json = false, force = false;
};

int runTune(const TuneCliOptions& o) {
  core::TuneOptions to;
  to.knobs = o.knobs;
  to.budgetSteps = o.budgetSteps;
  to.budgetSeconds = o.budgetSeconds;
  to.warmupSteps = o.warmup;
  to.measureSteps = o.measure;
  to.z = o.z;
  to.confidence = o.confidence;
  to.minEffectPct = o.minEffectPct;
  to.repeats = o.repeats;
  to.useSimulator = !o.noSimulator;
  to.log = [](const std::string& s) {
    std::fprintf(stderr, "%s\n", s.c_str());
    std::fflush(stderr);
  };
  for (const auto& v : o.values) {
    const size_t eq = v.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::fprintf(stderr, "trainscope-cli: --values \"%s\" is not NAME=v1,v2,...\n", v.c_str());
      return kExitUsage;
    }
    std::vector<std::string> list;
    const std::string rest = v.substr(eq + 1);
    for (size_t p = 0;;) {
      const size_t c = rest.find(',', p);
      list.push_back(rest.substr(p, c == std::string::npos ? std::string::npos : c - p));
      if (c == std::string::npos) break;
      p = c + 1;
    }
    to.values[v.substr(0, eq)] = list;
  }
  if (o.budgetSteps <= 0 && o.budgetSeconds <= 0) {
    std::fprintf(stderr, "trainscope-cli: tune needs --budget-steps N or --budget-seconds S\n");
    return kExitUsage;
  }
  // Refused before the tuning (which changes the job): --out may not replace a file without --force.
  auto output = OutputFile::create(o.out, {}, o.force);
  if (!output) return fail(output.status());
  auto entries = core::LiveSession::entriesOf(o.job, true);
  if (!entries) return fail(entries.status());
  core::LiveOptions lo;
  lo.client.clientName = "trainscope-cli";
  lo.createdBy = std::string("trainscope-cli tune ") + TRAINSCOPE_VERSION;
  // Only steps from now on matter: no flight-recorder history (on a loaded machine ingesting 30 s
  // of history delayed the first trial's steps past the no-progress timeout).
  lo.history = false;
  core::TraceStore store;
  std::shared_mutex mutex;
  core::LiveSession live(std::move(entries).value(), lo);
  live.setStore({&store, &mutex, {}, {}});
  live.start();
  for (int i = 0; i < 400 && live.snapshot().state != core::LiveState::Live && live.streaming(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto res = core::autotune(live, store, mutex, to);
  live.detach();
  if (!res) return fail(res.status());
  res->config.createdBy = std::string("trainscope-cli tune ") + TRAINSCOPE_VERSION;
  auto text = core::exportConfig(res->config, "config");
  if (!text) return fail(text.status());
  if (core::Status st = output->writeText(text.value()); !st) return fail(st);
  auto num = [](double v) { return v < 0 || !std::isfinite(v) ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(v); };
  auto settingJson = [](const std::map<std::string, std::string>& m) {
    nlohmann::ordered_json s = nlohmann::ordered_json::object();
    for (const auto& [k, v] : m) s[k] = v;
    return s;
  };
  auto diffJson = [&](const core::Difference& d) {
    nlohmann::ordered_json j;
    j["method"] = d.method == "z" ? "z" : "welch-t";
    j["confidence"] = d.confidence;
    j["valid"] = d.valid;
    j["baseline_mean_ms"] = num(d.baseline.mean);
    j["baseline_stderr_ms"] = num(d.baseline.se);
    j["baseline_steps"] = d.baseline.n;
    j["candidate_mean_ms"] = num(d.candidate.mean);
    j["candidate_stderr_ms"] = num(d.candidate.se);
    j["candidate_steps"] = d.candidate.n;
    j["gain_ms"] = d.diffMs;  // baseline - candidate: > 0 when the candidate is faster
    j["gain_ci_ms"] = d.valid ? nlohmann::ordered_json::array({d.ciLowMs, d.ciHighMs}) : nlohmann::ordered_json(nullptr);
    j["noise_ms"] = num(d.halfWidthMs);  // the interval's half width
    j["df"] = num(d.df);
    j["critical"] = num(d.critical);
    j["min_effect_ms"] = d.minEffectMs;
    j["better"] = d.better;
    j["worse"] = d.worse;
    j["text"] = d.text();
    return j;
  };
  if (o.json) {
    nlohmann::ordered_json j;
    j["initial_step_time_ms"] = res->initialMs;
    j["best_step_time_ms"] = res->bestMs;
    j["best_step_time_stderr_ms"] = num(res->bestSteps.se);
    j["best_step_time_ci95_ms"] =
        res->config.measured.stepTimeCi95LowMs >= 0
            ? nlohmann::ordered_json::array({res->config.measured.stepTimeCi95LowMs, res->config.measured.stepTimeCi95HighMs})
            : nlohmann::ordered_json(nullptr);
    j["changed"] = res->changed;
    j["confidence"] = res->confidence;
    j["verdict"] = res->verdict;
    j["win"] = diffJson(res->win);
    j["model_fits"] = res->modelFits;
    j["model_notes"] = res->modelNotes;
    j["applied_step"] = res->appliedStep;
    j["steps_used"] = res->stepsUsed;
    j["seconds"] = res->seconds;
    j["initial"] = settingJson(res->initial);
    j["best"] = settingJson(res->best);
    nlohmann::ordered_json decisions = nlohmann::ordered_json::array();
    for (const auto& d : res->decisions)
      decisions.push_back({{"knob", d.knob},
                           {"incumbent", settingJson(d.incumbent)},
                           {"candidate", settingJson(d.candidate)},
                           {"interleaved", d.interleaved},
                           {"accepted", d.accepted},
                           {"comparison", diffJson(d.diff)},
                           {"verdict", d.verdict}});
    j["decisions"] = decisions;
    nlohmann::ordered_json trials = nlohmann::ordered_json::array();
    for (const auto& t : res->trials) {
      trials.push_back({{"setting", settingJson(t.setting)},
                        {"incumbent", t.incumbent},
                        {"skipped", t.skipped},
                        {"refused", t.refused},
                        {"why", t.why},
                        {"applied_step", t.appliedStep},
                        {"steps", t.steps},
                        {"step_ms", t.stepMs},
                        {"mean_ms", t.meanMs},
                        {"stderr_ms", t.stderrMs},
                        {"periodic_steps", t.periodicSteps},
                        {"all_steps_mean_ms", num(t.allStepsMeanMs)},
                        {"predicted_ms", t.predictedMs},
                        {"prediction_off", num(t.predictionOff)},
                        {"model_fits", t.modelFits}});
    }
    j["trials"] = trials;
    j["out"] = o.out;
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    // Predicted and measured side by side, then the decisions and the verdict with its confidence.
    std::printf("%-48s %6s %10s %10s %10s %s\n", "setting", "steps", "measured", "+-stderr", "predicted", "");
    for (const auto& t : res->trials) {
      std::string name;
      for (const auto& [k, v] : t.setting) name += (name.empty() ? "" : " ") + k + "=" + v;
      if (t.incumbent) name += " (inc)";
      char pred[32] = "-";
      if (t.predictedMs >= 0) std::snprintf(pred, sizeof pred, "%.3f", t.predictedMs);
      if (t.skipped || t.refused) {
        std::printf("%-48s %6s %10s %10s %10s %s: %s\n", name.c_str(), "-", "-", "-", pred,
                    t.skipped ? "skipped" : "refused", t.why.c_str());
        continue;
      }
      std::string flag;
      if (!t.modelFits) {
        char b[96];
        std::snprintf(b, sizeof b, "model %.1fx off: does not fit this machine/run", t.predictionOff);
        flag = b;
      }
      std::printf("%-48s %6zu %10.3f %10.3f %10s %s\n", name.c_str(), t.stepMs.size(), t.meanMs, t.stderrMs, pred,
                  flag.c_str());
    }
    for (const auto& d : res->decisions) std::printf("%s: %s\n", d.knob.c_str(), d.verdict.c_str());
    if (!res->modelFits)
      std::printf("! the what-if model does not fit this machine/run (a prediction more than 2x off the "
                  "measurement): its predictions were not trusted\n");
    std::printf("%s\n", res->verdict.c_str());
    std::printf("best:");
    for (const auto& [k, v] : res->best) std::printf(" %s=%s", k.c_str(), v.c_str());
    std::printf(" %.3f ms/step", res->bestMs);
    if (res->config.measured.stepTimeCi95LowMs >= 0)
      std::printf(" (95%% CI %.3f..%.3f)", res->config.measured.stepTimeCi95LowMs,
                  res->config.measured.stepTimeCi95HighMs);
    std::printf(", initial %.3f ms, %zu trials, %d steps, %.1f s -> %s\n", res->initialMs, res->trials.size(),
                res->stepsUsed, res->seconds, o.out.c_str());
  }
  return kExitOk;
}

}  // namespace

void addTuneCommand(CLI::App& app, Runner& run) {
  auto opts = std::make_shared<TuneCliOptions>();
  CLI::App* cmd = app.add_subcommand("tune",
                                     "Autotune knobs of a running job (measured trials, ranked by the "
                                     "what-if simulator); writes a tuned configuration");
  cmd->add_option("--job", opts->job, "Job id (see `jobs`)")->required();
  cmd->add_option("--knobs", opts->knobs, "Knobs to tune, in order (comma-separated)")
      ->required()
      ->delimiter(',');
  cmd->add_option("--budget-steps", opts->budgetSteps, "Steps the trials may use in all");
  cmd->add_option("--budget-seconds", opts->budgetSeconds, "Wall seconds the tuning may take");
  cmd->add_option("--values", opts->values,
                  "NAME=v1,v2,... candidates for a knob (repeatable; default from its range)");
  cmd->add_option("--warmup-steps", opts->warmup, "Steps skipped after each change")->capture_default_str();
  cmd->add_option("--measure-steps", opts->measure, "Steps measured per trial")->capture_default_str();
  cmd->add_option("--confidence", opts->confidence,
                  "Confidence of the interval of a candidate's gain (Welch's t); a candidate wins only when "
                  "the whole interval is above the minimum effect")
      ->capture_default_str()
      ->check(CLI::Range(0.5, 0.999999));
  cmd->add_option("--min-effect", opts->minEffectPct,
                  "Minimum practical gain, percent of the incumbent's step time, that the interval must clear")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--z", opts->z,
                  "A fixed critical value (standard errors) instead of Student's t at --confidence (0: t)")
      ->capture_default_str();
  cmd->add_option("--repeats", opts->repeats,
                  "Measure an undecided candidate (faster, but within the noise) and the incumbent again, "
                  "up to this many times")
      ->capture_default_str()
      ->check(CLI::Range(0, 100));
  cmd->add_flag("--no-simulator", opts->noSimulator,
                "Measure every candidate (no what-if ranking or skipping)");
  cmd->add_option("--out,-o", opts->out, "Tuned configuration (JSON; not an existing file, unless --force)")
      ->required();
  cmd->add_flag("--force", opts->force, "Replace --out when it exists");
  cmd->add_flag("--json", opts->json, "Print the trials as JSON");
  cmd->callback([opts, &run] { run = [opts] { return runTune(*opts); }; });
}

}  // namespace trainscope::cli
