#include "session/args.h"

#include <bit>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace trainscope::core::tsdb {

namespace {

constexpr char kHex[] = "0123456789abcdef";

bool needsEscapePrefix(std::string_view name) {
  return (!name.empty() && (name[0] == '@' || name[0] == '#')) || builtinAttrFromName(name).has_value();
}

void appendInt(std::string& out, int64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

void appendDouble(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "null";
    return;
  }
  if (std::isinf(v)) {
    out += v > 0 ? "1e999" : "-1e999";  // overflows to infinity in every JSON reader we know
    return;
  }
  char buf[40];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that round-trips
  out.append(buf, r.ptr);
  // "3" would read back as an integer: keep doubles recognisable.
  if (std::memchr(buf, '.', static_cast<size_t>(r.ptr - buf)) == nullptr &&
      std::memchr(buf, 'e', static_cast<size_t>(r.ptr - buf)) == nullptr)
    out += ".0";
}

// A cursor over the JSON text; every parse step returns false on malformed input.
struct Parser {
  const char* p;
  const char* end;
  std::string scratch;  // unescaped string when the input had escapes
  std::string& error;

  bool fail(const char* what) {
    error = what;
    return false;
  }
  void ws() {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) ++p;
  }
  static int hexValue(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  bool hex4(uint32_t& v) {
    if (end - p < 4) return fail("short \\u escape");
    v = 0;
    for (int i = 0; i < 4; ++i) {
      const int h = hexValue(*p++);
      if (h < 0) return fail("bad \\u escape");
      v = v << 4 | static_cast<uint32_t>(h);
    }
    return true;
  }
  static void appendUtf8(std::string& s, uint32_t cp) {
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | cp >> 6);
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | cp >> 12);
      s += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | cp >> 18);
      s += static_cast<char>(0x80 | (cp >> 12 & 0x3F));
      s += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  // At an opening quote. The result views the input when there were no escapes, else scratch.
  bool string(std::string_view& out) {
    if (p >= end || *p != '"') return fail("expected a string");
    const char* begin = ++p;
    while (p < end && *p != '"' && *p != '\\') ++p;
    if (p < end && *p == '"') {
      out = std::string_view(begin, static_cast<size_t>(p - begin));
      ++p;
      return true;
    }
    scratch.assign(begin, p);
    while (p < end && *p != '"') {
      if (*p != '\\') {
        scratch += *p++;
        continue;
      }
      if (++p >= end) break;
      switch (const char c = *p++) {
        case '"': case '\\': case '/': scratch += c; break;
        case 'b': scratch += '\b'; break;
        case 'f': scratch += '\f'; break;
        case 'n': scratch += '\n'; break;
        case 'r': scratch += '\r'; break;
        case 't': scratch += '\t'; break;
        case 'u': {
          uint32_t cp = 0;
          if (!hex4(cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00 && end - p >= 6 && p[0] == '\\' && p[1] == 'u') {
            p += 2;
            uint32_t lo = 0;
            if (!hex4(lo)) return false;
            if (lo < 0xDC00 || lo > 0xDFFF) return fail("bad surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          appendUtf8(scratch, cp);
          break;
        }
        default: return fail("bad escape in string");
      }
    }
    if (p >= end) return fail("unterminated string");
    ++p;
    out = scratch;
    return true;
  }
};

// The attribute key for a JSON key (see session_args.h for the naming rules).
bool resolveKey(std::string_view key, StringTable& strings, uint32_t& out, std::string& error) {
  if (!key.empty() && key[0] == '@') {
    out = kCustomAttrBase + strings.intern(key.substr(1));
    return true;
  }
  if (!key.empty() && key[0] == '#') {
    const auto r = std::from_chars(key.data() + 1, key.data() + key.size(), out);
    if (r.ec != std::errc() || r.ptr != key.data() + key.size()) {
      error = "bad numeric key \"" + std::string(key) + "\"";
      return false;
    }
    return true;
  }
  if (auto k = builtinAttrFromName(key)) {
    out = static_cast<uint32_t>(*k);
    return true;
  }
  out = kCustomAttrBase + strings.intern(key);
  return true;
}

bool parseNumber(std::string_view tok, Attr& a, std::string& error) {
  const bool isDouble = tok.find_first_of(".eE") != std::string_view::npos;
  if (!isDouble) {
    int64_t v = 0;
    const auto r = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    if (r.ec == std::errc() && r.ptr == tok.data() + tok.size()) {
      a.type = AttrType::Int;
      a.bits = v;
      return true;
    }
    if (r.ec != std::errc::result_out_of_range) {
      error = "bad number \"" + std::string(tok) + "\"";
      return false;
    }
    // An integer too large for int64 (hand-edited file): keep it as a double.
  }
  double d = 0;
  const auto r = std::from_chars(tok.data(), tok.data() + tok.size(), d);
  if (r.ec == std::errc::result_out_of_range && tok.size() < 64) {
    char buf[64];  // overflow (our +-1e999) or underflow: strtod gives +-inf or 0
    std::memcpy(buf, tok.data(), tok.size());
    buf[tok.size()] = '\0';
    d = std::strtod(buf, nullptr);
  } else if (r.ec != std::errc() || r.ptr != tok.data() + tok.size()) {
    error = "bad number \"" + std::string(tok) + "\"";
    return false;
  }
  a.type = AttrType::Double;
  a.bits = std::bit_cast<int64_t>(d);
  return true;
}

}  // namespace

void appendJsonString(std::string& out, std::string_view s) {
  out += '"';
  size_t run = 0;  // start of the current run of characters that need no escape
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(s.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        out += "\\u00";
        out += kHex[c >> 4];
        out += kHex[c & 15];
    }
  }
  out.append(s.data() + run, s.size() - run);
  out += '"';
}

void encodeArgs(std::span<const Attr> attrs, const StringTable& strings, std::string& out) {
  out += '{';
  bool first = true;
  for (const Attr& a : attrs) {
    if (!first) out += ',';
    first = false;
    if (a.isCustom()) {
      const std::string_view name = strings.get(a.key - kCustomAttrBase);
      if (needsEscapePrefix(name)) {
        std::string prefixed = "@";
        prefixed += name;
        appendJsonString(out, prefixed);
      } else {
        appendJsonString(out, name);
      }
    } else if (const std::string_view name = builtinAttrName(static_cast<AttrKey>(a.key)); !name.empty()) {
      out += '"';
      out += name;  // built-in names are plain identifiers: nothing to escape
      out += '"';
    } else {
      out += "\"#";
      appendInt(out, a.key);
      out += '"';
    }
    out += ':';
    switch (a.type) {
      case AttrType::Double: appendDouble(out, std::bit_cast<double>(a.bits)); break;
      case AttrType::String: appendJsonString(out, strings.get(a.asString())); break;
      case AttrType::Int:
      default: appendInt(out, a.bits); break;
    }
  }
  out += '}';
}

bool decodeArgs(std::string_view json, StringTable& strings, std::vector<Attr>& out, std::string& error) {
  out.clear();
  Parser ps{json.data(), json.data() + json.size(), {}, error};
  ps.ws();
  if (ps.p >= ps.end || *ps.p != '{') return ps.fail("args is not a JSON object");
  ++ps.p;
  ps.ws();
  if (ps.p < ps.end && *ps.p == '}') {
    ++ps.p;
  } else {
    for (;;) {
      std::string_view keyText;
      if (!ps.string(keyText)) return false;
      Attr a;
      if (!resolveKey(keyText, strings, a.key, error)) return false;
      ps.ws();
      if (ps.p >= ps.end || *ps.p != ':') return ps.fail("expected ':' after a key");
      ++ps.p;
      ps.ws();
      if (ps.p >= ps.end) return ps.fail("missing value");
      if (*ps.p == '"') {
        std::string_view v;
        if (!ps.string(v)) return false;
        a.type = AttrType::String;
        a.bits = static_cast<int64_t>(strings.intern(v));
      } else if (ps.end - ps.p >= 4 && std::memcmp(ps.p, "null", 4) == 0) {
        ps.p += 4;  // NaN is written as null
        a.type = AttrType::Double;
        a.bits = std::bit_cast<int64_t>(std::numeric_limits<double>::quiet_NaN());
      } else {
        const char* b = ps.p;
        while (ps.p < ps.end && ((*ps.p >= '0' && *ps.p <= '9') || *ps.p == '-' || *ps.p == '+' ||
                                 *ps.p == '.' || *ps.p == 'e' || *ps.p == 'E'))
          ++ps.p;
        if (b == ps.p) return ps.fail("attribute values must be numbers, strings or null");
        if (!parseNumber(std::string_view(b, static_cast<size_t>(ps.p - b)), a, error)) return false;
      }
      out.push_back(a);
      ps.ws();
      if (ps.p < ps.end && *ps.p == ',') {
        ++ps.p;
        ps.ws();
        continue;
      }
      if (ps.p < ps.end && *ps.p == '}') {
        ++ps.p;
        break;
      }
      return ps.fail("expected ',' or '}'");
    }
  }
  ps.ws();
  if (ps.p != ps.end) return ps.fail("text after the args object");
  return true;
}

void encodeAttrBlob(std::span<const Attr> attrs, std::string& out) {
  auto varint = [&out](uint64_t v) {
    while (v >= 0x80) {
      out += static_cast<char>(v | 0x80);
      v >>= 7;
    }
    out += static_cast<char>(v);
  };
  for (const Attr& a : attrs) {
    varint(uint64_t{a.key} << 2 | static_cast<uint64_t>(a.type));
    const auto u = static_cast<uint64_t>(a.bits);
    switch (a.type) {
      case AttrType::Double:
        for (int i = 0; i < 8; ++i) out += static_cast<char>(u >> (8 * i));
        break;
      case AttrType::String: varint(u); break;
      case AttrType::Int:
      default: varint(u << 1 ^ static_cast<uint64_t>(a.bits >> 63)); break;  // zigzag
    }
  }
}

bool decodeAttrBlob(std::span<const unsigned char> blob, size_t fileStrings, std::vector<Attr>& out,
                    std::string& error) {
  out.clear();
  const unsigned char* p = blob.data();
  const unsigned char* const end = p + blob.size();
  auto varint = [&p, end](uint64_t& v) {
    v = 0;
    for (int shift = 0; p < end && shift < 64; shift += 7) {
      const unsigned char b = *p++;
      v |= uint64_t{b & 0x7fu} << shift;
      if (b < 0x80) return true;
    }
    return false;
  };
  auto fail = [&error](const char* why) {
    error = why;
    return false;
  };
  auto mapString = [fileStrings](uint64_t fileId, uint32_t& id) {
    id = static_cast<uint32_t>(fileId);
    return fileId < fileStrings;
  };
  while (p < end) {
    uint64_t head = 0;
    if (!varint(head)) return fail("truncated attribute key");
    Attr a;
    const uint64_t key = head >> 2;
    if (key > std::numeric_limits<uint32_t>::max()) return fail("impossible attribute key");
    a.key = static_cast<uint32_t>(key);
    if (a.key >= kCustomAttrBase) {
      uint32_t name = 0;
      if (!mapString(a.key - kCustomAttrBase, name)) return fail("attribute name not in the strings table");
      a.key = kCustomAttrBase + name;
    }
    uint64_t v = 0;
    switch (head & 3) {
      case 0:
        if (!varint(v)) return fail("truncated integer");
        a.type = AttrType::Int;
        a.bits = static_cast<int64_t>(v >> 1 ^ (~(v & 1) + 1));
        break;
      case 1:
        if (end - p < 8) return fail("truncated double");
        for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
        p += 8;
        a.type = AttrType::Double;
        a.bits = static_cast<int64_t>(v);
        break;
      case 2: {
        uint32_t id = 0;
        if (!varint(v) || !mapString(v, id)) return fail("string value not in the strings table");
        a.type = AttrType::String;
        a.bits = id;
        break;
      }
      default: return fail("unknown attribute type");
    }
    out.push_back(a);
  }
  return true;
}

}  // namespace trainscope::core::tsdb
