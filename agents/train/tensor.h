// A row-major float matrix and the deterministic random numbers the trainer uses everywhere
// (counter based: the same (seed, index) gives the same number on every rank and every run).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

// Host and device (the CUDA kernels draw the same numbers as the CPU code).
#if defined(__CUDACC__)
#define TS_HD __host__ __device__
#else
#define TS_HD
#endif

namespace trainscope::train {

struct Mat {
  int rows = 0, cols = 0;
  std::vector<float> v;
  void resize(int r, int c) {
    rows = r;
    cols = c;
    v.assign(static_cast<size_t>(r) * static_cast<size_t>(c), 0.0f);
  }
  float* row(int r) { return v.data() + static_cast<size_t>(r) * static_cast<size_t>(cols); }
  const float* row(int r) const { return v.data() + static_cast<size_t>(r) * static_cast<size_t>(cols); }
  float* data() { return v.data(); }
  const float* data() const { return v.data(); }
  size_t size() const { return v.size(); }
};

TS_HD inline uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
TS_HD inline uint64_t hashOf(uint64_t a, uint64_t b, uint64_t c = 0, uint64_t d = 0) {
  return mix64(mix64(mix64(mix64(a) ^ b) ^ c) ^ d);
}
// Uniform in [0, 1).
TS_HD inline double uniformOf(uint64_t h) {
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

// A small sequential generator (xorshift64*) seeded from a hash.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(mix64(seed) | 1) {}
  uint64_t next() {
    s_ ^= s_ >> 12;
    s_ ^= s_ << 25;
    s_ ^= s_ >> 27;
    return s_ * 0x2545F4914F6CDD1Dull;
  }
  double uniform() { return uniformOf(next()); }
  float normal() {  // Box-Muller
    const double u1 = uniform() + 1e-12, u2 = uniform();
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }

 private:
  uint64_t s_;
};

}  // namespace trainscope::train
