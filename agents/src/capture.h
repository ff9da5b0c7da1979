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

// Capture on/off, read by every hot-path call: a plain global (no instance() guard, no indirection).
inline constinit std::atomic<bool> g_captureActive{false};
// Capture on *and* TSC clock: the one flag the hot path reads (kept by Capture::setActive).
inline constinit std::atomic<bool> g_captureFast{false};

class Capture {
 public:
  static Capture& instance();

  // Sizes for rings registered from now on; ringBudgetBytes bounds all rings together.
  void configure(size_t ringRecords, size_t ringBudgetBytes);
  void setActive(bool on) {
    g_captureActive.store(on, std::memory_order_release);
    g_captureFast.store(on && g_clockTsc.load(std::memory_order_relaxed), std::memory_order_release);
  }
  bool active() const { return g_captureActive.load(std::memory_order_relaxed); }

  // Drops without a ring to count them in (over budget, thread exiting, drain-side limits).
  void countDrop() { dropped_.fetch_add(1, std::memory_order_relaxed); }
  void countDrops(uint64_t n) { dropped_.fetch_add(n, std::memory_order_relaxed); }
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
  std::atomic<uint64_t> dropped_{0};
  mutable std::mutex mu_;
  std::vector<ThreadRing*> rings_;
  std::atomic<uint64_t> version_{0};
  size_t ringRecords_ = 32768;
  size_t budgetBytes_ = 48u << 20;
  size_t usedBytes_ = 0;
  uint32_t nextIndex_ = 0;
};

// The calling thread's ring (nullptr until registered). Constant-initialized pointer with the
// initial-exec TLS model: one %fs-relative load, no TLS wrapper call, no __tls_get_addr. (The
// agent's whole TLS block is a few dozen bytes, well within what glibc reserves for a library
// with static TLS that is dlopen'ed rather than preloaded.)
inline constinit thread_local ThreadRing* t_ring __attribute__((tls_model("initial-exec"))) = nullptr;

// Slow path of the first record of a thread: registers its ring; counts the drop and returns
// nullptr when there is none (over budget, thread exiting, registration refused).
ThreadRing* registerOrCountDrop();

inline ThreadRing* currentRing() {
  ThreadRing* r = t_ring;
  if (__builtin_expect(r == nullptr, 0)) r = Capture::instance().registerCurrentThread();
  return r;
}

// Record::clock values.
inline constexpr uint16_t kRecordClockNs = 0;   // ts is the agent clock (ns)
inline constexpr uint16_t kRecordClockTsc = 1;  // ts is a raw TSC reading; the drain converts it

// Everything pushRecord does not do inline: a thread's first record (registration) and the
// clock_gettime clock. Out of line so that the TSC path is a leaf (no frame, no spills).
void pushRecordSlow(RecordType type, uint8_t sub, uint32_t name, uint64_t a, uint64_t b);

// Wakes the drain thread before its timer: a ring is half full (out of line, rare).
void nudgeDrain();
// The drain thread's wake-up word (futex): bumped by nudgeDrain().
inline constinit std::atomic<uint32_t> g_drainNudges{0};

inline void storeRecord(ThreadRing* r, int64_t ts, uint16_t clock, RecordType type, uint8_t sub, uint32_t name,
                        uint64_t a, uint64_t b) {
  Record rec;
  rec.ts = ts;
  rec.clock = clock;
  rec.type = type;
  rec.sub = sub;
  rec.name = name;
  rec.a = a;
  rec.b = b;
  const SpscRing::PushResult pushed = r->ring.push(rec);
  if (__builtin_expect(pushed != SpscRing::kPushStored, 0)) {
    if (pushed == SpscRing::kPushFull)
      r->countDrop();
    else
      nudgeDrain();
  }
}

// The hot path, inlined into every C API entry: one relaxed load (capture on with the TSC
// clock?), one TLS load, one predictable branch, rdtsc, a 32-byte store and a release store of
// the ring head (plain stores on x86). TRAINSCOPE_CLOCK=monotonic takes pushRecordSlow every time.
[[gnu::always_inline]] inline void pushRecord(RecordType type, uint8_t sub, uint32_t name, uint64_t a, uint64_t b) {
  const bool fast = g_captureFast.load(std::memory_order_relaxed);
  ThreadRing* r = t_ring;
  if (__builtin_expect(!fast || r == nullptr, 0)) {
    if (g_captureActive.load(std::memory_order_relaxed)) pushRecordSlow(type, sub, name, a, b);
    return;
  }
  storeRecord(r, static_cast<int64_t>(readTsc()), kRecordClockTsc, type, sub, name, a, b);
}

}  // namespace trainscope::agent
