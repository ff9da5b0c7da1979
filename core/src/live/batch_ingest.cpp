// BatchIngestor: agent-local ids -> store ids, agent clock -> client clock.
#include <algorithm>

#include "trainscope/core/live/agent_client.h"

namespace trainscope::core {

RankInfo rankInfoFor(const wire::JobInfo& job, const ClockSync& sync) {
  RankInfo r;
  r.rank = job.rank;
  r.host = job.host;
  r.pid = job.pid;
  r.localRank = job.localRank;
  r.device = job.device;
  r.clockOffsetNs = -sync.agentMinusClientNs;  // added to agent timestamps
  return r;
}

StringId BatchIngestor::mapString(uint32_t agentId) {
  if (agentId == 0) return kEmptyString;
  const auto it = strings_.find(agentId);
  if (it != strings_.end()) return it->second;
  ++unknownString_;
  return kEmptyString;
}

Status BatchIngestor::ingest(const wire::EventBatch& batch) {
  if (!batch.history) sawLive_ = true;
  if (batch.droppedTotal > rank_.droppedEvents) {  // a running total: keep the largest seen
    rank_.droppedEvents = batch.droppedTotal;
    store_.setRank(rank_);
  }
  for (const auto& [id, text] : batch.strings) strings_[id] = store_.intern(text);
  for (const wire::WireTrack& t : batch.tracks)
    tracks_[t.id] = store_.findOrAddTrack(rank_.rank, t.kind, t.externalId, t.name);
  const int64_t shift = rank_.clockOffsetNs;
  uint64_t seq = batch.firstSeq;
  if (!batch.events.empty()) {
    if (haveSeq_ && batch.firstSeq > nextSeq_) {
      // Events this client never got (issue 40: counted, never silent).
      const uint64_t lost = batch.firstSeq - nextSeq_;
      notReceived_ += lost;
      Gap g{lastEndNs_, batch.events.front().startNs + shift, lost};
      for (const wire::WireEvent& e : batch.events) g.toNs = std::min(g.toNs, e.startNs + shift);
      if (gaps_.size() >= 64) {  // bounded: the oldest two merge
        gaps_[0].toNs = gaps_[1].toNs;
        gaps_[0].events += gaps_[1].events;
        gaps_.erase(gaps_.begin() + 1);
      }
      gaps_.push_back(g);
    }
    haveSeq_ = true;
    nextSeq_ = std::max(nextSeq_, batch.firstSeq + batch.events.size());
    for (const wire::WireEvent& e : batch.events) lastEndNs_ = std::max(lastEndNs_, e.endNs + shift);
  }
  for (const wire::WireEvent& e : batch.events) {
    if (seq++ < skipBelow_) {
      ++skipped_;
      continue;
    }
    const auto tr = tracks_.find(e.track);
    if (tr == tracks_.end()) {
      ++unknownTrack_;
      continue;
    }
    attrs_.clear();
    for (Attr a : e.attrs) {
      if (a.isCustom()) a.key = kCustomAttrBase + mapString(a.key - kCustomAttrBase);
      if (a.type == AttrType::String) a.bits = static_cast<int64_t>(mapString(static_cast<uint32_t>(a.bits)));
      attrs_.push_back(a);
    }
    const EventRecord rec{e.startNs + shift, e.endNs + shift, mapString(e.name), e.kind};
    if (keepEvents_) store_.append(tr->second, rec, attrs_);
    if (sink_) {
      if (Status s = sink_(tr->second, rec, attrs_); !s.isOk()) return s;
    }
    ++events_;
  }
  return Status::ok();
}

}  // namespace trainscope::core
