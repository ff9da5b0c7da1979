// The trainer's numerics without MPI: the gradient codecs against hand-computed answers
// (payload sizes -- the wire-byte factors the benchmarks measure --, fp16/onebit/topk values,
// int8's stochastic rounding being unbiased, error feedback's invariant: what was sent plus the
// residual equals what was meant to be sent, summed over steps), the bucket plan, and the
// hand-written backward (B then W) of both models against finite differences.
#include <QtTest>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "compress.h"
#include "grad_sync.h"
#include "linear.h"
#include "models.h"
#include "task.h"
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

  // The F16C path (8 values per instruction) against the compiler's _Float16 conversion: every
  // float16 decoded, and floats around every float16 (ties, subnormals, overflow, inf, NaN)
  // encoded, in lengths that leave tails. Without F16C both calls take the same path.
  void fp16HardwareMatchesPortable() {
    if (!halfHasF16c()) qInfo("this CPU has no F16C: both paths are the portable one");
    std::vector<uint8_t> halves(2 * 65536);
    for (uint32_t b = 0; b < 65536; ++b) {
      halves[2 * b] = uint8_t(b & 0xff);
      halves[2 * b + 1] = uint8_t(b >> 8);
    }
    std::vector<float> a(65536, 0.5f), p(65536, 0.5f);
    addHalves(halves.data(), 65535, a.data());  // odd length: a scalar tail
    addHalvesPortable(halves.data(), 65535, p.data());
    for (size_t i = 0; i < a.size(); ++i)
      if (!(std::isnan(a[i]) && std::isnan(p[i])))
        QVERIFY2(std::memcmp(&a[i], &p[i], 4) == 0, qPrintable(QString("half 0x%1").arg(i, 4, 16, QChar('0'))));
    // Floats: every float16's value and the floats just around it and half way to the next.
    std::vector<float> f;
    for (uint32_t b = 0; b < 65536; ++b) {
      _Float16 h;
      const uint16_t u = uint16_t(b);
      std::memcpy(&h, &u, 2);
      const float x = static_cast<float>(h);
      f.push_back(x);
      f.push_back(std::nextafter(x, INFINITY));
      f.push_back(std::nextafter(x, -INFINITY));
      if (b + 1 < 65536 && std::isfinite(x)) {
        _Float16 h2;
        const uint16_t u2 = uint16_t(b + 1);
        std::memcpy(&h2, &u2, 2);
        const float y = static_cast<float>(h2);
        if (std::isfinite(y)) f.push_back(x + (y - x) / 2);  // a tie: to even
      }
    }
    f.push_back(1e-30f);
    f.push_back(-7e4f);
    f.push_back(65520.0f);  // rounds to inf
    f.push_back(std::numeric_limits<float>::denorm_min());
    f.push_back(5);  // a tail of 1..7
    std::vector<uint8_t> ha(2 * f.size()), hp(2 * f.size());
    toHalf(f.data(), f.size(), ha.data());
    toHalfPortable(f.data(), f.size(), hp.data());
    for (size_t i = 0; i < f.size(); ++i) {
      uint16_t x, y;
      std::memcpy(&x, &ha[2 * i], 2);
      std::memcpy(&y, &hp[2 * i], 2);
      const bool bothNan = (x & 0x7c00) == 0x7c00 && (x & 0x3ff) && (y & 0x7c00) == 0x7c00 && (y & 0x3ff);
      if (!bothNan) QVERIFY2(x == y, qPrintable(QString("float %1: 0x%2 vs 0x%3").arg(double(f[i]), 0, 'g', 9).arg(x, 0, 16).arg(y, 0, 16)));
    }
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
      void gemm(bool, bool, int, int, int, float, const float*, int, const float*, int, float, float*,
                int) override {}
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

  // d loss / d theta from F, B, W against central differences of the loss, in double-checked
  // float: a few parameters of every layer.
  void backwardMatchesFiniteDifferences_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<int>("layers");
    QTest::addColumn<int>("heads");
    QTest::newRow("mlp") << "mlp" << 2 << 1;
    QTest::newRow("transformer") << "transformer" << 2 << 2;
    QTest::newRow("transformer 1 block, 1 head") << "transformer" << 1 << 1;
    QTest::newRow("transformer 2 blocks, 1 head") << "transformer" << 2 << 1;
    QTest::newRow("transformer 1 block, 2 heads") << "transformer" << 1 << 2;
  }
  void backwardMatchesFiniteDifferences() {
    QFETCH(QString, model);
    QFETCH(int, layers);
    QFETCH(int, heads);
    auto compute = makeCpuCompute();
    Options o;
    o.model = model.toStdString();
    o.layers = layers;
    o.width = 8;
    o.heads = heads;
    o.seqLen = 5;
    o.vocab = 6;
    o.inputDim = 6;
    o.classes = 4;
    auto m = model == "mlp" ? makeMlp(*compute, o) : makeTransformer(*compute, o);
    auto task =
        model == "mlp" ? makeTeacherTask(3, o.inputDim, o.classes) : makeSequenceTask(3, o.seqLen, o.vocab);
    const Batch b = task->train(0, 4);
    const int L = m->layerCount();
    // Loss of the layers from..L-1 applied to x (slot 1: leaves slot 0's saved state alone).
    auto lossFrom = [&](int from, const Mat& x) {
      Mat a = x, y;
      for (int k = from; k < L; ++k) {
        m->layer(k).forward(1, a, y);
        std::swap(a, y);
      }
      return softmaxCrossEntropy(a, b.labels, nullptr, nullptr);
    };
    int checked = 0, skipped = 0;
    QStringList wrong;
    // d loss / d v at one scalar v against central differences. A ReLU kink within eps makes the
    // one-sided slopes disagree (the analytic value is one of them): such points are skipped.
    auto check = [&](float& v, double analytic, auto&& f, const QString& what) {
      const float keep = v, eps = 1e-3f;
      const double mid = f();
      v = keep + eps;
      const double up = f();
      v = keep - eps;
      const double down = f();
      v = keep;
      const double fwd = (up - mid) / double(eps), bwd = (mid - down) / double(eps), fd = (fwd + bwd) / 2;
      if (std::fabs(fwd - bwd) > 2e-3 + 0.05 * std::fabs(fd)) {
        ++skipped;
        return;
      }
      ++checked;
      if (std::fabs(fd - analytic) > 2e-3 + 0.03 * std::fabs(fd))
        wrong << QString("%1: backward %2, finite differences %3").arg(what).arg(analytic).arg(fd);
    };

    std::vector<Mat> act(size_t(L) + 1), grad(size_t(L) + 1);
    act[0] = b.x;
    for (int l = 0; l < L; ++l) m->layer(l).forward(0, act[size_t(l)], act[size_t(l) + 1]);
    softmaxCrossEntropy(act[size_t(L)], b.labels, &grad[size_t(L)], nullptr);
    m->zeroGrads();
    for (int l = L - 1; l >= 0; --l) {
      if (l > 0) m->layer(l).backwardInput(0, grad[size_t(l) + 1], grad[size_t(l)]);  // B
      m->layer(l).backwardWeight(0, grad[size_t(l) + 1]);                             // W
    }
    const std::vector<float> g(m->grads().begin(), m->grads().end());
    auto p = m->params();
    for (int l = 0; l < L; ++l) {
      const QString kind = QString::fromStdString(m->layer(l).kind());
      if (l > 0) {  // B: the input gradient
        Mat x = act[size_t(l)];
        for (size_t k = 0; k < std::min<size_t>(x.size(), 40); ++k) {
          const size_t i = (k * 7919) % x.size();
          check(
              x.v[i], grad[size_t(l)].v[i], [&] { return lossFrom(l, x); },
              QString("dx %1 (%2)[%3]").arg(l).arg(kind).arg(i));
        }
      }
      const size_t off = m->offsetOf(l), n = m->countOf(l);  // W: the parameter gradient
      for (size_t k = 0; k < std::min<size_t>(n, 40); ++k) {
        const size_t i = off + (k * 7919) % n;
        check(
            p[i], g[i], [&] { return lossFrom(0, b.x); }, QString("dW %1 (%2)[%3]").arg(l).arg(kind).arg(i));
      }
    }
    QVERIFY2(wrong.isEmpty(), qPrintable(wrong.join("\n")));
    QVERIFY2(checked > 100 && skipped * 10 < checked,
             qPrintable(QString("%1 checked, %2 skipped").arg(checked).arg(skipped)));
  }
};

QTEST_GUILESS_MAIN(TstTrainCompress)
#include "tst_train_compress.moc"
