// plots::SessionTreeModel: rank -> track tree built from a session summary, checked with Qt's
// model tester and against the summary's own numbers.
#include <QAbstractItemModelTester>
#include <QtTest>

#include "trainscope/core/session/summary.h"
#include "trainscope/core/synth/synth.h"
#include "trainscope/plots/session_tree_model.h"

using namespace trainscope;

class TstSessionTreeModel : public QObject {
  Q_OBJECT

 private slots:
  void treeMatchesSummary() {
    core::TraceStore store;
    core::SynthOptions o;
    o.ranks = 3;
    o.steps = 2;
    o.kernelsPerStep = 4;
    core::synthesizeTrace(store, o);
    store.rank(1)->droppedEvents = 17;
    const core::SessionSummary s = core::summarizeStore(store);

    plots::SessionTreeModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setSummary(s);
    QCOMPARE(model.rowCount(), 3);
    const QLocale locale;
    uint64_t total = 0;
    for (int r = 0; r < 3; ++r) {
      const QModelIndex rank = model.index(r, 0);
      QCOMPARE(model.data(rank, Qt::UserRole).toInt(), r);
      QCOMPARE(model.rowCount(rank), 4);  // main thread, compute, comm, counters
      QCOMPARE(model.parent(model.index(0, 0, rank)), rank);
      uint64_t rankEvents = 0;
      for (int t = 0; t < 4; ++t) {
        const auto id = model.data(model.index(t, 0, rank), Qt::UserRole).toUInt();
        rankEvents += s.tracks[id].eventCount;
        QCOMPARE(s.tracks[id].info.rank, r);
      }
      QCOMPARE(model.data(model.index(r, plots::SessionTreeModel::Events)).toString(),
               locale.toString(static_cast<qulonglong>(rankEvents)));
      total += rankEvents;
    }
    QCOMPARE(total, s.eventCount);
    QCOMPARE(model.data(model.index(1, plots::SessionTreeModel::Dropped)).toString(), locale.toString(17));
    QCOMPARE(model.data(model.index(0, 0)).toString(), QString("rank 0 (node0)"));
    model.clear();
    QCOMPARE(model.rowCount(), 0);
  }
};

QTEST_MAIN(TstSessionTreeModel)
#include "tst_session_tree_model.moc"
