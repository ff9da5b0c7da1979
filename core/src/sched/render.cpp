// renderTimeline (schedule_sim.h): the simulated step as a text chart.
#include <algorithm>
#include <cmath>
#include <string>

#include "trainscope/core/sched/schedule_sim.h"

namespace trainscope::core {

std::string renderTimeline(const Schedule& schedule, const ScheduleSimulation& sim, double unit,
                           int cellWidth) {
  if (!(unit > 0) || cellWidth < 1) return {};
  const auto cells = static_cast<size_t>(std::llround(sim.makespan / unit));
  const auto width = static_cast<size_t>(cellWidth);
  const std::string label = "stage " + std::to_string(schedule.stages.size() - 1);
  std::string out;
  for (size_t s = 0; s < schedule.stages.size() && s < sim.stages.size(); ++s) {
    std::string row(cells * width, '.');
    const auto& ops = schedule.stages[s];
    for (size_t i = 0; i < ops.size(); ++i) {
      if (!ops[i].isCompute()) continue;
      const TimeInterval& t = sim.stages[s].opTimes[i];
      const auto a = static_cast<size_t>(std::llround(t.start / unit)) * width;
      const auto b = std::min(row.size(), static_cast<size_t>(std::llround(t.end / unit)) * width);
      if (b <= a) continue;
      std::string text = opLabel(ops[i]).substr(0, std::min(width, b - a));
      text.resize(std::min(width, b - a), ' ');  // the label fills its first cell,
      text.resize(b - a, '-');                   // '-' the op's further cells
      row.replace(a, b - a, text);
    }
    std::string name = "stage " + std::to_string(s);
    name.resize(label.size(), ' ');
    out += name + " |" + row + "|\n";
  }
  return out;
}

}  // namespace trainscope::core
