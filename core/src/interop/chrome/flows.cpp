#include "interop/chrome/flows.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace trainscope::core::chrome {

namespace {

// Arrows run from senders to receivers; everything else in a group is ordered by time.
int role(EventKind k) {
  return k == EventKind::P2PSend ? 0 : k == EventKind::P2PRecv ? 2 : 1;
}

}  // namespace

FlowPlan planFlows(const TraceStore& store) {
  FlowPlan plan;
  std::map<int64_t, std::vector<uint32_t>> byFlowId;  // ordered: deterministic output
  using PeerKey = std::pair<RankId, int64_t>;         // (this rank, peer rank)
  std::map<PeerKey, std::vector<uint32_t>> sends, recvs;

  for (TrackId t = 0; t < store.trackCount(); ++t) {
    const TrackEvents& ev = store.events(t);
    const RankId rank = store.track(t).rank;
    for (size_t i = 0; i < ev.size(); ++i) {
      const EventKind kind = ev.kind(i);
      const Attr* flow = ev.findAttr(i, AttrKey::FlowId);
      const bool p2p = kind == EventKind::P2PSend || kind == EventKind::P2PRecv;
      if (!flow && !p2p) continue;
      const Attr* peer = flow ? nullptr : ev.findAttr(i, AttrKey::Peer);
      if (!flow && !peer) continue;
      const auto id = static_cast<uint32_t>(plan.endpoints.size());
      plan.endpoints.push_back({t, static_cast<uint32_t>(i), ev.start(i), ev.end(i), kind, 0});
      if (flow)
        byFlowId[flow->asInt()].push_back(id);
      else
        (kind == EventKind::P2PSend ? sends : recvs)[{rank, peer->asInt()}].push_back(id);
    }
  }

  const auto& eps = plan.endpoints;
  auto byTime = [&](uint32_t a, uint32_t b) {
    return std::tie(eps[a].start, eps[a].end, eps[a].track, eps[a].index) <
           std::tie(eps[b].start, eps[b].end, eps[b].track, eps[b].index);
  };
  for (auto& [id, group] : byFlowId) {
    if (group.size() < 2) continue;
    std::sort(group.begin(), group.end(), [&](uint32_t a, uint32_t b) {
      const int ra = role(eps[a].kind), rb = role(eps[b].kind);
      return ra != rb ? ra < rb : byTime(a, b);
    });
    plan.groups.push_back(std::move(group));
  }
  for (auto& [key, out] : sends) {
    auto it = recvs.find({static_cast<RankId>(key.second), key.first});
    if (it == recvs.end()) continue;
    auto& in = it->second;
    std::sort(out.begin(), out.end(), byTime);
    std::sort(in.begin(), in.end(), byTime);
    for (size_t n = 0; n < std::min(out.size(), in.size()); ++n) plan.groups.push_back({out[n], in[n]});
  }

  plan.byTrack.resize(store.trackCount());
  for (const auto& group : plan.groups)
    for (uint32_t e : group) plan.byTrack[eps[e].track].emplace_back(eps[e].index, e);
  for (auto& v : plan.byTrack) std::sort(v.begin(), v.end());
  return plan;
}

}  // namespace trainscope::core::chrome
