// libFuzzer target for knob values and descriptors (agents/src/knobs.cpp): the text a client
// sends in SetKnob (`trainscope-cli set NAME VALUE`, `set --from`) parsed for a knob the job
// declared, and formatted back as `knobs` lists it.
//
// Input: byte 0 picks the knob type (int, float, bool, enum); then its descriptor as the C API
// takes it (int: min, max, default as int64; float: min, max, default as double; bool: a
// default byte; enum: a default byte and a line of comma-separated choices), checked as
// ts_knob_int/_float/_bool/_enum check it; then values, one per line.
//
// Properties: no crash or undefined behaviour (ASan/UBSan); a value that parses lies within the
// knob's declared range (int: compared as integers) and is formatted as text that parses back
// to the same value; a value that does not parse gets a reason.
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "knobs.h"

using trainscope::agent::KnobRegistry;
using trainscope::core::wire::KnobType;

namespace {

template <typename T>
bool take(std::string_view& in, T& v) {
  if (in.size() < sizeof v) return false;
  std::memcpy(&v, in.data(), sizeof v);
  in.remove_prefix(sizeof v);
  return true;
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  for (;;) {
    const auto p = s.find(sep);
    out.emplace_back(s.substr(0, p));
    if (p == std::string_view::npos) return out;
    s.remove_prefix(p + 1);
  }
}

[[noreturn]] void fail(const char* what, const ts_knob& k, const std::string& value) {
  std::fprintf(stderr, "knob %s (type %d, [%.17g, %.17g]): value '%s': %s\n", k.name.c_str(),
               static_cast<int>(k.type), k.min, k.max, value.c_str(), what);
  __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  uint8_t type = 0;
  if (!take(in, type)) return 0;
  ts_knob k;
  k.name = "fuzz.knob";
  int64_t imin = 0, imax = 0;  // int knobs: the declared range, exactly
  switch (type % 4) {
    case 0: {  // ts_knob_int
      int64_t mn, mx, def;
      if (!take(in, mn) || !take(in, mx) || !take(in, def)) return 0;
      if (mn > mx || def < mn || def > mx) return 0;
      k.type = KnobType::Int;
      k.min = static_cast<double>(mn);
      k.max = static_cast<double>(mx);
      k.defaultBits = std::bit_cast<uint64_t>(def);
      k.intMin = mn;
      k.intMax = mx;
      imin = mn;
      imax = mx;
      break;
    }
    case 1: {  // ts_knob_float
      double mn, mx, def;
      if (!take(in, mn) || !take(in, mx) || !take(in, def)) return 0;
      if (!(mn <= mx) || !(def >= mn) || !(def <= mx)) return 0;
      k.type = KnobType::Float;
      k.min = mn;
      k.max = mx;
      k.defaultBits = std::bit_cast<uint64_t>(def);
      break;
    }
    case 2: {  // ts_knob_bool
      uint8_t def;
      if (!take(in, def)) return 0;
      k.type = KnobType::Bool;
      k.min = 0;
      k.max = 1;
      k.defaultBits = def ? 1 : 0;
      break;
    }
    default: {  // ts_knob_enum
      uint8_t def;
      if (!take(in, def)) return 0;
      const auto nl = in.find('\n');
      k.choices = split(in.substr(0, nl), ',');
      in = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);
      if (def >= k.choices.size()) return 0;
      k.type = KnobType::Enum;
      k.min = 0;
      k.max = static_cast<double>(k.choices.size() - 1);
      k.defaultBits = def;
      break;
    }
  }
  // The default as `knobs` lists it must be accepted by `set`.
  std::vector<std::string> values = split(in, '\n');
  values.push_back(KnobRegistry::format(k, k.defaultBits));
  for (const std::string& v : values) {
    std::string reason;
    const auto bits = KnobRegistry::parse(k, v, reason);
    if (!bits) {
      if (reason.empty()) fail("refused without a reason", k, v);
      continue;
    }
    if (k.type == KnobType::Int) {
      const int64_t x = std::bit_cast<int64_t>(*bits);
      if (x < imin || x > imax) fail("accepted outside the declared range", k, v);
    } else if (k.type == KnobType::Float) {
      const double x = std::bit_cast<double>(*bits);
      if (!std::isfinite(x) || x < k.min || x > k.max) fail("accepted outside the declared range", k, v);
    } else if (k.type == KnobType::Enum && *bits >= k.choices.size()) {
      fail("enum index out of range", k, v);
    }
    const std::string text = KnobRegistry::format(k, *bits);
    std::string reason2;
    const auto again = KnobRegistry::parse(k, text, reason2);
    if (!again) fail(("formatted as '" + text + "', which is refused: " + reason2).c_str(), k, v);
    // Enum choices may repeat: the first of equal names is what `set` finds.
    if (*again != *bits && !(k.type == KnobType::Enum && k.choices[*again] == k.choices[*bits]))
      fail(("formatted as '" + text + "', which parses to another value").c_str(), k, v);
  }
  return 0;
}
