// Chrome trace JSON export: streams a TraceStore as trace events (see chrome_trace.h for the
// layout and docs/FORMATS.md for every field).
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "interop/chrome/flows.h"
#include "interop/chrome/format.h"
#include "interop/chrome/json_writer.h"
#include "trainscope/core/base/saturating.h"
#include "trainscope/core/interop/chrome_trace.h"

namespace trainscope::core {

namespace {

using chrome::JsonWriter;

class Exporter {
 public:
  Exporter(const TraceStore& store, std::ostream& out, const ChromeExportOptions& options)
      : s_(store), w_(out), o_(options) {}

  ChromeExportStats run();
  bool failed() { return !w_.flush(); }

 private:
  struct Lane {
    std::vector<int64_t> open;  // ends of the slices open on this lane, innermost last
    uint32_t tid = 0;
  };

  void writeHeader();
  void writeProcesses();
  void writeTrack(TrackId t);
  void writeEvent(const TrackEvents& ev, size_t i, RankId rank, uint32_t tid);
  void writeAttrs(std::span<const Attr> attrs, bool skipValue);
  void writeFlows();
  void writeThreads();
  size_t laneFor(int64_t start, int64_t end);
  void beginEvent() {
    w_.raw(first_ ? "\n" : ",\n");
    first_ = false;
  }
  // Pre-escaped JSON literal of an interned string: names repeat, escaping them once is cheap.
  std::string_view quoted(StringId id) {
    if (id >= s_.strings().size()) return "\"\"";  // not in the table: StringTable::get gives ""
    if (id >= quoted_.size()) quoted_.resize(s_.strings().size());
    std::string& q = quoted_[id];
    if (q.empty()) chrome::appendJsonString(q, s_.str(id));
    return q;
  }

  const TraceStore& s_;
  JsonWriter w_;
  ChromeExportOptions o_;
  ChromeExportStats stats_;
  int64_t origin_ = 0;
  bool first_ = true;
  std::vector<std::string> quoted_;
  chrome::FlowPlan flows_;
  std::vector<Lane> lanes_;
  size_t lanesUsed_ = 0;
  uint32_t firstTid_ = 1;
  uint32_t nextTid_ = 0;
  std::vector<std::vector<uint32_t>> laneTids_;  // per track: tid of lane 0, 1, ...
};

ChromeExportStats Exporter::run() {
  origin_ = s_.eventCount() > 0 ? s_.timeSpan().first : 0;
  flows_ = chrome::planFlows(s_);
  // Lane 0 of track t is thread firstTid_ + t; extra lanes are numbered after all tracks, so a
  // tid is unique in the whole file. firstTid_ is above every pid (= rank): Perfetto gives each
  // process a main thread whose tid is its pid, and our lanes should never be mistaken for it.
  RankId maxRank = 0;
  for (const auto& [rank, info] : s_.ranks()) maxRank = std::max(maxRank, rank);
  firstTid_ = static_cast<uint32_t>(maxRank) + 1;
  nextTid_ = firstTid_ + static_cast<uint32_t>(s_.trackCount());
  laneTids_.assign(s_.trackCount(), {});
  writeHeader();
  writeProcesses();
  for (TrackId t = 0; t < s_.trackCount(); ++t) writeTrack(t);
  writeFlows();
  writeThreads();
  w_.raw("\n]}\n");
  return stats_;
}

void Exporter::writeHeader() {
  w_.raw("{\"displayTimeUnit\":\"ns\",\"otherData\":{\"");
  w_.raw(chrome::kFormatKey);
  w_.raw("\":\"");
  w_.raw(chrome::kFormatVersion);
  w_.raw("\",\"");
  w_.raw(chrome::kOriginKey);
  w_.raw("\":\"");
  w_.integer(origin_);
  w_.raw("\",\"");
  w_.raw(chrome::kMetadataKey);
  w_.raw("\":{");
  bool firstKey = true;
  for (const auto& [k, v] : s_.metadata()) {
    if (!firstKey) w_.raw(',');
    firstKey = false;
    w_.string(k);
    w_.raw(':');
    w_.string(v);
  }
  w_.raw("}},\"traceEvents\":[");
}

void Exporter::writeProcesses() {
  for (const auto& [rank, info] : s_.ranks()) {
    beginEvent();
    w_.raw("{\"ph\":\"M\",\"pid\":");
    w_.integer(rank);
    w_.raw(",\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":");
    std::string label = "rank " + std::to_string(rank);
    if (!info.host.empty()) label += " (" + info.host + ")";
    w_.string(label);
    const std::pair<std::string_view, int64_t> fields[] = {{chrome::kRankArg, rank},
                                                           {chrome::kOsPidArg, info.pid},
                                                           {chrome::kLocalRankArg, info.localRank},
                                                           {chrome::kDeviceArg, info.device},
                                                           {chrome::kClockOffsetArg, info.clockOffsetNs}};
    for (const auto& [key, value] : fields) {
      w_.raw(",\"");
      w_.raw(key);
      w_.raw("\":");
      w_.integer(value);
    }
    w_.raw(",\"");
    w_.raw(chrome::kDroppedArg);
    w_.raw("\":");
    w_.unsignedInteger(info.droppedEvents);
    w_.raw(",\"");
    w_.raw(chrome::kHostArg);
    w_.raw("\":");
    w_.string(info.host);
    w_.raw("}}");
    beginEvent();
    w_.raw("{\"ph\":\"M\",\"pid\":");
    w_.integer(rank);
    w_.raw(",\"tid\":0,\"name\":\"process_sort_index\",\"args\":{\"sort_index\":");
    w_.integer(rank);
    w_.raw("}}");
  }
}

// Greedy lane assignment over events sorted by (start asc, end desc): an event goes to the
// first lane whose innermost open slice contains it (or that has none open), so every lane
// nests properly, as Chrome JSON requires of complete events on one thread.
size_t Exporter::laneFor(int64_t start, int64_t end) {
  for (size_t l = 0; l < lanesUsed_; ++l) {
    auto& open = lanes_[l].open;
    while (!open.empty() && open.back() <= start) open.pop_back();
    if (open.empty() || end <= open.back()) {
      open.push_back(end);
      return l;
    }
  }
  if (lanesUsed_ == lanes_.size()) lanes_.emplace_back();
  Lane& lane = lanes_[lanesUsed_];
  lane.open.assign(1, end);
  lane.tid = nextTid_++;
  ++stats_.lanes;
  return lanesUsed_++;
}

void Exporter::writeTrack(TrackId t) {
  const TrackEvents& ev = s_.events(t);
  const RankId rank = s_.track(t).rank;
  lanesUsed_ = 1;
  if (lanes_.empty()) lanes_.emplace_back();
  lanes_[0].open.clear();
  lanes_[0].tid = firstTid_ + t;

  const bool filtered = o_.fromNs || o_.toNs;
  const int64_t t0 = o_.fromNs.value_or(std::numeric_limits<int64_t>::min());
  const int64_t t1 = o_.toNs.value_or(std::numeric_limits<int64_t>::max());
  const IndexRange range = filtered ? ev.candidates(t0, t1) : IndexRange{0, ev.size()};
  const auto& endpoints = flows_.byTrack[t];
  size_t nextEndpoint = 0;

  for (size_t i = range.first; i < range.last; ++i) {
    const int64_t start = ev.start(i);
    const int64_t end = std::max(start, ev.end(i));  // a negative duration is written as an instant
    if (filtered && !(end > t0 || (end == start && start >= t0))) continue;
    if (ev.end(i) < start) ++stats_.endBeforeStart;
    // Instants (counters included) never break nesting: they stay on lane 0.
    const size_t lane = end == start ? 0 : laneFor(start, end);
    const uint32_t tid = lanes_[lane].tid;
    writeEvent(ev, i, rank, tid);
    while (nextEndpoint < endpoints.size() && endpoints[nextEndpoint].first < i) ++nextEndpoint;
    for (; nextEndpoint < endpoints.size() && endpoints[nextEndpoint].first == i; ++nextEndpoint)
      flows_.endpoints[endpoints[nextEndpoint].second].tid = tid;
  }
  auto& tids = laneTids_[t];
  for (size_t l = 0; l < lanesUsed_; ++l) tids.push_back(lanes_[l].tid);
}

void Exporter::writeEvent(const TrackEvents& ev, size_t i, RankId rank, uint32_t tid) {
  const int64_t start = ev.start(i);
  const int64_t end = std::max(start, ev.end(i));
  const EventKind kind = ev.kind(i);
  const auto attrs = ev.attrs(i);
  const Attr* value = kind == EventKind::Counter && end == start ? ev.findAttr(i, AttrKey::Value) : nullptr;
  const std::string_view kindName = eventKindName(kind);

  beginEvent();
  w_.raw("{\"ts\":");
  // Saturating: a session may hold INT64_MIN..INT64_MAX, whose difference wraps to a negative.
  w_.micros(saturatingSub(start, origin_));
  if (end != start) {
    w_.raw(",\"dur\":");
    w_.micros(saturatingSub(end, start));
    w_.raw(",\"ph\":\"X\"");
  } else if (value) {
    w_.raw(",\"ph\":\"C\"");
  } else {
    w_.raw(",\"ph\":\"i\",\"s\":\"t\"");
  }
  w_.raw(",\"pid\":");
  w_.integer(rank);
  w_.raw(",\"tid\":");
  w_.unsignedInteger(tid);
  w_.raw(",\"name\":");
  w_.raw(quoted(ev.name(i)));
  w_.raw(",\"cat\":\"");
  w_.raw(kindName);
  if (value) {
    // The counter's series only; the rest rides along in an extra member (chrome_format.h).
    w_.raw("\",\"args\":{\"value\":");
    if (value->type == AttrType::Int)
      w_.integer(value->asInt());
    else
      w_.floating(value->asDouble());
    w_.raw("},\"");
    w_.raw(chrome::kCounterExtraArgs);
    w_.raw("\":{\"kind\":\"");
  } else {
    w_.raw("\",\"args\":{\"kind\":\"");
  }
  w_.raw(kindName);
  w_.raw("\"");
  writeAttrs(attrs, value != nullptr);
  w_.raw("}}");
  ++stats_.events;
}

void Exporter::writeAttrs(std::span<const Attr> attrs, bool skipValue) {
  bool valueSkipped = false;
  for (const Attr& a : attrs) {
    if (skipValue && !valueSkipped && a.key == static_cast<uint32_t>(AttrKey::Value)) {
      valueSkipped = true;  // the first Value is the counter's series
      continue;
    }
    w_.raw(',');
    if (a.isCustom()) {
      w_.raw(quoted(a.key - kCustomAttrBase));
    } else {
      w_.raw('"');
      w_.raw(builtinAttrName(static_cast<AttrKey>(a.key)));
      w_.raw('"');
    }
    w_.raw(':');
    switch (a.type) {
      case AttrType::Int:
        w_.integer(a.asInt());
        break;
      case AttrType::Double:
        w_.floating(a.asDouble());
        break;
      case AttrType::String:
        w_.raw(quoted(a.asString()));
        break;
    }
  }
}

// Flow v1 events: "s" on the first event of a chain, "t" on the middle ones, "f" with
// "bp":"e" on the last. Perfetto binds each to the slice on top of its thread's stack when it
// processes the flow event, and it processes events at one timestamp slices first (longest
// first), then the rest in file order. So ts is the event's own start, as Kineto does: at that
// moment the event is the innermost open slice (unless a child starts at the very same ns); a
// later timestamp could land on a child or an instant inside it. Steps never go back in time:
// Perfetto matches the steps of a flow in timestamp order (a receive posted before its send
// gets its step at the send's time, still inside the receive).
void Exporter::writeFlows() {
  uint64_t flowId = 0;
  std::vector<const chrome::FlowEndpoint*> chain;
  for (const auto& group : flows_.groups) {
    chain.clear();
    for (uint32_t e : group)
      if (flows_.endpoints[e].tid != 0) chain.push_back(&flows_.endpoints[e]);
    if (chain.size() < 2) continue;
    ++flowId;
    const std::string_view name = chain.front()->kind == EventKind::P2PSend ? "p2p" : "flow";
    int64_t prevTs = std::numeric_limits<int64_t>::min();
    for (size_t k = 0; k < chain.size(); ++k) {
      const auto& ep = *chain[k];
      int64_t ts = ep.start;
      if (ts < prevTs) ts = std::min(prevTs, std::max(ep.start, ep.end));
      prevTs = ts;
      beginEvent();
      w_.raw("{\"ts\":");
      w_.micros(saturatingSub(ts, origin_));
      w_.raw(k == 0                 ? ",\"ph\":\"s\""
             : k + 1 < chain.size() ? ",\"ph\":\"t\""
                                    : ",\"ph\":\"f\",\"bp\":\"e\"");
      w_.raw(",\"id\":");
      w_.unsignedInteger(flowId);
      w_.raw(",\"pid\":");
      w_.integer(s_.track(ep.track).rank);
      w_.raw(",\"tid\":");
      w_.unsignedInteger(ep.tid);
      w_.raw(",\"name\":\"");
      w_.raw(name);
      w_.raw("\",\"cat\":\"flow\"}");
    }
    stats_.flows += chain.size() - 1;
  }
}

void Exporter::writeThreads() {
  int64_t sortIndex = 0;
  for (TrackId t = 0; t < s_.trackCount(); ++t) {
    const TrackInfo& track = s_.track(t);
    const auto& tids = laneTids_[t];
    for (size_t lane = 0; lane < tids.size(); ++lane) {
      std::string name = track.name;
      if (lane > 0) name += " #" + std::to_string(lane + 1);
      beginEvent();
      w_.raw("{\"ph\":\"M\",\"pid\":");
      w_.integer(track.rank);
      w_.raw(",\"tid\":");
      w_.unsignedInteger(tids[lane]);
      w_.raw(",\"name\":\"thread_name\",\"args\":{\"name\":");
      w_.string(name);
      w_.raw(",\"");
      w_.raw(chrome::kTrackNameArg);
      w_.raw("\":");
      w_.string(track.name);
      w_.raw(",\"");
      w_.raw(chrome::kTrackKindArg);
      w_.raw("\":\"");
      w_.raw(trackKindName(track.kind));
      w_.raw("\",\"");
      w_.raw(chrome::kTrackExternalIdArg);
      w_.raw("\":");
      w_.integer(track.externalId);
      w_.raw(",\"");
      w_.raw(chrome::kTrackLaneArg);
      w_.raw("\":");
      w_.unsignedInteger(lane);
      w_.raw("}}");
      // Sort indexes follow track order, lanes right after their track; the importer uses them
      // to recreate the tracks in their original order.
      beginEvent();
      w_.raw("{\"ph\":\"M\",\"pid\":");
      w_.integer(track.rank);
      w_.raw(",\"tid\":");
      w_.unsignedInteger(tids[lane]);
      w_.raw(",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":");
      w_.integer(sortIndex++);
      w_.raw("}}");
    }
  }
}

}  // namespace

Result<ChromeExportStats> exportChromeTrace(const TraceStore& store, std::ostream& out,
                                            const ChromeExportOptions& options) {
  if (options.fromNs && options.toNs && *options.fromNs > *options.toNs)
    return Status(ErrorCode::InvalidArgument, "chrome export: the range start " +
                                                  std::to_string(*options.fromNs) + " is after its end " +
                                                  std::to_string(*options.toNs));
  try {
    Exporter exporter(store, out, options);
    ChromeExportStats stats = exporter.run();
    if (exporter.failed()) return Status(ErrorCode::Io, "chrome export: writing to the output stream failed");
    return stats;
  } catch (const std::exception& e) {  // bad_alloc, length_error: never let them out of core
    return Status(ErrorCode::Io, std::string("chrome export: ") + e.what());
  }
}

Result<ChromeExportStats> exportChromeTraceFile(const TraceStore& store, const std::filesystem::path& path,
                                                const ChromeExportOptions& options) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file)
    return Status(ErrorCode::Io, path.string() + ": cannot open for writing: " + std::strerror(errno));
  auto result = exportChromeTrace(store, file, options);
  if (!result) return Status(result.status().code(), path.string() + ": " + result.status().message());
  file.close();
  if (!file) return Status(ErrorCode::Io, path.string() + ": write failed: " + std::strerror(errno));
  return result;
}

}  // namespace trainscope::core
