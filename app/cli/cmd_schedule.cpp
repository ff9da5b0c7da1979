// `trainscope-cli schedule --schedule NAME --stages P --microbatches M [--virtual V]
// [--segments K] [--json]`: a pipeline schedule's per-stage op order, simulated with given op
// durations, and its bubble fraction against the papers' formula (docs/SCHEDULES.md).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "trainscope/core/sched/schedule.h"
#include "trainscope/core/sched/schedule_sim.h"

namespace trainscope::cli {
namespace {

struct ScheduleOptions {
  std::string schedule = "1f1b";
  core::ScheduleParams params{core::ScheduleKind::OneFOneB, 4, 8, 1, 1};
  core::OpDurations durations;
  bool comm = false;
  bool json = false;
};

constexpr size_t kMaxChartCells = 160;

// The shortest compute op: one chart cell.
double chartUnit(const core::Schedule& s, const core::OpDurations& d) {
  const double pieces = static_cast<double>(s.params.virtualStages) * s.params.segments;
  const double b = s.splitBackward ? d.backward : d.backward + d.weight;
  double unit = 0;
  for (double x : {d.forward, b, s.splitBackward ? d.weight : 0.0})
    if (x > 0) unit = unit > 0 ? std::min(unit, x / pieces) : x / pieces;
  return unit;
}

nlohmann::json toJson(const ScheduleOptions& o, const core::Schedule& s, const core::ScheduleSimulation& sim,
                      const core::Result<double>& theory) {
  const core::OpDurations& d = o.durations;
  nlohmann::json j = {{"schedule", o.schedule},
                      {"stages", s.params.stages},
                      {"microbatches", s.params.microBatches},
                      {"virtual_stages", s.params.virtualStages},
                      {"segments", s.params.segments},
                      {"split_backward", s.splitBackward},
                      {"durations",
                       {{"forward", d.forward},
                        {"backward", d.backward},
                        {"weight", d.weight},
                        {"send_latency", d.sendLatency}}},
                      {"makespan", sim.makespan},
                      {"bubble_fraction", sim.bubbleFraction},
                      {"bubble_fraction_theory", theory ? nlohmann::json(theory.value()) : nlohmann::json()},
                      {"per_stage", nlohmann::json::array()}};
  for (size_t st = 0; st < s.stages.size(); ++st) {
    const core::StageSimulation& ss = sim.stages[st];
    nlohmann::json ops = nlohmann::json::array(), idle = nlohmann::json::array();
    for (size_t i = 0; i < s.stages[st].size(); ++i) {
      const core::PipeOp& op = s.stages[st][i];
      if (!o.comm && !op.isCompute()) continue;
      ops.push_back({{"op", core::opLabel(op)}, {"start", ss.opTimes[i].start}, {"end", ss.opTimes[i].end}});
    }
    for (const core::TimeInterval& t : ss.idle) idle.push_back({t.start, t.end});
    j["per_stage"].push_back({{"stage", st},
                              {"bubble_fraction", ss.bubbleFraction},
                              {"busy_time", ss.busyTime},
                              {"peak_in_flight", ss.peakInFlight},
                              {"ops", ops},
                              {"idle", idle}});
  }
  return j;
}

void printText(const ScheduleOptions& o, const core::Schedule& s, const core::ScheduleSimulation& sim,
               const core::Result<double>& theory) {
  const core::ScheduleParams& sp = s.params;
  const core::OpDurations& d = o.durations;
  std::printf("schedule %s  p=%d m=%d v=%d k=%d\n", o.schedule.c_str(), sp.stages, sp.microBatches,
              sp.virtualStages, sp.segments);
  std::printf("durations per micro-batch and stage: F=%g B=%g W=%g%s, send latency %g\n", d.forward,
              d.backward, d.weight, s.splitBackward ? "" : " (B runs W with it)", d.sendLatency);
  for (size_t st = 0; st < s.stages.size(); ++st)
    std::printf("stage %zu: %s\n", st, core::formatStageOps(s.stages[st], o.comm).c_str());
  const double unit = chartUnit(s, d);
  if (unit > 0 && sim.makespan / unit <= kMaxChartCells) {
    size_t width = 2;
    for (const auto& ops : s.stages)
      for (const core::PipeOp& op : ops)
        width = std::max(width, op.isCompute() ? core::opLabel(op).size() : 0);
    std::printf("\ntimeline (one cell = %g):\n%s\n", unit,
                core::renderTimeline(s, sim, unit, static_cast<int>(width)).c_str());
  }
  std::printf("makespan %g\n", sim.makespan);
  for (size_t st = 0; st < sim.stages.size(); ++st)
    std::printf("stage %zu: bubble %.4f  peak in-flight %d\n", st, sim.stages[st].bubbleFraction,
                sim.stages[st].peakInFlight);
  if (theory)
    std::printf("bubble fraction: simulated %.4f  theory %.4f\n", sim.bubbleFraction, theory.value());
  else
    std::printf("bubble fraction: simulated %.4f  theory n/a (%s)\n", sim.bubbleFraction,
                theory.status().message().c_str());
}

// Bad parameters are a usage error (exit 2), with core's message.
int usage(const core::Status& status) {
  fail(status);
  return kExitUsage;
}

int runSchedule(ScheduleOptions o) {
  auto kind = core::parseSchedule(o.schedule);
  if (!kind) return usage(kind.status());
  o.params.kind = kind.value();
  // zbv always has two chunks per stage (its V); --virtual may be left out
  if (o.params.kind == core::ScheduleKind::Zbv && o.params.virtualStages == 1) o.params.virtualStages = 2;
  auto schedule = core::generateSchedule(o.params);
  if (!schedule) return usage(schedule.status());
  auto sim = core::simulateSchedule(schedule.value(), o.durations);
  if (!sim) return usage(sim.status());  // generated schedules never deadlock: bad durations
  const core::Result<double> theory = core::theoreticalBubbleFraction(o.params, o.durations);
  if (o.json)
    std::cout << toJson(o, schedule.value(), sim.value(), theory).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  else
    printText(o, schedule.value(), sim.value(), theory);
  return kExitOk;
}

}  // namespace

void addScheduleCommand(CLI::App& app, Runner& run) {
  auto o = std::make_shared<ScheduleOptions>();
  CLI::App* cmd = app.add_subcommand(
      "schedule",
      "Preview a pipeline schedule: per-stage op order, simulated timeline, bubble fraction vs theory");
  cmd->add_option("--schedule,-s", o->schedule, "gpipe, 1f1b, interleaved-1f1b, zb-h1, seq1f1b, interleaved-zb or zbv (PyTorch's; zbv has v = 2)")
      ->capture_default_str();
  cmd->add_option("--stages,-p", o->params.stages, "Pipeline stages")->capture_default_str();
  cmd->add_option("--microbatches,-m", o->params.microBatches, "Micro-batches per step")
      ->capture_default_str();
  cmd->add_option("--virtual,-v", o->params.virtualStages, "Model chunks per stage (interleaved-1f1b)")
      ->capture_default_str();
  cmd->add_option("--segments,-k", o->params.segments, "Sequence segments per micro-batch (seq1f1b)")
      ->capture_default_str();
  cmd->add_option("--forward", o->durations.forward, "Forward time of one micro-batch on one stage")
      ->capture_default_str();
  cmd->add_option("--backward", o->durations.backward, "Input-gradient (B) time")->capture_default_str();
  cmd->add_option("--weight", o->durations.weight, "Weight-gradient (W) time; part of B unless zb-h1")
      ->capture_default_str();
  cmd->add_option("--latency", o->durations.sendLatency, "Send latency between stages")
      ->capture_default_str();
  cmd->add_flag("--comm", o->comm, "List sends and receives too");
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o, &run] { run = [o] { return runSchedule(*o); }; });
}

}  // namespace trainscope::cli
