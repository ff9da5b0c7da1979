#include "interop/chrome/format.h"

#include <cctype>
#include <limits>

namespace trainscope::core::chrome {

namespace {
__extension__ typedef __int128 I128;  // GCC/Clang builtin; __extension__ keeps -Wpedantic quiet
}  // namespace

std::optional<int64_t> microsTextToNs(std::string_view t) {
  // Decimal digits into a 128-bit mantissa; 30 significant digits are far more than int64
  // nanoseconds need (19), so later digits only move the decimal point.
  constexpr int kMaxDigits = 30;
  size_t i = 0;
  const bool negative = i < t.size() && t[i] == '-';
  if (negative || (i < t.size() && t[i] == '+')) ++i;
  I128 mantissa = 0;
  int digits = 0;     // significant digits kept in mantissa
  int64_t exp10 = 0;  // value = mantissa * 10^exp10 microseconds
  bool any = false;
  for (; i < t.size() && std::isdigit(static_cast<unsigned char>(t[i])); ++i) {
    any = true;
    if (digits < kMaxDigits) {
      mantissa = mantissa * 10 + (t[i] - '0');
      if (mantissa != 0) ++digits;
    } else {
      ++exp10;  // an integer digit we cannot keep still scales the value
    }
  }
  if (i < t.size() && t[i] == '.') {
    ++i;
    for (; i < t.size() && std::isdigit(static_cast<unsigned char>(t[i])); ++i) {
      any = true;
      if (digits < kMaxDigits) {
        mantissa = mantissa * 10 + (t[i] - '0');
        if (mantissa != 0) ++digits;
        --exp10;
      }
    }
  }
  if (!any) return std::nullopt;
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    const bool expNegative = i < t.size() && t[i] == '-';
    if (i < t.size() && (t[i] == '-' || t[i] == '+')) ++i;
    int64_t e = 0;
    bool expDigits = false;
    for (; i < t.size() && std::isdigit(static_cast<unsigned char>(t[i])); ++i) {
      expDigits = true;
      if (e < 100000) e = e * 10 + (t[i] - '0');
    }
    if (!expDigits) return std::nullopt;
    exp10 += expNegative ? -e : e;
  }
  if (i != t.size()) return std::nullopt;

  int64_t shift = exp10 + 3;  // microseconds -> nanoseconds
  if (mantissa == 0) return 0;
  const I128 limit = negative ? -static_cast<I128>(std::numeric_limits<int64_t>::min())
                              : static_cast<I128>(std::numeric_limits<int64_t>::max());
  if (shift > 0) {
    for (; shift > 0; --shift) {
      if (mantissa > limit) return std::nullopt;
      mantissa *= 10;
    }
  } else if (shift < 0) {
    if (shift < -kMaxDigits - 1) return 0;
    I128 div = 1;
    for (; shift < 0; ++shift) div *= 10;
    const I128 q = mantissa / div, r = mantissa % div;
    mantissa = q + (2 * r >= div ? 1 : 0);  // half away from zero (sign applied below)
  }
  if (mantissa > limit) return std::nullopt;
  return static_cast<int64_t>(negative ? -mantissa : mantissa);
}

}  // namespace trainscope::core::chrome
