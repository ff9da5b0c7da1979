// A small streaming JSON writer for the Chrome trace exporter. It appends into one reusable
// char buffer and hands full chunks to the std::ostream, so a trace of any size costs a fixed
// amount of memory; numbers go through std::to_chars (no locale, no printf parsing).
//
// It writes tokens, not a document: the caller places commas and braces. That keeps the hot
// path (one trace event) a handful of memcpy calls.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace trainscope::core::chrome {

class JsonWriter {
 public:
  explicit JsonWriter(std::ostream& out, size_t chunkBytes = 1 << 20);
  JsonWriter(const JsonWriter&) = delete;
  JsonWriter& operator=(const JsonWriter&) = delete;
  ~JsonWriter();

  // Raw text, already valid JSON (punctuation, pre-escaped strings, keys).
  void raw(std::string_view s) {
    char* p = reserve(s.size());
    std::memcpy(p, s.data(), s.size());
    len_ += s.size();
  }
  void raw(char c) {
    char* p = reserve(1);
    *p = c;
    ++len_;
  }
  void integer(int64_t v) {
    char* p = reserve(24);
    len_ += static_cast<size_t>(std::to_chars(p, p + 24, v).ptr - p);
  }
  void unsignedInteger(uint64_t v) {
    char* p = reserve(24);
    len_ += static_cast<size_t>(std::to_chars(p, p + 24, v).ptr - p);
  }
  // A double that reads back as the same double *and* as a JSON float (never as an integer:
  // 2.0 is written "2.0", not "2"), so the attribute keeps its type through a round trip.
  // Non-finite values have no JSON form and are written as null.
  void floating(double v);
  // Nanoseconds as microseconds with exactly three decimals ("1234.567"), by integer
  // division: no binary floating point is involved, so every nanosecond survives.
  void micros(int64_t ns);
  // A JSON string literal with quotes. Invalid UTF-8 becomes U+FFFD (JSON readers reject it);
  // control characters and DEL are \u-escaped (Perfetto's tokenizer rejects raw ones).
  void string(std::string_view s);

  // Writes what is buffered to the stream; false if the stream failed.
  bool flush();
  bool failed() const { return failed_; }

 private:
  char* reserve(size_t n) {
    if (len_ + n > buf_.size()) grow(n);
    return buf_.data() + len_;
  }
  void grow(size_t n);

  std::ostream& out_;
  std::vector<char> buf_;
  size_t len_ = 0;
  size_t chunk_;
  bool failed_ = false;
};

// The JSON literal (with quotes) for s, appended to out. Shared by the writer and by caches
// of pre-escaped names.
void appendJsonString(std::string& out, std::string_view s);

}  // namespace trainscope::core::chrome
