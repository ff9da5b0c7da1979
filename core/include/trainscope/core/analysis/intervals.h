// Interval arithmetic for analysis: sorted, disjoint, non-empty half-open [start, end) lists.
// Every metric is a length of unions, intersections and differences of such lists (so two
// overlapping communication streams count once).
#pragma once

#include <cstdint>
#include <vector>

namespace trainscope::core {

struct Interval {
  int64_t start = 0;
  int64_t end = 0;  // one past
  int64_t length() const { return end > start ? end - start : 0; }
  bool operator==(const Interval&) const = default;
};

// Sorted by start, pairwise disjoint and not touching, no empty interval.
using IntervalList = std::vector<Interval>;

// Sorts and merges (touching intervals merge); drops empty ones. Takes any intervals.
IntervalList unionOf(std::vector<Interval> intervals);
IntervalList unionOf(const IntervalList& a, const IntervalList& b);
IntervalList intersect(const IntervalList& a, const IntervalList& b);
// a \ b
IntervalList subtract(const IntervalList& a, const IntervalList& b);
// a ∩ [w.start, w.end)
IntervalList clip(const IntervalList& a, Interval w);
// [w.start, w.end) \ a
IntervalList complementIn(const IntervalList& a, Interval w);
int64_t totalLength(const IntervalList& a);

}  // namespace trainscope::core
