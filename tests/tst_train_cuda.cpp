// The CUDA backend without a GPU: (1) the host reference of the compression kernels
// (gpu_codec_ref, which trainscope-cuda-check compares with the kernels byte for byte on a GPU)
// equals the CPU codecs: fp16, int8 and top-k byte for byte, onebit's signs exactly and its scale
// (summed in the kernels' reduction order) to float rounding; the fixed-order sum against a
// hand-computed one. (2) `trainscope-train --backend cuda` on a machine without a driver exits
// 2 with "no CUDA device" (or, in a -DTRAINSCOPE_GPU=OFF build, says it was built without it),
// before MPI; so does trainscope-cuda-check. (3) With GPU=ON the backend's objects are built and the program does
// not need the driver library.
#include <QtTest>
#include <cstring>

#include "compress.h"
#include "gpu_codec_ref.h"
#include "tensor.h"

using namespace trainscope::train;

namespace {
std::vector<float> randomVec(size_t n, uint64_t seed, float scale) {
  Rng r(seed);
  std::vector<float> v(n);
  for (float& x : v) x = scale * r.normal();
  if (n > 3) v[3] = -v[1];  // equal magnitudes: top-k's tie rule decides
  return v;
}
float scaleOf(const std::vector<uint8_t>& p) {
  float s;
  std::memcpy(&s, p.data(), 4);
  return s;
}
}  // namespace

class TstTrainCuda : public QObject {
  Q_OBJECT

 private slots:
  void fixedOrderSum() {
    const std::vector<float> v = {1.0f, -2.0f, 3.5f, -0.25f};
    QCOMPARE(gpuAbsSum(v.data(), v.size()), 6.75);
    QCOMPARE(gpuAbsSum(v.data(), 0), 0.0);
    // Many values (several per thread, all blocks): equals the sequential sum to rounding.
    const auto w = randomVec(100003, 3, 1.0f);
    double seq = 0;
    for (float f : w) seq += std::fabs(static_cast<double>(f));
    QVERIFY(std::fabs(gpuAbsSum(w.data(), w.size()) - seq) < 1e-9 * seq);
  }

  void referenceEqualsCpuCodecs_data() {
    QTest::addColumn<int>("kind");
    QTest::addColumn<int>("n");
    for (int k = 0; k < 5; ++k)
      for (int n : {0, 1, 37, 1000, 70001})
        QTest::addRow("%s/%d", kCompressionNames[k], n) << k << n;
  }
  void referenceEqualsCpuCodecs() {
    QFETCH(int, kind);
    QFETCH(int, n);
    Codec c;
    c.kind = static_cast<Compression>(kind);
    c.topkRatio = 0.01;
    const auto un = static_cast<size_t>(n);
    auto v = randomVec(un, static_cast<uint64_t>(n) + 11, 1.0f), v2 = v;
    auto err = randomVec(un, static_cast<uint64_t>(n) + 12, 0.1f), err2 = err;
    std::vector<uint8_t> cpu(c.payloadBytes(un)), ref(c.payloadBytes(un));
    c.encodeWithFeedback(v.data(), err.data(), un, 99, cpu.data());
    gpuReferenceEncodeWithFeedback(c, v2.data(), err2.data(), un, 99, ref.data());
    QCOMPARE(v2, v);  // both folded the same error in
    if (c.kind != Compression::OneBitEf) {
      QVERIFY(cpu == ref);
      QCOMPARE(err2, err);
      return;
    }
    QVERIFY(std::equal(cpu.begin() + 4, cpu.end(), ref.begin() + 4));  // signs
    QVERIFY(std::fabs(scaleOf(cpu) - scaleOf(ref)) <= 1e-6f * std::fabs(scaleOf(cpu)));
    for (size_t i = 0; i < un; ++i)  // err = v -/+ scale
      QVERIFY(std::fabs(err[i] - err2[i]) <= 1e-6f * (1.0f + std::fabs(err[i])));
  }

  void cudaBackendWithoutDeviceSaysSo() {
    QProcess p;
    QElapsedTimer t;
    t.start();
    p.start(QStringLiteral(TRAINSCOPE_BIN_DIR "/trainscope-train"),
            {"--backend", "cuda", "--steps", "1", "--no-agent"});
    QVERIFY(p.waitForFinished(60000));
    const QString err = QString::fromUtf8(p.readAllStandardError());
    QCOMPARE(p.exitStatus(), QProcess::NormalExit);
    QCOMPARE(p.exitCode(), 2);
    if (TRAINSCOPE_HAVE_GPU)
      QVERIFY2(err.contains("no CUDA device") && err.contains("--backend cpu"), qPrintable(err));
    else
      QVERIFY2(err.contains("built without the cuda backend"), qPrintable(err));
    QVERIFY2(!err.contains("MPI"), qPrintable(err));  // refused before MPI started
    if (!TRAINSCOPE_HAVE_GPU) return;
    QProcess check;  // the GPU check program refuses the same way
    check.start(QStringLiteral(TRAINSCOPE_BIN_DIR "/trainscope-cuda-check"), {});
    QVERIFY(check.waitForFinished(60000));
    QCOMPARE(check.exitCode(), 2);
    QVERIFY(QString::fromUtf8(check.readAllStandardError()).contains("no CUDA device"));
  }

  void cudaBackendIsBuiltWithGpu() {
    if (!TRAINSCOPE_HAVE_GPU) QSKIP("-DTRAINSCOPE_GPU=OFF build: no cuda backend objects");
    const QString objs = QStringLiteral(TRAINSCOPE_BINARY_DIR "/agents/train/CMakeFiles/trainscope_train_core.dir/");
    QVERIFY2(QFile::exists(objs + "cuda_backend.cpp.o"), qPrintable(objs));
    QVERIFY(QFile::exists(objs + "cuda_kernels.cu.o"));
    QVERIFY(QFile::exists(QStringLiteral(TRAINSCOPE_BIN_DIR "/trainscope-cuda-check")));
    // Linked against the runtime, cuBLAS and NCCL, never the driver library (absent here).
    QProcess r;
    r.start("readelf", {"-d", QStringLiteral(TRAINSCOPE_BIN_DIR "/trainscope-train")});
    if (!r.waitForFinished(30000) || r.exitCode() != 0) QSKIP("readelf not available");
    const QString needed = QString::fromUtf8(r.readAllStandardOutput());
    QVERIFY(needed.contains("libcudart.so"));
    QVERIFY(needed.contains("libcublas.so"));
    QVERIFY(needed.contains("libnccl.so"));
    QVERIFY(!needed.contains("libcuda.so"));
  }
};

QTEST_GUILESS_MAIN(TstTrainCuda)
#include "tst_train_cuda.moc"
