// The agent's capture path and knob registry, in process: a full ring drops and counts without
// blocking, records from several threads arrive complete and in order per thread, ranges pair
// by nesting (and by id across threads), knob changes are validated with reasons and applied
// at the agreed step boundary only.
#include <QtTest>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "agent_test_support.h"
#include "capture.h"
#include "knobs.h"
#include "outbox.h"
#include "spsc_ring.h"
#include "trainscope/agent.h"

using namespace agent_test;
using trainscope::core::AttrKey;
using trainscope::core::EventKind;

namespace {
const std::vector<std::pair<std::string, std::string>> kNoServer = {{"TRAINSCOPE_LISTEN", "none"}};

int64_t attrInt(const wire::WireEvent& e, AttrKey k) {
  for (const auto& a : e.attrs)
    if (a.key == static_cast<uint32_t>(k)) return a.asInt();
  return INT64_MIN;
}

int g_callbackCalls = 0;
int64_t g_callbackValue = -1;
void onChange(ts_knob_t k, void*) {
  ++g_callbackCalls;
  g_callbackValue = ts_knob_get_int(k);
}

wire::SetKnob setKnob(uint64_t seq, const char* name, const char* value) { return {seq, name, value}; }
}  // namespace

class TstAgentCapture : public QObject {
  Q_OBJECT

 private slots:
  void recordIs32Bytes() { QCOMPARE(sizeof(ag::Record), size_t{32}); }

  void ringRefusesWhenFull() {
    ag::SpscRing ring(8);
    QCOMPARE(ring.capacity(), size_t{8});
    ag::Record r;
    for (int i = 0; i < 8; ++i) {
      r.a = static_cast<uint64_t>(i);
      QVERIFY(ring.push(r));
    }
    QVERIFY(!ring.push(r));
    std::vector<uint64_t> seen;
    QCOMPARE(ring.consume(100, [&](const ag::Record& x) { seen.push_back(x.a); }), size_t{8});
    QCOMPARE(seen, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
    QVERIFY(ring.push(r));  // space again after the consumer moved on
  }

  // With the drain paused, a thread writing far more than its ring holds must neither block
  // nor lose count: exactly the overflow is reported as dropped, the rest arrives.
  void fullRingDropsAreCountedAndNothingBlocks() {
    ScopedAgent agent(Env{{"TRAINSCOPE_LISTEN", "none"}, {"TRAINSCOPE_RING_KB", "1"}});  // 32 records
    QCOMPARE(agent.rc(), TS_OK);
    ag::runtime()->drain().setPaused(true);
    const uint32_t name = ts_name("overflow-marker");
    const uint64_t before = ts_dropped_events();
    double seconds = 0;
    std::thread t([&] {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 100000; ++i) ts_marker(name);
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
    t.join();
    QCOMPARE(ts_dropped_events() - before, uint64_t{100000 - 32});
    QVERIFY2(seconds < 0.5, "100k records into a full ring must not wait for the drain");
    ag::runtime()->drain().setPaused(false);
    const Recorded rec = recorded();
    QCOMPARE(rec.named("overflow-marker").size(), size_t{32});
    QVERIFY(rec.batches.back().droppedTotal >= 100000 - 32);
    QCOMPARE(ag::runtime()->stats().eventsDropped, ts_dropped_events());
  }

  void fourThreadsArriveCompleteAndInOrder() {
    ScopedAgent agent(kNoServer);
    constexpr int kThreads = 4, kPerThread = 20000;
    std::vector<std::thread> threads;
    std::atomic<int> ready{0};
    const uint64_t dropsBefore = ts_dropped_events();
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        const uint32_t name = ts_name(("thread-counter-" + std::to_string(t)).c_str());
        ready.fetch_add(1);
        while (ready.load() < kThreads) {
        }
        for (int i = 0; i < kPerThread; ++i) {
          ts_counter(name, i);
          if (i % 4096 == 0) std::this_thread::yield();  // let the drain keep up: no drops here
        }
      });
    }
    for (auto& th : threads) th.join();
    QCOMPARE(ts_dropped_events(), dropsBefore);  // otherwise the counts below cannot hold
    const Recorded rec = recorded();
    for (int t = 0; t < kThreads; ++t) {
      const auto ev = rec.named("thread-counter-" + std::to_string(t));
      QCOMPARE(ev.size(), size_t{kPerThread});
      for (int i = 0; i < kPerThread; ++i) {
        double v = 0;
        for (const auto& a : ev[static_cast<size_t>(i)].attrs)
          if (a.key == static_cast<uint32_t>(AttrKey::Value)) v = a.asDouble();
        if (v != i) QFAIL(qPrintable(QString("thread %1: event %2 has value %3").arg(t).arg(i).arg(v)));
        if (i > 0) QVERIFY(ev[static_cast<size_t>(i)].startNs >= ev[static_cast<size_t>(i) - 1].startNs);
      }
    }
    // Sequence numbers are contiguous across batches: a client can detect gaps.
    uint64_t next = rec.batches.front().firstSeq;
    for (const auto& b : rec.batches) {
      if (b.events.empty()) continue;
      QCOMPARE(b.firstSeq, next);
      next += b.events.size();
    }
  }

  void rangesPairByNesting() {
    ScopedAgent agent(kNoServer);
    ts_range_push(ts_name("outer"));
    ts_range_push(ts_name("inner-1"));
    ts_range_pop();
    ts_range_push(ts_name("inner-2"));
    ts_marker(ts_name("mark"));
    ts_range_pop();
    ts_range_pop();
    ts_range_pop();  // unbalanced: ignored, must not pair with anything
    uint64_t id = ts_range_begin(ts_name("cross-thread"));
    std::thread([id] { ts_range_end(id); }).join();
    ts_step_begin(7);
    ts_phase_begin(TS_PHASE_BACKWARD);
    ts_phase_end(TS_PHASE_BACKWARD);
    ts_step_end(7);
    const Recorded rec = recorded();
    const auto outer = rec.named("outer"), in1 = rec.named("inner-1"), in2 = rec.named("inner-2");
    QCOMPARE(outer.size(), size_t{1});
    QCOMPARE(in1.size(), size_t{1});
    QCOMPARE(in2.size(), size_t{1});
    QVERIFY(outer[0].startNs <= in1[0].startNs && in1[0].endNs <= in2[0].startNs);
    QVERIFY(in2[0].endNs <= outer[0].endNs);
    const auto mark = rec.named("mark");
    QCOMPARE(mark.size(), size_t{1});
    QVERIFY(mark[0].startNs >= in2[0].startNs && mark[0].startNs <= in2[0].endNs);
    QCOMPARE(rec.named("cross-thread").size(), size_t{1});
    QCOMPARE(rec.named("cross-thread")[0].kind, EventKind::Range);
    const auto step = rec.named("step");
    QCOMPARE(step.size(), size_t{1});
    QCOMPARE(step[0].kind, EventKind::Step);
    QCOMPARE(attrInt(step[0], AttrKey::Step), int64_t{7});
    QCOMPARE(rec.named("backward").size(), size_t{1});
    QCOMPARE(rec.named("backward")[0].kind, EventKind::Phase);
    for (const auto& e : rec.events) QVERIFY(rec.tracks.count(e.track));  // every id resolves
  }

  void knobChangesAreValidated() {
    ScopedAgent agent(kNoServer);
    auto& reg = ag::KnobRegistry::instance();
    reg.resetChangesForTest();
    ts_knob_t k = ts_knob_int("tst.int", 0, 100, 10, "an int", 0);
    static const char* const choices[] = {"a", "b"};
    ts_knob_t e = ts_knob_enum("tst.enum", choices, 2, 0, "an enum", 0);
    ts_knob_t f = ts_knob_float("tst.float", 0.0, 1.0, 0.5, "a float", TS_KNOB_CHANGES_MATH);
    QVERIFY(k && e && f);
    QCOMPARE(ts_knob_int("tst.int", 0, 100, 10, "again", 0), k);  // same name, same knob
    struct Case {
      const char* name;
      const char* value;
      const char* reasonHas;
    };
    const Case cases[] = {{"tst.nope", "1", "unknown knob"},  {"tst.int", "abc", "not an integer"},
                          {"tst.int", "101", "out of range"}, {"tst.int", "-1", "out of range"},
                          {"tst.int", "5.5", "not an integer"}, {"tst.enum", "c", "not one of"},
                          {"tst.float", "x", "not a number"},  {"tst.float", "1.5", "out of range"}};
    uint64_t seq = 0;
    for (const Case& c : cases) {
      const wire::KnobAck ack = reg.receive(setKnob(++seq, c.name, c.value), 1, false);
      QVERIFY2(!ack.accepted, c.value);
      QCOMPARE(ack.changeSeq, seq);
      QVERIFY2(ack.reason.find(c.reasonHas) != std::string::npos, ack.reason.c_str());
    }
    QCOMPARE(reg.contiguousSeq(), seq);  // refused changes still count as received
    QVERIFY(!reg.receive(setKnob(seq, "tst.int", "5"), 1, false).accepted);  // duplicate seq
    ts_step_end(0);
    ts_step_begin(1);
    QCOMPARE(ts_knob_get_int(k), int64_t{10});
    QCOMPARE(ts_knob_get_enum(e), 0);
    QCOMPARE(ts_knob_get_float(f), 0.5);
    // World size > 1 without an agreement function: refused with the reason.
    const wire::KnobAck noAgree = reg.receive(setKnob(++seq, "tst.int", "5"), 4, false);
    QVERIFY(!noAgree.accepted);
    QVERIFY(noAgree.reason.find("ts_set_agree_fn") != std::string::npos);
    const auto list = reg.list(1);
    bool sawFloat = false;
    for (const auto& d : list.knobs)
      if (d.name == "tst.float") {
        sawFloat = true;
        QVERIFY(d.changesMath);
        QCOMPARE(d.currentValue, std::string("0.5"));
      }
    QVERIFY(sawFloat);
  }

  void knobAppliedAtAgreedStep() {
    ScopedAgent agent(kNoServer);
    auto& reg = ag::KnobRegistry::instance();
    reg.resetChangesForTest();
    ag::Outbox::instance().take();
    ts_knob_t k = ts_knob_int("tst.apply", 0, 100000, 2000, "applied at a step", 0);
    g_callbackCalls = 0;
    ts_knob_on_change(k, onChange, nullptr);
    ts_step_begin(4);
    const wire::KnobAck queued = reg.receive(setKnob(1, "tst.apply", "500"), 1, false);
    QVERIFY(queued.accepted);
    QVERIFY(!queued.applied);
    QCOMPARE(ts_knob_get_int(k), int64_t{2000});  // not before the step boundary
    ts_step_end(4);
    QCOMPARE(ts_knob_get_int(k), int64_t{2000});
    ts_step_begin(5);
    QCOMPARE(ts_knob_get_int(k), int64_t{500});
    QCOMPARE(g_callbackCalls, 1);
    QCOMPARE(g_callbackValue, int64_t{500});
    ts_step_end(5);
    bool sawApplied = false;
    for (const auto& m : ag::Outbox::instance().take())
      if (const auto* a = std::get_if<wire::KnobAck>(&m)) {
        QVERIFY(a->accepted && a->applied);
        QCOMPARE(a->appliedStep, int64_t{5});
        QCOMPARE(a->changeSeq, uint64_t{1});
        sawApplied = true;
      }
    QVERIFY(sawApplied);
    const Recorded rec = recorded();
    const auto changes = rec.named("tst.apply");
    QCOMPARE(changes.size(), size_t{1});
    QCOMPARE(changes[0].kind, EventKind::KnobChange);
    QCOMPARE(attrInt(changes[0], AttrKey::Step), int64_t{5});
    for (const auto& a : changes[0].attrs)
      if (a.key == static_cast<uint32_t>(AttrKey::KnobValue)) QCOMPARE(rec.name(a.asString()), std::string("500"));
  }

  // Two ranks simulated by an agreement function: nothing applies until the minimum over
  // ranks has caught up, then it applies at the next step begin.
  void knobWaitsForAllRanks() {
    ScopedAgent agent(kNoServer, 2);
    auto& reg = ag::KnobRegistry::instance();
    reg.resetChangesForTest();
    ts_knob_t k = ts_knob_int("tst.agree", 0, 10, 1, "agreed", 0);
    static int64_t otherRank = 0;
    otherRank = 0;
    ts_set_agree_fn([](int64_t local, void*) { return std::min(local, otherRank); }, nullptr);
    QVERIFY(reg.receive(setKnob(1, "tst.agree", "7"), 2, true).accepted);
    ts_step_end(10);
    ts_step_begin(11);
    QCOMPARE(ts_knob_get_int(k), int64_t{1});  // the other rank has not received it yet
    otherRank = 1;
    ts_step_end(11);
    ts_step_begin(12);
    QCOMPARE(ts_knob_get_int(k), int64_t{7});
    ts_set_agree_fn(nullptr, nullptr);
  }
};

QTEST_GUILESS_MAIN(TstAgentCapture)
#include "tst_agent_capture.moc"
