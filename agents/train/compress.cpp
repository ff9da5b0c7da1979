#include "compress.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "codec_math.h"
#include "tensor.h"

namespace trainscope::train {

void toHalfPortable(const float* v, size_t n, uint8_t* out) {
  for (size_t i = 0; i < n; ++i) {
    const auto h = static_cast<_Float16>(v[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

void addHalvesPortable(const uint8_t* in, size_t n, float* acc) {
  for (size_t i = 0; i < n; ++i) {
    _Float16 h;
    std::memcpy(&h, in + 2 * i, 2);
    acc[i] += static_cast<float>(h);
  }
}

#if defined(__x86_64__)
namespace {
__attribute__((target("avx,f16c"))) void toHalfF16c(const float* v, size_t n, uint8_t* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(v + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);
  }
  toHalfPortable(v + i, n - i, out + 2 * i);
}

__attribute__((target("avx,f16c"))) void addHalvesF16c(const uint8_t* in, size_t n, float* acc) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 f = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i)));
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), f));
  }
  addHalvesPortable(in + 2 * i, n - i, acc + i);
}
}  // namespace

bool halfHasF16c() {
  static const bool has = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return has;
}

void toHalf(const float* v, size_t n, uint8_t* out) {
  if (halfHasF16c()) toHalfF16c(v, n, out);
  else toHalfPortable(v, n, out);
}

void addHalves(const uint8_t* in, size_t n, float* acc) {
  if (halfHasF16c()) addHalvesF16c(in, n, acc);
  else addHalvesPortable(in, n, acc);
}
#else
bool halfHasF16c() { return false; }
void toHalf(const float* v, size_t n, uint8_t* out) { toHalfPortable(v, n, out); }
void addHalves(const uint8_t* in, size_t n, float* acc) { addHalvesPortable(in, n, acc); }
#endif

std::optional<Compression> parseCompression(const std::string& s) {
  for (int i = 0; i < 5; ++i)
    if (s == kCompressionNames[i]) return static_cast<Compression>(i);
  return std::nullopt;
}

namespace {
size_t topkCount(size_t n, double ratio) {
  if (n == 0) return 0;
  const auto k = static_cast<size_t>(std::ceil(ratio * static_cast<double>(n)));
  return std::clamp<size_t>(k, 1, n);
}
}  // namespace

size_t Codec::payloadBytes(size_t n) const {
  switch (kind) {
    case Compression::None:
      return 4 * n;
    case Compression::Fp16:
      return 2 * n;
    case Compression::Int8:
      return 4 + n;
    case Compression::OneBitEf:
      return 4 + (n + 7) / 8;
    case Compression::TopkEf:
      return 8 * topkCount(n, topkRatio);
  }
  return 4 * n;
}

void Codec::encode(const float* v, size_t n, uint64_t seed, uint8_t* out) const {
  switch (kind) {
    case Compression::None:
      if (n != 0) std::memcpy(out, v, 4 * n);  // an empty bucket may come with null pointers (UBSan)
      return;
    case Compression::Fp16:
      toHalf(v, n, out);
      return;
    case Compression::Int8: {
      float scale = 0;
      for (size_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(v[i]));
      std::memcpy(out, &scale, 4);
      const float inv = int8Inv(scale);
      for (size_t i = 0; i < n; ++i) out[4 + i] = static_cast<uint8_t>(int8Quantize(v[i], inv, seed, i));
      return;
    }
    case Compression::OneBitEf: {
      double sum = 0;
      for (size_t i = 0; i < n; ++i) sum += std::fabs(v[i]);
      const float scale = n ? static_cast<float>(sum / static_cast<double>(n)) : 0.0f;
      std::memcpy(out, &scale, 4);
      std::memset(out + 4, 0, (n + 7) / 8);
      for (size_t i = 0; i < n; ++i)
        if (v[i] >= 0) out[4 + i / 8] |= static_cast<uint8_t>(1u << (i % 8));
      return;
    }
    case Compression::TopkEf: {
      const size_t k = topkCount(n, topkRatio);
      std::vector<uint32_t> idx(n);
      std::iota(idx.begin(), idx.end(), 0u);
      // Largest magnitude first, ties by index: the same choice on every rank and run.
      std::partial_sort(idx.begin(), idx.begin() + static_cast<ptrdiff_t>(k), idx.end(),
                        [v](uint32_t a, uint32_t b) {
                          const uint32_t ka = magnitudeKey(v[a]), kb = magnitudeKey(v[b]);
                          return ka > kb || (ka == kb && a < b);
                        });
      for (size_t j = 0; j < k; ++j) {
        std::memcpy(out + 8 * j, &idx[j], 4);
        std::memcpy(out + 8 * j + 4, &v[idx[j]], 4);
      }
      return;
    }
  }
}

void Codec::decodeAdd(const uint8_t* in, size_t n, float* acc) const {
  switch (kind) {
    case Compression::None:
      for (size_t i = 0; i < n; ++i) {
        float f;
        std::memcpy(&f, in + 4 * i, 4);
        acc[i] += f;
      }
      return;
    case Compression::Fp16:
      addHalves(in, n, acc);
      return;
    case Compression::Int8: {
      float scale;
      std::memcpy(&scale, in, 4);
      const float step = int8Step(scale);
      for (size_t i = 0; i < n; ++i) acc[i] += step * static_cast<float>(static_cast<int8_t>(in[4 + i]));
      return;
    }
    case Compression::OneBitEf: {
      float scale;
      std::memcpy(&scale, in, 4);
      for (size_t i = 0; i < n; ++i) acc[i] += onebitValue((in[4 + i / 8] >> (i % 8)) & 1u, scale);
      return;
    }
    case Compression::TopkEf: {
      const size_t k = topkCount(n, topkRatio);
      for (size_t j = 0; j < k; ++j) {
        uint32_t i;
        float f;
        std::memcpy(&i, in + 8 * j, 4);
        std::memcpy(&f, in + 8 * j + 4, 4);
        if (i < n) acc[i] += f;
      }
      return;
    }
  }
}

void Codec::encodeWithFeedback(float* v, float* err, size_t n, uint64_t seed, uint8_t* out) const {
  if (!errorFeedback()) {
    encode(v, n, seed, out);
    return;
  }
  for (size_t i = 0; i < n; ++i) v[i] += err[i];
  encode(v, n, seed, out);
  for (size_t i = 0; i < n; ++i) err[i] = v[i];
  std::vector<float> dec(n, 0.0f);
  decodeAdd(out, n, dec.data());
  for (size_t i = 0; i < n; ++i) err[i] -= dec[i];
}

}  // namespace trainscope::train
