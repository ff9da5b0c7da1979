// Seq1F1B's FLOPs-balanced sequence partition (partition.h).
#include <string>

#include "trainscope/core/sched/partition.h"

namespace trainscope::core {
namespace {

// The end of the longest segment starting at `start`, ending at or before `maxEnd`, whose FLOPs
// stay within `budget`; `start` when even one token is too much. FLOPs grow with the end.
int64_t farthestEnd(int64_t start, int64_t maxEnd, double budget, const SequenceFlopsModel& m) {
  int64_t lo = start, hi = maxEnd;  // lo fits (trivially: empty), find the last end that fits
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (segmentFlops(start, mid - start, m) <= budget)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// Greedy: each segment as long as the budget allows while leaving a token for every later one.
// Optimal for a min-max split because a segment's FLOPs fall as its start moves right.
bool split(int64_t n, int k, double budget, const SequenceFlopsModel& m, std::vector<int64_t>* out) {
  out->clear();
  int64_t start = 0;
  for (int i = 0; i < k; ++i) {
    const int64_t maxEnd = i == k - 1 ? n : n - (k - 1 - i);
    const int64_t end = farthestEnd(start, maxEnd, budget, m);
    if (end == start || (i == k - 1 && end != n)) return false;
    out->push_back(end - start);
    start = end;
  }
  return true;
}

}  // namespace

double segmentFlops(int64_t offset, int64_t length, const SequenceFlopsModel& m) {
  const double n = static_cast<double>(length);
  return 2 * n * m.parameters + 2.0 * m.layers * n * static_cast<double>(offset + length) * m.modelDim;
}

Result<std::vector<int64_t>> partitionSequence(int64_t length, int segments, const SequenceFlopsModel& m) {
  auto invalid = [](std::string s) { return Status{ErrorCode::InvalidArgument, std::move(s)}; };
  if (length < 1) return invalid("sequence length must be >= 1, got " + std::to_string(length));
  if (segments < 1) return invalid("segments must be >= 1, got " + std::to_string(segments));
  if (segments > length)
    return invalid("cannot split " + std::to_string(length) + " tokens into " + std::to_string(segments) +
                   " non-empty segments");
  if (!(m.parameters >= 0) || m.layers < 0 || m.modelDim < 0)
    return invalid("FLOPs model needs parameters, layers and model width >= 0");
  // Binary search on the largest segment's FLOPs: feasibility is monotone in the budget.
  double lo = 0, hi = segmentFlops(0, length, m);
  std::vector<int64_t> best, trial;
  if (!split(length, segments, hi, m, &best))
    return invalid("internal: no split within the whole sequence's FLOPs");
  for (int it = 0; it < 200 && hi > lo; ++it) {
    const double mid = lo + (hi - lo) / 2;
    if (mid <= lo || mid >= hi) break;
    if (split(length, segments, mid, m, &trial)) {
      hi = mid;
      best = trial;
    } else {
      lo = mid;
    }
  }
  return best;
}

}  // namespace trainscope::core
