// Straggler attribution by last arrival (stragglers.h, docs/ANALYSIS.md "Straggler attribution").
#include "trainscope/core/analysis/stragglers.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "trainscope/core/analysis/intervals.h"

namespace trainscope::core {
namespace {

double ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

template <class T>
T medianOf(std::vector<T> v) {
  if (v.empty()) return T{};
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2) return *mid;
  const T upper = *mid;
  const T lower = *std::max_element(v.begin(), mid);
  return lower + (upper - lower) / 2;
}

struct StepWindow {
  int64_t start = 0, end = 0, step = 0;
};

struct RankData {
  std::vector<TrackId> tracks;
  std::vector<StepWindow> steps;  // by start
  // Matched collectives of this rank, by arrival: (enter, leave).
  std::vector<std::pair<int64_t, int64_t>> arrivals;

  // The step whose window holds t, or -1.
  int64_t stepAt(int64_t t) const {
    auto it = std::upper_bound(steps.begin(), steps.end(), t,
                               [](int64_t x, const StepWindow& w) { return x < w.start; });
    if (it == steps.begin()) return -1;
    --it;
    return t <= it->end ? it->step : -1;
  }
  std::map<int64_t, StepWindow> byStep;
  const StepWindow* window(int64_t step) const {
    const auto it = byStep.find(step);
    return it == byStep.end() ? nullptr : &it->second;
  }
  // The leave time of this rank's last matched collective that ended before t (-1: none).
  int64_t previousLeave(int64_t t) const {
    int64_t best = -1;
    auto it = std::lower_bound(arrivals.begin(), arrivals.end(), std::make_pair(t, INT64_MIN));
    // Collectives may overlap (several streams); look back a few.
    for (int k = 0; k < 16 && it != arrivals.begin(); ++k) {
      --it;
      if (it->second <= t) best = std::max(best, it->second);
    }
    return best;
  }
};

struct Arrival {
  RankId rank = -1;
  int64_t enter = 0, leave = 0;
};

struct Op {
  std::string group;
  int64_t step = -1;
  int64_t bytes = -1;
  std::vector<Arrival> ranks;
};

// Where a rank's time went in [w0, w1): compute, other communication, waiting for a peer, host.
struct Split {
  int64_t window = 0, compute = 0, comm = 0, waiting = 0, host = 0, prevLeave = -1;
};

Split splitWindow(const TraceStore& store, const RankData& rd, int64_t w0, int64_t w1) {
  Split s;
  s.window = std::max<int64_t>(0, w1 - w0);
  if (s.window == 0) return s;
  std::vector<Interval> k, c, r;
  for (TrackId t : rd.tracks) {
    const TrackEvents& ev = store.events(t);
    ev.forEachOverlapping(w0, w1, [&](size_t i) {
      const Interval iv{std::max(w0, ev.start(i)), std::min(w1, ev.end(i))};
      switch (ev.kind(i)) {
        case EventKind::Kernel:
          k.push_back(iv);
          break;
        case EventKind::Collective:
        case EventKind::P2PSend:
        case EventKind::Memcpy:
          c.push_back(iv);
          break;
        case EventKind::P2PRecv:
          r.push_back(iv);
          break;
        default:
          break;
      }
    });
  }
  const IntervalList K = unionOf(std::move(k));
  const IntervalList C = subtract(unionOf(std::move(c)), K);
  const IntervalList R = subtract(subtract(unionOf(std::move(r)), K), C);
  s.compute = totalLength(K);
  s.comm = totalLength(C);
  s.waiting = totalLength(R);
  s.host = std::max<int64_t>(0, s.window - s.compute - s.comm - s.waiting);
  return s;
}

// Time per event name of the cause's kind on a rank in [w0, w1) (clipped to the window).
std::map<std::string, int64_t> namedTimes(const TraceStore& store, const RankData& rd, int64_t w0, int64_t w1,
                                          const std::string& cause) {
  std::map<std::string, int64_t> out;
  for (TrackId t : rd.tracks) {
    const TrackEvents& ev = store.events(t);
    ev.forEachOverlapping(w0, w1, [&](size_t i) {
      const EventKind kind = ev.kind(i);
      bool want = false;
      if (cause == "compute") want = kind == EventKind::Kernel;
      else if (cause == "host") want = kind == EventKind::Range;
      else if (cause == "communication") want = kind == EventKind::Collective || kind == EventKind::P2PSend;
      else if (cause == "waiting") want = kind == EventKind::P2PRecv;
      if (!want) return;
      const int64_t len = std::min(w1, ev.end(i)) - std::max(w0, ev.start(i));
      if (len > 0) out[std::string(store.str(ev.name(i)))] += len;
    });
  }
  return out;
}

}  // namespace

StragglerReport findStragglers(const TraceStore& store, const StragglerOptions& options) {
  StragglerReport out;
  std::map<RankId, RankData> ranks;
  for (TrackId t = 0; t < store.trackCount(); ++t) ranks[store.track(t).rank].tracks.push_back(t);
  out.ranks = static_cast<int>(ranks.size());

  // Step windows per rank (one per step number: the first met).
  std::vector<int64_t> stepLengths;
  for (auto& [rank, rd] : ranks) {
    std::map<int64_t, StepWindow> bySteps;
    for (TrackId t : rd.tracks) {
      const TrackEvents& ev = store.events(t);
      for (size_t i = 0; i < ev.size(); ++i) {
        if (ev.kind(i) != EventKind::Step) continue;
        const Attr* a = ev.findAttr(i, AttrKey::Step);
        const int64_t step = a ? a->asInt() : -1;
        if (step < 0) continue;
        bySteps.try_emplace(step, StepWindow{ev.start(i), ev.end(i), step});
      }
    }
    rd.byStep = bySteps;
    for (const auto& [step, w] : bySteps) {
      rd.steps.push_back(w);
      stepLengths.push_back(w.end - w.start);
    }
    std::sort(rd.steps.begin(), rd.steps.end(),
              [](const StepWindow& a, const StepWindow& b) { return a.start < b.start; });
  }
  out.medianStepMs = ms(medianOf(stepLengths));
  out.thresholdMs = std::max(options.minLateMs, options.minLateFraction * out.medianStepMs);

  // Collectives per rank, keyed so that the same operation has the same key on every rank.
  using Key = std::tuple<std::string, int64_t, int64_t>;  // group, step (-1: sequence-numbered), n
  std::map<Key, Op> ops;
  std::map<std::string, std::map<RankId, bool>> groupRanks;  // which ranks run each group
  for (auto& [rank, rd] : ranks) {
    struct Coll {
      int64_t start, end, bytes, step, seq;
      std::string group;
    };
    std::vector<Coll> colls;
    for (TrackId t : rd.tracks) {
      const TrackEvents& ev = store.events(t);
      for (size_t i = 0; i < ev.size(); ++i) {
        if (ev.kind(i) != EventKind::Collective) continue;
        Coll c{ev.start(i), ev.end(i), -1, rd.stepAt(ev.start(i)), -1, {}};
        if (const Attr* b = ev.findAttr(i, AttrKey::Bytes)) c.bytes = b->asInt();
        const Attr* hash = ev.findAttr(i, AttrKey::CommHash);
        const Attr* seq = ev.findAttr(i, AttrKey::Seq);
        if (hash && seq) {
          char buf[48];
          std::snprintf(buf, sizeof buf, "comm %llx", static_cast<unsigned long long>(hash->asInt()));
          c.group = std::string(store.str(ev.name(i))) + " [" + buf + "]";
          c.seq = seq->asInt();
        } else {
          if (c.step < 0) continue;  // outside any step: no way to line it up across ranks
          c.group = std::string(store.str(ev.name(i)));
          if (const Attr* b = ev.findAttr(i, AttrKey::Bucket)) c.group += " [bucket " + std::to_string(b->asInt()) + "]";
        }
        colls.push_back(std::move(c));
      }
    }
    std::sort(colls.begin(), colls.end(), [](const Coll& a, const Coll& b) { return a.start < b.start; });
    std::map<std::pair<std::string, int64_t>, int64_t> nth;
    for (const Coll& c : colls) {
      const Key key = c.seq >= 0 ? Key{c.group, -1, c.seq} : Key{c.group, c.step, nth[{c.group, c.step}]++};
      Op& op = ops[key];
      // Ranks are walked one after the other: this rank's earlier arrival at this key is the last one.
      if (!op.ranks.empty() && op.ranks.back().rank == rank) continue;
      op.group = c.group;
      if (op.step < 0) op.step = c.step;
      if (op.bytes < 0) op.bytes = c.bytes;
      op.ranks.push_back({rank, c.start, c.end});
      groupRanks[c.group][rank] = true;
    }
  }
  // Only operations every rank of their group took part in (a live window or a flight recorder
  // starts at different steps on different ranks).
  std::vector<const Op*> matched;
  for (const auto& [key, op] : ops) {
    if (op.ranks.size() < 2 || op.ranks.size() < groupRanks[op.group].size()) continue;
    matched.push_back(&op);
    for (const Arrival& a : op.ranks) ranks[a.rank].arrivals.emplace_back(a.enter, a.leave);
  }
  out.matchedCollectives = static_cast<int>(matched.size());
  for (auto& [rank, rd] : ranks) std::sort(rd.arrivals.begin(), rd.arrivals.end());

  if (options.keepCollectives > 0) {
    std::vector<const Op*> recent = matched;
    auto firstEnter = [](const Op* o) {
      int64_t t = INT64_MAX;
      for (const Arrival& a : o->ranks) t = std::min(t, a.enter);
      return t;
    };
    std::sort(recent.begin(), recent.end(), [&](const Op* a, const Op* b) { return firstEnter(a) < firstEnter(b); });
    const size_t from = recent.size() > static_cast<size_t>(options.keepCollectives)
                            ? recent.size() - static_cast<size_t>(options.keepCollectives)
                            : 0;
    for (size_t i = from; i < recent.size(); ++i) {
      const Op& o = *recent[i];
      MatchedArrivals m;
      m.op = o.group;
      m.step = o.step;
      m.bytes = o.bytes;
      const Arrival* last = &o.ranks.front();
      for (const Arrival& a : o.ranks) {
        m.ranks.push_back({a.rank, a.enter, a.leave});
        if (a.enter > last->enter) last = &a;
      }
      std::vector<int64_t> others;
      for (const Arrival& a : o.ranks)
        if (&a != last) others.push_back(a.enter);
      m.lastRank = last->rank;
      m.lateMs = ms(last->enter - medianOf(others));
      std::sort(m.ranks.begin(), m.ranks.end(),
                [](const MatchedArrivals::Rank& a, const MatchedArrivals::Rank& b) { return a.rank < b.rank; });
      out.collectives.push_back(std::move(m));
    }
  }

  // The last arrival of every matched operation, kept when it is late enough.
  struct Candidate {
    const Op* op;
    const Arrival* last;
    double lateMs;
    int64_t medianEnter;
  };
  // The noise floor: how late the second-to-last rank arrives (the others' own jitter: descheduled
  // threads, OS noise), p95 over the operations with at least 3 ranks. A last arrival is reported
  // only when it stands out of that too.
  {
    std::vector<int64_t> second;
    for (const Op* op : matched) {
      if (op->ranks.size() < 3) continue;
      std::vector<int64_t> enters;
      for (const Arrival& a : op->ranks) enters.push_back(a.enter);
      std::sort(enters.begin(), enters.end());
      const int64_t secondLast = enters[enters.size() - 2];
      enters.pop_back();
      enters.pop_back();
      enters.push_back(secondLast);  // the others of the last: all but the last
      second.push_back(secondLast - medianOf(enters));
    }
    if (!second.empty()) {
      std::sort(second.begin(), second.end());
      out.noiseMs = ms(second[std::min(second.size() - 1, second.size() * 95 / 100)]);
      if (options.noiseFactor > 0) out.thresholdMs = std::max(out.thresholdMs, options.noiseFactor * out.noiseMs);
    }
  }
  std::map<int64_t, std::vector<Candidate>> byStep;
  std::map<int64_t, bool> stepsSeen;
  for (const Op* op : matched) {
    if (op->step >= 0) stepsSeen[op->step] = true;
    const auto last = std::max_element(op->ranks.begin(), op->ranks.end(),
                                       [](const Arrival& a, const Arrival& b) { return a.enter < b.enter; });
    std::vector<int64_t> others;
    for (const Arrival& a : op->ranks)
      if (&a != &*last) others.push_back(a.enter);
    const int64_t med = medianOf(others);
    const double late = ms(last->enter - med);
    if (late >= out.thresholdMs) byStep[op->step].push_back({op, &*last, late, med});
  }
  // Per step, the first operation where a rank came late (by the others' arrival): later
  // collectives of the step inherit its lateness (they wait behind it), and only the first one's
  // window holds the cause. late_ms is that rank's largest lateness in the step.
  std::map<int64_t, LateArrival> perStep;
  for (auto& [step, cands] : byStep) {
    const Candidate& c = *std::min_element(cands.begin(), cands.end(), [](const Candidate& x, const Candidate& y) {
      return x.medianEnter < y.medianEnter;
    });
    const Op* op = c.op;
    const Arrival* last = c.last;
    LateArrival la;
    la.step = step;
    la.op = op->group;
    la.bytes = op->bytes;
    la.rank = last->rank;
    la.lateMs = c.lateMs;
    for (const Candidate& x : cands)
      if (x.last->rank == la.rank) la.lateMs = std::max(la.lateMs, x.lateMs);
    la.ranks = static_cast<int>(op->ranks.size());

    // Why: each rank's time since it left its previous collective (or began the step), split
    // into compute / communication / waiting / host, the late rank against the others' median.
    auto windowStart = [&](const RankData& rd, int64_t enter) {
      const int64_t prev = rd.previousLeave(enter);
      if (prev >= 0) return prev;
      const StepWindow* w = rd.window(op->step);
      return w ? std::min(w->start, enter) : enter;
    };
    Split lateSplit;
    std::vector<int64_t> oc, om, ow, oh, op0;
    std::vector<std::pair<int64_t, int64_t>> otherWindows;
    for (const Arrival& a : op->ranks) {
      const RankData& rd = ranks[a.rank];
      const int64_t w0 = windowStart(rd, a.enter);
      Split sp = splitWindow(store, rd, w0, a.enter);
      sp.prevLeave = w0;
      if (&a == last) {
        lateSplit = sp;
      } else {
        oc.push_back(sp.compute);
        om.push_back(sp.comm);
        ow.push_back(sp.waiting);
        oh.push_back(sp.host);
        op0.push_back(w0);
      }
    }
    const int64_t startLate = lateSplit.prevLeave - medianOf(op0);  // left the previous one late
    const std::pair<const char*, int64_t> excess[] = {
        {"compute", lateSplit.compute - medianOf(oc)},
        {"host", lateSplit.host - medianOf(oh)},
        {"communication", lateSplit.comm - medianOf(om) + std::max<int64_t>(0, startLate)},
        {"waiting", lateSplit.waiting - medianOf(ow)},
    };
    const auto* best = &excess[0];
    for (const auto& e : excess)
      if (e.second > best->second) best = &e;
    la.cause = best->second > 0 ? best->first : "unknown";
    if (la.cause != "unknown") {
      // The event name whose time the late rank has most in excess of the others' median.
      const auto mine = namedTimes(store, ranks[la.rank], lateSplit.prevLeave, last->enter, la.cause);
      std::map<std::string, std::vector<int64_t>> theirs;
      size_t n = 0;
      for (const Arrival& a : op->ranks) {
        if (&a == last) continue;
        const RankData& rd = ranks[a.rank];
        for (const auto& [name, t] : namedTimes(store, rd, windowStart(rd, a.enter), a.enter, la.cause))
          theirs[name].push_back(t);
        ++n;
      }
      int64_t bestExcess = 0;
      for (const auto& [name, t] : mine) {
        std::vector<int64_t> v = theirs[name];
        v.resize(n, 0);  // ranks without that name had none of it
        const int64_t ex = t - medianOf(v);
        if (ex > bestExcess) {
          bestExcess = ex;
          la.what = name;
        }
      }
    }
    perStep[step] = std::move(la);
  }
  out.steps = static_cast<int>(stepsSeen.size());
  for (auto& [step, la] : perStep) out.perStep.push_back(std::move(la));

  // Per rank.
  std::map<RankId, Straggler> byRank;
  std::map<RankId, std::map<std::string, int>> causes, whats;
  for (const LateArrival& la : out.perStep) {
    Straggler& s = byRank[la.rank];
    s.rank = la.rank;
    s.steps.push_back(la.step);
    s.lateMs += la.lateMs;
    s.maxLateMs = std::max(s.maxLateMs, la.lateMs);
    ++causes[la.rank][la.cause];
    if (!la.what.empty()) ++whats[la.rank][la.what];
  }
  auto mostCommon = [](const std::map<std::string, int>& m) {
    std::string best;
    int n = 0;
    for (const auto& [k, c] : m)
      if (c > n) {
        n = c;
        best = k;
      }
    return best;
  };
  // A rank late once is noise or a blip (per_step keeps it); one that holds back at least 2 steps
  // and 5 % of them is a straggler now.
  const size_t minSteps = std::max<size_t>(2, static_cast<size_t>(std::ceil(0.05 * out.steps)));
  for (auto& [rank, s] : byRank) {
    if (s.steps.size() < minSteps) continue;
    s.lateMs /= static_cast<double>(s.steps.size());
    s.cause = mostCommon(causes[rank]);
    s.what = mostCommon(whats[rank]);
    out.stragglers.push_back(std::move(s));
  }
  std::sort(out.stragglers.begin(), out.stragglers.end(), [](const Straggler& a, const Straggler& b) {
    if (a.steps.size() != b.steps.size()) return a.steps.size() > b.steps.size();
    return a.lateMs > b.lateMs;
  });
  return out;
}

std::string stragglerReportJson(const StragglerReport& r, int indent) {
  using J = nlohmann::ordered_json;
  auto num = [](double v) { return std::isfinite(v) ? J(std::round(v * 1000) / 1000) : J(nullptr); };
  J j;
  j["ranks"] = r.ranks;
  j["steps"] = r.steps;
  j["matched_collectives"] = r.matchedCollectives;
  j["median_step_ms"] = num(r.medianStepMs);
  j["threshold_ms"] = num(r.thresholdMs);
  j["noise_ms"] = num(r.noiseMs);
  J list = J::array();
  for (const Straggler& s : r.stragglers)
    list.push_back({{"rank", s.rank},
                    {"steps", s.steps},
                    {"late_ms", num(s.lateMs)},
                    {"max_late_ms", num(s.maxLateMs)},
                    {"cause", s.cause},
                    {"what", s.what}});
  j["stragglers"] = std::move(list);
  J steps = J::array();
  for (const LateArrival& la : r.perStep)
    steps.push_back({{"step", la.step},
                     {"rank", la.rank},
                     {"late_ms", num(la.lateMs)},
                     {"cause", la.cause},
                     {"what", la.what},
                     {"op", la.op},
                     {"bytes", la.bytes},
                     {"ranks", la.ranks}});
  j["per_step"] = std::move(steps);
  if (!r.collectives.empty()) {
    J cs = J::array();
    for (const MatchedArrivals& m : r.collectives) {
      int64_t t0 = INT64_MAX;
      for (const auto& a : m.ranks) t0 = std::min(t0, a.enterNs);
      J rs = J::array();
      for (const auto& a : m.ranks)
        rs.push_back({{"rank", a.rank}, {"enter_ms", num(ms(a.enterNs - t0))}, {"leave_ms", num(ms(a.leaveNs - t0))}});
      cs.push_back({{"op", m.op},
                    {"step", m.step},
                    {"bytes", m.bytes},
                    {"last_rank", m.lastRank},
                    {"late_ms", num(m.lateMs)},
                    {"ranks", std::move(rs)}});
    }
    j["collectives"] = std::move(cs);
  }
  return j.dump(indent, ' ', false, J::error_handler_t::replace);
}

}  // namespace trainscope::core
