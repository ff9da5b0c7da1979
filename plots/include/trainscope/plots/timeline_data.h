// TimelineData: a TraceStore and the TimelineModel over it, shared by the thread that fills
// them (file loader, live ingest) and the GUI thread that draws them. Writers hold the mutex
// exclusively for short slices (one ingest round); the widget only ever *tries* the shared lock
// while painting and shows its last frame when it cannot have it, so the GUI never waits.
#pragma once

#include <atomic>
#include <cstdint>
#include <shared_mutex>

#include "trainscope/core/model/trace_store.h"
#include "trainscope/plots/timeline_model.h"

namespace trainscope::plots {

struct TimelineData {
  TimelineData() : model(store) {}
  TimelineData(const TimelineData&) = delete;
  TimelineData& operator=(const TimelineData&) = delete;

  mutable std::shared_mutex mutex;
  core::TraceStore store;  // guarded by mutex
  TimelineModel model;     // guarded by mutex; refers to store
  // Bumped (after unlocking) whenever the content changed; rows added bump layoutGeneration.
  std::atomic<uint64_t> generation{0};
  std::atomic<uint64_t> layoutGeneration{0};
  // Live retention (docs/RELIABILITY.md, "Live memory"): bumped after older events left the store
  // (event indices held outside the lock are void then), with what left and the cutoff, for
  // the status bar and the ruler.
  std::atomic<uint64_t> evictionGeneration{0};
  std::atomic<uint64_t> evictedEvents{0};
  std::atomic<int64_t> evictedBeforeNs{INT64_MIN};
};

}  // namespace trainscope::plots
