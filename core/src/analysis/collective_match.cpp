#include "trainscope/core/analysis/collective_match.h"

#include <algorithm>
#include <map>
#include <utility>

namespace trainscope::core {

namespace {
int64_t median(std::vector<int64_t>& v) {
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2) return *mid;
  const int64_t upper = *mid;
  const int64_t lower = *std::max_element(v.begin(), mid);
  return lower + (upper - lower) / 2;
}
}  // namespace

std::vector<MatchedCollective> matchCollectives(const TraceStore& store) {
  std::map<std::pair<int64_t, int64_t>, MatchedCollective> byKey;
  for (TrackId t = 0; t < store.trackCount(); ++t) {
    const TrackEvents& ev = store.rawEvents(t);
    const RankId rank = store.track(t).rank;
    for (size_t i = 0; i < ev.size(); ++i) {
      if (ev.kind(i) != EventKind::Collective) continue;
      const Attr* hash = ev.findAttr(i, AttrKey::CommHash);
      const Attr* seq = ev.findAttr(i, AttrKey::Seq);
      if (!hash || !seq) continue;
      MatchedCollective& m = byKey[{hash->asInt(), seq->asInt()}];
      m.commHash = hash->asInt();
      m.seq = seq->asInt();
      const bool seen = std::any_of(m.ranks.begin(), m.ranks.end(),
                                    [rank](const CollectiveOccurrence& o) { return o.rank == rank; });
      if (!seen) m.ranks.push_back({rank, t, ev.start(i), ev.end(i)});
    }
  }
  std::vector<MatchedCollective> out;
  for (auto& [key, m] : byKey) {
    if (m.ranks.size() < 2) continue;
    std::sort(m.ranks.begin(), m.ranks.end(),
              [](const CollectiveOccurrence& a, const CollectiveOccurrence& b) { return a.rank < b.rank; });
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<CollectiveSkew> estimateSkewFromCollectives(const std::vector<MatchedCollective>& matched,
                                                        RankId reference) {
  std::map<RankId, std::vector<int64_t>> deltas;
  for (const MatchedCollective& m : matched) {
    const auto ref = std::find_if(m.ranks.begin(), m.ranks.end(),
                                  [reference](const CollectiveOccurrence& o) { return o.rank == reference; });
    if (ref == m.ranks.end()) continue;
    for (const CollectiveOccurrence& o : m.ranks)
      if (o.rank != reference) deltas[o.rank].push_back(o.endNs - ref->endNs);
  }
  std::vector<CollectiveSkew> out;
  for (auto& [rank, d] : deltas) {
    CollectiveSkew s;
    s.rank = rank;
    s.samples = d.size();
    s.offsetNs = median(d);
    for (int64_t& x : d) x = x > s.offsetNs ? x - s.offsetNs : s.offsetNs - x;
    s.madNs = median(d);
    out.push_back(s);
  }
  return out;
}

}  // namespace trainscope::core
