// Matching NCCL collectives across ranks by (CommHash, Seq) and the clock skew their ends give:
// a constructed trace with hand-computed answers.
#include <QtTest>

#include "trainscope/core/analysis/collective_match.h"

using namespace trainscope::core;

namespace {
void coll(TraceStore& s, TrackId t, int64_t start, int64_t end, int64_t hash, int64_t seq) {
  const Attr a[] = {Attr::ofInt(AttrKey::CommHash, hash), Attr::ofInt(AttrKey::Seq, seq),
                    Attr::ofInt(AttrKey::Bytes, 4096)};
  s.append(t, {start, end, s.intern("AllReduce"), EventKind::Collective}, a);
}
}  // namespace

class TstCollectiveMatch : public QObject {
  Q_OBJECT
 private slots:
  void matchesAndSkew() {
    TraceStore s;
    const TrackId r0 = s.findOrAddTrack(0, TrackKind::Communicator, 77, "nccl world");
    const TrackId r1 = s.findOrAddTrack(1, TrackKind::Communicator, 77, "nccl world");
    const TrackId r2 = s.findOrAddTrack(2, TrackKind::Communicator, 77, "nccl world");
    // Rank 1's timeline is 5 us late (ends +5000 +- jitter), rank 2's 2 us early.
    const int64_t jitter1[] = {0, 40, -30, 10, 900};  // one outlier: the median ignores it
    const int64_t jitter2[] = {-10, 0, 20};
    for (int k = 0; k < 5; ++k) {
      const int64_t end = 1'000'000 + k * 100'000;
      coll(s, r0, end - 50'000, end, 77, k);
      coll(s, r1, end - 70'000, end + 5'000 + jitter1[k], 77, k);
      if (k < 3) coll(s, r2, end - 60'000, end - 2'000 + jitter2[k], 77, k);
    }
    coll(s, r0, 10, 20, 88, 0);  // another communicator, seen on one rank only
    s.append(r1, {30, 40, s.intern("x"), EventKind::Collective});  // no CommHash/Seq: ignored
    coll(s, r1, 50, 60, 77, 4);  // rank 1 reports seq 4 twice: the first counts

    const auto m = matchCollectives(s);
    QCOMPARE(m.size(), size_t{5});
    QCOMPARE(m[0].seq, int64_t{0});
    QCOMPARE(m[0].ranks.size(), size_t{3});
    QCOMPARE(m[4].ranks.size(), size_t{2});
    QCOMPARE(m[0].ranks[1].rank, RankId{1});
    QCOMPARE(m[4].ranks[1].endNs, int64_t{1'400'000 + 5'000 + 900});

    const auto skew = estimateSkewFromCollectives(m, 0);
    QCOMPARE(skew.size(), size_t{2});
    // Rank 1: deltas 5000, 5040, 4970, 5010, 5900 -> median 5010; |d - 5010| = 10, 30, 40, 0, 890 -> 30.
    QCOMPARE(skew[0].rank, RankId{1});
    QCOMPARE(skew[0].offsetNs, int64_t{5010});
    QCOMPARE(skew[0].madNs, int64_t{30});
    QCOMPARE(skew[0].samples, size_t{5});
    // Rank 2: deltas -2010, -2000, -1980 -> median -2000; deviations 10, 0, 20 -> 10.
    QCOMPARE(skew[1].rank, RankId{2});
    QCOMPARE(skew[1].offsetNs, int64_t{-2000});
    QCOMPARE(skew[1].madNs, int64_t{10});
    // Relative to rank 1 instead: rank 0 is early by the same amount.
    const auto from1 = estimateSkewFromCollectives(m, 1);
    QCOMPARE(from1[0].rank, RankId{0});
    QCOMPARE(from1[0].offsetNs, int64_t{-5010});
  }

  void evenCountMedianAndNothingShared() {
    TraceStore s;
    const TrackId r0 = s.findOrAddTrack(0, TrackKind::Communicator, 5, "c");
    const TrackId r1 = s.findOrAddTrack(1, TrackKind::Communicator, 5, "c");
    coll(s, r0, 0, 100, 5, 1);
    coll(s, r1, 0, 110, 5, 1);
    coll(s, r0, 0, 200, 5, 2);
    coll(s, r1, 0, 230, 5, 2);
    const auto skew = estimateSkewFromCollectives(matchCollectives(s), 0);
    QCOMPARE(skew.size(), size_t{1});
    QCOMPARE(skew[0].offsetNs, int64_t{20});                               // deltas 10, 30 -> 20
    QVERIFY(estimateSkewFromCollectives(matchCollectives(s), 7).empty());  // no such rank
    QVERIFY(matchCollectives(TraceStore{}).empty());
  }
};

QTEST_GUILESS_MAIN(TstCollectiveMatch)
#include "tst_collective_match.moc"
