// Bounds-checked little-endian Reader/Writer for wire payloads. Private to trainscope_wire.
//
// The Reader never trusts a length or count from the payload: every read checks the remaining
// bytes first, and a count is refused when even the smallest possible items could not fit in
// what is left -- so a 4-byte count of 4 billion cannot make us reserve 4 billion items.
// The first failure is sticky and remembered with a message; callers check ok() once at the end.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace trainscope::core::wire::detail {

// Appends to `out`. It grows `out` ahead of the writes (geometrically) and trims the slack when
// it goes away, so writing a field is a bounds check and a memcpy, not a vector resize.
class Writer {
 public:
  explicit Writer(std::vector<uint8_t>& out) : out_(out), cur_(out.data() + out.size()), end_(cur_) {}
  ~Writer() { out_.resize(size()); }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  size_t size() const { return static_cast<size_t>(cur_ - out_.data()); }
  void u8(uint8_t v) { putLe(v, 1); }
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
  void bytes(std::span<const uint8_t> b) { put(b.data(), b.size()); }
  void str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    put(s.data(), s.size());
  }
  void count(size_t n) { u32(static_cast<uint32_t>(n)); }
  // Room for n more bytes without growing again.
  void reserveMore(size_t n) {
    if (static_cast<size_t>(end_ - cur_) < n) grow(n, 0);
  }

 private:
  void putLe(uint64_t v, size_t n) {
    if constexpr (std::endian::native == std::endian::little) {
      put(&v, n);
    } else {
      uint8_t b[8];
      for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
      put(b, n);
    }
  }
  void put(const void* p, size_t n) {
    if (static_cast<size_t>(end_ - cur_) < n) grow(n, out_.size());
    if (n > 0) std::memcpy(cur_, p, n);
    cur_ += n;
  }
  // Makes room for n more bytes, and at least `extra` more.
  [[gnu::noinline]] void grow(size_t n, size_t extra) {
    const size_t used = size();
    out_.resize(used + std::max(n, extra));
    cur_ = out_.data() + used;
    end_ = out_.data() + out_.size();
  }

  std::vector<uint8_t>& out_;
  uint8_t* cur_;  // next byte to write; [cur_, end_) is slack in out_
  uint8_t* end_;
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
