// TimelineModel and ZoomControl: rows and levels, level of detail (never drops an event, merged
// items cover exactly their children), live updates equal a rebuild, zoom maths, box-selection
// totals, linked events and search -- on constructed traces with hand-computed answers.
#include <QtTest>
#include <map>
#include <random>

#include "trainscope/core/synth/synth.h"
#include "trainscope/plots/timeline_model.h"
#include "trainscope/plots/zoom_control.h"

using namespace trainscope;
using core::Attr;
using core::AttrKey;
using core::EventKind;
using core::TrackKind;
using plots::DrawItem;
using plots::TimelineModel;

namespace {

// Rows as (track, level, [start...]) for comparisons.
std::vector<std::pair<std::tuple<core::TrackId, uint32_t, core::StringId>, std::vector<int64_t>>> dump(
    const TimelineModel& m) {
  std::vector<std::pair<std::tuple<core::TrackId, uint32_t, core::StringId>, std::vector<int64_t>>> out;
  for (size_t r = 0; r < m.rowCount(); ++r) {
    const auto& row = m.row(r);
    std::vector<int64_t> starts;
    for (uint32_t i : row.events) starts.push_back(m.store().rawEvents(row.track).start(i));
    out.push_back({{row.track, row.level, row.counter}, starts});
  }
  return out;
}

// A row of n events with random lengths and gaps (some tiny, some wide).
void randomRow(core::TraceStore& s, core::TrackId t, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> pick(0, 9);
  int64_t at = 0;
  const core::StringId name = s.intern("op");
  for (int i = 0; i < n; ++i) {
    at += pick(rng) < 7 ? pick(rng) * 3 : pick(rng) * 5000;  // mostly tight, sometimes far
    const int64_t len = pick(rng) < 8 ? pick(rng) : 2000 + pick(rng) * 1000;
    s.append(t, {at, at + len, name, pick(rng) < 5 ? EventKind::Kernel : EventKind::Memcpy});
    at += len;
  }
}

}  // namespace

class TstTimelineModel : public QObject {
  Q_OBJECT

 private slots:
  void nestedRangesGetOneRowPerDepth() {
    core::TraceStore s;
    const auto t = s.findOrAddTrack(0, TrackKind::CpuThread, 1, "main");
    const auto c = s.findOrAddTrack(0, TrackKind::Counter, 0, "counters");
    const core::StringId n = s.intern("x");
    s.append(t, {0, 100, n, EventKind::Step});
    s.append(t, {10, 40, n, EventKind::Phase});
    s.append(t, {12, 20, n, EventKind::Range});
    s.append(t, {50, 90, n, EventKind::Phase});
    s.append(t, {100, 150, n, EventKind::Step});  // starts where the first ends: same level
    s.append(c, {5, 5, s.intern("loss"), EventKind::Counter});
    s.append(c, {6, 6, s.intern("lr"), EventKind::Counter});
    s.append(c, {7, 7, s.intern("loss"), EventKind::Counter});
    TimelineModel m(s);
    m.rebuild();
    QCOMPARE(m.rowCount(), size_t(5));
    QCOMPARE(m.eventCount(), uint64_t(8));
    auto d = dump(m);
    QCOMPARE(d[0].second, (std::vector<int64_t>{0, 100}));
    QCOMPARE(d[1].second, (std::vector<int64_t>{10, 50}));
    QCOMPARE(d[2].second, (std::vector<int64_t>{12}));
    QCOMPARE(d[3].second, (std::vector<int64_t>{5, 7}));  // counter rows by name
    QCOMPARE(d[4].second, (std::vector<int64_t>{6}));
    QCOMPARE(m.spanStart(), int64_t(0));
    QCOMPARE(m.spanEnd(), int64_t(150));
    QCOMPARE(m.steps().size(), size_t(2));
    QCOMPARE(*m.phaseAt(0, 30), n);
    QVERIFY(!m.phaseAt(0, 45));
  }

  void lodNeverDropsAnEventAndCoversChildrenExactly() {
    core::TraceStore s;
    const auto t = s.findOrAddTrack(0, TrackKind::CudaStream, 7, "stream");
    randomRow(s, t, 20000, 7);
    TimelineModel m(s);
    m.rebuild();
    // Instants that share a start with a longer event sit one level down: usually 2 rows.
    QVERIFY(m.rowCount() >= 1 && m.rowCount() <= 3);
    const auto& ev = s.rawEvents(t);
    std::mt19937_64 rng(3);
    std::vector<DrawItem> items;
    const int64_t span = m.spanEnd() - m.spanStart();
    size_t total = 0;
    for (size_t r = 0; r < m.rowCount(); ++r) {
      const auto& row = m.row(r);
      total += row.events.size();
      for (size_t p = 1; p < row.events.size(); ++p)  // a row never overlaps itself
        QVERIFY(ev.start(row.events[p]) >= ev.end(row.events[p - 1]));
      for (int trial = 0; trial < 150; ++trial) {
        const int64_t w =
            std::max<int64_t>(10, static_cast<int64_t>(rng() % static_cast<uint64_t>(span + 1)));
        const int64_t t0 = m.spanStart() - 100 + static_cast<int64_t>(rng() % static_cast<uint64_t>(span));
        const int64_t minNs = 1 + static_cast<int64_t>(rng() % 20000);
        m.drawItems(r, t0, t0 + w, minNs, items);
        // Reference: every event with start < t1 and end >= t0.
        uint64_t expected = 0;
        for (uint32_t i : row.events) expected += ev.start(i) < t0 + w && ev.end(i) >= t0;
        uint64_t counted = 0;
        uint32_t nextPos = items.empty() ? 0 : items.front().first;
        for (const DrawItem& it : items) {
          QCOMPARE(it.first, nextPos);  // consecutive, no gaps, no overlap
          nextPos = it.first + it.count;
          counted += it.count;
          int64_t lo = INT64_MAX, hi = INT64_MIN;
          for (uint32_t p = it.first; p < it.first + it.count; ++p) {
            lo = std::min(lo, ev.start(row.events[p]));
            hi = std::max(hi, ev.end(row.events[p]));
          }
          QCOMPARE(it.start, lo);
          QCOMPARE(it.end, hi);
          if (it.count > 1) {  // a summary never ends with a wide event (that is drawn on its own)
            const uint32_t lastPos = it.first + it.count - 1;
            QVERIFY(ev.end(row.events[lastPos]) - ev.start(row.events[lastPos]) < minNs);
          }
        }
        QCOMPARE(counted, expected);
      }
      // Fully zoomed in (minNs = 1): every event is drawn on its own.
      m.drawItems(r, m.spanStart(), m.spanEnd() + 1, 1, items);
      size_t wide = 0;
      for (uint32_t i : row.events) wide += ev.end(i) > ev.start(i);
      QVERIFY(items.size() >= wide);
      // Zoomed out over everything with a huge minNs: a handful of items.
      m.drawItems(r, m.spanStart(), m.spanEnd() + 1, span, items);
      QVERIFY(items.size() < 10);
    }
    QCOMPARE(total, size_t(20000));
  }

  void lodMergesTinyEventsIntoCountedSummary() {
    core::TraceStore s;
    const auto t = s.findOrAddTrack(0, TrackKind::CudaStream, 7, "stream");
    const core::StringId n = s.intern("k");
    for (int i = 0; i < 10; ++i) s.append(t, {i * 10, i * 10 + 5, n, EventKind::Kernel});  // 0..95
    s.append(t, {200, 1200, n, EventKind::Kernel});                                        // wide
    s.append(t, {5000, 5001, n, EventKind::Kernel});                                       // lone tiny
    TimelineModel m(s);
    m.rebuild();
    std::vector<DrawItem> items;
    m.drawItems(0, 0, 10000, 100, items);  // 100 ns per pixel
    QCOMPARE(items.size(), size_t(3));
    QCOMPARE(items[0].count, 10u);
    QCOMPARE(items[0].start, int64_t(0));
    QCOMPARE(items[0].end, int64_t(95));
    QCOMPARE(items[1].count, 1u);
    QCOMPARE(items[1].start, int64_t(200));
    QCOMPARE(items[2].count, 1u);
    QCOMPARE(items[2].end, int64_t(5001));
    m.drawItems(0, 0, 10000, 5, items);  // 5 ns: every kernel is wide enough
    QCOMPARE(items.size(), size_t(12));
  }

  void liveUpdatesEqualARebuild() {
    core::TraceStore live, whole;
    core::TraceStore src;
    core::synthesizeTrace(src, {.ranks = 2, .steps = 6, .kernelsPerStep = 16});
    for (core::TrackId t = 0; t < src.trackCount(); ++t) {
      (void)live.addTrack(src.track(t));
      (void)whole.addTrack(src.track(t));
    }
    TimelineModel m(live);
    m.rebuild();
    // Feed the events in raw order (children before parents happen), in slices, updating often.
    size_t fed = 0;
    for (core::TrackId t = 0; t < src.trackCount(); ++t) {
      const auto& ev = src.rawEvents(t);
      for (size_t i = 0; i < ev.size(); ++i) {
        const size_t j = ev.size() - 1 - i;  // reversed: every update is out of order
        core::EventRecord rec = ev.record(j);
        rec.name = live.intern(src.str(rec.name));
        live.append(t, rec, ev.attrs(j));
        rec.name = whole.intern(src.str(ev.name(j)));
        whole.append(t, rec, ev.attrs(j));
        if (++fed % 97 == 0) m.update();
      }
    }
    m.update();
    TimelineModel ref(whole);
    ref.rebuild();
    QCOMPARE(m.eventCount(), uint64_t(src.eventCount()));
    QCOMPARE(dump(m), dump(ref));
    // The coarse index of every row matches its events after all the re-levelling.
    for (size_t r = 0; r < m.rowCount(); ++r) {
      const auto& row = m.row(r);
      const auto& ev = live.rawEvents(row.track);
      const size_t B = plots::TimelineRow::kCoarseStride;
      QCOMPARE(row.coarse.size(), (row.events.size() + B - 1) / B);
      QCOMPARE(row.coarseEnd.size(), row.coarse.size());
      for (size_t j = 0; j < row.coarse.size(); ++j) {
        QCOMPARE(row.coarse[j], ev.start(row.events[j * B]));
        QCOMPARE(row.coarseEnd[j], ev.end(row.events[std::min(row.events.size(), (j + 1) * B) - 1]));
      }
    }
    QCOMPARE(m.steps().size(), ref.steps().size());
    QCOMPARE(m.knobChanges().size(), size_t(2));
  }

  // Live retention: the store drops the events before a cutoff and the model follows
  // (TimelineModel::evict) -- every kept event is in exactly one row, rows stay sorted with a
  // correct coarse index, marks before the cutoff go, and later updates keep working.
  void evictionKeepsRowsConsistent() {
    core::TraceStore src;
    core::synthesizeTrace(src, {.ranks = 2, .steps = 12, .kernelsPerStep = 16});
    src.flush();
    core::TraceStore live;
    for (core::TrackId t = 0; t < src.trackCount(); ++t) (void)live.addTrack(src.track(t));
    TimelineModel m(live);
    m.rebuild();
    const auto [t0, t1] = src.timeSpan();
    // Four slices by time; after each, evict what starts before the slice's first third.
    size_t fed = 0;
    for (int slice = 1; slice <= 4; ++slice) {
      const int64_t lo = t0 + (t1 - t0) * (slice - 1) / 4, hi = slice == 4 ? INT64_MAX : t0 + (t1 - t0) * slice / 4;
      for (core::TrackId t = 0; t < src.trackCount(); ++t) {
        const auto& ev = src.rawEvents(t);
        for (size_t i = 0; i < ev.size(); ++i) {
          if (ev.start(i) < lo || ev.start(i) >= hi) continue;
          core::EventRecord rec = ev.record(i);
          rec.name = live.intern(src.str(rec.name));
          live.append(t, rec, ev.attrs(i));
          ++fed;
        }
      }
      m.update();
      const int64_t cutoff = lo + (hi == INT64_MAX ? t1 - lo : hi - lo) / 3;
      const std::vector<size_t> dropped = live.evictBefore(cutoff);
      m.evict(dropped, cutoff);
      QCOMPARE(live.eventCount() + live.evictedEvents(), uint64_t(fed));
      QCOMPARE(m.eventCount(), uint64_t(live.eventCount()));
      // Per track: the rows together hold exactly the kept events, each once.
      std::map<core::TrackId, std::vector<uint32_t>> seen;
      for (size_t r = 0; r < m.rowCount(); ++r) {
        const auto& row = m.row(r);
        const auto& ev = live.rawEvents(row.track);
        for (size_t j = 0; j < row.events.size(); ++j) {
          QVERIFY(row.events[j] < ev.size());
          QVERIFY(ev.start(row.events[j]) >= cutoff);
          if (j > 0) QVERIFY(ev.start(row.events[j]) >= ev.end(row.events[j - 1]));  // no overlap
          seen[row.track].push_back(row.events[j]);
        }
        const size_t B = plots::TimelineRow::kCoarseStride;
        QCOMPARE(row.coarse.size(), (row.events.size() + B - 1) / B);
        for (size_t j = 0; j < row.coarse.size(); ++j) {
          QCOMPARE(row.coarse[j], ev.start(row.events[j * B]));
          QCOMPARE(row.coarseEnd[j], ev.end(row.events[std::min(row.events.size(), (j + 1) * B) - 1]));
        }
      }
      for (core::TrackId t = 0; t < live.trackCount(); ++t) {
        auto& v = seen[t];
        std::sort(v.begin(), v.end());
        QCOMPARE(v.size(), live.rawEvents(t).size());
        for (size_t k = 0; k < v.size(); ++k) QCOMPARE(v[k], uint32_t(k));
      }
      size_t stepEvents = live.eventCount(EventKind::Step);
      QCOMPARE(m.steps().size(), stepEvents);
      for (const auto& mark : m.steps()) QVERIFY(mark.start >= cutoff);
      QVERIFY(m.spanStart() >= cutoff);
    }
    QVERIFY(live.evictedEvents() > 0);
    QVERIFY(live.eventCount() > 0);
  }

  void selectionTotalsPerKind() {
    core::TraceStore s;
    const auto a = s.findOrAddTrack(0, TrackKind::CudaStream, 1, "a");
    const auto b = s.findOrAddTrack(1, TrackKind::CudaStream, 1, "b");
    const core::StringId n = s.intern("x");
    s.append(a, {0, 100, n, EventKind::Kernel});        // clipped to [50, 100): 50
    s.append(a, {100, 200, n, EventKind::Collective});  // clipped to [100, 150): 50
    s.append(a, {300, 400, n, EventKind::Kernel});      // outside
    s.append(b, {60, 70, n, EventKind::Kernel});        // 10
    s.append(b, {140, 140, n, EventKind::Marker});      // instant: counted, 0 ns
    s.append(b, {20, 50, n, EventKind::Memcpy});        // ends at t0: not overlapping
    TimelineModel m(s);
    m.rebuild();
    const auto st = m.selectionStats({0, 1}, 50, 150);
    QCOMPARE(st.durationNs, int64_t(100));
    QCOMPARE(st.events, uint64_t(4));
    QCOMPARE(st.countPerKind[size_t(EventKind::Kernel)], uint64_t(2));
    QCOMPARE(st.nsPerKind[size_t(EventKind::Kernel)], int64_t(60));
    QCOMPARE(st.nsPerKind[size_t(EventKind::Collective)], int64_t(50));
    QCOMPARE(st.countPerKind[size_t(EventKind::Marker)], uint64_t(1));
    QCOMPARE(st.countPerKind[size_t(EventKind::Memcpy)], uint64_t(0));
    const auto only = m.selectionStats({1}, 50, 150);
    QCOMPARE(only.events, uint64_t(2));
  }

  void zoomKeepsAnchorAndClamps() {
    plots::ZoomControl z;
    z.setTrace(1000, 11000, true);
    QCOMPARE(z.start(), int64_t(1000));
    QCOMPARE(z.end(), int64_t(11000));
    // Zoom 4x at t = 3000 (x = 200 of 1000 px): the anchor stays at x = 200.
    const double x = z.timeToX(3000, 1000);
    QCOMPARE(x, 200.0);
    z.zoomAt(3000, 4.0);
    QCOMPARE(z.width(), int64_t(2500));
    QCOMPARE(z.timeToX(3000, 1000), 200.0);
    QCOMPARE(z.xToTime(200, 1000), int64_t(3000));
    QCOMPARE(z.nsPerPixel(1000), 2.5);
    // Pan, then past the end: clamped to trace end + 5 % margin.
    z.pan(1000);
    QCOMPARE(z.start(), int64_t(3500));
    z.pan(1'000'000);
    QCOMPARE(z.end(), int64_t(11500));
    QCOMPARE(z.width(), int64_t(2500));
    // Zooming out beyond the trace shows trace + margins, no more.
    z.zoomAt(5000, 1e-6);
    QCOMPARE(z.start(), int64_t(500));
    QCOMPARE(z.end(), int64_t(11500));
    // Zooming in forever stops at the minimum width.
    for (int i = 0; i < 100; ++i) z.zoomAt(6000, 2.0);
    QCOMPARE(z.width(), plots::ZoomControl::kMinWidthNs);
    QVERIFY(z.start() <= 6000 && z.end() >= 6000);
    // Live: the trace grows; follow keeps the width and shows the newest part.
    z.setTrace(1000, 51000, false);
    z.followEnd();
    QCOMPARE(z.end(), int64_t(51000));
    QCOMPARE(z.width(), plots::ZoomControl::kMinWidthNs);
    QCOMPARE(plots::tickSpacingNs(10.0, 50), int64_t(500));
    QCOMPARE(plots::tickSpacingNs(10.0, 120), int64_t(2000));
    QCOMPARE(plots::tickSpacingNs(3e6, 100), int64_t(500'000'000));
  }

  void linkedEventsAndSearch() {
    core::TraceStore s;
    core::synthesizeTrace(s, {.ranks = 3, .steps = 2, .kernelsPerStep = 4, .buckets = 2});
    TimelineModel m(s);
    m.rebuild();
    // A send links to its receive on the next rank (flow id).
    std::optional<plots::EventRef> send;
    for (core::TrackId t = 0; t < s.trackCount() && !send; ++t) {
      const auto& ev = s.rawEvents(t);
      for (uint32_t i = 0; i < ev.size(); ++i)
        if (ev.kind(i) == EventKind::P2PSend && s.track(t).rank == 0) {
          send = plots::EventRef{t, i};
          break;
        }
    }
    QVERIFY(send);
    auto links = m.linkedEvents(*send);
    QCOMPARE(links.size(), size_t(1));
    QCOMPARE(QString(links[0].why), QString("flow"));
    QCOMPARE(s.track(links[0].ref.track).rank, 1);
    QCOMPARE(s.rawEvents(links[0].ref.track).kind(links[0].ref.index), EventKind::P2PRecv);
    // A collective links to the same (CommHash, Seq) on the two other ranks.
    std::optional<plots::EventRef> coll;
    for (core::TrackId t = 0; t < s.trackCount() && !coll; ++t) {
      const auto& ev = s.rawEvents(t);
      for (uint32_t i = 0; i < ev.size(); ++i)
        if (ev.kind(i) == EventKind::Collective) {
          coll = plots::EventRef{t, i};
          break;
        }
    }
    QVERIFY(coll);
    links = m.linkedEvents(*coll);
    QCOMPARE(links.size(), size_t(2));
    for (const auto& l : links) QCOMPARE(QString(l.why), QString("collective"));
    // A kernel links to its launch (correlation id) on the same rank.
    const auto kernelRow = [&] {
      for (size_t r = 0; r < m.rowCount(); ++r)
        if (m.row(r).kind == TrackKind::CudaStream) return r;
      return size_t(0);
    }();
    links = m.linkedEvents(m.ref(kernelRow, 0));
    QCOMPARE(links.size(), size_t(1));
    QCOMPARE(QString(links[0].why), QString("correlation"));
    QCOMPARE(s.str(s.rawEvents(links[0].ref.track).name(links[0].ref.index)),
             std::string_view("cudaLaunchKernel"));

    // Search: all "adam" kernels in time order, forward then back.
    std::vector<int64_t> found;
    std::optional<TimelineModel::Hit> at;
    while (auto h = m.findNext("ADAM", m.spanStart() - 1, true, at)) {
      found.push_back(s.rawEvents(m.row(h->row).track).start(m.ref(h->row, h->pos).index));
      at = h;
      QVERIFY(found.size() < 100);
    }
    QCOMPARE(found.size(), size_t(6));  // 3 ranks x 2 steps
    QVERIFY(std::is_sorted(found.begin(), found.end()));
    auto back = m.findNext("adam", 0, false, at);
    QVERIFY(back);
    QCOMPARE(s.rawEvents(m.row(back->row).track).start(m.ref(back->row, back->pos).index), found[4]);
    QVERIFY(!m.findNext("no such name", 0, true, std::nullopt));
  }
};

QTEST_GUILESS_MAIN(TstTimelineModel)
#include "tst_timeline_model.moc"
