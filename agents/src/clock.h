// The agent clock: CLOCK_MONOTONIC in ns (clock_gettime goes through the vDSO, ~20 ns) plus a
// constant shift from TRAINSCOPE_CLOCK_SHIFT_NS, a test hook that simulates a skewed host clock
// so client-side clock alignment can be tested on one machine.
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>

namespace trainscope::agent {

inline std::atomic<int64_t> g_clockShiftNs{0};

inline int64_t nowNs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000LL + t.tv_nsec +
         g_clockShiftNs.load(std::memory_order_relaxed);
}

}  // namespace trainscope::agent
