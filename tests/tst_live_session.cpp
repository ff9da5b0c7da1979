// The live-session engine (core::LiveSession) against real 4-rank MPI jobs (trainscope-testjob
// with the agent, started by `trainscope-cli launch`):
//  - a job that ends while attached: every rank's steps arrive once (history, then live), the
//    state turns to "job ended", what arrived stays in the timeline data and saves to a session
//    that reads back with the same counts;
//  - ranks that register after the engine attached join by themselves (the engine is given only
//    rank 0's entry, as `record` started while a job is coming up would be);
//  - detach and re-attach to the same engine: the flight recorder's history is not ingested twice;
//  - an endpoint nobody listens on fails cleanly.
// Every test stops the job's whole process group, also when it fails (JobGuard).
#include <QProcess>
#include <QtTest>
#include <future>
#include <set>

#include "live_test_support.h"
#include "trainscope/core/live/live_session.h"
#include "trainscope/core/session/tsdb.h"
#include "trainscope/plots/timeline_data.h"

using namespace trainscope;
using live_test::bin;
using live_test::usePrivateRuntimeDir;

namespace {

// `trainscope-cli launch` forwards SIGTERM to mpirun and the ranks; the guard stops the job
// however the test ends.
struct JobGuard {
  QProcess p;
  ~JobGuard() {
    if (p.state() == QProcess::NotRunning) return;
    p.terminate();
    if (!p.waitForFinished(10000)) p.kill();
    p.waitForFinished(5000);
  }
};

std::vector<core::discovery::Entry> waitForRanks(const QString& jobId, size_t n) {
  std::vector<core::discovery::Entry> entries;
  for (int i = 0; i < 300 && entries.size() < n; ++i) {
    entries.clear();
    for (auto& e : core::discovery::listEntries())
      if (e.jobId == jobId.toStdString()) entries.push_back(e);
    if (entries.size() < n) QTest::qWait(50);
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  return entries;
}

// Starts `trainscope-cli launch --ranks N -- trainscope-testjob ARGS` under job and waits until
// its N ranks are discoverable (empty when they never are).
std::vector<core::discovery::Entry> launchTestJob(JobGuard& job, const QString& jobId, int ranks,
                                                  const QStringList& args) {
  job.p.start(bin("trainscope-cli"),
              QStringList{"launch", "--ranks", QString::number(ranks), "--job-id", jobId, "--",
                          bin("trainscope-testjob")} +
                  args);
  if (!job.p.waitForStarted()) return {};
  return waitForRanks(jobId, static_cast<size_t>(ranks));
}

core::LiveSession::StoreTarget targetFor(const std::shared_ptr<plots::TimelineData>& data) {
  core::LiveSession::StoreTarget t;
  t.store = &data->store;
  t.mutex = &data->mutex;
  t.underLock = [data] { return data->model.update(); };
  t.afterUnlock = [data](bool) { ++data->generation; };
  return t;
}

core::LiveSnapshot waitForState(core::LiveSession& live, core::LiveState s, int ms) {
  for (int i = 0; i < ms / 50 && live.snapshot().state != s; ++i) QTest::qWait(50);
  return live.snapshot();
}

// Step events per rank: rank -> step numbers (a multiset shows duplicates).
std::map<core::RankId, std::multiset<int64_t>> stepsByRank(plots::TimelineData& data) {
  std::shared_lock lock(data.mutex);
  std::map<core::RankId, std::multiset<int64_t>> out;
  for (const auto& m : data.model.steps())
    if (m.kind == core::EventKind::Step) out[m.rank].insert(m.step);
  return out;
}

}  // namespace

class TstLiveSession : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;

  core::LiveOptions options() {
    core::LiveOptions o;
    o.client.clientName = "tst_live_session";
    o.rediscoverSeconds = 0.2;
    return o;
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    if (!QFileInfo::exists(bin("trainscope-testjob"))) QSKIP("trainscope-testjob not built (no MPI)");
    usePrivateRuntimeDir(dir_);
    qputenv("OMPI_ALLOW_RUN_AS_ROOT", "1");
    qputenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
  }

  void jobEndingWhileAttachedKeepsWhatArrived() {
    const QString jobId = QString("ingest-%1").arg(QCoreApplication::applicationPid());
    JobGuard job;
    // --start-delay-ms gives the test time to attach before step 0; the job then runs ~1 s.
    auto entries = launchTestJob(job, jobId, 4, {"--steps", "300", "--step-ms", "2", "--start-delay-ms", "1000"});
    QCOMPARE(entries.size(), size_t(4));

    auto data = std::make_shared<plots::TimelineData>();
    core::LiveSession live(entries, options());
    live.setStore(targetFor(data));
    live.start();
    const auto st = waitForState(live, core::LiveState::Ended, 30000);
    QCOMPARE(int(st.state), int(core::LiveState::Ended));
    QVERIFY2(st.message.find("job ended") != std::string::npos, st.message.c_str());
    QCOMPARE(st.ranksTotal, 4);
    QCOMPARE(st.ranksSeen, 4);
    QVERIFY(st.clockErrorNs > 0);
    QVERIFY(job.p.waitForFinished(30000));

    uint64_t events = 0;
    {
      std::shared_lock lock(data->mutex);
      events = data->model.eventCount();
      QCOMPARE(events, uint64_t(data->store.eventCount()));
    }
    QCOMPARE(st.events, events);
    const auto steps = stepsByRank(*data);
    QCOMPARE(steps.size(), size_t(4));
    for (const auto& [rank, s] : steps) QCOMPARE(s.size(), size_t(300));  // every step, history and live, once
    // The metadata `record` writes is in the store too.
    {
      std::shared_lock lock(data->mutex);
      const auto& md = data->store.metadata();
      for (const char* k : {"job_id", "clock_domain", "clock_offset_ns.0", "clock_sync_error_ns.3",
                            "clock_offset_updates.2", "dropped_events.1", "record_seconds", "knob.test.work_us"})
        QVERIFY2(md.count(k), k);
    }
    // Detaching after the end is harmless; what arrived saves and reads back.
    live.detach();
    const std::string file = dir_.filePath("kept.tsdb").toStdString();
    {
      std::shared_lock lock(data->mutex);
      QVERIFY(core::saveSession(data->store, file).isOk());
    }
    auto back = core::loadSession(file);
    QVERIFY(back.isOk());
    QCOMPARE(uint64_t(back->eventCount()), events);
  }

  // Given only rank 0 (the others "not registered yet"), the engine finds ranks 1-3 through
  // discovery and records all four.
  void lateRanksJoin() {
    const QString jobId = QString("late-%1").arg(QCoreApplication::applicationPid());
    JobGuard job;
    auto entries = launchTestJob(job, jobId, 4, {"--steps", "400", "--step-ms", "2", "--start-delay-ms", "1500"});
    QCOMPARE(entries.size(), size_t(4));
    entries.resize(1);
    entries.front().worldSize = 4;
    auto data = std::make_shared<plots::TimelineData>();
    core::LiveSession live(entries, options());
    live.setStore(targetFor(data));
    live.start();
    const auto st = waitForState(live, core::LiveState::Ended, 40000);
    QCOMPARE(int(st.state), int(core::LiveState::Ended));
    QCOMPARE(st.ranksSeen, 4);
    const auto steps = stepsByRank(*data);
    QCOMPARE(steps.size(), size_t(4));
    for (const auto& [rank, s] : steps) {
      // Which steps are missing or doubled, for the failure message (one run under heavy load,
      // 24 Nov, had 396 of 400 on one rank; not reproduced in 5 runs alone).
      QStringList odd;
      for (int64_t i = 0; i < 400 && odd.size() < 20; ++i)
        if (s.count(i) != 1) odd << QString("%1x%2").arg(i).arg(s.count(i));
      QVERIFY2(s.size() == 400 && odd.isEmpty(),
               qPrintable(QString("rank %1: %2 steps; step x count: %3").arg(rank).arg(s.size()).arg(odd.join(' '))));
    }
  }

  // Detach mid-run, then start the same engine again: the history it is sent again is skipped,
  // so each step is there once, and nothing is missing either (the flight recorder still holds
  // what streamed while detached).
  void reattachAddsNoDuplicates() {
    const QString jobId = QString("again-%1").arg(QCoreApplication::applicationPid());
    JobGuard job;
    auto entries = launchTestJob(job, jobId, 4, {"--steps", "500", "--step-ms", "4", "--start-delay-ms", "1000"});
    QCOMPARE(entries.size(), size_t(4));
    auto data = std::make_shared<plots::TimelineData>();
    core::LiveSession live(entries, options());
    live.setStore(targetFor(data));
    live.start();
    for (int i = 0; i < 200 && live.snapshot().events < 400; ++i) QTest::qWait(50);
    live.detach();
    QCOMPARE(int(live.snapshot().state), int(core::LiveState::Detached));
    const uint64_t before = live.snapshot().events;
    QVERIFY(before >= 400);
    QTest::qWait(300);
    live.start();
    const auto st = waitForState(live, core::LiveState::Ended, 40000);
    QCOMPARE(int(st.state), int(core::LiveState::Ended));
    QVERIFY(st.events > before);
    const auto steps = stepsByRank(*data);
    QCOMPARE(steps.size(), size_t(4));
    for (const auto& [rank, s] : steps) {
      QCOMPARE(s.size(), size_t(500));
      QCOMPARE(std::set<int64_t>(s.begin(), s.end()).size(), size_t(500));
    }
    const auto md = live.metadata();
    QCOMPARE(md.at("attaches.0"), std::string("2"));
  }

  void knobCallsWhileStreaming() {
    const QString jobId = QString("knobs-%1").arg(QCoreApplication::applicationPid());
    JobGuard job;
    auto entries = launchTestJob(job, jobId, 2, {"--steps", "5000", "--step-ms", "2"});
    QCOMPARE(entries.size(), size_t(2));
    auto data = std::make_shared<plots::TimelineData>();
    core::LiveSession live(entries, options());
    live.setStore(targetFor(data));
    live.start();
    QCOMPARE(int(waitForState(live, core::LiveState::Live, 10000).state), int(core::LiveState::Live));
    // The job registers its knobs after MPI_Init.
    bool listed = false;
    for (int i = 0; i < 200 && !listed; ++i) {
      auto l = live.knobList();
      listed = l.isOk() && !l->knobs.empty();
      if (!listed) QTest::qWait(50);
    }
    QVERIFY(listed);
    // From another thread, as the GUI's Knobs dock does; the engine runs them on its own.
    auto f = std::async(std::launch::async, [&live] { return live.setKnobs({{"test.work_us", "300"}}, 20000); });
    auto res = f.get();
    QVERIFY2(res.isOk(), res.status().toString().c_str());
    QCOMPARE(res->front().stepPerRank.size(), size_t(2));
    auto list = live.knobList();
    QVERIFY(list.isOk());
    bool found = false;
    for (const auto& k : list->knobs)
      if (k.name == "test.work_us") found = k.currentValue == "300";
    QVERIFY(found);
    auto refused = live.setKnobs({{"test.work_us", "many"}}, 2000);
    QVERIFY(!refused.isOk());
    QVERIFY2(live.snapshot().state == core::LiveState::Live, live.snapshot().message.c_str());
    live.detach();
  }

  void unreachableRankFails() {
    auto data = std::make_shared<plots::TimelineData>();
    core::discovery::Entry e;
    e.jobId = "nobody";
    e.endpoint = "unix:" + dir_.filePath("run/nobody.sock").toStdString();
    core::LiveSession live({e}, options());
    live.setStore(targetFor(data));
    live.start();
    for (int i = 0; i < 200 && live.snapshot().state == core::LiveState::Connecting; ++i) QTest::qWait(20);
    const auto st = live.snapshot();
    QCOMPARE(int(st.state), int(core::LiveState::Failed));
    QVERIFY2(st.message.find("rank 0") != std::string::npos, st.message.c_str());
  }

  // What `set` says when a change every rank accepted did not apply everywhere (tst_faults drives
  // the real cases): each rank's state, grouped, and what becomes of the change. Hand-written.
  void unappliedChangeIsDescribedPerRank() {
    QCOMPARE(core::describeUnapplied("a=1", 7, 4, {}, {0, 1, 2, 3}, {}, 60000),
             std::string("a=1 (knob change 7) was accepted by all 4 ranks but not applied on every rank: no rank "
                         "applied it; ranks 0, 1, 2, 3 went away before applying it (connection closed: the rank or "
                         "its job ended). Ranks apply a change only at a step all of them agree on, so no rank "
                         "applied it without the others"));
    QCOMPARE(core::describeUnapplied("a=1", 2, 2, {}, {}, {0, 1}, 2500),
             std::string("a=1 (knob change 2) was accepted by all 2 ranks but not applied on every rank: no rank "
                         "applied it; ranks 0, 1 had not applied it after 2.5 s. It stays pending: it applies on "
                         "every rank at one step once all ranks reach that step's agreement (a stopped or slow rank "
                         "holds it back), unless the job ends first"));
    QCOMPARE(core::describeUnapplied("b=x", 3, 4, {{0, 12}, {1, 12}, {2, 12}}, {3}, {}, 1000),
             std::string("b=x (knob change 3) was accepted by all 4 ranks but not applied on every rank: ranks 0, "
                         "1, 2 applied it at step 12; rank 3 went away before applying it (connection closed: the "
                         "rank or its job ended)"));
  }
};

QTEST_GUILESS_MAIN(TstLiveSession)
#include "tst_live_session.moc"
