#include "pp_knobs.h"

#include <iterator>
#include <string>
#include <vector>

namespace trainscope::train {
namespace {

const char* const* scheduleNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (core::ScheduleKind k : core::kAllSchedules) v.emplace_back(core::scheduleName(k));
    return v;
  }();
  static const std::vector<const char*> ptrs = [] {
    std::vector<const char*> v;
    for (const std::string& n : names) v.push_back(n.c_str());
    return v;
  }();
  return ptrs.data();
}

}  // namespace

core::ScheduleParams PpKnobs::read(const Options& o, int stages) const {
  core::ScheduleParams p;
  p.stages = stages;
  p.kind = schedule ? static_cast<core::ScheduleKind>(ts_knob_get_enum(schedule)) : core::parseSchedule(o.schedule).value();
  p.microBatches = microbatches ? static_cast<int>(ts_knob_get_int(microbatches)) : o.microbatches;
  p.virtualStages = virtualStages ? static_cast<int>(ts_knob_get_int(virtualStages)) : o.virtualStages;
  p.segments = p.kind == core::ScheduleKind::Seq1F1B ? o.segments : 1;
  if (p.kind != core::ScheduleKind::Interleaved1F1B) p.virtualStages = 1;  // v only means chunks there
  return p;
}

PpKnobs::Values PpKnobs::values() const {
  Values v;
  if (schedule) v.schedule = ts_knob_get_enum(schedule);
  if (microbatches) v.microbatches = ts_knob_get_int(microbatches);
  if (virtualStages) v.virtualStages = ts_knob_get_int(virtualStages);
  return v;
}

void PpKnobs::restore(const Values& v) const {
  const Values now = values();
  if (schedule && now.schedule != v.schedule)
    ts_knob_restore(schedule, std::string(core::scheduleName(core::kAllSchedules[v.schedule])).c_str());
  if (microbatches && now.microbatches != v.microbatches)
    ts_knob_restore(microbatches, std::to_string(v.microbatches).c_str());
  if (virtualStages && now.virtualStages != v.virtualStages)
    ts_knob_restore(virtualStages, std::to_string(v.virtualStages).c_str());
}

PpKnobs registerPpKnobs(const Options& o) {
  PpKnobs k;
  const int n = static_cast<int>(std::size(core::kAllSchedules));
  k.schedule = ts_knob_enum("pp.schedule", scheduleNames(), n, static_cast<int>(core::parseSchedule(o.schedule).value()),
                            "pipeline schedule (all ranks switch at the same step boundary)", 0);
  k.microbatches = ts_knob_int("pp.microbatches", 1, 1024, o.microbatches,
                               "micro-batches per step (must divide the replica's batch)", 0);
  k.virtualStages = ts_knob_int("pp.virtual_stages", 1, 64, o.virtualStages,
                                "model chunks per stage (interleaved-1f1b; layers % (stages x v) == 0)", 0);
  return k;
}

}  // namespace trainscope::train
