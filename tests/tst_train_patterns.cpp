// Each gradient-reduction algorithm sends the messages its name promises (issue 18): the job's
// own bucket ops (CommSet, makeBucketOp) run on p threads over the recording communicator
// (recording_communicator.h), and the recorded messages -- peer, size, order, tag -- are checked
// against tables computed by hand for p = 2, 3, 4, 5, 8: ring 2(p-1) steps of a chunk of n/p to
// the right neighbour; recursive doubling log2 p exchanges of the whole bucket with rank ^ 2^k,
// with the fold for p not a power of two; hierarchical a reduce inside the node, an allreduce
// among the node leaders, a broadcast inside the node, with the nodes taken from the machine
// (splitShared) or from the --ranks-per-node override; decentralized one message to each ring
// neighbour; each codec's payload sizes. The bytes the ops count (Request::bytesSent) equal
// the recorded ones, results are the mean (exact without a codec) and equal on every rank, and
// every tag stays within the transport's MPI_TAG_UB. (`analyze` on such bucket events:
// tst_analysis_bytes.)
#include <QtTest>
#include <cmath>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "collectives.h"
#include "recording_communicator.h"

using namespace trainscope::train;
using recording::Entry;
using recording::Fabric;

namespace {

struct Msg {
  int dst;
  size_t bytes;
  bool operator==(const Msg&) const = default;
};

struct Run {
  std::map<int, std::vector<Msg>> sends;                     // world rank -> its sends, in order
  std::map<int, std::vector<std::pair<std::string, int>>> colls;  // world rank -> (op, comm size)
  std::map<int, std::vector<int>> tags;
  std::map<int, std::vector<float>> data, params;
  std::map<int, uint64_t> counted, countedRecv, formula;
  std::map<int, bool> opaque;
  std::map<int, std::vector<std::pair<uint64_t, uint64_t>>> perPeer;  // the world's Traffic
};

size_t chunkLen(size_t n, int j, int p) {
  j = ((j % p) + p) % p;
  return n * static_cast<size_t>(j + 1) / static_cast<size_t>(p) - n * static_cast<size_t>(j) / static_cast<size_t>(p);
}

// Gradients of rank r: values that differ per rank and position.
float grad(int r, size_t i) {
  return static_cast<float>(std::sin(0.37 * static_cast<double>(i) + 1.3 * r)) * static_cast<float>(r + 1);
}

Run runOp(int p, size_t n, Algorithm a, Compression c, int nodeSize = 1, int ranksPerNode = 0, int bucket = 0,
          int tagUb = 32767, double ratio = 0.25) {
  Fabric f(nodeSize, tagUb);
  Run out;
  std::mutex mu;
  recording::runRanks(f, p, [&](int r, recording::Comm& world) {
    CommSet cs = CommSet::make(world, ranksPerNode);
    std::vector<float> g(n), params(n);
    for (size_t i = 0; i < n; ++i) {
      g[i] = grad(r, i);
      params[i] = grad(r + 7, i);
    }
    ErrorFeedback ef;
    ef.worker.assign(n, 0.0f);
    ef.server.assign(serverChunkSize(n, world.rank(), world.size()), 0.0f);
    for (auto* v : {&ef.self, &ef.left, &ef.right}) v->assign(n, 0.0f);
    OpParams op;
    op.algorithm = a;
    op.codec.kind = c;
    op.codec.topkRatio = ratio;
    op.data = g.data();
    op.params = params.data();
    op.n = n;
    op.bucket = bucket;
    op.seed = 11 + static_cast<uint64_t>(r);
    op.sharedSeed = 99;
    op.ef = &ef;
    // Only the op's messages are wanted, not the communicators' creation.
    world.allreduceMaxDouble(0);
    if (r == 0) f.clearLog();
    world.allreduceMaxDouble(0);
    auto bop = makeBucketOp(cs, op);
    while (!bop->progress(INT_MAX)) std::this_thread::yield();
    std::lock_guard l(mu);
    out.data[r] = g;
    out.params[r] = params;
    out.counted[r] = bop->bytesSent();
    out.countedRecv[r] = bop->bytesReceived();
    out.formula[r] = bop->wireBytes();
    out.opaque[r] = bop->opaque();
    out.perPeer[r] = world.traffic().perPeer;
  });
  for (const Entry& e : f.log()) {
    if (e.op == "allreduce-max") continue;
    if (e.op == "send") {
      out.sends[e.src].push_back({e.dst, e.bytes});
      out.tags[e.src].push_back(e.tag);
    } else {
      out.colls[e.src].emplace_back(e.op, e.commSize);
    }
  }
  return out;
}

uint64_t sumBytes(const std::vector<Msg>& v) {
  uint64_t s = 0;
  for (const Msg& m : v) s += m.bytes;
  return s;
}

void checkMean(const Run& run, int p, size_t n, double tol) {
  for (int r = 0; r < p; ++r)
    for (size_t i = 0; i < n; ++i) {
      double mean = 0;
      for (int q = 0; q < p; ++q) mean += grad(q, i);
      mean /= p;
      QVERIFY2(std::fabs(run.data.at(r)[i] - mean) <= tol,
               qPrintable(QString("rank %1 value %2: %3 vs mean %4").arg(r).arg(i).arg(run.data.at(r)[i]).arg(mean)));
    }
}

void checkReplicas(const Run& run, int p) {
  for (int r = 1; r < p; ++r) QVERIFY2(run.data.at(r) == run.data.at(0), qPrintable(QString("rank %1 differs").arg(r)));
}

// Counted bytes = the recorded sends; for point-to-point algorithms also = the op's formula.
void checkCounts(const Run& run, int p, bool formulaToo = true) {
  for (int r = 0; r < p; ++r) {
    const uint64_t rec = run.sends.count(r) ? sumBytes(run.sends.at(r)) : 0;
    QCOMPARE(run.counted.at(r), rec);
    if (formulaToo) QCOMPARE(run.formula.at(r), rec);
    QVERIFY(!run.opaque.at(r));
  }
  // What all ranks sent is what all received.
  uint64_t sent = 0, recv = 0;
  for (int r = 0; r < p; ++r) {
    sent += run.counted.at(r);
    recv += run.countedRecv.at(r);
  }
  QCOMPARE(recv, sent);
}

size_t pay(Compression c, size_t len, double ratio = 0.25) {
  Codec k;
  k.kind = c;
  k.topkRatio = ratio;
  return k.payloadBytes(len);
}

}  // namespace

class TstTrainPatterns : public QObject {
  Q_OBJECT

 private slots:
  // Hand-written tables for small cases, then the rule for every p.
  void ringTable() {
    // p = 3, n = 10: chunks [0,3) [3,6) [6,10). Rank 0 sends chunk 0, 2 (reduce-scatter), then 1, 0
    // (allgather: it ends the reduce-scatter owning chunk 1), always to rank 1.
    const Run run = runOp(3, 10, Algorithm::Ring, Compression::None);
    QCOMPARE(run.sends.at(0), (std::vector<Msg>{{1, 12}, {1, 16}, {1, 12}, {1, 12}}));
    QCOMPARE(run.sends.at(1), (std::vector<Msg>{{2, 12}, {2, 12}, {2, 16}, {2, 12}}));
    QCOMPARE(run.sends.at(2), (std::vector<Msg>{{0, 16}, {0, 12}, {0, 12}, {0, 16}}));
    QVERIFY(run.colls.empty());
    checkCounts(run, 3);
    checkMean(run, 3, 10, 1e-5);
  }

  void ringEveryP_data() {
    QTest::addColumn<int>("p");
    for (int p : {2, 3, 4, 5, 8}) QTest::newRow(qPrintable(QString("p=%1").arg(p))) << p;
  }
  void ringEveryP() {
    QFETCH(int, p);
    const size_t n = 1001;
    const Run run = runOp(p, n, Algorithm::Ring, Compression::None);
    uint64_t total = 0;
    for (int r = 0; r < p; ++r) {
      const auto& s = run.sends.at(r);
      QCOMPARE(int(s.size()), 2 * (p - 1));  // 2(p-1) steps
      for (int k = 0; k < p - 1; ++k) {
        QCOMPARE(s[size_t(k)], (Msg{(r + 1) % p, 4 * chunkLen(n, r - k, p)}));              // reduce-scatter
        QCOMPARE(s[size_t(p - 1 + k)], (Msg{(r + 1) % p, 4 * chunkLen(n, r + 1 - k, p)}));  // allgather
      }
      total += sumBytes(s);
    }
    QCOMPARE(total, uint64_t(2 * (p - 1)) * 4 * n);  // 2(p-1)/p n per rank, summed
    for (int r = 0; r < p; ++r) {  // the communicator's per-peer counts: right gets, left gives
      const auto& pp = run.perPeer.at(r);
      for (int q = 0; q < int(pp.size()); ++q) {
        QCOMPARE(pp[size_t(q)].first, q == (r + 1) % p ? run.counted.at(r) : uint64_t{0});
        QCOMPARE(pp[size_t(q)].second, q == (r - 1 + p) % p ? run.countedRecv.at(r) : uint64_t{0});
      }
    }
    checkCounts(run, p);
    checkMean(run, p, n, 1e-5);
  }

  void recursiveDoublingTable() {
    // p = 5: 4 = 2^2 ranks after the fold; rank 0 hands its bucket to 1, which exchanges with 2
    // then 3 (virtual ranks 0^1 -> rank 2, 0^2 -> rank 3) and hands the result back to 0.
    const size_t n = 10;
    const Run run = runOp(5, n, Algorithm::RecursiveDoubling, Compression::None);
    QCOMPARE(run.sends.at(0), (std::vector<Msg>{{1, 40}}));
    QCOMPARE(run.sends.at(1), (std::vector<Msg>{{2, 40}, {3, 40}, {0, 40}}));
    QCOMPARE(run.sends.at(2), (std::vector<Msg>{{1, 40}, {4, 40}}));
    QCOMPARE(run.sends.at(3), (std::vector<Msg>{{4, 40}, {1, 40}}));
    QCOMPARE(run.sends.at(4), (std::vector<Msg>{{3, 40}, {2, 40}}));
    checkCounts(run, 5);
    checkMean(run, 5, n, 1e-5);
    const Run three = runOp(3, n, Algorithm::RecursiveDoubling, Compression::None);
    QCOMPARE(three.sends.at(0), (std::vector<Msg>{{1, 40}}));
    QCOMPARE(three.sends.at(1), (std::vector<Msg>{{2, 40}, {0, 40}}));
    QCOMPARE(three.sends.at(2), (std::vector<Msg>{{1, 40}}));
    checkMean(three, 3, n, 1e-5);
  }

  void recursiveDoublingPowersOfTwo_data() {
    QTest::addColumn<int>("p");
    for (int p : {2, 4, 8}) QTest::newRow(qPrintable(QString("p=%1").arg(p))) << p;
  }
  void recursiveDoublingPowersOfTwo() {
    QFETCH(int, p);
    const size_t n = 33;
    const Run run = runOp(p, n, Algorithm::RecursiveDoubling, Compression::None);
    const int rounds = int(std::log2(p));
    for (int r = 0; r < p; ++r) {
      std::vector<Msg> want;
      for (int k = 0; k < rounds; ++k) want.push_back({r ^ (1 << k), 4 * n});  // log2 p exchanges
      QCOMPARE(run.sends.at(r), want);
    }
    checkCounts(run, p);
    checkMean(run, p, n, 1e-5);
  }

  void hierarchical_data() {
    QTest::addColumn<int>("p");
    QTest::addColumn<int>("nodeSize");      // the "machine": ranks per shared-memory node
    QTest::addColumn<int>("ranksPerNode");  // the override (0: the machine's)
    QTest::addColumn<int>("nodes");
    QTest::newRow("p=2 one node") << 2 << 2 << 0 << 1;
    QTest::newRow("p=3 nodes of 2") << 3 << 2 << 0 << 2;
    QTest::newRow("p=4 nodes of 2") << 4 << 2 << 0 << 2;
    QTest::newRow("p=5 nodes of 2") << 5 << 2 << 0 << 3;
    QTest::newRow("p=8 nodes of 4") << 8 << 4 << 0 << 2;
    QTest::newRow("p=8 one machine, override 2") << 8 << 8 << 2 << 4;
  }
  void hierarchical() {
    QFETCH(int, p);
    QFETCH(int, nodeSize);
    QFETCH(int, ranksPerNode);
    QFETCH(int, nodes);
    const size_t n = 50;
    const Run run = runOp(p, n, Algorithm::Hierarchical, Compression::None, nodeSize, ranksPerNode);
    const int per = ranksPerNode > 0 ? ranksPerNode : nodeSize;
    for (int r = 0; r < p; ++r) {
      const int nodeSz = std::min(per, p - r / per * per);
      std::vector<std::pair<std::string, int>> want{{"reduce", nodeSz}};
      if (r % per == 0 && nodes > 1) want.emplace_back("allreduce", nodes);  // the leaders only
      want.emplace_back("bcast", nodeSz);
      QCOMPARE(run.colls.at(r), want);
      QVERIFY(!run.sends.count(r));  // no point-to-point message of ours
      QVERIFY(run.opaque.at(r));     // MPI chooses the messages: counted as handed over
    }
    checkMean(run, p, n, 1e-4);
  }

  void allreduceIsOneLibraryCall() {
    const Run run = runOp(4, 20, Algorithm::Allreduce, Compression::None);
    for (int r = 0; r < 4; ++r) {
      QCOMPARE(run.colls.at(r), (std::vector<std::pair<std::string, int>>{{"allreduce", 4}}));
      QVERIFY(run.opaque.at(r));
      QCOMPARE(run.counted.at(r), uint64_t{80});  // the buffer handed to MPI, not a wire count
    }
    checkMean(run, 4, 20, 1e-5);
  }

  void decentralized_data() {
    QTest::addColumn<int>("p");
    for (int p : {2, 3, 4, 5, 8}) QTest::newRow(qPrintable(QString("p=%1").arg(p))) << p;
  }
  void decentralized() {
    QFETCH(int, p);
    const size_t n = 40;
    for (Compression c : {Compression::None, Compression::Int8}) {
      const Run run = runOp(p, n, Algorithm::Decentralized, c);
      for (int r = 0; r < p; ++r) {
        std::vector<Msg> want{{(r - 1 + p) % p, pay(c, n)}};
        if (p > 2) want.push_back({(r + 1) % p, pay(c, n)});  // left, then right neighbour
        QCOMPARE(run.sends.at(r), want);
      }
      checkCounts(run, p);
    }
  }

  // Each codec's payloads in the compressed ring: reduce-scatter chunk r-k-1, allgather chunk
  // r-k (the ring is shifted so that rank r owns chunk r, its server error feedback's chunk).
  void codecsInRing_data() {
    QTest::addColumn<int>("p");
    QTest::addColumn<int>("codec");
    for (int p : {2, 3, 5, 8})
      for (int c = 1; c < 5; ++c)
        QTest::newRow(qPrintable(QString("p=%1 %2").arg(p).arg(kCompressionNames[c]))) << p << c;
  }
  void codecsInRing() {
    QFETCH(int, p);
    QFETCH(int, codec);
    const auto c = static_cast<Compression>(codec);
    const size_t n = 203;
    const Run run = runOp(p, n, Algorithm::Ring, c);
    for (int r = 0; r < p; ++r) {
      const auto& s = run.sends.at(r);
      QCOMPARE(int(s.size()), 2 * (p - 1));
      for (int k = 0; k < p - 1; ++k) {
        QCOMPARE(s[size_t(k)], (Msg{(r + 1) % p, pay(c, chunkLen(n, r - k - 1, p))}));
        QCOMPARE(s[size_t(p - 1 + k)], (Msg{(r + 1) % p, pay(c, chunkLen(n, r - k, p))}));
      }
    }
    checkCounts(run, p);
    checkReplicas(run, p);
    if (c == Compression::Fp16) checkMean(run, p, n, 0.02);
  }

  void codecsInRecursiveDoubling_data() {
    QTest::addColumn<int>("p");
    QTest::addColumn<int>("codec");
    for (int p : {2, 3, 4, 5, 8})
      for (int c = 1; c < 5; ++c)
        QTest::newRow(qPrintable(QString("p=%1 %2").arg(p).arg(kCompressionNames[c]))) << p << c;
  }
  void codecsInRecursiveDoubling() {
    QFETCH(int, p);
    QFETCH(int, codec);
    const auto c = static_cast<Compression>(codec);
    const size_t n = 64;
    const Run plain = runOp(p, n, Algorithm::RecursiveDoubling, Compression::None);
    const Run run = runOp(p, n, Algorithm::RecursiveDoubling, c);
    for (int r = 0; r < p; ++r) {  // the same exchanges, each an encoded bucket
      std::vector<Msg> want = plain.sends.at(r);
      for (Msg& m : want) m.bytes = pay(c, n);
      QCOMPARE(run.sends.at(r), want);
    }
    checkCounts(run, p);
    checkReplicas(run, p);
    if (c == Compression::Fp16) checkMean(run, p, n, 0.05);
  }

  // allreduce with a codec is Bagua's scatter-reduce: an alltoall of encoded chunks and an
  // allgather of the encoded merged chunks, each block padded to the largest chunk's payload.
  void scatterReduceCodecs() {
    for (int p : {2, 3, 5, 8})
      for (int ci = 1; ci < 5; ++ci) {
        const auto c = static_cast<Compression>(ci);
        const size_t n = 203;
        const Run run = runOp(p, n, Algorithm::Allreduce, c);
        const size_t block = pay(c, chunkLen(n, p - 1, p));  // the last chunk is the largest
        for (int r = 0; r < p; ++r) {
          QCOMPARE(run.colls.at(r), (std::vector<std::pair<std::string, int>>{{"alltoall", p}, {"allgather", p}}));
          QCOMPARE(run.counted.at(r), uint64_t(2 * (p - 1)) * block);  // others' blocks, both stages
          QCOMPARE(run.formula.at(r), run.counted.at(r));
          QVERIFY(!run.opaque.at(r));
        }
        checkReplicas(run, p);
      }
  }

  void hierarchicalRefusesCodecs() {
    for (int c = 1; c < 5; ++c)
      QVERIFY(unsupportedCombination(Algorithm::Hierarchical, static_cast<Compression>(c)).find("cannot carry") !=
              std::string::npos);
    for (int a = 0; a < 5; ++a)
      if (a != int(Algorithm::Hierarchical))
        for (int c = 0; c < 5; ++c)
          QVERIFY(unsupportedCombination(static_cast<Algorithm>(a), static_cast<Compression>(c)).empty());
    QCOMPARE(opName(Algorithm::Ring, Compression::Int8), std::string("ring+int8"));
    QCOMPARE(opName(Algorithm::RecursiveDoubling, Compression::TopkEf), std::string("recursive-doubling+topk-ef"));
    QCOMPARE(opName(Algorithm::Allreduce, Compression::Int8), std::string("scatter-reduce+int8"));
  }

  // Tags stay within MPI_TAG_UB even for far buckets (a transport that guarantees only 32767).
  void tagsWithinTagUb() {
    for (int ub : {32767, 1000}) {
      const Run run = runOp(8, 64, Algorithm::Ring, Compression::None, 1, 0, 5000, ub);
      std::set<int> distinct;
      for (const auto& [r, tags] : run.tags)
        for (int t : tags) {
          QVERIFY2(t >= 0 && t <= ub, qPrintable(QString("tag %1 > %2").arg(t).arg(ub)));
          distinct.insert(t);
        }
      QCOMPARE(int(distinct.size()), 2 * (8 - 1));  // one tag per step, the same on both sides
      checkMean(run, 8, 64, 1e-5);
    }
  }
};

QTEST_GUILESS_MAIN(TstTrainPatterns)
#include "tst_train_patterns.moc"
