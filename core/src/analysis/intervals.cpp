#include "trainscope/core/analysis/intervals.h"

#include <algorithm>

namespace trainscope::core {

IntervalList unionOf(std::vector<Interval> v) {
  std::erase_if(v, [](const Interval& i) { return i.end <= i.start; });
  std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.start < b.start; });
  IntervalList out;
  out.reserve(v.size());
  for (const Interval& i : v) {
    if (!out.empty() && i.start <= out.back().end)
      out.back().end = std::max(out.back().end, i.end);
    else
      out.push_back(i);
  }
  return out;
}

IntervalList unionOf(const IntervalList& a, const IntervalList& b) {
  std::vector<Interval> all;
  all.reserve(a.size() + b.size());
  std::merge(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(all),
             [](const Interval& x, const Interval& y) { return x.start < y.start; });
  IntervalList out;
  out.reserve(all.size());
  for (const Interval& i : all) {
    if (!out.empty() && i.start <= out.back().end)
      out.back().end = std::max(out.back().end, i.end);
    else
      out.push_back(i);
  }
  return out;
}

IntervalList intersect(const IntervalList& a, const IntervalList& b) {
  IntervalList out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t s = std::max(a[i].start, b[j].start);
    const int64_t e = std::min(a[i].end, b[j].end);
    if (s < e) out.push_back({s, e});
    if (a[i].end < b[j].end)
      ++i;
    else
      ++j;
  }
  return out;
}

IntervalList subtract(const IntervalList& a, const IntervalList& b) {
  IntervalList out;
  size_t j = 0;
  for (const Interval& x : a) {
    int64_t cur = x.start;
    while (j < b.size() && b[j].end <= cur) ++j;
    size_t k = j;
    while (k < b.size() && b[k].start < x.end) {
      if (b[k].start > cur) out.push_back({cur, b[k].start});
      cur = std::max(cur, b[k].end);
      if (b[k].end >= x.end) break;
      ++k;
    }
    if (cur < x.end) out.push_back({cur, x.end});
  }
  return out;
}

IntervalList clip(const IntervalList& a, Interval w) {
  return intersect(a, IntervalList{w});
}

IntervalList complementIn(const IntervalList& a, Interval w) {
  if (w.end <= w.start) return {};
  return subtract(IntervalList{w}, a);
}

int64_t totalLength(const IntervalList& a) {
  int64_t n = 0;
  for (const Interval& i : a) n += i.length();
  return n;
}

}  // namespace trainscope::core
