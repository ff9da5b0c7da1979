// Partitioning (core/partition.h): PipeDream's DP against exhaustive enumeration on small
// random instances, hand-computed cases, edge cases and bad input; Seq1F1B's FLOPs-balanced
// sequence split against exhaustive enumeration.
#include <QtTest>
#include <algorithm>
#include <functional>
#include <random>

#include "trainscope/core/sched/partition.h"

using namespace trainscope::core;

namespace {

// The objective of a given partition, recomputed from the definitions (not from the DP).
double objective(const std::vector<LayerProfile>& layers, const PipelinePartition& part,
                 const PartitionOptions& o) {
  double worst = 0;
  for (size_t s = 0; s < part.stages.size(); ++s) {
    const StageAssignment& st = part.stages[s];
    worst = std::max(worst, stageTime(layers, st.firstLayer, st.lastLayer, st.replicas, o));
    if (s > 0) worst = std::max(worst, boundaryTime(layers, st.firstLayer - 1, o));
  }
  return worst;
}

// Exhaustive: every way to cut the layers into consecutive stages, and every assignment of
// replica counts (each >= 1) summing to `machines` (or fixed `replicas` and `stages`).
double bruteForce(const std::vector<LayerProfile>& layers, const PartitionOptions& o, int machines,
                  int stages, int replicas) {
  const int n = static_cast<int>(layers.size());
  double best = std::numeric_limits<double>::infinity();
  for (uint32_t cuts = 0; cuts < (1u << (n - 1)); ++cuts) {  // bit i: a stage ends after layer i
    std::vector<std::pair<int, int>> ranges;
    int first = 0;
    for (int l = 0; l < n; ++l)
      if (l == n - 1 || (cuts >> l & 1u)) {
        ranges.push_back({first, l});
        first = l + 1;
      }
    const int k = static_cast<int>(ranges.size());
    if (stages > 0 && k != stages) continue;
    std::vector<int> reps(static_cast<size_t>(k), 1);
    std::function<void(int, int)> assign = [&](int s, int left) {
      if (s == k - 1) {
        if (left < 1) return;
        reps[static_cast<size_t>(s)] = left;
        PipelinePartition p;
        for (int i = 0; i < k; ++i)
          p.stages.push_back({ranges[static_cast<size_t>(i)].first, ranges[static_cast<size_t>(i)].second,
                              reps[static_cast<size_t>(i)], 0});
        best = std::min(best, objective(layers, p, o));
        return;
      }
      for (int r = 1; r <= left - (k - 1 - s); ++r) {
        reps[static_cast<size_t>(s)] = r;
        assign(s + 1, left - r);
      }
    };
    if (stages > 0) {
      PipelinePartition p;
      for (const auto& [a, b] : ranges) p.stages.push_back({a, b, replicas, 0});
      best = std::min(best, objective(layers, p, o));
    } else if (k <= machines) {
      assign(0, machines);
    }
  }
  return best;
}

std::vector<LayerProfile> randomLayers(std::mt19937& rng, int n) {
  std::uniform_real_distribution<double> t(0.5, 10), a(0, 4e6), w(0, 8e6);
  std::vector<LayerProfile> layers;
  for (int i = 0; i < n; ++i) layers.push_back({t(rng), a(rng), w(rng)});
  return layers;
}

bool close(double a, double b) {
  return std::abs(a - b) <= 1e-9 * std::max(1.0, std::abs(b));
}

void checkShape(const PipelinePartition& p, int layers) {
  QVERIFY(!p.stages.empty());
  QCOMPARE(p.stages.front().firstLayer, 0);
  QCOMPARE(p.stages.back().lastLayer, layers - 1);
  for (size_t s = 1; s < p.stages.size(); ++s)
    QCOMPARE(p.stages[s].firstLayer, p.stages[s - 1].lastLayer + 1);
}

}  // namespace

class TstPartition : public QObject {
  Q_OBJECT

 private slots:
  // Compute 4, 1, 1, 4 (s); no weights; activations 1 MB/s-units: bandwidth 1e6, a = 0.5e6 →
  // 2 C_i = 1 s. Two stages: {0,1} | {2,3} gives max(5, 1, 5) = 5; {0} | {1,2,3} gives 6.
  void handCaseTwoStages() {
    const std::vector<LayerProfile> layers{{4, 0.5e6, 0}, {1, 0.5e6, 0}, {1, 0.5e6, 0}, {4, 0.5e6, 0}};
    PartitionOptions o;
    o.bandwidth = 1e6;
    auto r = partitionStages(layers, 2, 1, o);
    QVERIFY(r);
    QCOMPARE(r->slowest, 5.0);
    QCOMPARE(r->stages.size(), size_t{2});
    QCOMPARE(r->stages[0].lastLayer, 1);
    QCOMPARE(r->stages[0].time, 5.0);
    // A slow link: a = 4e6 → 2 C_i = 8 s dominates any split; one stage (10 s) is worse still.
    std::vector<LayerProfile> heavy = layers;
    for (LayerProfile& l : heavy) l.activationBytes = 4e6;
    QCOMPARE(partitionStages(heavy, 2, 1, o)->slowest, 8.0);
  }

  // PipeDream with replication, by hand: 2 layers of 6 s each and no weights, 2 machines.
  // Data parallel on both: T = 12/2 = 6. Pipeline {0}|{1}: max(6, 2C, 6) = 6 + nothing if
  // C = 0. With weights 1e6 bytes per layer at 1e6 B/s, data parallel costs sync
  // 4 (2-1)/2 * 2e6 / 1e6 = 4 s < 12 s compute → T = 6; the pipeline's boundary 2 C_0 = 2 s.
  // Now make weights heavy (1e7 B per layer): DP sync = 2 * 2e7 / 1e6 = 40 s → T = 20;
  // the pipeline (no sync) wins with 6.
  void handCaseReplication() {
    PartitionOptions o;
    o.bandwidth = 1e6;
    std::vector<LayerProfile> layers{{6, 1e6, 1e6}, {6, 1e6, 1e6}};
    QCOMPARE(stageTime(layers, 0, 1, 2, o), 6.0);
    auto light = partitionPipeDream(layers, 2, o);
    QVERIFY(light);
    QCOMPARE(light->slowest, 6.0);
    for (LayerProfile& l : layers) l.weightBytes = 1e7;
    QCOMPARE(stageTime(layers, 0, 1, 2, o), 20.0);
    auto heavy = partitionPipeDream(layers, 2, o);
    QVERIFY(heavy);
    QCOMPARE(heavy->slowest, 6.0);
    QCOMPARE(heavy->stages.size(), size_t{2});
    QCOMPARE(heavy->stages[0].replicas, 1);
    QCOMPARE(heavy->noam, 2);  // ceil(2 machines / 1 in the input stage)
  }

  void pipeDreamMatchesBruteForce() {
    std::mt19937 rng(42);
    std::uniform_real_distribution<double> bw(2e5, 5e6);
    for (int trial = 0; trial < 120; ++trial) {
      const int n = 1 + trial % 7;
      const int machines = 1 + trial % 5;
      const auto layers = randomLayers(rng, n);
      PartitionOptions o;
      o.bandwidth = bw(rng);
      auto r = partitionPipeDream(layers, machines, o);
      QVERIFY2(r, r.status().toString().c_str());
      checkShape(r.value(), n);
      int used = 0;
      for (const StageAssignment& s : r->stages) used += s.replicas;
      QCOMPARE(used, machines);
      QVERIFY(close(objective(layers, r.value(), o), r->slowest));
      QVERIFY2(close(r->slowest, bruteForce(layers, o, machines, 0, 0)), qPrintable(QString::number(trial)));
    }
  }

  void fixedStagesMatchBruteForce() {
    std::mt19937 rng(3);
    for (int trial = 0; trial < 120; ++trial) {
      const int n = 1 + trial % 8;
      const int stages = 1 + trial % n;
      const int replicas = 1 + trial % 3;
      const auto layers = randomLayers(rng, n);
      PartitionOptions o;
      o.bandwidth = 1e6;
      o.syncFactor = 2;
      auto r = partitionStages(layers, stages, replicas, o);
      QVERIFY2(r, r.status().toString().c_str());
      checkShape(r.value(), n);
      QCOMPARE(static_cast<int>(r->stages.size()), stages);
      for (const StageAssignment& s : r->stages) QCOMPARE(s.replicas, replicas);
      QVERIFY(close(objective(layers, r.value(), o), r->slowest));
      QVERIFY(close(r->slowest, bruteForce(layers, o, 0, stages, replicas)));
    }
  }

  void edgeCases() {
    std::mt19937 rng(5);
    const auto layers = randomLayers(rng, 5);
    // One stage: everything in it.
    auto one = partitionStages(layers, 1);
    QVERIFY(one);
    QCOMPARE(one->stages.size(), size_t{1});
    QCOMPARE(one->stages[0].lastLayer, 4);
    double sum = 0;
    for (const LayerProfile& l : layers) sum += l.computeSec;
    QVERIFY(close(one->slowest, sum));
    // Layers == stages: one layer each.
    auto each = partitionStages(layers, 5);
    QVERIFY(each);
    for (int s = 0; s < 5; ++s) QCOMPARE(each->stages[static_cast<size_t>(s)].firstLayer, s);
    // One machine: one stage, no sync.
    auto single = partitionPipeDream(layers, 1);
    QVERIFY(single);
    QCOMPARE(single->stages.size(), size_t{1});
    QCOMPARE(single->noam, 1);
  }

  void badInputRefused() {
    const std::vector<LayerProfile> layers{{1, 1, 1}, {1, 1, 1}};
    auto expect = [](const Status& s, const char* text) {
      QVERIFY(!s.isOk());
      QCOMPARE(s.code(), ErrorCode::InvalidArgument);
      QVERIFY2(s.message().find(text) != std::string::npos, s.message().c_str());
    };
    expect(partitionStages({}, 1).status(), "no layers");
    expect(partitionStages(layers, 3).status(), "cannot split 2 layers into 3 stages");
    expect(partitionStages(layers, 0).status(), "stages must be >= 1");
    expect(partitionStages(layers, 1, 0).status(), "replicas must be >= 1");
    expect(partitionPipeDream(layers, 0).status(), "machines must be >= 1");
    PartitionOptions o;
    o.bandwidth = 0;
    expect(partitionStages(layers, 1, 1, o).status(), "bandwidth must be > 0");
    expect(partitionStages({{-1, 0, 0}}, 1).status(), "layer 0: times and sizes must be finite and >= 0");
    expect(partitionPipeDream({{std::nan(""), 0, 0}}, 1).status(), "layer 0");
  }

  // Seq1F1B: segment FLOPs = 2 n_i P + 2 L n_i (prefix end) d. By hand with P = 0, L = 1,
  // d = 1: cost(a, b) = 2 (b - a) b. n = 10, k = 2: the split at 7 costs max(2*7*7, 2*3*10) =
  // max(98, 60) = 98; at 6: max(72, 80) = 80; at 5: max(50, 100). Best: 6 + 4.
  void sequenceHandCase() {
    const SequenceFlopsModel m{0, 1, 1};
    QCOMPARE(segmentFlops(6, 4, m), 80.0);
    auto r = partitionSequence(10, 2, m);
    QVERIFY(r);
    QCOMPARE(r.value(), (std::vector<int64_t>{6, 4}));
    // Attention-free (L = 0): equal lengths.
    QCOMPARE(partitionSequence(12, 3, {1e6, 0, 512}).value(), (std::vector<int64_t>{4, 4, 4}));
  }

  void sequenceMatchesBruteForce() {
    std::mt19937 rng(11);
    std::uniform_real_distribution<double> params(0, 2e3);
    for (int trial = 0; trial < 60; ++trial) {
      const int64_t n = 2 + trial % 11;
      const int k = 1 + trial % std::min<int>(4, static_cast<int>(n));
      const SequenceFlopsModel m{params(rng), 1 + trial % 3, 8};
      auto r = partitionSequence(n, k, m);
      QVERIFY2(r, r.status().toString().c_str());
      QCOMPARE(static_cast<int>(r->size()), k);
      int64_t total = 0;
      double worst = 0;
      for (int64_t len : r.value()) {
        QVERIFY(len >= 1);
        worst = std::max(worst, segmentFlops(total, len, m));
        total += len;
      }
      QCOMPARE(total, n);
      // Exhaustive min-max over all compositions of n into k positive parts.
      double best = std::numeric_limits<double>::infinity();
      std::function<void(int64_t, int, double)> go = [&](int64_t start, int left, double cur) {
        if (left == 1) {
          best = std::min(best, std::max(cur, segmentFlops(start, n - start, m)));
          return;
        }
        for (int64_t end = start + 1; end <= n - (left - 1); ++end)
          go(end, left - 1, std::max(cur, segmentFlops(start, end - start, m)));
      };
      go(0, k, 0);
      QVERIFY2(close(worst, best), qPrintable(QString("trial %1: %2 vs %3").arg(trial).arg(worst).arg(best)));
    }
    // A long sequence: later segments are shorter, FLOPs within one token's worth of each other.
    const SequenceFlopsModel gpt{1.3e8, 24, 2048};
    auto r = partitionSequence(8192, 4, gpt);
    QVERIFY(r);
    for (size_t i = 1; i < r->size(); ++i) QVERIFY((*r)[i] < (*r)[i - 1]);
    double lo = 1e300, hi = 0;
    int64_t off = 0;
    for (int64_t len : r.value()) {
      const double f = segmentFlops(off, len, gpt);
      lo = std::min(lo, f);
      hi = std::max(hi, f);
      off += len;
    }
    QVERIFY(hi - lo <= segmentFlops(off - 1, 1, gpt) * 2 + 1);
  }

  void sequenceBadInput() {
    QVERIFY(!partitionSequence(3, 4, {}));
    QVERIFY(partitionSequence(3, 4, {}).status().message().find("cannot split 3 tokens into 4") !=
            std::string::npos);
    QVERIFY(!partitionSequence(0, 1, {}));
    QVERIFY(!partitionSequence(8, 0, {}));
    QVERIFY(!partitionSequence(8, 2, {-1, 1, 1}));
  }
};

QTEST_GUILESS_MAIN(TstPartition)
#include "tst_partition.moc"
