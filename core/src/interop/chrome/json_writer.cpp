#include "interop/chrome/json_writer.h"

#include <cmath>

namespace trainscope::core::chrome {

namespace {

constexpr char kHex[] = "0123456789abcdef";

// Length of the valid UTF-8 sequence starting at s[i], or 0 if it is not valid (bad lead byte,
// missing continuation, overlong form, surrogate, or beyond U+10FFFF).
size_t utf8SequenceLength(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  size_t n = 0;
  uint32_t cp = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
    cp = b0 & 0x1Fu;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    cp = b0 & 0x0Fu;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    cp = b0 & 0x07u;
  } else
    return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3Fu);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF) return 0;
  if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
  return n;
}

bool plainAscii(unsigned char c) {
  return c >= 0x20 && c < 0x7F && c != '"' && c != '\\';
}

}  // namespace

void appendJsonString(std::string& out, std::string_view s) {
  out.push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    while (j < s.size() && plainAscii(static_cast<unsigned char>(s[j]))) ++j;
    out.append(s.data() + i, j - i);
    if (j == s.size()) break;
    const auto c = static_cast<unsigned char>(s[j]);
    i = j + 1;
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20 || c == 0x7F) {
      const char esc[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
      out.append(esc, sizeof esc);
      continue;
    }
    // c >= 0x80: copy a valid multi-byte sequence as is, replace a broken byte.
    if (const size_t n = utf8SequenceLength(s, j); n > 0) {
      out.append(s.data() + j, n);
      i = j + n;
    } else {
      out += "\xEF\xBF\xBD";
    }
  }
  out.push_back('"');
}

JsonWriter::JsonWriter(std::ostream& out, size_t chunkBytes) : out_(out), chunk_(chunkBytes) {
  buf_.resize(chunk_ + 4096);
}

JsonWriter::~JsonWriter() {
  (void)flush();
}

void JsonWriter::grow(size_t n) {
  // Hand the full chunk to the stream first; only grow the buffer for a single huge token.
  (void)flush();
  if (n > buf_.size()) buf_.resize(n + 4096);
}

bool JsonWriter::flush() {
  if (len_ > 0 && !failed_) {
    out_.write(buf_.data(), static_cast<std::streamsize>(len_));
    if (!out_) failed_ = true;
  }
  len_ = 0;
  return !failed_;
}

void JsonWriter::floating(double v) {
  if (!std::isfinite(v)) {
    raw("null");
    return;
  }
  char* p = reserve(40);
  char* end = std::to_chars(p, p + 38, v).ptr;
  bool looksFloat = false;
  for (char* q = p; q < end; ++q) looksFloat |= (*q == '.' || *q == 'e');
  if (!looksFloat) {
    *end++ = '.';
    *end++ = '0';
  }
  len_ += static_cast<size_t>(end - p);
}

void JsonWriter::micros(int64_t ns) {
  char* p = reserve(32);
  char* q = p;
  uint64_t u = static_cast<uint64_t>(ns);
  if (ns < 0) {
    *q++ = '-';
    u = ~u + 1;  // magnitude, also right for INT64_MIN
  }
  q = std::to_chars(q, q + 24, u / 1000).ptr;
  if (const auto frac = static_cast<unsigned>(u % 1000); frac != 0) {
    q[0] = '.';
    q[1] = static_cast<char>('0' + frac / 100);
    q[2] = static_cast<char>('0' + frac / 10 % 10);
    q[3] = static_cast<char>('0' + frac % 10);
    q += 4;
  }
  len_ += static_cast<size_t>(q - p);
}

void JsonWriter::string(std::string_view s) {
  // Fast path: nothing to escape, one copy.
  bool plain = true;
  for (char c : s) plain &= plainAscii(static_cast<unsigned char>(c));
  if (plain) {
    char* p = reserve(s.size() + 2);
    p[0] = '"';
    std::memcpy(p + 1, s.data(), s.size());
    p[s.size() + 1] = '"';
    len_ += s.size() + 2;
    return;
  }
  std::string tmp;
  appendJsonString(tmp, s);
  raw(tmp);
}

}  // namespace trainscope::core::chrome
