// TimelineModel: the rows of the timeline and their level of detail (no Qt).
//
// Every track is split into rows whose events never overlap: nested CPU ranges get one row per
// depth (greedy "first free level", so a parent's row is above its children's), counter tracks one
// row per counter name. A row is a sorted array of event indices into the track, so both starts
// and ends are non-decreasing along it and a viewport is found by binary search.
//
// drawItems() is the level of detail (Tracy's zone folding): a run of events narrower than
// minNs is merged into one summary item that says how many events it stands for, found with
// galloping binary searches, so a frame costs O(items drawn × log n), never O(events). Counts are
// exact: an item's count is the number of row positions it spans.
//
// Live use: update() takes what was appended to the store since the last call, sort-merges the
// tracks (TraceStore::flush) and re-levels only the part of each track the late events reached.
// The model is not synchronised; TimelineData pairs it with its store and a lock.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trainscope/core/model/pod_column.h"
#include "trainscope/core/model/trace_store.h"

namespace trainscope::plots {

// One event of the store: its track and index in that track (valid until the next update()).
struct EventRef {
  core::TrackId track = core::kInvalidTrack;
  uint32_t index = 0;
  bool valid() const { return track != core::kInvalidTrack; }
  bool operator==(const EventRef&) const = default;
};

// What a row draws at one level of detail: one event (count == 1) or a summary of `count`
// consecutive events of the row, covering [start, end] = [first child's start, last child's end].
struct DrawItem {
  int64_t start = 0;
  int64_t end = 0;
  uint32_t first = 0;  // position in the row of the first event it stands for
  uint32_t count = 1;
};

struct TimelineRow {
  core::TrackId track = 0;
  core::RankId rank = 0;
  core::TrackKind kind = core::TrackKind::CpuThread;
  uint32_t level = 0;                           // depth in the track (0 = outermost)
  core::StringId counter = core::kEmptyString;  // counter rows: the counter's name
  core::PodColumn<uint32_t> events;             // indices into the track, in start order
  // Start of every kCoarseStride-th event (position k * stride): a small contiguous index that
  // the level-of-detail searches walk first, so long jumps touch few cold cache lines.
  core::PodColumn<int64_t> coarse;
  // End of the last event of each block of kCoarseStride positions (the block's latest end).
  core::PodColumn<int64_t> coarseEnd;
  static constexpr size_t kCoarseStride = 32;
  int64_t lastEnd = INT64_MIN;  // end of the last event (for levelling)
};

// A marker drawn across a rank's rows: step boundaries and knob changes.
struct TimelineMark {
  int64_t start = 0;
  int64_t end = 0;
  core::RankId rank = 0;
  core::EventKind kind = core::EventKind::Step;
  core::StringId name = core::kEmptyString;
  int64_t step = -1;
  core::StringId value = core::kEmptyString;  // knob changes: the new value
};

struct SelectionStats {
  int64_t durationNs = 0;  // t1 - t0
  uint64_t events = 0;     // events overlapping the box
  std::array<uint64_t, core::kEventKindCount> countPerKind{};
  std::array<int64_t, core::kEventKindCount> nsPerKind{};  // durations clipped to [t0, t1]
};

class TimelineModel {
 public:
  explicit TimelineModel(core::TraceStore& store) : store_(store) {}

  core::TraceStore& store() { return store_; }
  const core::TraceStore& store() const { return store_; }

  // Drops everything and builds the rows of every event in the store.
  void rebuild();
  // Takes the events appended since the last rebuild()/update(). Returns true when rows were
  // added (the layout changed), as opposed to only rows growing.
  bool update();
  // The store dropped `dropped[t]` events from the front of track t (TraceStore::evictBefore with
  // cutoffNs; call after update()). Rows drop those positions and re-base the rest; step, knob
  // and phase marks that start before the cutoff go. O(events kept of the touched rows).
  void evict(const std::vector<size_t>& dropped, int64_t cutoffNs);

  // Rows in display order: by rank, then track kind, then track id, then level / counter name.
  size_t rowCount() const { return order_.size(); }
  const TimelineRow& row(size_t i) const { return rows_[order_[i]]; }
  // Events in the model; the trace span [min start, max end] ({0,0} when empty).
  uint64_t eventCount() const { return events_; }
  int64_t spanStart() const { return spanStart_; }
  int64_t spanEnd() const { return spanEnd_; }
  // Bytes used by the model's own arrays (not the store's).
  size_t memoryBytes() const;

  // Level of detail: items of row `r` for the viewport [t0, t1); events (and runs of events)
  // shorter than minNs are merged. `out` is cleared first.
  void drawItems(size_t r, int64_t t0, int64_t t1, int64_t minNs, std::vector<DrawItem>& out) const;
  // Positions [first, last) of row r's events overlapping [t0, t1) (start < t1, end >= t0).
  std::pair<size_t, size_t> visibleRange(size_t r, int64_t t0, int64_t t1) const;
  EventRef ref(size_t r, uint32_t pos) const { return {row(r).track, row(r).events[pos]}; }
  // The event of row r under time t, allowing `slackNs` on either side (the nearest wins).
  std::optional<uint32_t> eventAt(size_t r, int64_t t, int64_t slackNs) const;
  // The row showing ref, if any.
  std::optional<size_t> rowOf(EventRef ref) const;

  // Box selection: rows [rows], time [t0, t1).
  SelectionStats selectionStats(const std::vector<size_t>& rows, int64_t t0, int64_t t1) const;

  // Step windows and knob changes of every rank, sorted by start.
  const std::vector<TimelineMark>& steps() const { return steps_; }
  const std::vector<TimelineMark>& knobChanges() const { return knobs_; }
  // The name of the Phase event (forward/backward/optimizer) of `rank` covering t, if any.
  std::optional<core::StringId> phaseAt(core::RankId rank, int64_t t) const;

  // Events linked to ref: same FlowId (send <-> recv), same CorrelationId (launch <-> kernel),
  // same (CommHash, Seq) on other ranks (one collective). Searched within ±windowNs of the event.
  struct Link {
    EventRef ref;
    const char* why;  // "flow", "correlation", "collective"
  };
  std::vector<Link> linkedEvents(EventRef ref, int64_t windowNs = 1'000'000'000) const;

  // Next (forward) or previous event after/before time `from` whose name contains `needle`
  // (case-insensitive), over all rows; ties broken by row order.
  struct Hit {
    size_t row = 0;
    uint32_t pos = 0;
  };
  std::optional<Hit> findNext(const std::string& needle, int64_t from, bool forward,
                              std::optional<Hit> current) const;

 private:
  void levelTrack(core::TrackId t, size_t from);
  void rebuildOrder();
  void noteMarks(core::TrackId t, size_t from, size_t to);

  core::TraceStore& store_;
  std::vector<TimelineRow> rows_;
  std::vector<uint32_t> order_;     // display position -> rows_ index
  std::vector<uint32_t> position_;  // rows_ index -> display position
  // Per track: its rows (indices into rows_), by level; counters by name; events seen.
  struct TrackState {
    std::vector<uint32_t> rows;
    std::map<core::StringId, uint32_t> counterRows;
    size_t seen = 0;
  };
  std::vector<TrackState> tracks_;
  std::vector<TimelineMark> steps_, knobs_;
  std::map<core::RankId, std::vector<TimelineMark>> phases_;
  uint64_t events_ = 0;
  int64_t spanStart_ = 0, spanEnd_ = 0;
};

}  // namespace trainscope::plots
