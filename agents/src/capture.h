// Per-thread rings and the hot path. Each thread that records gets its own SpscRing on first
// use (the only lock: registration); records go in with one store, or are dropped and counted
// when the ring is full or the memory budget allows no ring for a new thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "clock.h"
#include "record.h"
#include "spsc_ring.h"

namespace trainscope::agent {

struct ThreadRing {
  explicit ThreadRing(size_t capacity) : ring(capacity) {}
  SpscRing ring;
  int64_t tid = 0;
  std::string threadName;
  uint32_t index = 0;           // registration order, unique for the process lifetime
  uint64_t nextRangeId = 0;     // producer-only
  std::atomic<bool> closed{false};  // the owning thread has exited
  // Written only by the owning thread (load + store, no RMW): counting a drop costs no shared
  // cache-line traffic even when every thread's ring is full.
  std::atomic<uint64_t> dropped{0};
  void countDrop() { dropped.store(dropped.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
};

class Capture {
 public:
  static Capture& instance();

  // Sizes for rings registered from now on; ringBudgetBytes bounds all rings together.
  void configure(size_t ringRecords, size_t ringBudgetBytes);
  void setActive(bool on) { active_.store(on, std::memory_order_release); }
  bool active() const { return active_.load(std::memory_order_relaxed); }

  // Drops without a ring to count them in (over budget, thread exiting, drain-side limits).
  void countDrop() { dropped_.fetch_add(1, std::memory_order_relaxed); }
  // All drops so far: the shared counter plus every ring's own (takes the registration lock).
  uint64_t dropped() const;

  // Slow path: the calling thread's ring, registering it; nullptr when over budget or exiting.
  ThreadRing* registerCurrentThread();

  // Drain side: the current ring list (copied under the registration lock when it changed).
  bool snapshot(std::vector<ThreadRing*>& out, uint64_t& version);
  // Drain side: frees a ring whose thread exited and that is empty.
  void release(ThreadRing* r);
  uint64_t bytesUsed() const;
  uint64_t bytesCap() const;

 private:
  Capture() = default;
  std::atomic<bool> active_{false};
  std::atomic<uint64_t> dropped_{0};
  mutable std::mutex mu_;
  std::vector<ThreadRing*> rings_;
  std::atomic<uint64_t> version_{0};
  size_t ringRecords_ = 32768;
  size_t budgetBytes_ = 48u << 20;
  size_t usedBytes_ = 0;
  uint32_t nextIndex_ = 0;
};

// The calling thread's ring (nullptr until registered). Trivial type: cheap TLS access.
extern thread_local ThreadRing* t_ring;

inline ThreadRing* currentRing() {
  ThreadRing* r = t_ring;
  if (__builtin_expect(r == nullptr, 0)) r = Capture::instance().registerCurrentThread();
  return r;
}

// The hot path: one relaxed load, one TLS load, a clock read, a 32-byte store.
inline void pushRecord(RecordType type, uint8_t sub, uint32_t name, uint64_t a, uint64_t b) {
  Capture& c = Capture::instance();
  if (!c.active()) return;
  ThreadRing* r = currentRing();
  if (__builtin_expect(r == nullptr, 0)) {
    c.countDrop();
    return;
  }
  Record rec;
  rec.ts = nowNs();
  rec.type = type;
  rec.sub = sub;
  rec.name = name;
  rec.a = a;
  rec.b = b;
  if (!r->ring.push(rec)) r->countDrop();
}

}  // namespace trainscope::agent
