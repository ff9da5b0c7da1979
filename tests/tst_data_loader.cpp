// The trainer's DataLoader (agents/train/data_loader.h) against Task::train: whatever order the
// pieces are asked for in -- prefetched and ready, prefetched and not yet started, in flight,
// never prefetched, asked twice -- take() returns exactly Task::train's batch; discardBefore()
// drops what no step will take; the loader shuts down with work queued.
#include <QtTest>

#include "data_loader.h"
#include "task.h"

using namespace trainscope::train;

namespace {

bool same(const Batch& a, const Batch& b) {
  return a.x.rows == b.x.rows && a.x.cols == b.x.cols && a.x.v == b.x.v && a.labels == b.labels;
}

}  // namespace

class TstDataLoader : public QObject {
  Q_OBJECT

 private slots:
  void batchesEqualTheTasks_data() {
    QTest::addColumn<bool>("background");
    QTest::newRow("loader thread") << true;
    QTest::newRow("inline (--no-prefetch)") << false;
  }
  void batchesEqualTheTasks() {
    QFETCH(bool, background);
    const auto task = makeTeacherTask(7, 64, 10);
    DataLoader loader(*task, background);
    for (int64_t f = 0; f < 8 * 32; f += 32) loader.prefetch(f, 32);
    // In reverse: the last ones may still be queued (made inline), the first ones ready.
    for (int64_t f = 7 * 32; f >= 0; f -= 32) QVERIFY(same(loader.take(f, 32), task->train(f, 32)));
    QVERIFY(same(loader.take(1000, 5), task->train(1000, 5)));  // never prefetched
    loader.prefetch(2000, 16);
    QVERIFY(same(loader.take(2000, 16), task->train(2000, 16)));
    QVERIFY(same(loader.take(2000, 16), task->train(2000, 16)));  // taken twice: made again
    const auto seq = makeSequenceTask(3, 12, 17);
    DataLoader seqLoader(*seq, background);
    seqLoader.prefetch(40, 8);
    QVERIFY(same(seqLoader.take(40, 8), seq->train(40, 8)));
  }

  // Pieces before the given sample are dropped; later ones stay and are still exact.
  void discardDropsStalePieces() {
    const auto task = makeTeacherTask(1, 32, 4);
    DataLoader loader(*task, true);
    for (int64_t f = 0; f < 10 * 8; f += 8) loader.prefetch(f, 8);
    loader.discardBefore(40);
    for (int64_t f = 40; f < 80; f += 8) QVERIFY(same(loader.take(f, 8), task->train(f, 8)));
    QVERIFY(same(loader.take(0, 8), task->train(0, 8)));  // dropped: made inline, still right
  }

  // Destroyed with a long queue and one piece in flight: joins without hanging or leaking work.
  void shutsDownWithWorkQueued() {
    const auto task = makeTeacherTask(2, 512, 512);
    QElapsedTimer t;
    t.start();
    {
      DataLoader loader(*task, true);
      for (int64_t f = 0; f < 64 * 128; f += 128) loader.prefetch(f, 128);
    }
    QVERIFY2(t.elapsed() < 5000, qPrintable(QString("%1 ms to shut down").arg(t.elapsed())));
  }
};

QTEST_GUILESS_MAIN(TstDataLoader)
#include "tst_data_loader.moc"
