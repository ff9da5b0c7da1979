#include "interop/chrome/fast_reader.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <string>
#include <unordered_set>
#include <vector>

namespace trainscope::core::chrome {

enum class Parse : uint8_t { Ok, NeedMore, Fallback };

// Parses one JSON value into a JsonDoc. NeedMore: the text ends inside the value (the caller
// reads more and parses the value again from its start); Fallback: see fast_reader.h.
class FastParser {
 public:
  explicit FastParser(JsonDoc& doc) : doc_(doc) {}

  // An event or top-level member: doc is cleared first; on Ok, p is after the value.
  Parse parse(const char*& p, const char* end, bool event) {
    doc_.clear();
    event_ = event;
    tsText = durText = {};
    const Parse r = value(p, end, {nullptr, 0}, false, 1);
    if (r == Parse::Ok) doc_.finish();
    return r;
  }
  // A key of the top-level object, decoded.
  Parse key(const char*& p, const char* end, std::string& out) {
    doc_.clear();
    JsonValue::Text t{};
    bool arena = false;
    const Parse r = string(p, end, t, arena);
    if (r == Parse::Ok) out.assign(arena ? doc_.arena_.data() + reinterpret_cast<uintptr_t>(t.p) : t.p, t.n);
    return r;
  }

  std::string_view tsText, durText;  // the event's own "ts"/"dur" when they are floats

 private:
  static bool digit(char c) { return c >= '0' && c <= '9'; }

  Parse value(const char*& p, const char* end, JsonValue::Text key, bool keyInArena, uint32_t depth) {
    if (p >= end) return Parse::NeedMore;
    if (doc_.nodes_.size() >= UINT32_MAX / 2) return Parse::Fallback;  // node indices are 32-bit
    const uint32_t idx = static_cast<uint32_t>(doc_.nodes_.size());
    {
      JsonValue& n = doc_.nodes_.emplace_back();
      n.key_ = key;
      n.keyInArena_ = keyInArena;
      if (keyInArena) doc_.fixups_.push_back(idx);
    }
    switch (*p) {
      case '{':
        return object(p, end, idx, depth);
      case '[':
        return array(p, end, idx, depth);
      case '"': {
        JsonValue::Text t{};
        bool arena = false;
        if (Parse r = string(p, end, t, arena); r != Parse::Ok) return r;
        if (t.n > kMaxStringBytes) return Parse::Fallback;
        JsonValue& n = doc_.nodes_[idx];
        n.type_ = JsonValue::Type::String;
        n.s_ = t;
        n.strInArena_ = arena;
        if (arena && !keyInArena) doc_.fixups_.push_back(idx);
        return Parse::Ok;
      }
      case 't':
        return literal(p, end, "true", idx, JsonValue::Type::Boolean, 1);
      case 'f':
        return literal(p, end, "false", idx, JsonValue::Type::Boolean, 0);
      case 'n':
        return literal(p, end, "null", idx, JsonValue::Type::Null, 0);
      default:
        if (*p == '-' || digit(*p)) return number(p, end, idx, depth);
        return Parse::Fallback;
    }
  }

  Parse literal(const char*& p, const char* end, std::string_view word, uint32_t idx, JsonValue::Type type,
                uint64_t v) {
    if (static_cast<size_t>(end - p) < word.size()) {
      if (std::memcmp(p, word.data(), static_cast<size_t>(end - p)) != 0) return Parse::Fallback;
      return Parse::NeedMore;
    }
    if (std::memcmp(p, word.data(), word.size()) != 0) return Parse::Fallback;
    p += word.size();
    JsonValue& n = doc_.nodes_[idx];
    n.type_ = type;
    n.u_ = v;
    return Parse::Ok;
  }

  // JSON's number grammar, typed as nlohmann types it (lexer::scan_number): no fraction and no
  // exponent is Unsigned (or Integer when negative) while it fits, else Float; a Float that is
  // not finite is an error there ("number overflow"), so a fallback here.
  Parse number(const char*& p, const char* end, uint32_t idx, uint32_t depth) {
    const char* s = p;
    const char* q = p;
    const bool negative = *q == '-';
    if (negative) ++q;
    if (q >= end) return Parse::NeedMore;
    if (*q == '0') {
      ++q;
    } else if (digit(*q)) {
      while (q < end && digit(*q)) ++q;
    } else {
      return Parse::Fallback;
    }
    bool isFloat = false;
    if (q < end && *q == '.') {
      ++q;
      if (q >= end) return Parse::NeedMore;
      if (!digit(*q)) return Parse::Fallback;
      while (q < end && digit(*q)) ++q;
      isFloat = true;
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
      ++q;
      if (q < end && (*q == '+' || *q == '-')) ++q;
      if (q >= end) return Parse::NeedMore;
      if (!digit(*q)) return Parse::Fallback;
      while (q < end && digit(*q)) ++q;
      isFloat = true;
    }
    if (q >= end) return Parse::NeedMore;  // the number may go on in the next read
    JsonValue& n = doc_.nodes_[idx];
    if (!isFloat) {
      uint64_t m = 0;
      bool overflow = false;
      for (const char* d = negative ? s + 1 : s; d < q; ++d) {
        const uint64_t digitValue = static_cast<uint64_t>(*d - '0');
        if (m > (UINT64_MAX - digitValue) / 10) {
          overflow = true;
          break;
        }
        m = m * 10 + digitValue;
      }
      if (!overflow && !negative) {
        n.type_ = JsonValue::Type::Unsigned;
        n.u_ = m;
        p = q;
        return Parse::Ok;
      }
      if (!overflow && m <= uint64_t{1} << 63) {
        n.type_ = JsonValue::Type::Integer;
        n.i_ = static_cast<int64_t>(0 - m);  // -2^63 included
        p = q;
        return Parse::Ok;
      }
      // Beyond 64 bits: nlohmann reads it as a float.
    }
    double d = 0;
    const auto [ptr, ec] = std::from_chars(s, q, d);
    if (ec != std::errc() || ptr != q || !std::isfinite(d)) return Parse::Fallback;
    n.type_ = JsonValue::Type::Float;
    n.d_ = d;
    // nlohmann hands a float's text to the reader (json_reader.cpp: number_float), integers
    // beyond 64 bits included.
    if (event_ && depth == 2) {  // a member of the event itself
      const std::string_view k = n.key();
      if (k == "ts")
        tsText = std::string_view(s, static_cast<size_t>(q - s));
      else if (k == "dur")
        durText = std::string_view(s, static_cast<size_t>(q - s));
    }
    p = q;
    return Parse::Ok;
  }

  static void skipWs(const char*& p, const char* end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) ++p;
  }

  // A container nested deeper than the reader's limit is refused there (json_reader.cpp: open):
  // the event (or top-level member) itself is depth 1, and a container at depth > kMaxJsonDepth
  // is an error.
  Parse object(const char*& p, const char* end, uint32_t idx, uint32_t depth) {
    if (depth > kMaxJsonDepth) return Parse::Fallback;
    ++p;
    uint32_t count = 0;
    skipWs(p, end);
    if (p >= end) return Parse::NeedMore;
    if (*p != '}') {
      for (;;) {
        if (*p != '"') return Parse::Fallback;
        JsonValue::Text k{};
        bool arena = false;
        if (Parse r = string(p, end, k, arena); r != Parse::Ok) return r;
        if (k.n > kMaxStringBytes || ++count > kMaxObjectMembers) return Parse::Fallback;
        if (duplicate(idx, count, k, arena)) return Parse::Fallback;
        skipWs(p, end);
        if (p >= end) return Parse::NeedMore;
        if (*p != ':') return Parse::Fallback;
        ++p;
        skipWs(p, end);
        if (Parse r = value(p, end, k, arena, depth + 1); r != Parse::Ok) return r;
        skipWs(p, end);
        if (p >= end) return Parse::NeedMore;
        if (*p == ',') {
          ++p;
          skipWs(p, end);
          if (p >= end) return Parse::NeedMore;
          continue;
        }
        if (*p == '}') break;
        return Parse::Fallback;
      }
    }
    ++p;
    JsonValue& n = doc_.nodes_[idx];
    n.type_ = JsonValue::Type::Object;
    n.count_ = count;
    n.subtree_ = static_cast<uint32_t>(doc_.nodes_.size() - idx);
    return Parse::Ok;
  }

  Parse array(const char*& p, const char* end, uint32_t idx, uint32_t depth) {
    if (depth > kMaxJsonDepth) return Parse::Fallback;
    ++p;
    uint32_t count = 0;
    skipWs(p, end);
    if (p >= end) return Parse::NeedMore;
    if (*p != ']') {
      for (;;) {
        if (Parse r = value(p, end, {nullptr, 0}, false, depth + 1); r != Parse::Ok) return r;
        ++count;
        skipWs(p, end);
        if (p >= end) return Parse::NeedMore;
        if (*p == ',') {
          ++p;
          skipWs(p, end);
          continue;
        }
        if (*p == ']') break;
        return Parse::Fallback;
      }
    }
    ++p;
    JsonValue& n = doc_.nodes_[idx];
    n.type_ = JsonValue::Type::Array;
    n.count_ = count;
    n.subtree_ = static_cast<uint32_t>(doc_.nodes_.size() - idx);
    return Parse::Ok;
  }

  std::string_view resolve(JsonValue::Text t, bool arena) const {
    return {arena ? doc_.arena_.data() + reinterpret_cast<uintptr_t>(t.p) : t.p, t.n};
  }

  // Whether the object at idx, which now has `count` keys, the last being k, had k before.
  // nlohmann's ordered_json keeps a duplicate's first position with its last value (and the
  // reader's "ts" text follows the last float): rare enough to leave to that reader.
  bool duplicate(uint32_t idx, uint32_t count, JsonValue::Text k, bool arena) {
    const std::string_view key = resolve(k, arena);
    if (count <= 32) {
      const JsonValue* c = &doc_.nodes_[idx] + 1;
      for (uint32_t i = 1; i < count; ++i) {
        if (c->key_.n == k.n && resolve(c->key_, c->keyInArena_) == key) return true;
        c += c->subtree_;
      }
      return false;
    }
    // Large objects (up to kMaxObjectMembers): a set of the keys, so that 4,096 keys cost 4,096
    // look-ups, not 8 M comparisons. Filled with the first 32 when the 33rd arrives.
    if (count == 33) {
      bigKeys_.clear();
      const JsonValue* c = &doc_.nodes_[idx] + 1;
      for (uint32_t i = 1; i < count; ++i, c += c->subtree_)
        bigKeys_.emplace(resolve(c->key_, c->keyInArena_));
      bigObject_ = idx;
    } else if (bigObject_ != idx) {
      return true;  // a large object inside a large object: not a trace a profiler writes
    }
    return !bigKeys_.emplace(key).second;
  }

  // One UTF-8 sequence at p as nlohmann's lexer accepts it (RFC 3629: no overlongs, no
  // surrogates, at most U+10FFFF): its length, 0 when invalid, -1 when the text ends inside it.
  static int utf8(const char* p, const char* end) {
    const auto b = [&](int i) { return static_cast<unsigned char>(p[i]); };
    const auto in = [](unsigned char c, unsigned lo, unsigned hi) { return c >= lo && c <= hi; };
    const unsigned char c = b(0);
    int n = 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (in(c, 0xC2, 0xDF)) {
      n = 2;
    } else if (in(c, 0xE0, 0xEF)) {
      n = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (in(c, 0xF0, 0xF4)) {
      n = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return 0;
    }
    for (int i = 1; i < n; ++i) {
      if (p + i >= end) return -1;
      if (!in(b(i), i == 1 ? lo : 0x80, i == 1 ? hi : 0xBF)) return 0;
    }
    return n;
  }

  static int hex4(const char* p) {
    int v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = p[i];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= c - '0';
      else if (c >= 'a' && c <= 'f')
        v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        v |= c - 'A' + 10;
      else
        return -1;
    }
    return v;
  }

  // A string at p (on its opening quote). Without escapes it is the text itself; with escapes it
  // is decoded into the arena, and t.p holds the arena offset (arena = true).
  Parse string(const char*& p, const char* end, JsonValue::Text& t, bool& arena) {
    const char* s = p + 1;
    const char* q = s;
    // Longer raw text than any string within the limit can have (6 bytes per \u escape): stop
    // here rather than grow the window; the nlohmann reader says what is wrong.
    const char* const limit = s + std::min<size_t>(static_cast<size_t>(end - s), 6 * kMaxStringBytes + 16);
    for (;;) {
      // Eight bytes at a time while none is '"', '\\', a control character or non-ASCII.
      while (q + 8 <= limit) {
        uint64_t w;
        std::memcpy(&w, q, 8);
        constexpr uint64_t k01 = 0x0101010101010101ull, k80 = 0x8080808080808080ull;
        const uint64_t quote = w ^ (k01 * '"'), slash = w ^ (k01 * '\\');
        const uint64_t special = ((quote - k01) & ~quote) | ((slash - k01) & ~slash) | (w - k01 * 0x20) | w;
        if (special & k80) break;
        q += 8;
      }
      if (q >= limit) return limit < end ? Parse::Fallback : Parse::NeedMore;
      const unsigned char c = static_cast<unsigned char>(*q);
      if (c == '"') {
        t = {s, static_cast<uint32_t>(q - s)};
        arena = false;
        p = q + 1;
        return Parse::Ok;
      }
      if (c == '\\') break;
      if (c < 0x20) return Parse::Fallback;
      if (c >= 0x80) {
        const int n = utf8(q, end);
        if (n == 0) return Parse::Fallback;
        if (n < 0) return Parse::NeedMore;
        q += n;
        continue;
      }
      ++q;
    }
    // Escapes: decode into the arena.
    std::string& a = doc_.arena_;
    const size_t off = a.size();
    a.append(s, static_cast<size_t>(q - s));
    for (;;) {
      if (q >= limit) return limit < end ? Parse::Fallback : Parse::NeedMore;
      const unsigned char c = static_cast<unsigned char>(*q);
      if (c == '"') break;
      if (c < 0x20) return Parse::Fallback;
      if (c >= 0x80) {
        const int n = utf8(q, end);
        if (n == 0) return Parse::Fallback;
        if (n < 0) return Parse::NeedMore;
        a.append(q, static_cast<size_t>(n));
        q += n;
        continue;
      }
      if (c != '\\') {
        a.push_back(static_cast<char>(c));
        ++q;
        continue;
      }
      if (q + 1 >= end) return Parse::NeedMore;
      switch (q[1]) {
        case '"':
        case '\\':
        case '/':
          a.push_back(q[1]);
          break;
        case 'b':
          a.push_back('\b');
          break;
        case 'f':
          a.push_back('\f');
          break;
        case 'n':
          a.push_back('\n');
          break;
        case 'r':
          a.push_back('\r');
          break;
        case 't':
          a.push_back('\t');
          break;
        case 'u': {
          if (end - q < 6) return Parse::NeedMore;
          int cp = hex4(q + 2);
          if (cp < 0 || (cp >= 0xDC00 && cp <= 0xDFFF)) return Parse::Fallback;
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // a surrogate pair
            if (end - q < 12) return Parse::NeedMore;
            if (q[6] != '\\' || q[7] != 'u') return Parse::Fallback;
            const int lo = hex4(q + 8);
            if (lo < 0xDC00 || lo > 0xDFFF) return Parse::Fallback;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            q += 6;
          }
          if (cp < 0x80) {
            a.push_back(static_cast<char>(cp));
          } else if (cp < 0x800) {
            a.push_back(static_cast<char>(0xC0 | (cp >> 6)));
            a.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
          } else if (cp < 0x10000) {
            a.push_back(static_cast<char>(0xE0 | (cp >> 12)));
            a.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
            a.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
          } else {
            a.push_back(static_cast<char>(0xF0 | (cp >> 18)));
            a.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
            a.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
            a.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
          }
          q += 4;
          break;
        }
        default:
          return Parse::Fallback;
      }
      q += 2;
    }
    t = {reinterpret_cast<const char*>(static_cast<uintptr_t>(off)), static_cast<uint32_t>(a.size() - off)};
    if (a.size() - off > kMaxStringBytes) return Parse::Fallback;
    arena = true;
    p = q + 1;
    return Parse::Ok;
  }

  JsonDoc& doc_;
  bool event_ = false;
  std::unordered_set<std::string> bigKeys_;
  uint32_t bigObject_ = UINT32_MAX;
};

namespace {

// The text being read: a window over the file (refilled by ReadBytes), or the whole text.
class Window {
 public:
  explicit Window(std::string_view text) : base_(text.data()), len_(text.size()), eof_(true) {}
  Window(const ReadBytes& read, size_t size) : read_(&read), buf_(size) { base_ = buf_.data(); }

  const char* at() const { return base_ + pos_; }
  const char* end() const { return base_ + len_; }
  void commit(const char* p) { pos_ = static_cast<size_t>(p - base_); }
  bool eof() const { return eof_; }
  bool error() const { return error_; }

  // Keeps the uncommitted text, reads more after it; false at the end or on an error.
  bool more() {
    if (eof_) return false;
    if (pos_ > 0) {
      std::memmove(buf_.data(), buf_.data() + pos_, len_ - pos_);
      len_ -= pos_;
      pos_ = 0;
    }
    if (len_ == buf_.size()) {  // one element larger than the window
      buf_.resize(buf_.size() * 2);
      base_ = buf_.data();
    }
    const long n = (*read_)(buf_.data() + len_, buf_.size() - len_);
    if (n < 0) {
      error_ = true;
      eof_ = true;
      return false;
    }
    if (n == 0) {
      eof_ = true;
      return false;
    }
    len_ += static_cast<size_t>(n);
    return true;
  }

 private:
  const ReadBytes* read_ = nullptr;
  std::vector<char> buf_;
  const char* base_ = nullptr;
  size_t len_ = 0, pos_ = 0;
  bool eof_ = false, error_ = false;
};

FastRead readFast(Window& w, const std::function<Status(const RawEvent&)>& onEvent, ReadResult& result) {
  const FastRead fallback{true, Status::ok()};
  JsonDoc doc;
  FastParser parser(doc);
  enum class St { Root, ObjFirst, ObjKey, ObjSep, ArrFirst, ArrElem, ArrSep, Done };
  St st = St::Root;
  bool rootArray = false, sawEvents = false;
  size_t eventIndex = 0;
  std::string key;
  auto ws = [](const char*& p, const char* end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) ++p;
  };
  for (;;) {
    const char* p = w.at();
    const char* const end = w.end();
    Parse r = Parse::Ok;
    ws(p, end);
    if (p >= end) {
      r = Parse::NeedMore;
    } else {
      switch (st) {
        case St::Root:
          if (*p == '{') {
            result.objectForm = true;
            st = St::ObjFirst;
          } else if (*p == '[') {
            rootArray = sawEvents = true;
            st = St::ArrFirst;
          } else {
            return fallback;  // a scalar, a byte-order mark, not JSON
          }
          ++p;
          break;
        case St::ObjFirst:
        case St::ObjKey:
          if (st == St::ObjFirst && *p == '}') {
            ++p;
            st = St::Done;
            break;
          }
          if (*p != '"') return fallback;
          r = parser.key(p, end, key);
          if (r != Parse::Ok) break;
          ws(p, end);
          if (p >= end) {
            r = Parse::NeedMore;
            break;
          }
          if (*p != ':') return fallback;
          ++p;
          ws(p, end);
          if (p >= end) {
            r = Parse::NeedMore;
            break;
          }
          if (key == "traceEvents") {
            if (*p != '[' || sawEvents) return fallback;
            ++p;
            sawEvents = true;
            st = St::ArrFirst;
            break;
          }
          r = parser.parse(p, end, false);
          if (r != Parse::Ok) break;
          result.topLevel[key] = JsonDoc::toJson(doc.root());
          st = St::ObjSep;
          break;
        case St::ObjSep:
          if (*p == ',') {
            st = St::ObjKey;
          } else if (*p == '}') {
            st = St::Done;
          } else {
            return fallback;
          }
          ++p;
          break;
        case St::ArrFirst:
        case St::ArrElem:
          if (st == St::ArrFirst && *p == ']') {
            ++p;
            st = rootArray ? St::Done : St::ObjSep;
            break;
          }
          if (*p != '{') return fallback;
          r = parser.parse(p, end, true);
          if (r != Parse::Ok) break;
          w.commit(p);  // the event's text stays in the window while onEvent looks at it
          ++result.events;
          if (Status s = onEvent(RawEvent{eventIndex++, &doc.root(), parser.tsText, parser.durText}); !s)
            return FastRead{false, std::move(s)};
          st = St::ArrSep;
          break;
        case St::ArrSep:
          if (*p == ',') {
            st = St::ArrElem;
          } else if (*p == ']') {
            st = rootArray ? St::Done : St::ObjSep;
          } else {
            return fallback;
          }
          ++p;
          break;
        case St::Done:
          return fallback;  // data after the trace
      }
    }
    if (r == Parse::Fallback) return fallback;
    if (r == Parse::Ok) {
      w.commit(p);
      continue;
    }
    // NeedMore: read on, or the end (only whitespace may follow a complete trace).
    if (w.more()) continue;
    if (w.error() || st != St::Done || !sawEvents) return fallback;
    return FastRead{false, Status::ok()};
  }
}

}  // namespace

FastRead readChromeJsonFast(std::string_view text, const std::function<Status(const RawEvent&)>& onEvent,
                            ReadResult& result) {
  Window w(text);
  return readFast(w, onEvent, result);
}

FastRead readChromeJsonFast(const ReadBytes& read, const std::function<Status(const RawEvent&)>& onEvent,
                            ReadResult& result, size_t window) {
  Window w(read, window ? window : 1);
  return readFast(w, onEvent, result);
}

}  // namespace trainscope::core::chrome
