#include "trainscope/plots/timeline_model.h"

#include "trainscope/core/base/saturating.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <tuple>
#include <unordered_set>

namespace trainscope::plots {

using core::EventKind;
using core::TrackEvents;

namespace {

// First k in [lo, hi) with !pred(k), for pred true on a prefix. Gallops from lo first: the
// answer is usually close, and a full binary search would touch cold cache lines.
template <typename Pred>
size_t gallop(size_t lo, size_t hi, Pred pred) {
  size_t step = 1, a = lo, b = lo;
  while (b < hi && pred(b)) {
    a = b + 1;
    b = lo + step;
    step *= 2;
  }
  b = std::min(b, hi);
  while (a < b) {
    const size_t mid = a + (b - a) / 2;
    if (pred(mid))
      a = mid + 1;
    else
      b = mid;
  }
  return a;
}

// First position k in [from, last) of row with start >= limit (starts are non-decreasing).
// Walks the coarse index when the answer lies beyond from's block, then searches one block.
size_t firstStartAtLeast(const TimelineRow& row, const TrackEvents& ev, size_t from, size_t last,
                         int64_t limit) {
  constexpr size_t B = TimelineRow::kCoarseStride;
  const uint32_t* idx = row.events.data();
  auto before = [&](size_t j) { return ev.start(idx[j]) < limit; };
  size_t lo = from, hi = last;
  const size_t nextBlock = from / B + 1;
  const size_t blocks = row.coarse.size();
  if (nextBlock < blocks && nextBlock * B < last) {
    if (row.coarse[nextBlock] >= limit) {
      hi = std::min(last, nextBlock * B);
    } else {
      const int64_t* c = row.coarse.data();
      const size_t j =
          gallop(nextBlock, blocks, [&](size_t b) { return c[b] < limit; });  // first block at/after limit
      lo = std::max(from, (j - 1) * B);
      hi = std::min(last, j * B);
    }
  }
  if (lo >= hi) return hi;
  return gallop(lo, hi, before);
}

void pushEvent(TimelineRow& row, const TrackEvents& ev, size_t i) {
  if (row.events.size() % TimelineRow::kCoarseStride == 0) {
    row.coarse.push_back(ev.start(i));
    row.coarseEnd.push_back(ev.end(i));
  } else {
    row.coarseEnd.back() = ev.end(i);
  }
  row.events.push_back(static_cast<uint32_t>(i));
}

int trackKindOrder(core::TrackKind k) {
  switch (k) {
    case core::TrackKind::CpuThread:
      return 0;
    case core::TrackKind::PipelineStage:
      return 1;
    case core::TrackKind::CudaStream:
      return 2;
    case core::TrackKind::Communicator:
      return 3;
    case core::TrackKind::Counter:
      return 4;
  }
  return 5;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

void TimelineModel::rebuild() {
  rows_.clear();
  tracks_.clear();
  steps_.clear();
  knobs_.clear();
  phases_.clear();
  events_ = 0;
  update();
}

namespace {
// v is sorted by start up to `from`; the marks appended after it may be in any order (ranks
// interleave). Sorts the new tail and merges it in, moving only the part of the sorted prefix
// the tail reaches into -- not a sort of every mark of the session each round.
void mergeNewMarks(std::vector<TimelineMark>& v, size_t from) {
  if (from >= v.size()) return;
  auto byStart = [](const TimelineMark& a, const TimelineMark& b) { return a.start < b.start; };
  const auto tail = v.begin() + static_cast<std::ptrdiff_t>(from);
  std::stable_sort(tail, v.end(), byStart);
  if (from == 0 || !byStart(*tail, *(tail - 1))) return;
  const auto lo = std::upper_bound(v.begin(), tail, *tail, byStart);
  std::inplace_merge(lo, tail, v.end(), byStart);
}
}  // namespace

bool TimelineModel::update() {
  const size_t rowsBefore = rows_.size();
  const size_t stepsBefore = steps_.size(), knobsBefore = knobs_.size();
  std::map<core::RankId, size_t> phasesBefore;
  for (const auto& [rank, v] : phases_) phasesBefore[rank] = v.size();
  if (tracks_.size() < store_.trackCount()) tracks_.resize(store_.trackCount());
  bool any = false;
  for (core::TrackId t = 0; t < store_.trackCount(); ++t) {
    TrackState& ts = tracks_[t];
    const TrackEvents& raw = store_.rawEvents(t);
    const size_t n = raw.size();
    if (n == ts.seen) continue;
    any = true;
    noteMarks(t, ts.seen, n);
    int64_t minNew = std::numeric_limits<int64_t>::max();
    for (size_t i = ts.seen; i < n; ++i) minNew = std::min(minNew, raw.start(i));
    const TrackEvents& ev = store_.flushTrack(t);  // the writer sort-merges the new tail in
    const auto starts = ev.starts();
    // Everything before the first start >= minNew kept its place in the merge.
    const size_t from =
        static_cast<size_t>(std::lower_bound(starts.begin(), starts.end(), minNew) - starts.begin());
    events_ += n - ts.seen;
    ts.seen = n;
    levelTrack(t, from);
  }
  if (!any) return false;
  mergeNewMarks(steps_, stepsBefore);
  mergeNewMarks(knobs_, knobsBefore);
  for (auto& [rank, v] : phases_) mergeNewMarks(v, phasesBefore.count(rank) ? phasesBefore[rank] : 0);
  spanStart_ = std::numeric_limits<int64_t>::max();
  spanEnd_ = std::numeric_limits<int64_t>::min();
  for (core::TrackId t = 0; t < store_.trackCount(); ++t) {
    const TrackEvents& ev = store_.rawEvents(t);
    if (ev.empty()) continue;
    spanStart_ = std::min(spanStart_, ev.minStart());
    spanEnd_ = std::max(spanEnd_, ev.maxEnd());
  }
  if (spanStart_ > spanEnd_) spanStart_ = spanEnd_ = 0;
  const bool added = rows_.size() != rowsBefore || order_.size() != rows_.size();
  if (added) rebuildOrder();
  return added;
}

void TimelineModel::evict(const std::vector<size_t>& dropped, int64_t cutoffNs) {
  for (core::TrackId t = 0; t < dropped.size() && t < tracks_.size(); ++t) {
    const size_t k = dropped[t];
    if (k == 0) continue;
    TrackState& ts = tracks_[t];
    const TrackEvents& ev = store_.rawEvents(t);
    for (uint32_t r : ts.rows) {
      TimelineRow& row = rows_[r];
      // Row indices ascend, so the evicted ones (< k) are a prefix of the row.
      const uint32_t* b = row.events.data();
      const size_t n = row.events.size();
      const size_t p = static_cast<size_t>(std::lower_bound(b, b + n, static_cast<uint32_t>(k)) - b);
      if (p == 0) {
        for (size_t j = 0; j < n; ++j) row.events[j] -= static_cast<uint32_t>(k);
        continue;
      }
      core::PodColumn<uint32_t> kept;
      kept.reserve(n - p);
      std::swap(kept, row.events);
      row.events.clear();
      row.coarse.clear();
      row.coarseEnd.clear();
      for (size_t j = p; j < n; ++j) pushEvent(row, ev, kept[j] - k);
      if (row.events.empty()) row.lastEnd = std::numeric_limits<int64_t>::min();
    }
    ts.seen -= std::min(ts.seen, k);
    events_ -= std::min<uint64_t>(events_, k);
  }
  auto before = [cutoffNs](const TimelineMark& m) { return m.start < cutoffNs; };
  auto dropMarks = [&](std::vector<TimelineMark>& v) {
    // Sorted by start (update() sorts them), so the marks to drop are a prefix.
    v.erase(v.begin(), std::partition_point(v.begin(), v.end(), before));
  };
  dropMarks(steps_);
  dropMarks(knobs_);
  for (auto& [rank, v] : phases_) dropMarks(v);
  spanStart_ = std::numeric_limits<int64_t>::max();
  spanEnd_ = std::numeric_limits<int64_t>::min();
  for (core::TrackId t = 0; t < store_.trackCount(); ++t) {
    const TrackEvents& e = store_.rawEvents(t);
    if (e.empty()) continue;
    spanStart_ = std::min(spanStart_, e.minStart());
    spanEnd_ = std::max(spanEnd_, e.maxEnd());
  }
  if (spanStart_ > spanEnd_) spanStart_ = spanEnd_ = 0;
}

void TimelineModel::noteMarks(core::TrackId t, size_t from, size_t to) {
  const TrackEvents& ev = store_.rawEvents(t);
  const core::RankId rank = store_.track(t).rank;
  for (size_t i = from; i < to; ++i) {
    const EventKind k = ev.kind(i);
    if (k != EventKind::Step && k != EventKind::KnobChange && k != EventKind::Phase) continue;
    TimelineMark m{ev.start(i), ev.end(i), rank, k, ev.name(i), -1, core::kEmptyString};
    if (const core::Attr* a = ev.findAttr(i, core::AttrKey::Step)) m.step = a->asInt();
    if (k == EventKind::KnobChange) {
      if (const core::Attr* a = ev.findAttr(i, core::AttrKey::Knob)) m.name = a->asString();
      if (const core::Attr* a = ev.findAttr(i, core::AttrKey::KnobValue)) m.value = a->asString();
    }
    auto& dst = k == EventKind::Step ? steps_ : k == EventKind::KnobChange ? knobs_ : phases_[rank];
    dst.push_back(m);
  }
}

void TimelineModel::levelTrack(core::TrackId t, size_t from) {
  TrackState& ts = tracks_[t];
  const TrackEvents& ev = store_.rawEvents(t);
  // Forget the positions the merge may have moved, then level them again from there.
  for (uint32_t r : ts.rows) {
    TimelineRow& row = rows_[r];
    size_t n = row.events.size();
    while (n > 0 && row.events[n - 1] >= from) --n;
    row.events.truncate(n);
    row.coarse.truncate((n + TimelineRow::kCoarseStride - 1) / TimelineRow::kCoarseStride);
    row.coarseEnd.truncate(row.coarse.size());
    if (n > 0) row.coarseEnd.back() = ev.end(row.events[n - 1]);
    row.lastEnd = n ? ev.end(row.events[n - 1]) : std::numeric_limits<int64_t>::min();
  }
  const core::TrackInfo& info = store_.track(t);
  auto newRow = [&](uint32_t level, core::StringId counter) {
    TimelineRow row;
    row.track = t;
    row.rank = info.rank;
    row.kind = info.kind;
    row.level = level;
    row.counter = counter;
    rows_.push_back(std::move(row));
    ts.rows.push_back(static_cast<uint32_t>(rows_.size() - 1));
    return static_cast<uint32_t>(rows_.size() - 1);
  };
  const size_t n = ev.size();
  if (info.kind == core::TrackKind::Counter) {
    for (size_t i = from; i < n; ++i) {
      auto [it, fresh] = ts.counterRows.try_emplace(ev.name(i), 0);
      if (fresh) it->second = newRow(static_cast<uint32_t>(ts.counterRows.size() - 1), ev.name(i));
      TimelineRow& row = rows_[it->second];
      pushEvent(row, ev, i);
      row.lastEnd = ev.end(i);
    }
    return;
  }
  for (size_t i = from; i < n; ++i) {
    const int64_t s = ev.start(i);
    uint32_t target = UINT32_MAX;
    for (uint32_t r : ts.rows) {
      if (rows_[r].lastEnd <= s) {
        target = r;
        break;
      }
    }
    if (target == UINT32_MAX) target = newRow(static_cast<uint32_t>(ts.rows.size()), core::kEmptyString);
    TimelineRow& row = rows_[target];
    pushEvent(row, ev, i);
    row.lastEnd = ev.end(i);
  }
}

void TimelineModel::rebuildOrder() {
  order_.resize(rows_.size());
  for (uint32_t i = 0; i < rows_.size(); ++i) order_[i] = i;
  auto key = [this](uint32_t i) {
    const TimelineRow& r = rows_[i];
    return std::make_tuple(r.rank, trackKindOrder(r.kind), r.track, r.level);
  };
  std::sort(order_.begin(), order_.end(), [&](uint32_t a, uint32_t b) { return key(a) < key(b); });
  position_.resize(rows_.size());
  for (uint32_t p = 0; p < order_.size(); ++p) position_[order_[p]] = p;
}

size_t TimelineModel::memoryBytes() const {
  size_t b = rows_.capacity() * sizeof(TimelineRow) + order_.capacity() * 8;
  for (const auto& r : rows_)
    b += r.events.capacity() * sizeof(uint32_t) +
         (r.coarse.capacity() + r.coarseEnd.capacity()) * sizeof(int64_t);
  b += (steps_.capacity() + knobs_.capacity()) * sizeof(TimelineMark);
  for (const auto& [rank, v] : phases_) b += v.capacity() * sizeof(TimelineMark);
  return b;
}

std::pair<size_t, size_t> TimelineModel::visibleRange(size_t r, int64_t t0, int64_t t1) const {
  const TimelineRow& row = this->row(r);
  const TrackEvents& ev = store_.rawEvents(row.track);
  const uint32_t* idx = row.events.data();
  const size_t n = row.events.size();
  // Along a row both starts and ends are non-decreasing (its events do not overlap).
  auto endBefore = [&](size_t k) { return ev.end(idx[k]) < t0; };
  auto startBefore = [&](size_t k) { return ev.start(idx[k]) < t1; };
  size_t a = 0, b = n;
  while (a < b) {
    const size_t m = a + (b - a) / 2;
    if (endBefore(m))
      a = m + 1;
    else
      b = m;
  }
  const size_t first = a;
  b = n;
  while (a < b) {
    const size_t m = a + (b - a) / 2;
    if (startBefore(m))
      a = m + 1;
    else
      b = m;
  }
  return {first, a};
}

void TimelineModel::drawItems(size_t r, int64_t t0, int64_t t1, int64_t minNs,
                              std::vector<DrawItem>& out) const {
  out.clear();
  const TimelineRow& row = this->row(r);
  const TrackEvents& ev = store_.rawEvents(row.track);
  const uint32_t* idx = row.events.data();
  auto S = [&](size_t k) { return ev.start(idx[k]); };
  auto E = [&](size_t k) { return ev.end(idx[k]); };
  auto [p, last] = visibleRange(r, t0, t1);
  minNs = std::max<int64_t>(minNs, 1);
  while (p < last) {
    const int64_t s = S(p), e = E(p);
    if (core::saturatingSub(e, s) >= minNs) {  // saturating: a span may exceed INT64_MAX
      out.push_back({s, e, static_cast<uint32_t>(p), 1});
      ++p;
      continue;
    }
    // A tiny event: fold in every following event that starts within minNs of the run's end.
    // A wide event can only be the last one a jump reaches (it would push later starts past the
    // limit); it stays out of the run and is drawn on its own.
    size_t q = p + 1;
    int64_t runEnd = e;
    constexpr size_t B = TimelineRow::kCoarseStride;
    const size_t boundaries = std::min(row.coarse.size(), (last + B - 1) / B);  // blocks starting before last
    while (q < last) {
      const int64_t limit = core::saturatingAdd(runEnd, minNs);
      // Whole blocks first, on the coarse arrays only: when the next block starts before the
      // limit, every event up to the last such block start joins the run, and none of them is
      // wide (a wide one would push all later starts past the limit).
      const size_t jb = q / B + 1;
      if (jb < boundaries && row.coarse[jb] < limit) {
        const int64_t* c = row.coarse.data();
        const size_t jj = gallop(jb, boundaries, [&](size_t b) { return c[b] < limit; });
        q = (jj - 1) * B;
        runEnd = std::max(runEnd, row.coarseEnd[jj - 2]);
        continue;
      }
      const size_t k = firstStartAtLeast(row, ev, q, last, limit);
      if (k == q) break;
      if (core::saturatingSub(E(k - 1), S(k - 1)) >= minNs) {
        if (k - 1 > q) runEnd = std::max(runEnd, E(k - 2));
        q = k - 1;
        break;
      }
      q = k;
      runEnd = std::max(runEnd, E(k - 1));
    }
    out.push_back({s, runEnd, static_cast<uint32_t>(p), static_cast<uint32_t>(q - p)});
    p = q;
  }
}

std::optional<uint32_t> TimelineModel::eventAt(size_t r, int64_t t, int64_t slackNs) const {
  const TimelineRow& row = this->row(r);
  const TrackEvents& ev = store_.rawEvents(row.track);
  const auto& idx = row.events;
  const size_t k = static_cast<size_t>(
      std::partition_point(idx.begin(), idx.end(), [&](uint32_t i) { return ev.start(i) <= t; }) -
      idx.begin());
  std::optional<uint32_t> best;
  int64_t bestDist = slackNs + 1;
  if (k > 0) {
    const int64_t d = std::max<int64_t>(0, t - ev.end(idx[k - 1]));
    if (d < bestDist) best = static_cast<uint32_t>(k - 1), bestDist = d;
  }
  if (k < idx.size()) {
    const int64_t d = ev.start(idx[k]) - t;
    if (d < bestDist) best = static_cast<uint32_t>(k), bestDist = d;
  }
  return best;
}

std::optional<size_t> TimelineModel::rowOf(EventRef ref) const {
  if (!ref.valid() || ref.track >= tracks_.size()) return std::nullopt;
  for (uint32_t r : tracks_[ref.track].rows) {
    const auto& e = rows_[r].events;
    if (std::binary_search(e.begin(), e.end(), ref.index)) return position_[r];
  }
  return std::nullopt;
}

SelectionStats TimelineModel::selectionStats(const std::vector<size_t>& rows, int64_t t0, int64_t t1) const {
  SelectionStats st;
  st.durationNs = t1 - t0;
  for (size_t r : rows) {
    const TimelineRow& row = this->row(r);
    const TrackEvents& ev = store_.rawEvents(row.track);
    auto [a, b] = visibleRange(r, t0, t1);
    for (size_t p = a; p < b; ++p) {
      const uint32_t i = row.events[p];
      const int64_t s = ev.start(i), e = ev.end(i);
      if (!(e > t0 || (e == s && s >= t0))) continue;  // TrackEvents::forEachOverlapping's rule
      const auto k = static_cast<size_t>(ev.kind(i));
      ++st.events;
      ++st.countPerKind[k];
      st.nsPerKind[k] += std::min(e, t1) - std::max(s, t0);
    }
  }
  return st;
}

std::optional<core::StringId> TimelineModel::phaseAt(core::RankId rank, int64_t t) const {
  auto it = phases_.find(rank);
  if (it == phases_.end()) return std::nullopt;
  const auto& v = it->second;
  auto k = std::partition_point(v.begin(), v.end(), [t](const TimelineMark& m) { return m.start <= t; });
  if (k == v.begin()) return std::nullopt;
  --k;
  if (k->end < t) return std::nullopt;
  return k->name;
}

std::vector<TimelineModel::Link> TimelineModel::linkedEvents(EventRef ref, int64_t windowNs) const {
  std::vector<Link> out;
  if (!ref.valid() || ref.track >= store_.trackCount()) return out;
  const TrackEvents& self = store_.rawEvents(ref.track);
  if (ref.index >= self.size()) return out;
  auto attr = [](const TrackEvents& ev, size_t i, core::AttrKey k) -> std::optional<int64_t> {
    const core::Attr* a = ev.findAttr(i, k);
    return a ? std::optional<int64_t>(a->asInt()) : std::nullopt;
  };
  const auto flow = attr(self, ref.index, core::AttrKey::FlowId);
  const auto corr = attr(self, ref.index, core::AttrKey::CorrelationId);
  const auto comm = attr(self, ref.index, core::AttrKey::CommHash);
  const auto seq = attr(self, ref.index, core::AttrKey::Seq);
  if (!flow && !corr && !(comm && seq)) return out;
  const core::RankId myRank = store_.track(ref.track).rank;
  const int64_t t0 = self.start(ref.index) - windowNs, t1 = self.end(ref.index) + windowNs + 1;
  for (core::TrackId t = 0; t < store_.trackCount(); ++t) {
    const TrackEvents& ev = store_.rawEvents(t);
    const bool sameRank = store_.track(t).rank == myRank;
    if (!ev.isSorted()) continue;
    ev.forEachOverlapping(t0, t1, [&](size_t i) {
      if (t == ref.track && i == ref.index) return;
      if (flow && attr(ev, i, core::AttrKey::FlowId) == flow) {
        out.push_back({{t, static_cast<uint32_t>(i)}, "flow"});
      } else if (corr && sameRank && attr(ev, i, core::AttrKey::CorrelationId) == corr) {
        out.push_back({{t, static_cast<uint32_t>(i)}, "correlation"});
      } else if (comm && seq && !sameRank && attr(ev, i, core::AttrKey::CommHash) == comm &&
                 attr(ev, i, core::AttrKey::Seq) == seq && ev.kind(i) == self.kind(ref.index)) {
        out.push_back({{t, static_cast<uint32_t>(i)}, "collective"});
      }
    });
  }
  return out;
}

std::optional<TimelineModel::Hit> TimelineModel::findNext(const std::string& needle, int64_t from,
                                                          bool forward, std::optional<Hit> current) const {
  if (needle.empty()) return std::nullopt;
  const std::string n = lower(needle);
  std::vector<bool> match(store_.strings().size());
  bool anyName = false;
  for (core::StringId id = 0; id < match.size(); ++id) {
    match[id] = lower(store_.strings().get(id)).find(n) != std::string::npos;
    anyName = anyName || match[id];
  }
  if (!anyName) return std::nullopt;
  using Key = std::tuple<int64_t, size_t, uint32_t>;
  const Key here =
      current ? Key{store_.rawEvents(row(current->row).track).start(ref(current->row, current->pos).index),
                    current->row, current->pos}
              : Key{from, forward ? 0 : SIZE_MAX, forward ? 0 : UINT32_MAX};
  std::optional<Key> best;
  for (size_t r = 0; r < rowCount(); ++r) {
    const TimelineRow& rw = row(r);
    const TrackEvents& ev = store_.rawEvents(rw.track);
    const auto& idx = rw.events;
    const int64_t at = std::get<0>(here);
    const size_t k = static_cast<size_t>(
        std::partition_point(idx.begin(), idx.end(),
                             [&](uint32_t i) { return forward ? ev.start(i) < at : ev.start(i) <= at; }) -
        idx.begin());
    if (forward) {
      for (size_t p = k; p < idx.size(); ++p) {
        const Key key{ev.start(idx[p]), r, static_cast<uint32_t>(p)};
        if (best && key >= *best) break;
        if (key > here && match[ev.name(idx[p])]) {
          best = key;
          break;
        }
      }
    } else {
      for (size_t p = k; p-- > 0;) {
        const Key key{ev.start(idx[p]), r, static_cast<uint32_t>(p)};
        if (key >= here) continue;
        if (best && key <= *best) break;
        if (match[ev.name(idx[p])]) {
          best = key;
          break;
        }
      }
    }
  }
  if (!best) return std::nullopt;
  return Hit{std::get<1>(*best), std::get<2>(*best)};
}

}  // namespace trainscope::plots
