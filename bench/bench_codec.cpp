// The reference trainer's gradient codecs on the CPU (agents/train/compress.h): nanoseconds per
// value for one encode (with error feedback where the codec has it) plus one decode-add, the work
// a rank does per bucket per step. Beside them, the anchors measured in the same run: a plain
// float copy-and-add (codec `none`), and fp16 through the compiler's _Float16 conversion (libgcc's
// soft-float calls on x86) next to the F16C path the codec takes. docs/BENCHMARKS.md, "fp16 in
// hardware".
//
//   bench_codec [--values 200000] [--reps 50]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "compress.h"

using namespace trainscope::train;

int main(int argc, char** argv) {
  int values = 200000, reps = 50;
  for (int i = 1; i + 1 < argc; i += 2) {
    int* v = !std::strcmp(argv[i], "--values") ? &values : !std::strcmp(argv[i], "--reps") ? &reps : nullptr;
    if (!v || (*v = std::atoi(argv[i + 1])) < 1) {
      std::fprintf(stderr, "usage: bench_codec [--values N] [--reps N]\n");
      return 2;
    }
  }
  const auto n = static_cast<size_t>(values);
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 1e-3f);  // gradient-sized values
  std::vector<float> grad(n), v(n), err(n), acc(n);
  for (auto& x : grad) x = g(rng);
  std::vector<uint8_t> payload(8 * n + 8);
  using Clock = std::chrono::steady_clock;
  // Median of reps runs of fn, in ns per value.
  const auto measure = [&](auto&& fn) {
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
      std::copy(grad.begin(), grad.end(), v.begin());
      std::fill(acc.begin(), acc.end(), 0.0f);
      const auto t0 = Clock::now();
      fn();
      t.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / double(n));
    }
    std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
    return t[static_cast<size_t>(reps / 2)];
  };
  std::printf("values %zu, reps %d, F16C %s\n", n, reps, halfHasF16c() ? "yes" : "no");
  std::printf("%-22s %10s\n", "codec", "ns/value");
  for (int k = 0; k < 5; ++k) {
    const Codec c{static_cast<Compression>(k), 0.01};
    std::fill(err.begin(), err.end(), 0.0f);
    const double ns = measure([&] {
      c.encodeWithFeedback(v.data(), err.data(), n, 42, payload.data());
      c.decodeAdd(payload.data(), n, acc.data());
    });
    std::printf("%-22s %10.3f\n", kCompressionNames[k], ns);
  }
  const double portable = measure([&] {
    toHalfPortable(v.data(), n, payload.data());
    addHalvesPortable(payload.data(), n, acc.data());
  });
  std::printf("%-22s %10.3f\n", "fp16 (_Float16 casts)", portable);
  return 0;
}
