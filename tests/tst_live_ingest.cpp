// LiveIngest against a real 4-rank MPI job that ends while attached: events from every rank
// arrive (history first, then live), the state turns to "job ended" with a message, what arrived
// stays in the timeline data and saves to a session that reads back with the same counts. An
// endpoint nobody listens on fails cleanly.
#include <QProcess>
#include <QtTest>
#include <set>

#include "live_test_support.h"
#include "trainscope/core/session_db.h"
#include "trainscope/plots/live_ingest.h"

using namespace trainscope;
using live_test::bin;
using live_test::usePrivateRuntimeDir;

class TstLiveIngest : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;

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
    QProcess job;
    // --start-delay-ms gives the test time to attach before step 0; the job then runs ~1 s.
    job.start(bin("trainscope-cli"),
              {"launch", "--ranks", "4", "--job-id", jobId, "--", bin("trainscope-testjob"), "--steps", "300",
               "--step-ms", "2", "--start-delay-ms", "1000"});
    QVERIFY(job.waitForStarted());
    std::vector<core::discovery::Entry> entries;
    for (int i = 0; i < 300 && entries.size() < 4; ++i) {
      entries.clear();
      for (auto& e : core::discovery::listEntries())
        if (e.jobId == jobId.toStdString()) entries.push_back(e);
      if (entries.size() < 4) QTest::qWait(50);
    }
    QCOMPARE(entries.size(), size_t(4));

    auto data = std::make_shared<plots::TimelineData>();
    plots::LiveIngest ingest(data);
    core::AgentClient::Options o;
    o.clientName = "tst_live_ingest";
    ingest.start(entries, o);
    // Wait for the job to end (the ingest notices every rank closing).
    for (int i = 0; i < 600 && ingest.stats().state != plots::LiveIngest::State::Ended; ++i) QTest::qWait(50);
    const auto st = ingest.stats();
    QCOMPARE(int(st.state), int(plots::LiveIngest::State::Ended));
    QVERIFY2(st.message.find("job ended") != std::string::npos, st.message.c_str());
    QCOMPARE(st.ranksTotal, 4);
    QCOMPARE(st.ranksSeen, 4);
    QVERIFY(st.clockErrorNs > 0);
    QVERIFY(job.waitForFinished(30000));

    uint64_t steps = 0, events = 0;
    {
      std::shared_lock lock(data->mutex);
      events = data->model.eventCount();
      QCOMPARE(events, uint64_t(data->store.eventCount()));
      std::set<core::RankId> ranks;
      for (const auto& m : data->model.steps()) ranks.insert(m.rank);
      QCOMPARE(ranks.size(), size_t(4));
      steps = data->model.steps().size();
    }
    QCOMPARE(st.events, events);
    QCOMPARE(steps, uint64_t(4 * 300));  // every step of every rank, history and live, once
    // Detaching after the end is harmless; what arrived saves and reads back.
    ingest.detach();
    const std::string file = dir_.filePath("kept.tsdb").toStdString();
    {
      std::shared_lock lock(data->mutex);
      QVERIFY(core::saveSession(data->store, file).isOk());
    }
    auto back = core::loadSession(file);
    QVERIFY(back.isOk());
    QCOMPARE(uint64_t(back->eventCount()), events);
  }

  void unreachableRankFails() {
    auto data = std::make_shared<plots::TimelineData>();
    plots::LiveIngest ingest(data);
    core::discovery::Entry e;
    e.jobId = "nobody";
    e.endpoint = "unix:" + dir_.filePath("run/nobody.sock").toStdString();
    ingest.start({e}, {});
    for (int i = 0; i < 200 && ingest.stats().state == plots::LiveIngest::State::Connecting; ++i)
      QTest::qWait(20);
    const auto st = ingest.stats();
    QCOMPARE(int(st.state), int(plots::LiveIngest::State::Failed));
    QVERIFY2(st.message.find("rank 0") != std::string::npos, st.message.c_str());
  }
};

QTEST_GUILESS_MAIN(TstLiveIngest)
#include "tst_live_ingest.moc"
