#include "trainscope/core/session/summary.h"

#include "trainscope/core/base/saturating.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace trainscope::core {

SessionSummary summarizeStore(const TraceStore& store) {
  SessionSummary s;
  s.schemaVersion = kTsdbSchemaVersion;
  s.eventCount = store.eventCount();
  const auto [lo, hi] = store.timeSpan();
  s.startNs = lo;
  s.endNs = hi;
  for (const auto& [r, info] : store.ranks()) {
    s.ranks.push_back(info);
    s.droppedEvents += info.droppedEvents;
  }
  for (TrackId t = 0; t < store.trackCount(); ++t) {
    const TrackEvents& ev = store.rawEvents(t);
    s.tracks.push_back({t, store.track(t), ev.size()});
    for (size_t i = 0; i < ev.size(); ++i) ++s.eventsPerKind[ev.kind(i)];
  }
  s.metadata = store.metadata();
  s.complete = true;
  return s;
}

std::string summaryToJson(const SessionSummary& s, int indent) {
  using nlohmann::json;
  json kinds = json::object();
  for (const auto& [k, n] : s.eventsPerKind) kinds[std::string(eventKindName(k))] = n;
  json ranks = json::array();
  for (const RankInfo& r : s.ranks) {
    json tracks = json::array();
    uint64_t events = 0;
    for (const TrackSummary& t : s.tracks) {
      if (t.info.rank != r.rank) continue;
      events += t.eventCount;
      tracks.push_back({{"id", t.id},
                        {"kind", std::string(trackKindName(t.info.kind))},
                        {"name", t.info.name},
                        {"external_id", t.info.externalId},
                        {"event_count", t.eventCount}});
    }
    ranks.push_back({{"rank", r.rank},
                     {"host", r.host},
                     {"pid", r.pid},
                     {"local_rank", r.localRank},
                     {"device", r.device},
                     {"clock_offset_ns", r.clockOffsetNs},
                     {"dropped_events", r.droppedEvents},
                     {"event_count", events},
                     {"tracks", std::move(tracks)}});
  }
  // Events may span more than int64 nanoseconds (a trace from -9.2e15 µs to now): the duration
  // saturates instead of overflowing (found by fuzz_chrome_import).
  const int64_t duration = saturatingSub(s.endNs, s.startNs);
  json j = {{"file", s.path.string()},
            {"schema_version", s.schemaVersion},
            {"event_count", s.eventCount},
            {"events_per_kind", std::move(kinds)},
            {"start_ns", s.startNs},
            {"end_ns", s.endNs},
            {"duration_ns", duration},
            {"rank_count", s.ranks.size()},
            {"track_count", s.tracks.size()},
            {"dropped_events", s.droppedEvents},
            {"segments", s.segments},
            {"complete", s.complete},
            {"metadata", s.metadata},
            {"ranks", std::move(ranks)}};
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace trainscope::core
