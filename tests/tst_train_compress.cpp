// The trainer's gradient codecs against hand-computed answers: payload sizes (the wire-byte
// factors the benchmarks measure), fp16/onebit/topk values, int8's stochastic rounding being
// unbiased, and error feedback's invariant: what was sent plus the residual equals what was
// meant to be sent, summed over steps (nothing is lost, only delayed).
#include <QtTest>

#include <cmath>
#include <numeric>

#include "compress.h"
#include "grad_sync.h"
#include "linear.h"
#include "tensor.h"

using namespace trainscope::train;

class TstTrainCompress : public QObject {
  Q_OBJECT

 private slots:
  void payloadSizes() {
    Codec c;
    QCOMPARE(c.payloadBytes(1000), size_t{4000});
    c.kind = Compression::Fp16;
    QCOMPARE(c.payloadBytes(1000), size_t{2000});
    c.kind = Compression::Int8;
    QCOMPARE(c.payloadBytes(1000), size_t{1004});
    c.kind = Compression::OneBitEf;
    QCOMPARE(c.payloadBytes(1000), size_t{4 + 125});
    QCOMPARE(c.payloadBytes(1001), size_t{4 + 126});
    c.kind = Compression::TopkEf;
    c.topkRatio = 0.01;
    QCOMPARE(c.payloadBytes(1000), size_t{80});  // 10 (index, value) pairs
    QCOMPARE(c.payloadBytes(10), size_t{8});     // at least one
  }

  void fp16AndOnebitValues() {
    const std::vector<float> v = {1.0f, -2.5f, 0.333333f, 0.0f};
    Codec c{Compression::Fp16};
    std::vector<uint8_t> buf(c.payloadBytes(v.size()));
    c.encode(v.data(), v.size(), 0, buf.data());
    std::vector<float> out(v.size(), 0.0f);
    c.decodeAdd(buf.data(), v.size(), out.data());
    QCOMPARE(out[0], 1.0f);
    QCOMPARE(out[1], -2.5f);
    QVERIFY(std::fabs(out[2] - 0.333333f) < 2e-4f);
    c.kind = Compression::OneBitEf;  // scale = mean |v| = 3.833333 / 4
    buf.assign(c.payloadBytes(v.size()), 0);
    c.encode(v.data(), v.size(), 0, buf.data());
    std::fill(out.begin(), out.end(), 0.0f);
    c.decodeAdd(buf.data(), v.size(), out.data());
    const float s = (1.0f + 2.5f + 0.333333f) / 4;
    QVERIFY(std::fabs(out[0] - s) < 1e-6f && std::fabs(out[1] + s) < 1e-6f && std::fabs(out[3] - s) < 1e-6f);
  }

  void topkKeepsTheLargest() {
    const std::vector<float> v = {0.1f, -5.0f, 0.2f, 3.0f, -0.3f, 0.0f, 1.0f, 0.05f, -0.01f, 0.4f};
    Codec c{Compression::TopkEf, 0.2};  // k = 2
    std::vector<uint8_t> buf(c.payloadBytes(v.size()));
    c.encode(v.data(), v.size(), 0, buf.data());
    std::vector<float> out(v.size(), 0.0f);
    c.decodeAdd(buf.data(), v.size(), out.data());
    for (size_t i = 0; i < v.size(); ++i) QCOMPARE(out[i], (i == 1 || i == 3) ? v[i] : 0.0f);
  }

  void int8IsUnbiased() {
    // 0.3 of the scale sits between two levels; stochastic rounding must average to it.
    std::vector<float> v(20000, 0.3f);
    v[0] = 1.0f;  // scale = 1: levels are k / 127
    Codec c{Compression::Int8};
    std::vector<uint8_t> buf(c.payloadBytes(v.size()));
    c.encode(v.data(), v.size(), 42, buf.data());
    std::vector<float> out(v.size(), 0.0f);
    c.decodeAdd(buf.data(), v.size(), out.data());
    QCOMPARE(out[0], 1.0f);
    const double mean = std::accumulate(out.begin() + 1, out.end(), 0.0) / double(v.size() - 1);
    QVERIFY2(std::fabs(mean - 0.3) < 1e-3, qPrintable(QString::number(mean)));
    for (size_t i = 1; i < out.size(); ++i) {  // only the two neighbouring levels appear
      const float k = out[i] * 127.0f;
      QVERIFY(std::fabs(k - 38.0f) < 1e-3f || std::fabs(k - 39.0f) < 1e-3f);
    }
  }

  void errorFeedbackLosesNothing_data() {
    QTest::addColumn<int>("kind");
    QTest::newRow("onebit-ef") << int(Compression::OneBitEf);
    QTest::newRow("topk-ef") << int(Compression::TopkEf);
  }
  void errorFeedbackLosesNothing() {
    QFETCH(int, kind);
    Codec c{static_cast<Compression>(kind), 0.05};
    const size_t n = 300;
    std::vector<float> err(n, 0.0f);
    std::vector<double> meant(n, 0.0), sent(n, 0.0);
    std::vector<uint8_t> buf(c.payloadBytes(n));
    Rng rng(7);
    for (int step = 0; step < 50; ++step) {
      std::vector<float> g(n);
      for (float& x : g) x = rng.normal();
      for (size_t i = 0; i < n; ++i) meant[i] += g[i];
      c.encodeWithFeedback(g.data(), err.data(), n, uint64_t(step), buf.data());
      std::vector<float> dec(n, 0.0f);
      c.decodeAdd(buf.data(), n, dec.data());
      for (size_t i = 0; i < n; ++i) sent[i] += dec[i];
      // After every step: sent + residual == meant (up to float rounding).
      for (size_t i = 0; i < n; ++i) QVERIFY(std::fabs(sent[i] + err[i] - meant[i]) < 1e-3);
    }
  }

  void bucketsFollowReverseLayerOrder() {
    struct NoCompute final : Compute {
      void gemm(bool, bool, int, int, int, float, const float*, int, const float*, int, float, float*, int) override {}
    } nc;
    std::vector<std::unique_ptr<Layer>> layers;
    layers.push_back(std::make_unique<Linear>(nc, 10, 10, true));  // 110 params
    layers.push_back(std::make_unique<Linear>(nc, 10, 20, true));  // 220
    layers.push_back(std::make_unique<Linear>(nc, 20, 5, false));  // 105
    Model m(std::move(layers), 1);
    QCOMPARE(m.offsetOf(2), size_t{0});
    QCOMPARE(m.offsetOf(1), size_t{105});
    QCOMPARE(m.offsetOf(0), size_t{325});
    auto b = planBuckets(m, 4 * 300);  // 105 -> +220 = 325 >= 300: first bucket is layers 2, 1
    QCOMPARE(int(b.size()), 2);
    QCOMPARE(b[0].offset, size_t{0});
    QCOMPARE(b[0].count, size_t{325});
    QCOMPARE(b[0].lowestLayer, 1);
    QCOMPARE(b[1].offset, size_t{325});
    QCOMPARE(b[1].count, size_t{110});
    QCOMPARE(int(planBuckets(m, 1).size()), 3);
    QCOMPARE(int(planBuckets(m, 1 << 30).size()), 1);
  }
};

QTEST_GUILESS_MAIN(TstTrainCompress)
#include "tst_train_compress.moc"
