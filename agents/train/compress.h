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

}  // namespace trainscope::train
