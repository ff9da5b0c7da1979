// Bounds-checked little-endian Reader/Writer for wire payloads. Private to trainscope_wire.
//
// The Reader never trusts a length or count from the payload: every read checks the remaining
// bytes first, and a count is refused when even the smallest possible items could not fit in
// what is left -- so a 4-byte count of 4 billion cannot make us reserve 4 billion items.
// The first failure is sticky and remembered with a message; callers check ok() once at the end.
#pragma once

#include <cstdint>
#include <bit>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace trainscope::core::wire::detail {

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>& out) : out_(out) {}
  void u8(uint8_t v) { out_.push_back(v); }
  void u16(uint16_t v) { putLe(v, 2); }
  void u32(uint32_t v) { putLe(v, 4); }
  void u64(uint64_t v) { putLe(v, 8); }
  void i32(int32_t v) { u32(static_cast<uint32_t>(v)); }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void f64(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    u64(bits);
  }
  void boolean(bool v) { u8(v ? 1 : 0); }
  void bytes(std::span<const uint8_t> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  void str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void count(size_t n) { u32(static_cast<uint32_t>(n)); }
  void reserveMore(size_t n) { out_.reserve(out_.size() + n); }

 private:
  void putLe(uint64_t v, int n) { storeLe(grow(static_cast<size_t>(n)), v, n); }

 public:
  // Appends n bytes and returns where they start (for fixed-size records written with storeLe).
  uint8_t* grow(size_t n) {
    const size_t at = out_.size();
    out_.resize(at + n);
    return out_.data() + at;
  }
  static void storeLe(uint8_t* p, uint64_t v, int n) {
    if constexpr (std::endian::native == std::endian::little) {
      std::memcpy(p, &v, static_cast<size_t>(n));
    } else {
      for (int i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
    }
  }

 private:
  std::vector<uint8_t>& out_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> d) : d_(d) {}

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  size_t remaining() const { return d_.size() - pos_; }
  // Records the first failure; later reads then return zeros.
  void fail(std::string what) {
    if (error_.empty()) error_ = std::move(what);
  }

  uint8_t u8() { return static_cast<uint8_t>(getLe(1, "u8")); }
  uint16_t u16() { return static_cast<uint16_t>(getLe(2, "u16")); }
  uint32_t u32() { return static_cast<uint32_t>(getLe(4, "u32")); }
  uint64_t u64() { return getLe(8, "u64"); }
  int32_t i32() { return static_cast<int32_t>(u32()); }
  int64_t i64() { return static_cast<int64_t>(u64()); }
  double f64() {
    const uint64_t bits = u64();
    double v;
    std::memcpy(&v, &bits, 8);
    return v;
  }
  bool boolean() {
    const uint8_t v = u8();
    if (v > 1) fail("invalid bool value " + std::to_string(v));
    return v == 1;
  }
  void fixed(std::span<uint8_t> out) {
    if (!need(out.size(), "fixed-size field")) return;
    std::memcpy(out.data(), d_.data() + pos_, out.size());
    pos_ += out.size();
  }
  std::string str() {
    const uint32_t n = u32();
    if (!need(n, "string")) return {};
    std::string s(reinterpret_cast<const char*>(d_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  // A vector count whose items take at least minItemBytes each.
  uint32_t count(size_t minItemBytes, const char* what) {
    const uint32_t n = u32();
    if (!ok()) return 0;
    if (static_cast<uint64_t>(n) * minItemBytes > remaining()) {
      fail(std::string("count of ") + what + " (" + std::to_string(n) +
           ") larger than the payload can hold (" + std::to_string(remaining()) + " bytes left)");
      return 0;
    }
    return n;
  }
  // Enum stored as an integer below `limit`.
  template <typename E>
  E enumBelow(uint64_t raw, uint64_t limit, const char* what) {
    if (raw >= limit) {
      fail(std::string("invalid ") + what + " value " + std::to_string(raw));
      return E{};
    }
    return static_cast<E>(raw);
  }

 private:
  bool need(size_t n, const char* what) {
    if (!ok()) return false;
    if (n > remaining()) {
      fail(std::string("payload truncated: ") + what + " needs " + std::to_string(n) + " bytes, " +
           std::to_string(remaining()) + " left");
      return false;
    }
    return true;
  }
  uint64_t getLe(size_t n, const char* what) {
    if (!need(n, what)) return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(d_[pos_ + i]) << (8 * i);
    pos_ += n;
    return v;
  }

  std::span<const uint8_t> d_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace trainscope::core::wire::detail
