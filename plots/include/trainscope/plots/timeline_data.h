// TimelineData: a TraceStore and the TimelineModel over it, shared by the thread that fills
// them (file loader, live ingest: the owner) and the threads that read them (docs/ARCHITECTURE.md,
// "Who owns what"). The owner holds the mutex exclusively for one short round, and only when it
// is free at once (it never waits for a reader); it flushes before it releases, so readers only
// read (`const`). The widget holds the shared lock only while it records a frame's drawing into a
// display list, never while the raster engine paints; work off the GUI thread (analysis, what-if,
// export, compare) reads a snapshot().
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <chrono>
#include <thread>

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
  // True while a live engine may write into the store (set before it starts, cleared after it
  // stopped); false for a file, which nobody changes once loaded.
  std::atomic<bool> live{false};
  // The live engine has a round waiting for the lock (LiveSession::StoreTarget::ownerWaiting).
  std::atomic<bool> ownerWaiting{false};
  // For readers that work in slices: after releasing the lock, give a waiting owner its round
  // (at most maxMs) before taking the lock again.
  void yieldToOwner(int maxMs = 50) const {
    for (int i = 0; i < maxMs && ownerWaiting.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  // A const store that nobody changes while the holder reads it, for work off the GUI thread.
  // Live: a copy of the events that end in the last recentSeconds (0: all), taken under the
  // shared lock (held for the copy only; the engine publishes at its next round). Not live: the
  // store itself, with the shared lock held for as long as the snapshot lives (no writer waits
  // for it: an owner only ever tries the lock).
  struct Snapshot {
    std::shared_ptr<const core::TraceStore> copy;
    std::shared_lock<std::shared_mutex> lock;
    const core::TraceStore* store = nullptr;
    const core::TraceStore& operator*() const { return *store; }
    const core::TraceStore* operator->() const { return store; }
  };
  Snapshot snapshot(double recentSeconds = 0) const {
    Snapshot s;
    yieldToOwner();
    s.lock = std::shared_lock(mutex);
    if (live.load()) {
      const int64_t since = recentSeconds > 0 && store.eventCount() > 0
                                ? store.timeSpan().second - static_cast<int64_t>(recentSeconds * 1e9)
                                : INT64_MIN;
      s.copy = std::make_shared<const core::TraceStore>(store.copyRecent(since));
      s.lock.unlock();
      s.store = s.copy.get();
    } else {
      s.store = &store;
    }
    return s;
  }
};

}  // namespace trainscope::plots
