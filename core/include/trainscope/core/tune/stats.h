// The tuner's decision rule (docs/TUNING.md "Decision"): is a candidate's step time better than
// the baseline's beyond the measured noise? Two samples of step times (ms), the difference of
// their means (baseline - candidate: positive when the candidate is faster) and its confidence
// interval by Welch's t (unequal variances, Welch-Satterthwaite degrees of freedom). A candidate
// is better only when the whole interval lies above the minimum practical effect (0: above
// zero); worse when it lies wholly below zero; otherwise the difference is inside the noise.
//
// Steps are taken as independent samples. On a shared machine they are not quite (a load
// burst slows several steps in a row), which is why the tuner interleaves the baseline's
// measurements with the candidate's (baseline, candidate, baseline, ...) and pools them: a
// drift then moves both samples alike instead of deciding the comparison.
#pragma once

#include <string>
#include <vector>

namespace trainscope::core {

// The p-quantile (0 < p < 1) of Student's t distribution with df > 0 degrees of freedom (df may
// be fractional, as Welch's are). NaN outside the domain.
double studentTQuantile(double p, double df);

// The regularized incomplete beta function I_x(a, b) (a, b > 0, 0 <= x <= 1).
double incompleteBeta(double x, double a, double b);

struct SampleSummary {
  int n = 0;
  double mean = -1, sd = -1, se = -1;  // sd: sample standard deviation (n - 1); -1 when n < 2
};
SampleSummary summarize(const std::vector<double>& v);

struct Difference {
  std::string method = "welch-t";  // or "z" when a fixed critical value was asked for
  double confidence = 0.95;
  SampleSummary baseline, candidate;
  double diffMs = 0;      // baseline mean - candidate mean (> 0: the candidate is faster)
  double seMs = -1;       // sqrt(se_b^2 + se_c^2)
  double df = -1;         // Welch-Satterthwaite degrees of freedom (-1 when undefined)
  double critical = -1;   // t (or z) critical value of the two-sided interval
  double ciLowMs = 0, ciHighMs = 0;  // the interval of diffMs
  double halfWidthMs = -1;           // critical x se: the measured noise at this confidence
  double minEffectMs = 0;            // the practical effect the interval must clear
  bool valid = false;                // both samples have >= 2 values
  bool better = false;               // ciLow > minEffect: the candidate is faster beyond the noise
  bool worse = false;                // ciHigh < 0: the candidate is slower beyond the noise
  // One line: "0.412 ms faster (95% CI 0.210..0.614 ms, Welch's t, df 9.8, 12 vs 12 steps)".
  std::string text() const;
};

// The comparison of a candidate's step times with the baseline's. confidence in (0, 1);
// minEffectMs >= 0; a fixedCritical > 0 replaces Student's t quantile (method "z").
Difference compareToBaseline(const std::vector<double>& baseline, const std::vector<double>& candidate,
                             double confidence = 0.95, double minEffectMs = 0, double fixedCritical = 0);

}  // namespace trainscope::core
