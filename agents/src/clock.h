// The agent clock: CLOCK_MONOTONIC in ns plus a constant shift from TRAINSCOPE_CLOCK_SHIFT_NS, a
// test hook that simulates a skewed host clock so client-side clock alignment can be tested on
// one machine. Everything the agent sends (events, Pong, Welcome, KnobChange) is on this clock.
//
// The capture hot path does not read it directly when the TSC is invariant: records carry the
// raw TSC (one rdtsc, ~10 ns, instead of clock_gettime's ~24 ns through the vDSO) and the drain
// thread converts them with TscCalibration: (tsc, monotonic ns) pairs sampled when capture
// starts and then periodically, piecewise-linear between pairs and extrapolated past the newest
// one. TRAINSCOPE_CLOCK=monotonic, or a TSC that is not invariant, keeps clock_gettime on the
// hot path (selected once at start; records say which clock they carry).
#pragma once

#include <time.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define TRAINSCOPE_HAVE_TSC 1
#else
#define TRAINSCOPE_HAVE_TSC 0
#endif

namespace trainscope::agent {

__extension__ typedef __int128 Int128;  // GCC/Clang extension (the TSC path is x86-64 only anyway)
__extension__ typedef unsigned __int128 UInt128;

inline constinit std::atomic<int64_t> g_clockShiftNs{0};
// True when the hot path records raw TSC (set once at start, before capture is activated).
inline constinit std::atomic<bool> g_clockTsc{false};

inline int64_t monotonicNs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000LL + t.tv_nsec;
}

// Test hook beside the shift: TRAINSCOPE_CLOCK_DRIFT_PPB makes the agent clock run fast (or
// slow) by that many ns per second from g_clockDriftT0 on, like an undisciplined host clock, so
// that client-side re-synchronization during long recordings can be tested on one machine.
inline constinit std::atomic<int64_t> g_clockDriftPpb{0};
inline constinit std::atomic<int64_t> g_clockDriftT0{0};

// The agent clock for a CLOCK_MONOTONIC reading: monotonic + shift (+ drift, when testing).
inline int64_t agentClockFromMonotonic(int64_t mono) {
  int64_t ns = mono + g_clockShiftNs.load(std::memory_order_relaxed);
  if (const int64_t ppb = g_clockDriftPpb.load(std::memory_order_relaxed); ppb != 0)
    ns += static_cast<int64_t>(static_cast<Int128>(mono - g_clockDriftT0.load(std::memory_order_relaxed)) * ppb /
                               1'000'000'000);
  return ns;
}

// The agent clock. Used outside the hot path and for monotonic-mode records.
inline int64_t nowNs() { return agentClockFromMonotonic(monotonicNs()); }

inline uint64_t readTsc() {
#if TRAINSCOPE_HAVE_TSC
  return __rdtsc();
#else
  return 0;
#endif
}

// Whether the TSC runs at a constant rate through P-/C-states (CPUID 0x80000007 EDX bit 8, or
// the kernel's constant_tsc + nonstop_tsc flags, which hypervisors often set without the bit).
bool tscIsInvariant();

// Converts raw TSC readings to CLOCK_MONOTONIC ns. Owned and used by one thread (the drain) or
// under its lock. Keeps the last kMaxPoints calibration pairs: a reading between two pairs is
// interpolated on that segment, one after the newest pair is extrapolated with the newest
// segment's slope, one before the oldest with the oldest slope. Slopes are fixed point with 48
// fractional bits and a 64x64->128 multiply: no precision loss over hours of extrapolation.
class TscCalibration {
 public:
  struct Point {
    uint64_t tsc = 0;
    int64_t ns = 0;  // CLOCK_MONOTONIC, no shift
  };
  // The tightest of a few rdtsc / clock_gettime / rdtsc brackets (tsc = the bracket's middle).
  static Point sample();

  void reset() { n_ = 0; }
  // Appends a pair (ignored unless both clocks moved forward). The first two make it ready.
  void add(Point p);
  bool ready() const { return n_ >= 2; }
  size_t points() const { return n_; }
  const Point& newest() const { return pts_[n_ - 1].p; }
  // Start of the newest complete segment (the pair before the newest); requires ready().
  int64_t segmentStartNs() const { return pts_[n_ - 2].p.ns; }
  // CLOCK_MONOTONIC ns for a TSC reading; requires ready().
  int64_t toNs(uint64_t tsc) const {
    size_t i = n_ - 1;
    while (i > 0 && tsc < pts_[i].p.tsc) --i;  // almost always the newest or the one before
    const Entry& e = pts_[i];
    const Int128 dt = static_cast<Int128>(static_cast<int64_t>(tsc - e.p.tsc));
    return e.p.ns + static_cast<int64_t>((dt * e.mult + (static_cast<Int128>(1) << (kFracBits - 1))) >> kFracBits);
  }

  static constexpr size_t kMaxPoints = 16;
  static constexpr int kFracBits = 48;

 private:
  struct Entry {
    Point p;
    int64_t mult = 0;  // ns per tick << kFracBits, of the segment starting here
  };
  Entry pts_[kMaxPoints];
  size_t n_ = 0;
};

}  // namespace trainscope::agent
