// Gradient compression codecs (Bagua's low-precision primitives). Each encodes a chunk of n
// floats into a fixed-size payload (payloadBytes depends only on n and the ratio), so every
// rank knows every chunk's size without exchanging it.
//   fp16       2 bytes / value
//   int8       per-chunk scale (max |v|) + stochastically rounded int8 (QSGD-like, unbiased)
//   onebit-ef  per-chunk scale (mean |v|) + one sign bit / value; with error feedback
//   topk-ef    the k = ceil(ratio n) largest |v| as (uint32 index, float value); error feedback
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trainscope::train {

enum class Compression { None = 0, Fp16, Int8, OneBitEf, TopkEf };
inline constexpr const char* kCompressionNames[] = {"none", "fp16", "int8", "onebit-ef", "topk-ef"};
std::optional<Compression> parseCompression(const std::string& s);

struct Codec {
  Compression kind = Compression::None;
  double topkRatio = 0.01;
  bool errorFeedback() const { return kind == Compression::OneBitEf || kind == Compression::TopkEf; }
  size_t payloadBytes(size_t n) const;
  // seed makes int8's stochastic rounding reproducible (it differs per rank, step and chunk).
  void encode(const float* v, size_t n, uint64_t seed, uint8_t* out) const;
  void decodeAdd(const uint8_t* in, size_t n, float* acc) const;  // acc += decode(in)
  // Error feedback: v += err; encode(v); err = v - decode(payload). Without error feedback
  // (none, fp16, int8) err is left alone (all zeros) and this is encode.
  void encodeWithFeedback(float* v, float* err, size_t n, uint64_t seed, uint8_t* out) const;
};

// fp16's conversions. On x86-64 CPUs with F16C they run 8 values per instruction (chosen at run
// time; the binary still runs without F16C); elsewhere, and for the tails, the compiler's
// _Float16 conversion (libgcc's __truncsfhf2 / __extendhfsf2 on x86: ~10 ns a value, which made
// fp16 slower than sending floats on the 2-core CI machine). Both round to nearest-even and give
// the same bits (tst_train_compress checks every float16 and a sweep of floats).
void toHalf(const float* v, size_t n, uint8_t* out);
void addHalves(const uint8_t* in, size_t n, float* acc);  // acc += float(in)
void toHalfPortable(const float* v, size_t n, uint8_t* out);
void addHalvesPortable(const uint8_t* in, size_t n, float* acc);
bool halfHasF16c();

}  // namespace trainscope::train
