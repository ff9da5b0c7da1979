#include "trainscope/core/model/trace_store.h"

#include "trainscope/core/base/saturating.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

namespace trainscope::core {

// ---------------------------------------------------------------------------------------------
// TrackEvents
// ---------------------------------------------------------------------------------------------

std::span<const Attr> TrackEvents::attrs(size_t i) const {
  const size_t b = attrBegin_[i];
  const size_t e = i + 1 < attrBegin_.size() ? attrBegin_[i + 1] : attrs_.size();
  return {attrs_.data() + b, e - b};
}

const Attr* TrackEvents::findAttr(size_t i, AttrKey key) const {
  for (const Attr& a : attrs(i))
    if (a.key == static_cast<uint32_t>(key)) return &a;
  return nullptr;
}

IndexRange TrackEvents::candidates(int64_t t0, int64_t t1) const {
  const auto lastIt = std::lower_bound(start_.begin(), start_.end(), t1);
  // maxDuration_ == INT64_MAX means "saturated": some event may be longer still, so look back to
  // the first event.
  const int64_t lo = maxDuration_ == std::numeric_limits<int64_t>::max() ? std::numeric_limits<int64_t>::min()
                                                                         : saturatingSub(t0, maxDuration_);
  const auto firstIt = std::lower_bound(start_.begin(), lastIt, lo);
  return {static_cast<size_t>(firstIt - start_.begin()), static_cast<size_t>(lastIt - start_.begin())};
}

bool TrackEvents::anyOverlapping(int64_t t0, int64_t t1, size_t budget) const {
  const IndexRange r = candidates(t0, t1);
  for (size_t i = r.last; i > r.first; --i) {
    const size_t k = i - 1;
    if (start_[k] >= t0 || end_[k] > t0) return true;  // starts inside, or reaches into it
    if (r.last - k > budget) return true;
  }
  return false;
}

size_t TrackEvents::memoryBytes() const {
  return start_.capacity() * sizeof(int64_t) + end_.capacity() * sizeof(int64_t) +
         name_.capacity() * sizeof(StringId) + kind_.capacity() * sizeof(uint8_t) +
         attrBegin_.capacity() * sizeof(uint32_t) + attrs_.capacity() * sizeof(Attr);
}

void TrackEvents::reserve(size_t n) {
  start_.reserve(n);
  end_.reserve(n);
  name_.reserve(n);
  kind_.reserve(n);
  attrBegin_.reserve(n);
}

void TrackEvents::append(const EventRecord& e, std::span<const Attr> attrs) {
  // All five per-event columns have the same size; one capacity check covers them.
  if (start_.size() == start_.capacity()) {
    const size_t n = start_.size() + 1;
    start_.grow(n);
    reserve(start_.capacity());
  }
  const bool inOrder =
      sortedPrefix_ == start_.size() &&
      (start_.empty() || e.startNs > start_.back() ||
       (e.startNs == start_.back() && e.endNs <= end_.back()));
  start_.pushUnchecked(e.startNs);
  end_.pushUnchecked(e.endNs);
  name_.pushUnchecked(e.name);
  kind_.pushUnchecked(static_cast<uint8_t>(e.kind));
  attrBegin_.pushUnchecked(static_cast<uint32_t>(attrs_.size()));
  if (!attrs.empty()) attrs_.append(attrs.data(), attrs.size());
  if (inOrder) sortedPrefix_ = start_.size();
  // An event may span more than INT64_MAX (INT64_MIN to INT64_MAX from a crafted file): the
  // bound saturates, which queries treat as "any start" (found by UBSan in the ASan suite run).
  maxDuration_ = std::max(maxDuration_, saturatingSub(e.endNs, e.startNs));
  maxEnd_ = std::max(maxEnd_, e.endNs);
}

bool TrackEvents::flush() {
  const size_t n = start_.size();
  const size_t p = sortedPrefix_;
  if (p == n) return false;

  // Order: start ascending, then end descending (enclosing events first), then arrival order.
  auto before = [this](uint32_t a, uint32_t b) {
    return start_[a] != start_[b] ? start_[a] < start_[b] : end_[a] > end_[b];
  };
  std::vector<uint32_t> tail(n - p);
  std::iota(tail.begin(), tail.end(), static_cast<uint32_t>(p));
  std::stable_sort(tail.begin(), tail.end(), before);

  // Only the part of the sorted prefix that the tail reaches into has to move.
  const uint32_t firstTail = tail.front();
  size_t lo = p;
  {
    size_t a = 0, b = p;
    while (a < b) {  // first prefix index that must come after the earliest tail event
      const size_t mid = (a + b) / 2;
      if (before(firstTail, static_cast<uint32_t>(mid))) b = mid; else a = mid + 1;
    }
    lo = a;
  }
  std::vector<uint32_t> order;
  order.reserve(n - lo);
  std::vector<uint32_t> head(p - lo);
  std::iota(head.begin(), head.end(), static_cast<uint32_t>(lo));
  std::merge(head.begin(), head.end(), tail.begin(), tail.end(), std::back_inserter(order), before);

  auto permute = [&](auto& col) {
    using T = std::remove_reference_t<decltype(col[0])>;
    std::vector<T> tmp(order.size());
    for (size_t k = 0; k < order.size(); ++k) tmp[k] = col[order[k]];
    std::copy(tmp.begin(), tmp.end(), col.begin() + lo);
  };
  // Attributes: rebuild the flat array of the moved range in the new order.
  if (!attrs_.empty()) {
    const size_t attrLo = attrBegin_[lo];
    std::vector<Attr> newAttrs;
    newAttrs.reserve(attrs_.size() - attrLo);
    std::vector<uint32_t> newBegin(order.size());
    for (size_t k = 0; k < order.size(); ++k) {
      newBegin[k] = static_cast<uint32_t>(attrLo + newAttrs.size());
      const auto a = attrs(order[k]);
      newAttrs.insert(newAttrs.end(), a.begin(), a.end());
    }
    std::copy(newAttrs.begin(), newAttrs.end(), attrs_.begin() + attrLo);
    std::copy(newBegin.begin(), newBegin.end(), attrBegin_.begin() + lo);
  }
  permute(start_);
  permute(end_);
  permute(name_);
  permute(kind_);
  sortedPrefix_ = n;
  return true;
}

void TrackEvents::shrinkToFit() {
  start_.shrink_to_fit();
  end_.shrink_to_fit();
  name_.shrink_to_fit();
  kind_.shrink_to_fit();
  attrBegin_.shrink_to_fit();
  attrs_.shrink_to_fit();
}

TrackEvents TrackEvents::copyEndingFrom(int64_t t) const {
  TrackEvents out;
  const size_t n = start_.size();
  const size_t first = t == std::numeric_limits<int64_t>::min() ? 0 : candidates(t, std::numeric_limits<int64_t>::max()).first;
  // Knob changes of any time stay: they say which setting was in force in the window.
  for (size_t i = 0; i < first; ++i)
    if (kind(i) == EventKind::KnobChange) out.append(record(i), attrs(i));
  out.reserve(out.size() + n - first);
  for (size_t i = first; i < n; ++i)
    if (end_[i] >= t) out.append(record(i), attrs(i));
  return out;
}

size_t TrackEvents::countStartingBefore(int64_t t) const {
  const int64_t* b = start_.data();
  return static_cast<size_t>(std::lower_bound(b, b + sortedPrefix_, t) - b);
}

void TrackEvents::evictFront(size_t k) {
  k = std::min(k, sortedPrefix_);
  if (k == 0) return;
  const size_t n = start_.size();
  auto drop = [k, n](auto& col) {
    using T = std::remove_reference_t<decltype(col[0])>;
    std::memmove(col.data(), col.data() + k, (n - k) * sizeof(T));
    col.truncate(n - k);
  };
  if (!attrs_.empty()) {
    const uint32_t a0 = k < n ? attrBegin_[k] : static_cast<uint32_t>(attrs_.size());
    const size_t na = attrs_.size();
    std::memmove(attrs_.data(), attrs_.data() + a0, (na - a0) * sizeof(Attr));
    attrs_.truncate(na - a0);
    for (size_t i = k; i < n; ++i) attrBegin_[i] -= a0;
  }
  drop(start_);
  drop(end_);
  drop(name_);
  drop(kind_);
  drop(attrBegin_);
  sortedPrefix_ -= k;
  // maxDuration_ and maxEnd_ stay: upper bounds, which is all the queries need.
}

// ---------------------------------------------------------------------------------------------
// TraceStore
// ---------------------------------------------------------------------------------------------

void TraceStore::setRank(const RankInfo& info) { ranks_[info.rank] = info; }

const RankInfo* TraceStore::rank(RankId r) const {
  auto it = ranks_.find(r);
  return it == ranks_.end() ? nullptr : &it->second;
}
RankInfo* TraceStore::rank(RankId r) {
  auto it = ranks_.find(r);
  return it == ranks_.end() ? nullptr : &it->second;
}

TrackId TraceStore::addTrack(TrackInfo info) {
  const auto id = static_cast<TrackId>(tracks_.size());
  if (!ranks_.count(info.rank)) ranks_[info.rank] = RankInfo{.rank = info.rank};
  trackIndex_.emplace(std::make_tuple(info.rank, info.kind, info.externalId), id);
  tracks_.push_back(std::move(info));
  events_.emplace_back();
  return id;
}

TrackId TraceStore::findOrAddTrack(RankId rank, TrackKind kind, int64_t externalId,
                                   std::string_view name) {
  if (auto it = trackIndex_.find({rank, kind, externalId}); it != trackIndex_.end()) return it->second;
  return addTrack(TrackInfo{rank, kind, std::string(name), externalId});
}

const TrackEvents& TraceStore::flushTrack(TrackId track) {
  events_[track].flush();
  return events_[track];
}

bool TraceStore::isFlushed() const {
  return std::all_of(events_.begin(), events_.end(), [](const TrackEvents& t) { return t.isSorted(); });
}

void TraceStore::flush() {
  for (auto& t : events_) t.flush();
}

void TraceStore::shrinkToFit() {
  for (auto& t : events_) {
    t.flush();
    t.shrinkToFit();
  }
}

size_t TraceStore::eventCount(EventKind kind) const {
  size_t n = 0;
  for (const auto& t : events_)
    for (size_t i = 0; i < t.size(); ++i) n += t.kind(i) == kind;
  return n;
}

std::pair<int64_t, int64_t> TraceStore::timeSpan() const {
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  for (const auto& t : events_) {
    if (t.empty()) continue;
    // The first element is the minimum only once sorted; scan starts when not.
    if (t.isSorted()) lo = std::min(lo, t.minStart());
    else for (int64_t s : t.starts()) lo = std::min(lo, s);
    hi = std::max(hi, t.maxEnd());
  }
  if (lo > hi) return {0, 0};
  return {lo, hi};
}

std::vector<size_t> TraceStore::evictBefore(int64_t cutoffNs) {
  std::vector<size_t> dropped(events_.size(), 0);
  for (size_t t = 0; t < events_.size(); ++t) {
    TrackEvents& ev = events_[t];
    ev.flush();
    const size_t k = ev.countStartingBefore(cutoffNs);
    ev.evictFront(k);
    dropped[t] = k;
    eventCount_ -= k;
    evictedEvents_ += k;
  }
  evictedBeforeNs_ = std::max(evictedBeforeNs_, cutoffNs);
  return dropped;
}

TraceStore TraceStore::copyRecent(int64_t sinceNs) const {
  TraceStore out;
  out.strings_ = strings_;
  out.ranks_ = ranks_;
  out.tracks_ = tracks_;
  out.trackIndex_ = trackIndex_;
  out.metadata_ = metadata_;
  out.events_.reserve(events_.size());
  for (const TrackEvents& t : events_) {
    out.events_.push_back(t.copyEndingFrom(sinceNs));
    out.eventCount_ += out.events_.back().size();
  }
  return out;
}

size_t TraceStore::memoryBytes() const {
  size_t n = 0;
  for (const auto& t : events_) n += t.memoryBytes();
  return n;
}

}  // namespace trainscope::core
