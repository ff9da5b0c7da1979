// Critical path of one step across ranks: walk back from the event that ends last. On a rank the
// predecessor is the event that ended last before the current one began; a receive that waited
// for its send jumps to the sender, a collective that waited for a late participant jumps to
// that participant. Gaps between path events are waiting.
#include <algorithm>
#include <set>

#include "analysis/state.h"

namespace trainscope::core {
namespace {

struct Node {
  RankId rank = 0;
  const WinEvent* e = nullptr;
};

bool leafCompute(EventKind k) {
  return k == EventKind::Kernel || k == EventKind::MicroBatchF || k == EventKind::MicroBatchB ||
         k == EventKind::MicroBatchW;
}

}  // namespace

CriticalPathStep criticalPath(const TraceStore& store, int64_t step,
                              const std::map<RankId, WindowEvents>& perRank) {
  CriticalPathStep out;
  out.step = step;
  std::map<RankId, std::vector<const WinEvent*>> byEnd;
  std::map<int64_t, const WinEvent*> sends;
  std::map<std::pair<int64_t, int64_t>, std::vector<Node>> collectives;
  int64_t stepStart = INT64_MAX;
  size_t total = 0;
  for (const auto& [rank, we] : perRank) {
    stepStart = std::min(stepStart, we.window.start);
    const bool leaves = std::any_of(we.events.begin(), we.events.end(),
                                    [](const WinEvent& e) { return leafCompute(e.kind); });
    auto& list = byEnd[rank];
    for (const WinEvent& e : we.events) {
      if (!(e.comm || (e.compute && (leafCompute(e.kind) || !leaves)))) continue;
      list.push_back(&e);
      if (e.kind == EventKind::P2PSend && e.flow >= 0) sends[e.flow] = &e;
      if (e.kind == EventKind::Collective && e.seq >= 0)
        collectives[{e.commHash, e.seq}].push_back({rank, &e});
    }
    std::sort(list.begin(), list.end(), [](const WinEvent* a, const WinEvent* b) {
      return a->end < b->end || (a->end == b->end && a->start < b->start);
    });
    total += list.size();
  }
  auto rankOf = [&](const WinEvent* e) {
    for (const auto& [rank, we] : perRank)
      if (!we.events.empty() && e >= &we.events.front() && e <= &we.events.back()) return rank;
    return RankId{-1};
  };
  auto localPred = [&](RankId rank, int64_t t) -> Node {
    const auto& list = byEnd[rank];
    auto it = std::upper_bound(list.begin(), list.end(), t,
                               [](int64_t x, const WinEvent* e) { return x < e->end; });
    if (it == list.begin()) return {};
    return {rank, *std::prev(it)};
  };

  Node cur;
  for (const auto& [rank, list] : byEnd)
    if (!list.empty() && (!cur.e || list.back()->end > cur.e->end)) cur = {rank, list.back()};
  if (!cur.e) return out;
  const int64_t lastEnd = cur.e->end;
  int64_t frontier = lastEnd;
  double compute = 0, comm = 0, wait = 0;
  std::vector<CriticalSegment> segs;
  // Each step back ends before the current event began, so the walk cannot revisit an event;
  // the bound only guards against malformed input.
  for (size_t guard = 0; cur.e && guard <= total && frontier > stepStart; ++guard) {
    const WinEvent& e = *cur.e;
    Node remote;    // waited for: continue before remote.e's start on its rank
    Node producer;  // a receive without its send: the peer's op that ended as the data came
    auto send = e.flow >= 0 ? sends.find(e.flow) : sends.end();
    if (e.kind == EventKind::P2PRecv && send != sends.end()) {
      if (send->second->start > e.start) remote = {rankOf(send->second), send->second};
    } else if (e.kind == EventKind::P2PRecv && e.peer >= 0 && e.peer != cur.rank &&
               byEnd.count(static_cast<RankId>(e.peer))) {
      const Node n = localPred(static_cast<RankId>(e.peer), e.end);
      if (n.e && n.e->end > e.start) producer = n;
    } else if (e.kind == EventKind::Collective && e.seq >= 0) {
      for (const Node& n : collectives[{e.commHash, e.seq}])
        if (n.rank != cur.rank && n.e->start > e.start && (!remote.e || n.e->start > remote.e->start))
          remote = n;
    }
    const int64_t segEnd = std::min(e.end, frontier);
    int64_t effStart = remote.e ? std::min(remote.e->start, segEnd) : producer.e ? producer.e->end : e.start;
    effStart = std::max(effStart, stepStart);
    effStart = std::min(effStart, segEnd);
    wait += static_cast<double>(frontier - segEnd);
    const double busy = static_cast<double>(segEnd - effStart);
    (e.comm ? comm : compute) += busy;
    out.perRankMs[cur.rank] += busy / 1e6;
    segs.push_back({cur.rank, e.kind, std::string(store.str(e.name)), effStart, segEnd, e.ref});
    frontier = effStart;
    if (busy <= 0) segs.pop_back();  // a receive that did not wait adds nothing to the path
    cur = remote.e     ? localPred(remote.rank, remote.e->start)
          : producer.e ? producer
                       : localPred(cur.rank, effStart);
    if (cur.e && cur.e->end <= stepStart) break;
  }
  wait += static_cast<double>(std::max<int64_t>(0, frontier - stepStart));
  std::reverse(segs.begin(), segs.end());
  out.segments = std::move(segs);
  out.lengthMs = static_cast<double>(lastEnd - stepStart) / 1e6;
  out.computeMs = compute / 1e6;
  out.commMs = comm / 1e6;
  out.waitMs = wait / 1e6;
  return out;
}

}  // namespace trainscope::core
