// Events from sources that are not the C API -- CUPTI activity records, the NCCL profiler
// plugin -- arrive complete (start and end known) on threads the job or a library owns. They
// queue here (bounded; a full queue drops and counts) and the drain thread turns them into wire
// events on their own tracks, next to what the rings deliver. The C API's hot path is untouched.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "trainscope/profiler/event_sink.h"

namespace trainscope::agent {

class ExternalQueue final : public profiler::EventSink {
 public:
  static ExternalQueue& instance();

  uint32_t intern(std::string_view s) override;
  bool push(const profiler::ExternalEvent& e) noexcept override;  // false while capture is off
  void countDropped(uint64_t n) noexcept override;
  int64_t nowNs() noexcept override;
  void log(const char* line) noexcept override;

  // Drain thread: swaps the queued events into out (cleared first).
  void take(std::vector<profiler::ExternalEvent>& out);
  // The GPU of the first kernel pushed since the agent started (its Device attribute), -1
  // before one: the rank's device in JobInfo (the ranks table, `info`, the GUI).
  int32_t device() const { return device_.load(std::memory_order_relaxed); }
  void resetDevice() { device_.store(-1, std::memory_order_relaxed); }
  size_t capacity() const { return cap_; }

 private:
  ExternalQueue() = default;
  std::mutex mu_;
  std::vector<profiler::ExternalEvent> pending_;
  std::atomic<int32_t> device_{-1};
  size_t cap_ = 65536;  // ~13 MB of 200-byte events at most between two drain passes
};

}  // namespace trainscope::agent
