// TraceStore: interning, append order, sort-merge of out-of-order tails, range queries, memory.
#include <QtTest>

#include <algorithm>
#include <limits>
#include <random>
#include <tuple>

#include "trainscope/core/synth/synth.h"
#include "trainscope/core/model/trace_store.h"

using namespace trainscope::core;

class TstTraceStore : public QObject {
  Q_OBJECT

 private slots:
  void stringTableInterns() {
    StringTable t;
    QCOMPARE(t.intern(""), kEmptyString);
    const StringId a = t.intern("allreduce");
    const StringId b = t.intern("kernel");
    QVERIFY(a != b);
    QCOMPARE(t.intern(std::string("allreduce")), a);
    QCOMPARE(t.get(a), std::string_view("allreduce"));
    QCOMPARE(t.find("kernel").value(), b);
    QVERIFY(!t.find("nope").has_value());
    QCOMPARE(t.get(12345), std::string_view());
    // Many strings: views stay valid while the table grows (deque storage).
    for (int i = 0; i < 10000; ++i) t.intern("s" + std::to_string(i));
    QCOMPARE(t.get(a), std::string_view("allreduce"));
    QCOMPARE(t.find("s9999").value(), t.intern("s9999"));
    StringTable copy = t;  // copies rebuild their index over their own storage
    QCOMPARE(copy.find("s42").value(), t.find("s42").value());
  }

  void namesRoundTrip() {
    for (int k = 0; k < kEventKindCount; ++k) {
      const auto kind = static_cast<EventKind>(k);
      QCOMPARE(eventKindFromName(eventKindName(kind)).value(), kind);
    }
    for (int k = 0; k < kTrackKindCount; ++k) {
      const auto kind = static_cast<TrackKind>(k);
      QCOMPARE(trackKindFromName(trackKindName(kind)).value(), kind);
    }
    for (uint32_t k = 1; k <= kBuiltinAttrMax; ++k) {
      const auto key = static_cast<AttrKey>(k);
      QVERIFY(!builtinAttrName(key).empty());
      QCOMPARE(builtinAttrFromName(builtinAttrName(key)).value(), key);
    }
    QCOMPARE(builtinAttrName(AttrKey::CorrelationId), std::string_view("correlation_id"));
    QCOMPARE(builtinAttrType(AttrKey::Algorithm), AttrType::String);
    QCOMPARE(builtinAttrType(AttrKey::Value), AttrType::Double);
    QVERIFY(!eventKindFromName("bogus").has_value());
  }

  void attrsAreTyped() {
    const Attr d = Attr::ofDouble(AttrKey::Value, 0.1);
    QCOMPARE(d.type, AttrType::Double);
    QCOMPARE(d.asDouble(), 0.1);
    const Attr i = Attr::ofInt(AttrKey::Bytes, -5);
    QCOMPARE(i.asInt(), int64_t(-5));
    QCOMPARE(i.asDouble(), -5.0);
    const Attr c = Attr::custom(7, AttrType::String, 9);
    QVERIFY(c.isCustom());
    QCOMPARE(c.key, kCustomAttrBase + 7);
    QCOMPARE(c.asString(), StringId(9));
  }

  void tracksAndRanks() {
    TraceStore s;
    const TrackId a = s.findOrAddTrack(3, TrackKind::CudaStream, 7, "stream 7");
    const TrackId b = s.findOrAddTrack(3, TrackKind::CudaStream, 8, "stream 8");
    QVERIFY(a != b);
    QCOMPARE(s.findOrAddTrack(3, TrackKind::CudaStream, 7, "other name"), a);
    QCOMPARE(s.track(a).name, std::string("stream 7"));
    QVERIFY(s.rank(3) != nullptr);  // created with the track
    QCOMPARE(s.rank(3)->rank, 3);
    s.setRank(RankInfo{.rank = 3, .host = "n1", .pid = 42, .droppedEvents = 5});
    QCOMPARE(s.rank(3)->host, std::string("n1"));
    QCOMPARE(s.rank(3)->droppedEvents, uint64_t(5));
    QVERIFY(s.rank(4) == nullptr);
  }

  void inOrderAppendStaysSorted() {
    TraceStore s;
    const TrackId t = s.findOrAddTrack(0, TrackKind::CpuThread, 1, "main");
    s.append(t, {100, 500, 1, EventKind::Step});
    s.append(t, {100, 200, 1, EventKind::Phase});  // same start, shorter: a child, still in order
    s.append(t, {150, 150, 1, EventKind::Marker});
    s.append(t, {300, 400, 1, EventKind::Phase});
    QVERIFY(s.rawEvents(t).isSorted());
    QCOMPARE(s.eventCount(), size_t(4));
    QCOMPARE(s.eventCount(EventKind::Phase), size_t(2));
    QCOMPARE(s.timeSpan(), std::make_pair(int64_t(100), int64_t(500)));
  }

  // Random out-of-order batches: after flush the track equals a stable sort of everything by
  // (start asc, end desc), and every event keeps its own attributes.
  void outOfOrderBatchesSortMerge_data() {
    QTest::addColumn<int>("seed");
    QTest::addColumn<int>("flushEvery");
    QTest::newRow("flush at end") << 1 << 0;
    QTest::newRow("flush every 64") << 2 << 64;
    QTest::newRow("flush every 7") << 3 << 7;
  }
  void outOfOrderBatchesSortMerge() {
    QFETCH(int, seed);
    QFETCH(int, flushEvery);
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int64_t> back(0, 5000), dur(0, 300);
    TraceStore s;
    const TrackId t = s.findOrAddTrack(0, TrackKind::CpuThread, 1, "main");
    struct Ref { int64_t start, end; int64_t id; int attrs; };
    std::vector<Ref> ref;
    for (int i = 0; i < 5000; ++i) {
      const int64_t st = int64_t(i) * 10 - back(rng) * (i % 3 == 0);
      const int64_t en = st + dur(rng);
      const int nAttrs = i % 4;  // 0..3 attributes, the first one identifies the event
      std::vector<Attr> a;
      for (int k = 0; k < nAttrs; ++k) a.push_back(Attr::ofInt(k == 0 ? AttrKey::Seq : AttrKey::Bytes, i * 10 + k));
      s.append(t, {st, en, static_cast<StringId>(i % 5), EventKind::Range}, a);
      ref.push_back({st, en, i, nAttrs});
      if (flushEvery && i % flushEvery == 0) s.flush();
    }
    std::stable_sort(ref.begin(), ref.end(), [](const Ref& x, const Ref& y) {
      return x.start != y.start ? x.start < y.start : x.end > y.end;
    });
    s.flush();  // the writer sorts before anyone reads
    const TrackEvents& ev = s.events(t);
    QVERIFY(ev.isSorted());
    QCOMPARE(ev.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      QCOMPARE(ev.start(i), ref[i].start);
      QCOMPARE(ev.end(i), ref[i].end);
      const auto attrs = ev.attrs(i);
      QCOMPARE(int(attrs.size()), ref[i].attrs);
      if (ref[i].attrs > 0) {
        QCOMPARE(attrs[0].asInt(), ref[i].id * 10);
        QCOMPARE(ev.name(i), static_cast<StringId>(ref[i].id % 5));
      }
      for (size_t k = 1; k < attrs.size(); ++k) QCOMPARE(attrs[k].asInt(), ref[i].id * 10 + int64_t(k));
    }
  }

  // forEachOverlapping returns exactly the brute-force set, for random windows.
  void rangeQueryMatchesBruteForce() {
    std::mt19937 rng(11);
    std::uniform_int_distribution<int64_t> startD(0, 1'000'000), durD(0, 20'000), longD(0, 200'000);
    TraceStore s;
    const TrackId t = s.findOrAddTrack(0, TrackKind::CudaStream, 1, "s");
    for (int i = 0; i < 20000; ++i) {
      const int64_t st = startD(rng);
      const int64_t d = i % 10 == 0 ? 0 : (i % 97 == 0 ? longD(rng) : durD(rng));
      s.append(t, {st, st + d, 0, d == 0 ? EventKind::Marker : EventKind::Kernel});
    }
    s.flush();
    const TrackEvents& ev = s.events(t);
    for (int q = 0; q < 200; ++q) {
      const int64_t t0 = startD(rng) - 10'000, t1 = t0 + durD(rng) * (q % 5) + 1;
      std::vector<size_t> got, want;
      ev.forEachOverlapping(t0, t1, [&](size_t i) { got.push_back(i); });
      for (size_t i = 0; i < ev.size(); ++i) {
        const bool instant = ev.start(i) == ev.end(i);
        const bool hit = instant ? (ev.start(i) >= t0 && ev.start(i) < t1) : (ev.start(i) < t1 && ev.end(i) > t0);
        if (hit) want.push_back(i);
      }
      QCOMPARE(got, want);
    }
    // Window before everything and after everything.
    size_t n = 0;
    ev.forEachOverlapping(-100, -1, [&](size_t) { ++n; });
    ev.forEachOverlapping(5'000'000, 6'000'000, [&](size_t) { ++n; });
    QCOMPARE(n, size_t(0));
  }

  // An event spanning more than INT64_MAX (INT64_MIN to INT64_MAX, a crafted file's): its
  // duration overflowed int64 (UBSan in the ASan suite run, 24 Nov), wrapped to -1, and the
  // range query's look-back bound then missed it. It must be found from any window.
  void eventSpanningTheWholeInt64RangeIsFound() {
    constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
    TraceStore s;
    const TrackId t = s.findOrAddTrack(0, TrackKind::CpuThread, 1, "t");
    s.append(t, {kMin, kMax, 0, EventKind::Range});
    s.append(t, {100, 200, 0, EventKind::Range});
    s.flush();
    const TrackEvents& ev = s.events(t);
    for (const auto& [t0, t1] : std::vector<std::pair<int64_t, int64_t>>{{150, 160}, {-5, 5}, {kMax - 10, kMax}}) {
      std::vector<size_t> got;
      ev.forEachOverlapping(t0, t1, [&](size_t i) { got.push_back(i); });
      QVERIFY2(!got.empty() && ev.start(got.front()) == kMin,
               qPrintable(QString("window [%1, %2): the spanning event is missing").arg(t0).arg(t1)));
    }
  }

  // Issue #2 target: <= 32 bytes per plain event once a session is complete.
  // Live retention: evictBefore drops exactly the events that start before the cutoff (their
  // attributes with them), keeps the rest in order with theirs, and the columns' capacity is
  // reused -- filling and evicting the same amount again and again holds the memory flat.
  void evictBeforeDropsTheOldestAndReusesMemory() {
    TraceStore s;
    const TrackId t = s.addTrack({0, TrackKind::CpuThread, "main", 1});
    const TrackId u = s.addTrack({0, TrackKind::Communicator, "comm", 2});
    const StringId op = s.intern("op");
    // Track t: events at 0, 10, ..., 990 (start i*10, length 5), every third with a Step attr
    // = i; appended out of order in two halves so the cut runs through a merged tail.
    for (int i = 50; i < 100; ++i) {
      const Attr a = Attr::ofInt(AttrKey::Step, i);
      s.append(t, {i * 10, i * 10 + 5, op, EventKind::Kernel}, i % 3 == 0 ? std::span<const Attr>(&a, 1) : std::span<const Attr>{});
    }
    for (int i = 0; i < 50; ++i) {
      const Attr a = Attr::ofInt(AttrKey::Step, i);
      s.append(t, {i * 10, i * 10 + 5, op, EventKind::Kernel}, i % 3 == 0 ? std::span<const Attr>(&a, 1) : std::span<const Attr>{});
    }
    for (int i = 0; i < 10; ++i) s.append(u, {i * 100, i * 100 + 50, op, EventKind::Collective});
    QCOMPARE(s.eventCount(), size_t(110));

    const std::vector<size_t> dropped = s.evictBefore(255);  // t: starts 0..250 (26), u: 0..200 (3)
    QCOMPARE(dropped, (std::vector<size_t>{26, 3}));
    QCOMPARE(s.eventCount(), size_t(81));
    QCOMPARE(s.evictedEvents(), uint64_t(29));
    QCOMPARE(s.evictedBeforeNs(), int64_t(255));
    const TrackEvents& ev = s.events(t);
    QCOMPARE(ev.size(), size_t(74));
    for (size_t k = 0; k < ev.size(); ++k) {
      const int i = static_cast<int>(k) + 26;
      QCOMPARE(ev.start(k), int64_t(i * 10));
      const Attr* a = ev.findAttr(k, AttrKey::Step);
      QCOMPARE(a != nullptr, i % 3 == 0);
      if (a) QCOMPARE(a->asInt(), int64_t(i));
    }
    QCOMPARE(s.events(u).start(0), int64_t(300));
    // Range queries still find exactly the overlapping events.
    int hits = 0;
    ev.forEachOverlapping(300, 400, [&](size_t) { ++hits; });
    QCOMPARE(hits, 10);

    // Steady state: 100 events arrive, the 100 oldest leave, 20 times over: same capacity.
    TraceStore r;
    const TrackId w = r.addTrack({0, TrackKind::CpuThread, "main", 1});
    const StringId name = r.intern("op");
    int64_t at = 0;
    auto fill = [&](int n) {
      for (int i = 0; i < n; ++i, at += 10) {
        const Attr a = Attr::ofInt(AttrKey::Bytes, at);
        r.append(w, {at, at + 5, name, EventKind::Collective}, std::span<const Attr>(&a, 1));
      }
    };
    fill(5000);
    size_t peak = 0;
    for (int round = 0; round < 20; ++round) {
      fill(1000);
      (void)r.evictBefore(at - 5000 * 10);
      QCOMPARE(r.eventCount(), size_t(5000));
      if (round == 0) peak = r.memoryBytes();
      QCOMPARE(r.memoryBytes(), peak);
    }
    QCOMPARE(r.evictedEvents(), uint64_t(20 * 1000));
    const TrackEvents& we = r.events(w);
    QCOMPARE(we.start(0), at - 5000 * 10);
    QCOMPARE(we.findAttr(0, AttrKey::Bytes)->asInt(), at - 5000 * 10);
    QCOMPARE(we.findAttr(4999, AttrKey::Bytes)->asInt(), at - 10);
  }

  void memoryPerPlainEvent() {
    TraceStore s;
    const TrackId t = s.findOrAddTrack(0, TrackKind::CudaStream, 1, "s");
    const size_t n = 1'000'000;
    for (size_t i = 0; i < n; ++i) s.append(t, {int64_t(i) * 10, int64_t(i) * 10 + 5, 1, EventKind::Kernel});
    const double live = double(s.memoryBytes()) / double(n);
    s.shrinkToFit();
    const double done = double(s.memoryBytes()) / double(n);
    QVERIFY2(done <= 32.0, qPrintable(QString("bytes/event %1").arg(done)));
    QVERIFY2(live <= 25.0 * 1.5 + 0.01, qPrintable(QString("live bytes/event %1").arg(live)));
    QCOMPARE(done, 25.0);
  }

  void synthTraceIsConsistent() {
    TraceStore s;
    SynthOptions o;
    o.ranks = 3;
    o.steps = 4;
    o.kernelsPerStep = 16;
    const size_t n = synthesizeTrace(s, o);
    QCOMPARE(s.eventCount(), n);
    QCOMPARE(int(s.ranks().size()), 3);
    QCOMPARE(s.eventCount(EventKind::Step), size_t(3 * 4));
    QCOMPARE(s.eventCount(EventKind::Kernel), size_t(3 * 4 * (2 * 16 + 1)));
    QCOMPARE(s.eventCount(EventKind::Collective), size_t(3 * 4 * 4));
    QCOMPARE(s.eventCount(EventKind::P2PSend), s.eventCount(EventKind::P2PRecv));
    s.flush();
    for (TrackId t = 0; t < s.trackCount(); ++t) QVERIFY(s.rawEvents(t).isSorted());
    // Deterministic: the same options give the same trace.
    TraceStore s2;
    QCOMPARE(synthesizeTrace(s2, o), n);
    QCOMPARE(s2.timeSpan(), s.timeSpan());
  }
};

QTEST_GUILESS_MAIN(TstTraceStore)
#include "tst_trace_store.moc"
