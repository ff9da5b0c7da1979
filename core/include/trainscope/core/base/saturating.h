#pragma once
// Saturating int64 arithmetic for timestamps and durations that come from files or peers we do
// not control: an event may run from INT64_MIN to INT64_MAX, and end - start or t - maxDuration
// must then clamp instead of overflowing (undefined behaviour, and wrong answers in range
// queries: found by fuzz_chrome_import and by UBSan in the ASan suite run).
#include <cstdint>
#include <limits>

namespace trainscope::core {

inline int64_t saturatingSub(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r))
    return b > 0 ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
  return r;
}

inline int64_t saturatingAdd(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r))
    return b > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
  return r;
}

}  // namespace trainscope::core
