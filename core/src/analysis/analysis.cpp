// Analyzer: finds step windows, analyses each finished step once (all ranks), keeps per-step
// records; result() aggregates them (analysis_aggregate.cpp).
#include <chrono>
#include "trainscope/core/analysis/analysis.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "analysis/state.h"

namespace trainscope::core {
namespace {

constexpr int64_t kFarPast = INT64_MIN / 4;
constexpr int64_t kFarFuture = INT64_MAX / 4;

std::vector<StringId> phaseNames(const TraceStore& store) {
  std::vector<StringId> ids;
  for (const char* n : {"forward", "backward", "optimizer"})
    if (auto id = store.strings().find(n)) ids.push_back(*id);
  return ids;
}

StringId discoName(const TraceStore& store) {
  auto id = store.strings().find("disco exchange");
  return id ? *id : UINT32_MAX;
}

// The power-of-two class of a byte count; 2^62 for everything from 2^62 on (a count near 2^63
// doubled c past INT64_MAX: found by fuzz_analysis).
int64_t sizeClass(double bytes) {
  if (!(bytes >= 1)) return 0;
  int64_t c = 1;
  while (c < (int64_t{1} << 62) && static_cast<double>(c) * 2 <= bytes) c *= 2;
  return c;
}

}  // namespace

std::string collectiveType(EventKind kind, std::string_view name) {
  if (kind == EventKind::P2PSend || kind == EventKind::P2PRecv) return "sendrecv";
  std::string n;
  for (char c : name)
    if (std::isalnum(static_cast<unsigned char>(c)))
      n += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* t : {"allreduce", "reducescatter", "allgather", "alltoall", "broadcast", "reduce",
                        "sendrecv", "send", "recv"})
    if (n.find(t) != std::string::npos)
      return std::string(t) == "send" || std::string(t) == "recv" ? "sendrecv" : t;
  return "other";
}

double busBandwidthFactor(const std::string& c, int n) {
  if (n < 1) return kNaN;
  const double dn = n;
  if (c == "allreduce") return 2 * (dn - 1) / dn;
  if (c == "reducescatter" || c == "allgather" || c == "alltoall") return (dn - 1) / dn;
  return 1;  // broadcast, reduce, sendrecv and anything else
}

double discoEquilibriumSparsity(double a, int n) {
  if (std::isnan(a) || n < 1) return kNaN;
  if (a < 1) return 0;
  const double x = a * n - n;
  return x / (x + 1);
}

std::string knobAt(const AnalyzerState& s, const std::string& knob, int64_t step, const char** source) {
  const KnobEvent* best = nullptr;
  for (const KnobEvent& k : s.knobs) {
    if (k.knob != knob || k.step > step) continue;
    if (!best || k.step > best->step || (k.step == best->step && k.timeNs >= best->timeNs)) best = &k;
  }
  if (source) *source = best ? "knob" : "metadata";
  if (best) return best->value;
  auto it = s.metadata.find("knob." + knob);
  return it == s.metadata.end() ? std::string() : it->second;
}

void AnalyzerState::refreshLayout(const TraceStore& store) {
  tracksByRank.clear();
  for (TrackId t = 0; t < store.trackCount(); ++t) tracksByRank[store.track(t).rank].push_back(t);
  for (const auto& [r, info] : store.ranks()) allRanks.insert(r);
  for (const auto& [r, tracks] : tracksByRank) allRanks.insert(r);
  metadata = store.metadata();
}

void AnalyzerState::scanInstants(const TraceStore& store, int64_t from) {
  const StringId accuracy = store.strings().find("accuracy").value_or(UINT32_MAX);
  std::set<std::pair<RankId, int64_t>> incomplete;
  for (TrackId t = 0; t < store.trackCount(); ++t) {
    const RankId rank = store.track(t).rank;
    const TrackEvents& ev = store.events(t);
    ev.forEachOverlapping(from, kFarFuture, [&](size_t i) {
      const EventKind k = ev.kind(i);
      if (k == EventKind::Step) {
        const Attr* a = ev.findAttr(i, AttrKey::Step);
        const int64_t n = a ? a->asInt() : static_cast<int64_t>(windows[rank].size());
        if (ev.end(i) <= ev.start(i)) {
          incomplete.insert({rank, n});
          return;
        }
        Interval& w = windows[rank].try_emplace(n, Interval{ev.start(i), ev.end(i)}).first->second;
        w = {std::min(w.start, ev.start(i)), std::max(w.end, ev.end(i))};
      } else if (k == EventKind::KnobChange) {
        const Attr* name = ev.findAttr(i, AttrKey::Knob);
        const Attr* value = ev.findAttr(i, AttrKey::KnobValue);
        const Attr* step = ev.findAttr(i, AttrKey::Step);
        if (!name || !value) return;
        KnobEvent e{step ? step->asInt() : -1, ev.start(i), std::string(store.str(name->asString())),
                    std::string(store.str(value->asString()))};
        if (knobSeen.insert({e.step, e.knob, e.value}).second) knobs.push_back(std::move(e));
      } else if (k == EventKind::Counter) {
        const Attr* v = ev.findAttr(i, AttrKey::Value);
        if (!v) return;
        const double value = v->type == AttrType::Double ? v->asDouble() : static_cast<double>(v->asInt());
        if (ev.name(i) == accuracy) {
          const Attr* step = ev.findAttr(i, AttrKey::Step);
          accuracySamples[{rank, ev.start(i)}] = {step ? step->asInt() : -1, value};
        } else if (const std::string_view name = store.str(ev.name(i)); name.starts_with("disco_bench_")) {
          discoBench[rank][std::string(name)][ev.start(i)] = value;
        }
      }
    });
  }
  for (const auto& [rank, n] : incomplete)
    if (!windows[rank].count(n) && incompleteSeen.insert({rank, n}).second) ++incompleteSteps;
}

void AnalyzerState::rememberDpExample(const RankStepRecord& rec, const WindowEvents& we) {
  const int64_t t0 = we.window.start;
  auto rel = [t0](const IntervalList& l) {
    std::vector<std::pair<double, double>> out;
    for (const Interval& i : l)
      out.push_back({static_cast<double>(i.start - t0) / 1e6, static_cast<double>(i.end - t0) / 1e6});
    return out;
  };
  dpExample =
      DpExample{rec.rank, rec.step, static_cast<double>(we.window.length()) / 1e6, rel(we.compute), {}, {}};
  for (const BucketRecord& b : rec.buckets) {
    dpExample.buckets[b.bucket] = rel(b.intervals);
    if (b.readyRel >= 0) dpExample.ready[b.bucket] = static_cast<double>(b.readyRel) / 1e6;
  }
}

// Per ordered pair of ranks (a -> b): a's P2PSend events to b and b's P2PRecv events from a, in
// start order, are one message each (MPI keeps the order per pair and tag; the pipeline sends
// one kind of message per direction). Where the receive started first -- the receiver was
// waiting -- the time from the send's start to the receive's end is a hand-off it waited for.
void AnalyzerState::recordHandoffs(const std::map<RankId, WindowEvents>& perRank, size_t first) {
  std::map<std::pair<RankId, RankId>, std::vector<const WinEvent*>> sends, recvs;
  for (const auto& [rank, we] : perRank)
    for (const WinEvent& e : we.events) {
      if (e.peer < 0) continue;
      if (e.kind == EventKind::P2PSend) sends[{rank, static_cast<RankId>(e.peer)}].push_back(&e);
      if (e.kind == EventKind::P2PRecv) recvs[{static_cast<RankId>(e.peer), rank}].push_back(&e);
    }
  std::map<RankId, RankStepRecord*> rec;
  for (size_t i = first; i < records.size(); ++i) rec[records[i].rank] = &records[i];
  for (const auto& [pair, rs] : recvs) {
    auto it = sends.find(pair);
    auto rt = rec.find(pair.second);
    if (it == sends.end() || rt == rec.end()) continue;
    const auto& ss = it->second;  // both in start order (WindowEvents are sorted)
    for (size_t i = 0; i < rs.size() && i < ss.size(); ++i)
      if (rs[i]->start < ss[i]->start && rs[i]->end >= ss[i]->start) {
        rt->second->handoff += rs[i]->end - ss[i]->start;
        ++rt->second->handoffs;
      }
  }
}

void AnalyzerState::analyseStep(const TraceStore& store, int64_t step) {
  const std::vector<StringId> phases = phaseNames(store);
  const StringId disco = discoName(store);
  if (nameClass.size() != store.strings().size()) classifyNames(store.strings(), nameClass);
  std::map<RankId, WindowEvents> perRank;
  const size_t firstRecord = records.size();
  for (auto& [rank, ws] : windows) {
    auto it = ws.find(step);
    if (it == ws.end()) continue;
    const std::vector<TrackId>& tracks = tracksByRank[rank];
    WindowEvents we = collectWindow(store, tracks, it->second, phases, disco, nameClass);
    RankStepRecord rec = recordWindow(we, rank, step);
    recordPipeline(we, rec);
    auto last = lastWindowEnd.find(rank);
    const int64_t prevEnd = last == lastWindowEnd.end() ? kFarPast : last->second;
    rec.outside = activityIn(store, tracks, {prevEnd, it->second.start}, phases);
    lastWindowEnd[rank] = std::max(prevEnd, it->second.end);
    for (const WinEvent& e : we.events) {
      if (!e.comm || e.bytes <= 0 || e.start < we.window.start || e.end <= e.start) continue;
      // A decentralized bucket exchanges with its neighbours only: sendrecv (bus factor 1).
      const std::string type = e.neighbour ? std::string("sendrecv") : collectiveType(e.kind, store.str(e.name));
      BwAcc& acc = bandwidth[{type, e.commHash, sizeClass(e.bytes)}];
      ++acc.count;
      acc.bytes += e.bytes;
      acc.time += e.end - e.start;
      if (e.bytesSent >= 0) {
        ++acc.counted;
        acc.sent += e.bytesSent;
        acc.received += std::max(0.0, e.bytesReceived);
        acc.countedTime += e.end - e.start;
      }
      commRanks[e.commHash].insert(rank);
    }
    if (!rec.buckets.empty()) rememberDpExample(rec, we);
    records.push_back(std::move(rec));
    perRank.emplace(rank, std::move(we));
  }
  recordHandoffs(perRank, firstRecord);
  if (!perRank.empty()) critical[step] = criticalPath(store, step, perRank);
  done.insert(step);
}

int AnalyzerState::analyse(const TraceStore& store, bool all, int64_t budgetNs) {
  const auto started = std::chrono::steady_clock::now();
  stoppedEarly = false;
  refreshLayout(store);
  scanInstants(store, scanFrom);
  // Next scan starts where the slowest rank's newest event starts: late batches of a rank
  // that lags behind are still seen.
  int64_t next = kFarFuture;
  bool any = false;
  for (const auto& [rank, tracks] : tracksByRank) {
    int64_t newest = INT64_MIN;
    for (TrackId t : tracks) {
      const TrackEvents& ev = store.events(t);
      if (!ev.empty()) newest = std::max(newest, ev.starts().back());
    }
    if (newest != INT64_MIN) {
      newestByRank[rank] = newest;
      next = std::min(next, newest);
      any = true;
    }
  }
  if (any && !all) scanFrom = std::max(scanFrom, next);

  std::set<int64_t> pending;
  for (const auto& [rank, ws] : windows)
    for (const auto& [n, w] : ws)
      if (!done.count(n)) pending.insert(n);
  int analysed = 0;
  for (int64_t n : pending) {
    bool ready = all;
    if (!ready) {
      // Every rank has finished step n (or never had it but went on) and sent events from
      // after it: nothing of the step is still in flight.
      ready = true;
      for (const auto& [rank, ws] : windows) {
        if (ws.empty()) continue;
        auto it = ws.find(n);
        const int64_t newest = newestByRank.count(rank) ? newestByRank[rank] : INT64_MIN;
        if (it != ws.end() ? newest < it->second.end : ws.rbegin()->first < n) ready = false;
      }
    }
    if (!ready) break;
    analyseStep(store, n);
    ++analysed;
    if (budgetNs != INT64_MAX &&
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started).count() >
            budgetNs) {
      stoppedEarly = true;
      break;
    }
  }
  if (all) {
    const std::vector<StringId> phases = phaseNames(store);
    for (const auto& [rank, tracks] : tracksByRank) {
      auto last = lastWindowEnd.find(rank);
      const int64_t from = last == lastWindowEnd.end() ? kFarPast : last->second;
      outsideTail[rank] = activityIn(store, tracks, {from, kFarFuture}, phases);
    }
  }
  return analysed;
}

Analyzer::Analyzer() : s_(std::make_unique<AnalyzerState>()) {}
Analyzer::~Analyzer() = default;
int Analyzer::update(const TraceStore& store, int64_t budgetNs) {
  return s_->analyse(store, false, budgetNs);
}
bool Analyzer::caughtUp() const {
  return !s_->stoppedEarly;
}
int Analyzer::finish(const TraceStore& store) {
  const int n = s_->analyse(store, true, INT64_MAX);
  s_->hta = computeHta(store);  // whole-trace numbers: once, at the end
  return n;
}
AnalysisResult Analyzer::result(const TraceStore& store) const {
  AnalysisResult r = aggregate(*s_, store);
  r.hta = s_->hta;
  return r;
}
int Analyzer::analysedSteps() const {
  return static_cast<int>(s_->done.size());
}

int64_t Analyzer::safeEvictBeforeNs() const {
  if (s_->newestByRank.empty()) return INT64_MIN;
  int64_t safe = s_->scanFrom;
  // Steps are analysed in order, so the pending ones are the newest: walk back to the first
  // analysed one (O(pending), not O(steps)).
  for (const auto& [rank, ws] : s_->windows)
    for (auto it = ws.rbegin(); it != ws.rend() && !s_->done.count(it->first); ++it)
      safe = std::min(safe, it->second.start);
  return safe;
}

void Analyzer::evicted(const std::vector<size_t>& dropped, int64_t cutoffNs) {
  AnalyzerState& st = *s_;
  // The per-step state of analysed steps that ended, on every rank, before the cutoff goes with
  // their events: the live analysis covers the window (its memory is bounded by it too).
  std::map<int64_t, int64_t> lastEnd;  // step -> latest window end over ranks
  for (const auto& [rank, ws] : st.windows)
    for (const auto& [n, w] : ws) {
      auto [it, fresh] = lastEnd.try_emplace(n, w.end);
      if (!fresh) it->second = std::max(it->second, w.end);
    }
  std::set<int64_t> gone;
  for (const auto& [n, end] : lastEnd)
    if (end < cutoffNs && st.done.count(n)) gone.insert(n);
  if (!gone.empty()) {
    for (auto& [rank, ws] : st.windows) std::erase_if(ws, [&](const auto& kv) { return gone.count(kv.first) > 0; });
    std::erase_if(st.records, [&](const RankStepRecord& r) { return gone.count(r.step) > 0; });
    std::erase_if(st.critical, [&](const auto& kv) { return gone.count(kv.first) > 0; });
    std::erase_if(st.done, [&](int64_t n) { return gone.count(n) > 0; });
    std::erase_if(st.incompleteSeen, [&](const auto& rn) { return gone.count(rn.second) > 0; });
  }
  std::erase_if(st.accuracySamples, [&](const auto& kv) { return kv.first.second < cutoffNs; });
  for (auto& [rank, byName] : st.discoBench)
    for (auto& [name, series] : byName) std::erase_if(series, [&](const auto& kv) { return kv.first < cutoffNs; });

  auto rebase = [&](std::vector<EventRef>& refs) {
    size_t out = 0;
    for (const EventRef& r : refs) {
      const size_t k = r.track < dropped.size() ? dropped[r.track] : 0;
      if (r.index < k) continue;
      refs[out++] = {r.track, static_cast<uint32_t>(r.index - k)};
    }
    refs.resize(out);
    if (refs.capacity() > 2 * out + 16) refs.shrink_to_fit();
  };
  for (RankStepRecord& rec : st.records) {
    for (BucketRecord& b : rec.buckets) rebase(b.refs);
    for (LayerRecord& l : rec.layers) rebase(l.refs);
    rebase(rec.opRefs);
    std::erase_if(rec.overlays, [cutoffNs](const Overlay& o) { return o.endNs < cutoffNs; });
  }
}

AnalysisResult analyzeStore(const TraceStore& store) {
  Analyzer a;
  (void)a.finish(store);
  return a.result(store);
}

AnalysisResult analyzeStore(const TraceStore& store, int64_t fromStep, int64_t toStep) {
  Analyzer a;
  (void)a.finish(store);
  a.keepSteps(fromStep, toStep);
  return a.result(store);
}

void Analyzer::keepSteps(int64_t fromStep, int64_t toStep) {
  AnalyzerState& st = *s_;
  auto out = [&](int64_t n) { return n < fromStep || n > toStep; };
  for (auto& [rank, ws] : st.windows) std::erase_if(ws, [&](const auto& kv) { return out(kv.first); });
  std::erase_if(st.records, [&](const RankStepRecord& r) { return out(r.step); });
  std::erase_if(st.critical, [&](const auto& kv) { return out(kv.first); });
  std::erase_if(st.done, [&](int64_t n) { return out(n); });
  std::erase_if(st.incompleteSeen, [&](const auto& rn) { return out(rn.second); });
}

}  // namespace trainscope::core
