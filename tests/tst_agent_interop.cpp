// The real agent against the real client: core::AgentClient (what the CLI and GUI use) talks
// to the in-process agent over TCP with authentication -- handshake, knob list/set/apply at a
// step, clock offset against a simulated skew (TRAINSCOPE_CLOCK_SHIFT_NS), stats, and history
// plus live events ingested into a TraceStore with every id resolved.
#include <QtTest>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "agent_test_support.h"
#include "trainscope/agent.h"
#include "trainscope/core/live/agent_client.h"
#include "trainscope/core/wire/discovery.h"
#include "trainscope/core/model/trace_store.h"

using namespace agent_test;
namespace fs = std::filesystem;
namespace core = trainscope::core;

class TstAgentInterop : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    const fs::path d = fs::temp_directory_path() / ("tst-agent-interop-" + std::to_string(::getpid()));
    fs::create_directories(d);
    fs::permissions(d, fs::perms::owner_all, fs::perm_options::replace);
    qputenv("TRAINSCOPE_RUNTIME_DIR", QByteArray(d.c_str()));  // under Qt's lock (agent_test_support.h)
  }
  void cleanupTestCase() { fs::remove_all(std::getenv("TRAINSCOPE_RUNTIME_DIR")); }

  void agentClientAgainstRealAgent() {
    constexpr int64_t kShift = 5'000'000'000LL;
    ScopedAgent agent(Env{{"TRAINSCOPE_LISTEN", "tcp"}, {"TRAINSCOPE_CLOCK_SHIFT_NS", std::to_string(kShift)}});
    QCOMPARE(agent.rc(), TS_OK);
    ts_knob_t k = ts_knob_int("interop.int", 0, 100, 1, "interop", 0);
    const uint32_t mark = ts_name("interop-before");
    for (int i = 0; i < 10; ++i) ts_marker(mark);

    std::optional<core::discovery::Entry> entry;
    for (const auto& e : core::discovery::listEntries())
      if (e.jobId == "tst-agent" && e.pid == ::getpid()) entry = e;
    QVERIFY(entry.has_value());
    core::AgentClient::Options opt;
    opt.secretFile = entry->secretFile;
    auto client = core::AgentClient::connect(entry->endpoint, opt);
    QVERIFY2(client.isOk(), client.status().toString().c_str());
    auto& c = *client.value();
    QCOMPARE(c.job().jobId, std::string("tst-agent"));

    auto list = c.knobList();
    QVERIFY(list.isOk());
    const uint64_t seq = list->lastChangeSeq + 1;
    auto ack = c.setKnob(seq, "interop.int", "42");
    QVERIFY2(ack.isOk() && ack->accepted && !ack->applied, ack.isOk() ? ack->reason.c_str() : "no ack");
    ts_step_end(0);
    ts_step_begin(1);
    QCOMPARE(ts_knob_get_int(k), int64_t{42});
    auto applied = c.waitForApplied(seq, 3000);
    QVERIFY(applied.isOk());
    QCOMPARE(applied->appliedStep, int64_t{1});

    auto sync = c.estimateClockOffset(16);
    QVERIFY(sync.isOk());
    QVERIFY2(std::llabs(sync->agentMinusClientNs - kShift) < 2'000'000,
             qPrintable(QString("offset %1 ns").arg(sync->agentMinusClientNs)));

    QVERIFY(c.subscribe(true).isOk());
    const uint32_t live = ts_name("interop-live");
    for (int i = 0; i < 10; ++i) ts_marker(live);
    core::TraceStore store;
    core::BatchIngestor ingest(store, core::rankInfoFor(c.job(), sync.value()));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline && !(ingest.sawLive() && ingest.eventsIngested() >= 21)) {
      auto n = c.pollEvents(200, [&](const core::wire::EventBatch& b) { QVERIFY(ingest.ingest(b).isOk()); });
      QVERIFY(n.isOk());
    }
    QVERIFY(ingest.eventsIngested() >= 21);  // 10 + KnobChange + 10
    QCOMPARE(ingest.unknownTrackEvents(), uint64_t{0});
    QCOMPARE(ingest.unknownStrings(), uint64_t{0});

    auto stats = c.stats();
    QVERIFY(stats.isOk());
    QCOMPARE(stats->clients, 1u);
    QCOMPARE(stats->currentStep, int64_t{1});
    c.close();
  }
};

QTEST_GUILESS_MAIN(TstAgentInterop)
#include "tst_agent_interop.moc"
