#include "trainscope/core/tune/stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace trainscope::core {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

// The continued fraction of the incomplete beta function (modified Lentz; Numerical Recipes,
// 2nd ed., 6.4 betacf).
double betaContinuedFraction(double x, double a, double b) {
  constexpr int kMaxIter = 300;
  constexpr double kEps = 1e-15, kTiny = 1e-300;
  const double qab = a + b, qap = a + 1, qam = a - 1;
  double c = 1, d = 1 - qab * x / qap;
  if (std::fabs(d) < kTiny) d = kTiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= kMaxIter; ++m) {
    const double m2 = 2.0 * m;
    double aa = m * (b - m) * x / ((qam + m2) * (a + m2));
    d = 1 + aa * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1 + aa / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    h *= d * c;
    aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
    d = 1 + aa * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1 + aa / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1) < kEps) break;
  }
  return h;
}

// P(T <= t) for Student's t with df degrees of freedom.
double studentTCdf(double t, double df) {
  const double x = df / (df + t * t);
  const double tail = 0.5 * incompleteBeta(x, df / 2, 0.5);  // P(T > |t|)
  return t >= 0 ? 1 - tail : tail;
}

std::string fmt(double v, const char* f = "%.3f") {
  char b[48];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

}  // namespace

double incompleteBeta(double x, double a, double b) {
  if (!(a > 0) || !(b > 0) || !(x >= 0) || !(x <= 1)) return kNan;
  if (x == 0 || x == 1) return x;
  const double lbt = std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x);
  const double bt = std::exp(lbt);
  if (x < (a + 1) / (a + b + 2)) return bt * betaContinuedFraction(x, a, b) / a;
  return 1 - bt * betaContinuedFraction(1 - x, b, a) / b;
}

double studentTQuantile(double p, double df) {
  if (!(p > 0) || !(p < 1) || !(df > 0)) return kNan;
  if (p == 0.5) return 0;
  if (p < 0.5) return -studentTQuantile(1 - p, df);
  // Bisection on [0, hi]: the CDF is monotone; hi doubles until it brackets p.
  double lo = 0, hi = 1;
  while (studentTCdf(hi, df) < p && hi < 1e12) hi *= 2;
  for (int i = 0; i < 200 && hi - lo > 1e-12 * hi; ++i) {
    const double mid = (lo + hi) / 2;
    (studentTCdf(mid, df) < p ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

SampleSummary summarize(const std::vector<double>& v) {
  SampleSummary s;
  s.n = static_cast<int>(v.size());
  if (v.empty()) return s;
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  if (v.size() < 2) return s;
  double ss = 0;
  for (double x : v) ss += (x - s.mean) * (x - s.mean);
  s.sd = std::sqrt(ss / static_cast<double>(v.size() - 1));
  s.se = s.sd / std::sqrt(static_cast<double>(v.size()));
  return s;
}

Difference compareToBaseline(const std::vector<double>& baseline, const std::vector<double>& candidate,
                             double confidence, double minEffectMs, double fixedCritical) {
  Difference d;
  d.confidence = confidence;
  d.minEffectMs = std::max(0.0, minEffectMs);
  d.baseline = summarize(baseline);
  d.candidate = summarize(candidate);
  if (d.baseline.n > 0 && d.candidate.n > 0) d.diffMs = d.baseline.mean - d.candidate.mean;
  d.ciLowMs = d.ciHighMs = d.diffMs;
  if (d.baseline.n < 2 || d.candidate.n < 2 || !(confidence > 0) || !(confidence < 1)) return d;
  d.valid = true;
  const double vb = d.baseline.se * d.baseline.se, vc = d.candidate.se * d.candidate.se;
  d.seMs = std::sqrt(vb + vc);
  if (fixedCritical > 0) {
    d.method = "z";
    d.critical = fixedCritical;
  } else if (d.seMs > 0) {
    // Welch-Satterthwaite: (vb + vc)^2 / (vb^2 / (nb - 1) + vc^2 / (nc - 1)).
    d.df = (vb + vc) * (vb + vc) /
           (vb * vb / static_cast<double>(d.baseline.n - 1) + vc * vc / static_cast<double>(d.candidate.n - 1));
    d.critical = studentTQuantile(1 - (1 - confidence) / 2, d.df);
  } else {
    d.critical = 0;  // both samples constant: the difference is exact
  }
  d.halfWidthMs = d.critical * d.seMs;
  d.ciLowMs = d.diffMs - d.halfWidthMs;
  d.ciHighMs = d.diffMs + d.halfWidthMs;
  d.better = d.ciLowMs > d.minEffectMs;
  d.worse = d.ciHighMs < 0;
  return d;
}

std::string Difference::text() const {
  if (!valid)
    return fmt(std::fabs(diffMs)) + " ms " + (diffMs > 0 ? "faster" : "slower") +
           " (no interval: fewer than 2 steps on a side)";
  const std::string conf = fmt(confidence * 100, "%g") + "%";
  std::string s = fmt(std::fabs(diffMs)) + " ms " + (diffMs >= 0 ? "faster" : "slower") + " (" + conf +
                  " CI of the gain " + fmt(ciLowMs) + ".." + fmt(ciHighMs) + " ms, ";
  s += method == "z" ? "z = " + fmt(critical, "%g") : "Welch's t, df " + fmt(df, "%.1f");
  s += ", " + std::to_string(candidate.n) + " vs " + std::to_string(baseline.n) + " steps";
  if (minEffectMs > 0) s += ", minimum effect " + fmt(minEffectMs) + " ms";
  return s + ")";
}

}  // namespace trainscope::core
