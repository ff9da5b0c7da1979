// trainscope-cuda-check: runs the kernels of cuda_kernels.cu on the GPU and compares them with
// their host references: the compression kernels byte for byte with gpu_codec_ref (which the
// no-GPU test tst_train_gpu_codecs compares with the CPU codecs), the model pieces with the CPU
// formulas to 1e-5, cuBLAS GEMMs through the backend with OpenBLAS. Then measures the compression kernels' throughput. Exit 0: all equal;
// 1: a mismatch; 2: no device.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend.h"
#include "cuda_kernels.h"
#include "gpu_codec_ref.h"
#include "model.h"
#include "tensor.h"

using namespace trainscope::train;

namespace {

int g_failures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  g_failures += ok ? 0 : 1;
}

// A device copy of a host vector that copies back on demand.
template <class T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) {
    cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(1, n) * sizeof(T));
    cudaMemset(p, 0, std::max<size_t>(1, n) * sizeof(T));
  }
  explicit Dev(const std::vector<T>& h) : Dev(h.size()) { cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  std::vector<T> host() const {
    std::vector<T> h(n);
    cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
};

std::vector<float> randomVec(size_t n, uint64_t seed, float scale) {
  Rng r(seed);
  std::vector<float> v(n);
  for (float& x : v) x = scale * r.normal();
  if (n > 3) v[3] = v[1];  // a tie for top-k
  return v;
}

bool sameBits(const void* a, const void* b, size_t bytes) { return std::memcmp(a, b, bytes) == 0; }

float maxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

void checkCodec(const Codec& c, size_t n) {
  const std::string name = std::string(kCompressionNames[static_cast<int>(c.kind)]) + " n=" + std::to_string(n);
  std::vector<float> v = randomVec(n, n * 7 + 1, 1.0f), err = randomVec(n, n * 7 + 2, c.errorFeedback() ? 0.1f : 0.0f);
  Dev<float> dv(v), derr(err);
  Dev<uint8_t> dout(c.payloadBytes(n)), scratch(gpu::encodeScratchBytes(c, n));
  std::vector<uint8_t> ref(c.payloadBytes(n));
  gpuReferenceEncodeWithFeedback(c, v.data(), err.data(), n, 42, ref.data());
  gpu::encode(c, dv.p, derr.p, n, 42, dout.p, scratch.p, nullptr);
  cudaDeviceSynchronize();
  const auto out = dout.host();
  expect(sameBits(out.data(), ref.data(), ref.size()), "encode " + name + " equals the host reference");
  if (c.errorFeedback()) {
    const auto e = derr.host();
    expect(sameBits(e.data(), err.data(), 4 * n), "error feedback " + name + " equals the host reference");
  }
  Dev<float> acc(n);
  gpu::decodeAdd(c, dout.p, n, acc.p, nullptr);
  std::vector<float> hacc(n, 0.0f);
  c.decodeAdd(ref.data(), n, hacc.data());
  const auto a = acc.host();
  expect(sameBits(a.data(), hacc.data(), 4 * n), "decode " + name + " equals the CPU codec");
}

void benchCodec(const Codec& c, size_t n, double peakGBs) {
  std::vector<float> v = randomVec(n, 9, 1.0f);
  Dev<float> dv(v), derr(n);
  Dev<uint8_t> dout(c.payloadBytes(n)), scratch(gpu::encodeScratchBytes(c, n));
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  gpu::encode(c, dv.p, derr.p, n, 1, dout.p, scratch.p, nullptr);  // warm-up
  const int reps = 20;
  cudaEventRecord(t0);
  for (int r = 0; r < reps; ++r) gpu::encode(c, dv.p, derr.p, n, static_cast<uint64_t>(r), dout.p, scratch.p, nullptr);
  cudaEventRecord(t1);
  cudaEventSynchronize(t1);
  float ms = 0;
  cudaEventElapsedTime(&ms, t0, t1);
  ms /= reps;
  const double inGBs = 4.0 * static_cast<double>(n) / (ms * 1e6);
  std::printf("BENCH encode %-9s n=%zu  %.3f ms  %.1f GB/s of input (%.0f%% of %.0f GB/s peak)\n",
              kCompressionNames[static_cast<int>(c.kind)], n, static_cast<double>(ms), inGBs,
              100.0 * inGBs / peakGBs, peakGBs);
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
}

void checkRows() {
  const int rows = 96, cols = 70;
  Mat z;
  z.resize(rows, cols);
  z.v = randomVec(z.size(), 5, 3.0f);
  std::vector<int> labels(rows);
  for (int r = 0; r < rows; ++r) labels[static_cast<size_t>(r)] = (r * 13) % cols;
  Mat dref;
  const double loss = softmaxCrossEntropy(z, labels, &dref, nullptr);
  Dev<float> dz(z.v), dloss(rows), dd(z.size());
  Dev<int> dl(labels);
  gpu::softmaxCrossEntropy(dz.p, dl.p, rows, cols, dloss.p, dd.p, nullptr);
  double sum = 0;
  for (float l : dloss.host()) sum += l;
  expect(std::fabs(sum / rows - loss) < 1e-5 * std::max(1.0, loss), "softmax cross-entropy loss");
  expect(maxAbsDiff(dd.host(), dref.v) < 1e-6f, "softmax cross-entropy gradient");

  // relu
  std::vector<float> x = z.v, y = z.v;
  for (float& f : y) f = std::max(f, 0.0f);
  gpu::reluForward(dz.p, z.size(), nullptr);
  expect(maxAbsDiff(dz.host(), y) == 0.0f, "relu forward");
  Dev<float> dg(x);
  gpu::reluBackward(dz.p, dg.p, z.size(), nullptr);
  std::vector<float> gref = x;
  for (size_t i = 0; i < x.size(); ++i) gref[i] = y[i] > 0 ? x[i] : 0.0f;
  expect(maxAbsDiff(dg.host(), gref) == 0.0f, "relu backward");

  // layer norm (the CPU model's formulas, in double)
  std::vector<float> g = randomVec(cols, 6, 1.0f), b = randomVec(cols, 7, 1.0f), dy = randomVec(z.size(), 8, 1.0f);
  std::vector<float> yl(z.size()), xh(z.size()), rs(rows), dx(z.size(), 0.0f);
  for (int r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * cols;
    double mean = 0, var = 0, m1 = 0, m2 = 0;
    for (int j = 0; j < cols; ++j) mean += xr[j];
    mean /= cols;
    for (int j = 0; j < cols; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    rs[static_cast<size_t>(r)] = static_cast<float>(1.0 / std::sqrt(var / cols + 1e-5));
    for (int j = 0; j < cols; ++j) {
      const size_t o = static_cast<size_t>(r * cols + j);
      xh[o] = (xr[j] - static_cast<float>(mean)) * rs[static_cast<size_t>(r)];
      yl[o] = xh[o] * g[static_cast<size_t>(j)] + b[static_cast<size_t>(j)];
      m1 += dy[o] * g[static_cast<size_t>(j)];
      m2 += dy[o] * g[static_cast<size_t>(j)] * xh[o];
    }
    for (int j = 0; j < cols; ++j) {
      const size_t o = static_cast<size_t>(r * cols + j);
      dx[o] = static_cast<float>(rs[static_cast<size_t>(r)] * (dy[o] * g[static_cast<size_t>(j)] - m1 / cols - xh[o] * m2 / cols));
    }
  }
  Dev<float> dxin(x), dgam(g), dbet(b), dyl(z.size()), dxh(z.size()), drs(rows), ddy(dy), ddx(z.size());
  gpu::layerNormForward(dxin.p, dgam.p, dbet.p, rows, cols, dyl.p, dxh.p, drs.p, nullptr);
  expect(maxAbsDiff(dyl.host(), yl) < 1e-4f, "layer norm forward");
  gpu::layerNormBackward(ddy.p, dgam.p, dxh.p, drs.p, rows, cols, ddx.p, nullptr);
  expect(maxAbsDiff(ddx.host(), dx) < 1e-4f, "layer norm backward");

  // causal softmax over len x len score blocks, and its backward
  const int len = 40, srows = 3 * len;
  std::vector<float> p = randomVec(static_cast<size_t>(srows * len), 10, 2.0f), dp = randomVec(p.size(), 11, 1.0f);
  Dev<float> dpp(p), ddp(dp);
  for (int r = 0; r < srows; ++r) {
    float* row = p.data() + r * len;
    const int t = r % len;
    float mx = -1e30f, total = 0;
    for (int u = 0; u <= t; ++u) mx = std::max(mx, row[u]);
    for (int u = 0; u < len; ++u) total += (row[u] = u <= t ? std::exp(row[u] - mx) : 0.0f);
    for (int u = 0; u <= t; ++u) row[u] /= total;
    float* d = dp.data() + r * len;
    float dot = 0;
    for (int u = 0; u < len; ++u) dot += d[u] * row[u];
    for (int u = 0; u < len; ++u) d[u] = row[u] * (d[u] - dot);
  }
  gpu::causalSoftmaxForward(dpp.p, srows, len, nullptr);
  expect(maxAbsDiff(dpp.host(), p) < 1e-6f, "causal softmax forward");
  gpu::causalSoftmaxBackward(dpp.p, ddp.p, srows, len, nullptr);
  expect(maxAbsDiff(ddp.host(), dp) < 1e-5f, "causal softmax backward");
}

// cuBLAS through the backend's row-major mapping against OpenBLAS: every transpose, strided
// leading dimensions, accumulation (beta 1) and overwrite (beta 0).
void checkGemm() {
  auto gpu = makeCudaCompute();
  auto cpu = makeCpuCompute();
  const int m = 33, n = 17, k = 45, pad = 3;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (float beta : {0.0f, 1.0f}) {
        const int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
        const auto a = randomVec(static_cast<size_t>((ta ? k : m) * lda), 21, 1.0f);
        const auto b = randomVec(static_cast<size_t>((tb ? n : k) * ldb), 22, 1.0f);
        auto c1 = randomVec(static_cast<size_t>(m * ldc), 23, 1.0f), c2 = c1;
        cpu->gemm(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, beta, c1.data(), ldc);
        gpu->gemm(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, beta, c2.data(), ldc);
        expect(maxAbsDiff(c1, c2) < 1e-4f, "cuBLAS gemm transA=" + std::to_string(ta) + " transB=" +
                                               std::to_string(tb) + " beta=" + std::to_string(beta));
      }
}

}  // namespace

int main(int argc, char** argv) {
  if (std::string why; !cudaBackendAvailable(&why)) {
    std::fprintf(stderr, "trainscope-cuda-check: %s\n", why.c_str());
    return 2;
  }
  const size_t benchN = argc > 1 ? std::stoull(argv[1]) : (size_t{1} << 26);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  int busWidth = 0, memClockKHz = 0;
  cudaDeviceGetAttribute(&busWidth, cudaDevAttrGlobalMemoryBusWidth, 0);
  cudaDeviceGetAttribute(&memClockKHz, cudaDevAttrMemoryClockRate, 0);
  const double peak = 2.0 * memClockKHz * 1e3 * (busWidth / 8) / 1e9;
  std::printf("device: %s, sm_%d%d, peak memory bandwidth %.0f GB/s\n", prop.name, prop.major, prop.minor, peak);
  for (int k = 0; k < 5; ++k) {
    Codec c;
    c.kind = static_cast<Compression>(k);
    c.topkRatio = 0.01;
    for (size_t n : {size_t{0}, size_t{1}, size_t{37}, size_t{1000}, (size_t{1} << 20) + 5}) checkCodec(c, n);
  }
  checkRows();
  checkGemm();
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) expect(false, std::string("CUDA error: ") + cudaGetErrorString(e));
  for (int k = 1; k < 5; ++k) {
    Codec c;
    c.kind = static_cast<Compression>(k);
    benchCodec(c, benchN, peak);
  }
  std::printf("%s: %d failure(s)\n", g_failures ? "FAIL" : "PASS", g_failures);
  return g_failures ? 1 : 0;
}
