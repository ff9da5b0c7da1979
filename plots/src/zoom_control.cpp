#include "trainscope/plots/zoom_control.h"

#include <algorithm>
#include <cmath>

namespace trainscope::plots {

void ZoomControl::setTrace(int64_t start, int64_t end, bool fitAll) {
  start = std::clamp(start, -kLimitNs, kLimitNs - kMinWidthNs);
  end = std::clamp(end, -kLimitNs, kLimitNs);
  traceStart_ = start;
  traceEnd_ = std::max(end, start + kMinWidthNs);
  if (fitAll || !hasTrace_) {
    hasTrace_ = true;
    fit();
  } else {
    setWindow(start_, end_);
  }
}

int64_t ZoomControl::margin() const {
  return (traceEnd_ - traceStart_) / 20;
}

void ZoomControl::setWindow(int64_t start, int64_t end) {
  if (end < start) std::swap(start, end);
  const int64_t lo = traceStart_ - margin(), hi = traceEnd_ + margin();
  int64_t w = std::clamp<int64_t>(end - start, kMinWidthNs, hi - lo);
  if (end - start < kMinWidthNs) start -= (kMinWidthNs - (end - start)) / 2;  // keep the centre
  start = std::clamp(start, lo, hi - w);
  start_ = start;
  end_ = start + w;
}

void ZoomControl::zoomAt(int64_t anchor, double factor) {
  if (!(factor > 0)) return;
  // In double, and clamped to the zoomable range before going back to int64: zooming out far
  // from an anchor near one end of a +-kLimitNs trace would otherwise put the new start past
  // INT64_MIN (UBSan found `ns + nw` overflowing in tst_timeline_widget's int64-extremes test).
  const double w = static_cast<double>(width());
  const double frac = w > 0 ? (static_cast<double>(anchor) - static_cast<double>(start_)) / w : 0.5;
  const double lo = static_cast<double>(traceStart_ - margin()), hi = static_cast<double>(traceEnd_ + margin());
  const double nw = std::clamp(w / factor, static_cast<double>(kMinWidthNs), hi - lo);
  const double ns = std::clamp(static_cast<double>(anchor) - frac * nw, lo, hi - nw);
  const auto start = static_cast<int64_t>(std::llround(ns));
  setWindow(start, start + static_cast<int64_t>(std::llround(nw)));
}

void ZoomControl::pan(int64_t deltaNs) {
  setWindow(start_ + deltaNs, end_ + deltaNs);
}

void ZoomControl::followEnd() {
  const int64_t w = width();
  setWindow(traceEnd_ - w, traceEnd_);
}

double ZoomControl::timeToX(int64_t t, double widthPx) const {
  // In double: t may lie anywhere in int64 (beyond the clamped trace), t - start_ would overflow.
  return (static_cast<double>(t) - static_cast<double>(start_)) * widthPx / static_cast<double>(width());
}

int64_t ZoomControl::xToTime(double x, double widthPx) const {
  return start_ + static_cast<int64_t>(std::llround(x * static_cast<double>(width()) / widthPx));
}

double ZoomControl::nsPerPixel(double widthPx) const {
  return static_cast<double>(width()) / widthPx;
}

int64_t tickSpacingNs(double nsPerPixel, double minPx) {
  const double want = std::max(1.0, nsPerPixel * minPx);
  int64_t base = 1;
  while (true) {
    for (int m : {1, 2, 5}) {
      if (static_cast<double>(base * m) >= want) return base * m;
    }
    if (base > INT64_MAX / 100) return base * 10;
    base *= 10;
  }
}

}  // namespace trainscope::plots
