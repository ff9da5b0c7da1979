// TraceStore: the columnar in-memory trace. One TrackEvents per track holds its events as
// parallel arrays sorted by (start asc, end desc) so that parents precede their children.
//
// Appends are O(1). Events may arrive out of order (late batches from another thread or rank):
// they are appended as they come and the unsorted tail of a track is sort-merged into the sorted
// prefix by flush() -- only the part of the prefix the tail overlaps is touched, as in Perfetto's
// windowed sorter. Queries require a flushed track.
//
// Ownership (docs/ARCHITECTURE.md, "Who owns what"): whoever fills a store -- a loader, an
// importer, the live engine's ingest round -- flushes it before anyone else reads it; readers
// (analysis, what-if, export, compare, the timeline) take a `const TraceStore&` and never sort or
// grow it, so any number of them may read at once under a shared lock or on a snapshot.
//
// A plain event (no attributes) costs 25 bytes: start 8 + end 8 + name 4 + kind 1 + attr offset 4.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <tuple>
#include <string>
#include <vector>

#include "trainscope/core/model/events.h"
#include "trainscope/core/model/pod_column.h"
#include "trainscope/core/model/string_table.h"

namespace trainscope::core {

struct IndexRange {
  size_t first = 0;
  size_t last = 0;  // one past
  size_t size() const { return last - first; }
  bool empty() const { return first == last; }
};

class TrackEvents {
 public:
  size_t size() const { return start_.size(); }
  bool empty() const { return start_.empty(); }
  bool isSorted() const { return sortedPrefix_ == start_.size(); }

  int64_t start(size_t i) const { return start_[i]; }
  int64_t end(size_t i) const { return end_[i]; }
  StringId name(size_t i) const { return name_[i]; }
  EventKind kind(size_t i) const { return static_cast<EventKind>(kind_[i]); }
  EventRecord record(size_t i) const { return {start_[i], end_[i], name_[i], kind(i)}; }
  std::span<const Attr> attrs(size_t i) const;
  // The first attribute with this key, if any.
  const Attr* findAttr(size_t i, AttrKey key) const;

  std::span<const int64_t> starts() const { return start_; }
  std::span<const int64_t> ends() const { return end_; }
  // Longest event of the track; bounds the backwards search of overlap queries.
  int64_t maxDuration() const { return maxDuration_; }
  int64_t minStart() const { return start_.empty() ? 0 : start_.front(); }
  int64_t maxEnd() const { return maxEnd_; }

  // Candidate index range for events overlapping [t0, t1): every event with start < t1 and
  // end > t0 (instants at t0 <= start < t1 included) lies inside it. Binary search on start,
  // widened backwards by maxDuration(). Requires isSorted().
  IndexRange candidates(int64_t t0, int64_t t1) const;
  // Calls f(index) for exactly the events overlapping [t0, t1), in start order.
  template <typename F>
  void forEachOverlapping(int64_t t0, int64_t t1, F&& f) const {
    const IndexRange r = candidates(t0, t1);
    for (size_t i = r.first; i < r.last; ++i) {
      if (end_[i] > t0 || (end_[i] == start_[i] && start_[i] >= t0)) f(i);
    }
  }

  // Whether any event overlaps [t0, t1), as forEachOverlapping would find one. Looks at no more
  // than `budget` events that started before t0; past it, answers true (the caller collapses
  // only what is surely empty). Requires isSorted().
  bool anyOverlapping(int64_t t0, int64_t t1, size_t budget = 4096) const;
  // Bytes held by the columns (capacity, i.e. what the allocator gave us).
  size_t memoryBytes() const;
  // Appends one event; attributes are copied.
  void append(const EventRecord& e, std::span<const Attr> attrs = {});
  void reserve(size_t n);
  // Sort-merges the unsorted tail into the sorted prefix. Returns true if anything moved.
  bool flush();
  // Gives back spare capacity (call when a session is complete).
  void shrinkToFit();
  // The events that end at or after t (all of them when t is INT64_MIN), in order: a recent
  // window's copy for a snapshot. Requires isSorted().
  TrackEvents copyEndingFrom(int64_t t) const;
  // Drops the first k events (k <= the sorted prefix): the columns' live part moves down once,
  // capacity is kept for the events still to come. Indices of the remaining events drop by k.
  void evictFront(size_t k);
  // Events in the sorted prefix that start before t (what evictFront would drop for cutoff t).
  size_t countStartingBefore(int64_t t) const;

 private:
  PodColumn<int64_t> start_;
  PodColumn<int64_t> end_;
  PodColumn<StringId> name_;
  PodColumn<uint8_t> kind_;
  // Attributes of event i are attrs_[attrBegin_[i] .. attrBegin_[i+1]) (attrs_.size() for the last).
  PodColumn<uint32_t> attrBegin_;
  PodColumn<Attr> attrs_;
  size_t sortedPrefix_ = 0;
  int64_t maxDuration_ = 0;
  int64_t maxEnd_ = INT64_MIN;
};

class TraceStore {
 public:
  StringTable& strings() { return strings_; }
  const StringTable& strings() const { return strings_; }
  StringId intern(std::string_view s) { return strings_.intern(s); }

  // Adds or replaces the description of a rank.
  void setRank(const RankInfo& info);
  const RankInfo* rank(RankId r) const;
  RankInfo* rank(RankId r);
  const std::map<RankId, RankInfo>& ranks() const { return ranks_; }

  TrackId addTrack(TrackInfo info);
  // The track of this rank with this kind and external id, created (with name) if absent.
  TrackId findOrAddTrack(RankId rank, TrackKind kind, int64_t externalId, std::string_view name);
  const std::vector<TrackInfo>& tracks() const { return tracks_; }
  const TrackInfo& track(TrackId id) const { return tracks_[id]; }
  size_t trackCount() const { return tracks_.size(); }

  void append(TrackId track, const EventRecord& e, std::span<const Attr> attrs = {}) {
    events_[track].append(e, attrs);
    ++eventCount_;
  }
  // The events of a track, as they are: sorted once the store's owner flushed it (a reader never
  // sorts; isFlushed() says whether it may query).
  const TrackEvents& events(TrackId track) const { return events_[track]; }
  const TrackEvents& rawEvents(TrackId track) const { return events_[track]; }
  bool isFlushed() const;
  void flush();         // sort-merges every track (the writer's job, before it publishes)
  const TrackEvents& flushTrack(TrackId track);  // sort-merges one track (writer side)
  void shrinkToFit();   // flush + give back spare capacity
  size_t eventCount() const { return eventCount_; }
  size_t eventCount(EventKind kind) const;
  // [min start, max end] over all events; {0, 0} when empty.
  std::pair<int64_t, int64_t> timeSpan() const;
  size_t memoryBytes() const;
  // A copy with every rank, track, string and metadata entry but only the events that end at
  // or after sinceNs: what a snapshot of a live session's recent steps needs (what-if, apply,
  // export, compare), at the cost of that window instead of the whole store. Requires a flushed
  // store.
  TraceStore copyRecent(int64_t sinceNs) const;

  // Live retention (docs/RELIABILITY.md, "Live memory"): drops, from every track, the events
  // that start before cutoffNs, flushing first. Returns the count dropped per track (indexed by
  // TrackId; all zero when nothing went); indices into a track drop by its count. Ranks, tracks,
  // strings and metadata stay.
  std::vector<size_t> evictBefore(int64_t cutoffNs);
  // Events dropped by evictBefore so far, and the latest cutoff (INT64_MIN: none yet).
  uint64_t evictedEvents() const { return evictedEvents_; }
  int64_t evictedBeforeNs() const { return evictedBeforeNs_; }

  // Free-form session metadata ("job_id", "clock_domain", "created_by", ...).
  std::map<std::string, std::string>& metadata() { return metadata_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Convenience: attribute lookups.
  std::string_view str(StringId id) const { return strings_.get(id); }

 private:
  StringTable strings_;
  std::map<RankId, RankInfo> ranks_;
  std::vector<TrackInfo> tracks_;
  std::vector<TrackEvents> events_;
  std::map<std::tuple<RankId, TrackKind, int64_t>, TrackId> trackIndex_;
  std::map<std::string, std::string> metadata_;
  size_t eventCount_ = 0;
  uint64_t evictedEvents_ = 0;
  int64_t evictedBeforeNs_ = INT64_MIN;
};

}  // namespace trainscope::core
