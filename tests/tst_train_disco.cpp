// DISCO under a real mpirun (issue 5): the feature-split MLP at sparsity 0 equals the dense
// one-process model; the bytes the ranks exchange fall linearly with the sparsity (exactly:
// 2 directions x batch x 4 bytes x kept off-diagonal sub-rows per split layer); pruning keeps
// the diagonal blocks and zeroes the pruned sub-rows; training still lowers the loss at
// moderate sparsity.
#include <QRegularExpression>
#include <QtTest>
#include <cmath>

#include "train_test_support.h"

using namespace train_test;

namespace {

// 3 hidden layers of 32 (layers 1 and 2 are split), batch 16.
const QStringList kModel{"--layers", "3", "--width", "32", "--batch", "16", "--eval-every", "0"};

uint64_t bytesAllRanks(const QString& out) {
  uint64_t sum = 0;
  QRegularExpression re("rank \\d+ step 0 disco bytes (\\d+)");
  for (auto it = re.globalMatch(out); it.hasNext();) sum += it.next().captured(1).toULongLong();
  return sum;
}

}  // namespace

class TstTrainDisco : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    if (!QFileInfo::exists(trainer())) QSKIP("trainscope-train not built (MPI or OpenBLAS missing)");
  }

  void sparsityZeroEqualsDense() {
    const QString ref = dir_.filePath("dense.bin");
    QCOMPARE(mpirunTrainer(1, kModel + QStringList{"--steps", "3", "--dump-params", ref}).code, 0);
    for (int n : {2, 4}) {
      const QString f = dir_.filePath(QString("disco%1.bin").arg(n));
      const Run r = mpirunTrainer(n, kModel + QStringList{"--steps", "3", "--mode", "disco", "--dump-params", f});
      QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
      const double d = maxAbsDiff(readFloats(f), readFloats(ref));
      QVERIFY2(d < 2e-5, qPrintable(QString("N=%1: max |difference| %2").arg(n).arg(d)));
    }
  }

  void bytesFallLinearly_data() {
    QTest::addColumn<int>("ranks");
    QTest::addColumn<double>("sparsity");
    for (int n : {2, 4})
      for (double s : {0.0, 0.25, 0.5, 0.9, 1.0}) QTest::newRow(qPrintable(QString("N=%1 s=%2").arg(n).arg(s))) << n << s;
  }

  void bytesFallLinearly() {
    QFETCH(int, ranks);
    QFETCH(double, sparsity);
    const Run r = mpirunTrainer(ranks, kModel + QStringList{"--steps", "1", "--mode", "disco", "--sparsity",
                                                           QString::number(sparsity)});
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    const int offDiagonal = ranks * (32 - 32 / ranks);  // sub-rows per split layer
    const auto kept = offDiagonal - static_cast<int>(std::llround(sparsity * offDiagonal));
    const uint64_t expected = uint64_t{2} * 16 * 4 * static_cast<uint64_t>(kept) * 2;  // 2 split layers
    QCOMPARE(bytesAllRanks(r.out), expected);
  }

  void pruningKeepsDiagonalBlocks() {
    const QString f = dir_.filePath("s1.bin");
    const Run r = mpirunTrainer(2, kModel + QStringList{"--steps", "2", "--mode", "disco", "--sparsity", "1",
                                                       "--dump-params", f});
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    const auto p = readFloats(f);
    // Layout: reverse layer order; layer 1 (32 x 32 + 32) sits after the output (8 x 32 + 8) and layer 2.
    const size_t layer1 = (8 * 32 + 8) + (32 * 32 + 32);
    QVERIFY(p.size() > layer1 + 32 * 32);
    double diag = 0, off = 0;
    for (int o = 0; o < 32; ++o)
      for (int i = 0; i < 32; ++i) (o / 16 == i / 16 ? diag : off) += std::fabs(p[layer1 + size_t(o) * 32 + size_t(i)]);
    QVERIFY2(diag > 1.0, "diagonal blocks are kept");
    QCOMPARE(off, 0.0);  // every off-diagonal sub-row pruned: independent branches
  }

  void trainsAtModerateSparsity() {
    const Run r = mpirunTrainer(4, kModel + QStringList{"--steps", "80", "--mode", "disco", "--sparsity", "0.5",
                                                       "--log-every", "1", "--lr", "0.05"});
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    QRegularExpression re("step (\\d+) loss ([0-9.]+)");
    std::vector<double> loss;
    for (auto it = re.globalMatch(r.out); it.hasNext();) loss.push_back(it.next().captured(2).toDouble());
    QVERIFY(loss.size() >= 80);
    double first = 0, last = 0;
    for (size_t i = 0; i < 10; ++i) {
      first += loss[i] / 10;
      last += loss[loss.size() - 1 - i] / 10;
    }
    QVERIFY2(last < 0.8 * first, qPrintable(QString("loss %1 -> %2").arg(first).arg(last)));
  }
};

QTEST_GUILESS_MAIN(TstTrainDisco)
#include "tst_train_disco.moc"
