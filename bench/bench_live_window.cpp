// Live window benchmark (docs/RELIABILITY.md "Live memory"): what the GUI pays, under the data's
// exclusive lock, to let events older than its window leave memory, and what memory it keeps.
//
//   bench_live_window [--events N] [--window-events W]
//
// A synthetic multi-rank trace (core::synthesizeTrace, as bench_timeline) of N events is fed in
// time order into a live TraceStore + TimelineModel in rounds of ~2,000 events (TimelineModel::
// update each round, as the ingest does); the window is the time that W events span. As in
// SessionView, once the oldest event is more than window + window/8 older than the newest, every
// event starting before newest - window leaves: TraceStore::evictBefore + TimelineModel::evict
// -- timed, median and max over all evictions. The anchor, side by side: what a rebuild of the
// model over the kept events costs (TimelineModel::rebuild on the same store after the last
// eviction). Memory: store + model bytes at the end, with the window and without it (the same
// feed, no eviction). Prints markdown.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <tuple>
#include <vector>

#include "trainscope/core/synth/synth.h"
#include "trainscope/plots/timeline_model.h"

using namespace trainscope;
using Clock = std::chrono::steady_clock;

namespace {

double ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

struct Ref {
  int64_t start;
  core::TrackId track;
  uint32_t index;
};

struct Run {
  std::vector<double> evictMs, storeMs;
  std::vector<size_t> evicted;
  size_t keptAtEnd = 0;
  size_t bytesAtEnd = 0;
  double rebuildMs = 0;
};

Run feed(const core::TraceStore& src, const std::vector<Ref>& order, int64_t windowNs) {
  Run run;
  core::TraceStore live;
  for (core::TrackId t = 0; t < src.trackCount(); ++t) (void)live.addTrack(src.track(t));
  plots::TimelineModel model(live);
  model.rebuild();
  constexpr size_t kRound = 2000;
  for (size_t i = 0; i < order.size(); ++i) {
    const Ref& r = order[i];
    const core::TrackEvents& ev = src.rawEvents(r.track);
    core::EventRecord rec = ev.record(r.index);
    rec.name = live.intern(src.str(rec.name));
    live.append(r.track, rec, ev.attrs(r.index));
    if ((i + 1) % kRound != 0 && i + 1 != order.size()) continue;
    model.update();
    if (windowNs <= 0) continue;
    const int64_t newest = model.spanEnd();
    if (model.spanStart() >= newest - windowNs - windowNs / 8) continue;
    const int64_t cutoff = newest - windowNs;
    const auto a = Clock::now();
    const std::vector<size_t> dropped = live.evictBefore(cutoff);
    const auto b = Clock::now();
    model.evict(dropped, cutoff);
    run.evictMs.push_back(ms(Clock::now() - a));
    run.storeMs.push_back(ms(b - a));
    run.evicted.push_back(std::accumulate(dropped.begin(), dropped.end(), size_t{0}));
  }
  run.keptAtEnd = live.eventCount();
  run.bytesAtEnd = live.memoryBytes() + model.memoryBytes();
  const auto a = Clock::now();
  model.rebuild();
  run.rebuildMs = ms(Clock::now() - a);
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t events = 4'000'000, windowEvents = 1'000'000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--events")) events = std::strtoull(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "--window-events")) windowEvents = std::strtoull(argv[i + 1], nullptr, 10);
  }
  core::SynthOptions o;
  o.ranks = 8;
  o.kernelsPerStep = 256;
  o.steps = std::max<int>(1, static_cast<int>(events / (8 * 1043)));
  core::TraceStore src;
  (void)core::synthesizeTrace(src, o);
  src.flush();
  std::vector<Ref> order;
  order.reserve(src.eventCount());
  for (core::TrackId t = 0; t < src.trackCount(); ++t)
    for (uint32_t i = 0; i < src.rawEvents(t).size(); ++i) order.push_back({src.rawEvents(t).start(i), t, i});
  std::stable_sort(order.begin(), order.end(), [](const Ref& a, const Ref& b) { return a.start < b.start; });
  const auto [t0, t1] = src.timeSpan();
  const int64_t windowNs = static_cast<int64_t>(static_cast<double>(t1 - t0) *
                                                static_cast<double>(windowEvents) / static_cast<double>(order.size()));

  const Run with = feed(src, order, windowNs);
  const Run without = feed(src, order, 0);
  std::vector<double> e = with.evictMs, st = with.storeMs;
  std::sort(e.begin(), e.end());
  std::sort(st.begin(), st.end());
  const double perChunk = with.evicted.empty() ? 0
                                                : static_cast<double>(std::accumulate(with.evicted.begin(), with.evicted.end(), size_t{0})) /
                                                      static_cast<double>(with.evicted.size());
  std::printf("| events fed | window | evictions | events per eviction | eviction (store + model) median / max | of which the store, median | "
              "anchor: model rebuild of the kept events | kept at the end | store + model bytes at the end | "
              "without the window |\n|---|---|---|---|---|---|---|---|---|---|\n");
  std::printf("| %zu | %.0f ms (~%llu events) | %zu | %.0f | %.1f / %.1f ms | %.1f ms | %.1f ms | %zu | %.1f MB | %.1f MB (%zu events) |\n",
              order.size(), static_cast<double>(windowNs) / 1e6, static_cast<unsigned long long>(windowEvents),
              e.size(), perChunk, e.empty() ? 0.0 : e[e.size() / 2], e.empty() ? 0.0 : e.back(), st.empty() ? 0.0 : st[st.size() / 2], with.rebuildMs,
              with.keptAtEnd, static_cast<double>(with.bytesAtEnd) / 1e6,
              static_cast<double>(without.bytesAtEnd) / 1e6, without.keptAtEnd);
  return 0;
}
