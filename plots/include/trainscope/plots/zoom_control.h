// ZoomControl: the visible time window of a timeline and the maths of zooming and panning it
// (no Qt). The window always lies inside the trace span widened by a margin, and is never
// narrower than kMinWidthNs, so repeated zooming or panning cannot lose the trace.
#pragma once

#include <cstdint>

namespace trainscope::plots {

class ZoomControl {
 public:
  static constexpr int64_t kMinWidthNs = 100;
  // The trace's extent is clamped to +-kLimitNs (about 127 years around the epoch), so that its
  // width, margins and window differences never overflow int64 -- a crafted trace may hold
  // timestamps near +-9.2e18 ns. Events beyond it are drawn at the edge.
  static constexpr int64_t kLimitNs = 4'000'000'000'000'000'000;

  // The trace's extent. The first call (or one with fit) shows all of it.
  void setTrace(int64_t start, int64_t end, bool fit);
  int64_t traceStart() const { return traceStart_; }
  int64_t traceEnd() const { return traceEnd_; }

  int64_t start() const { return start_; }
  int64_t end() const { return end_; }
  int64_t width() const { return end_ - start_; }
  // Sets the window, clamped (its width kept where possible).
  void setWindow(int64_t start, int64_t end);
  void fit() { setWindow(traceStart_, traceEnd_); }
  // Zooms by factor (> 1 zooms in) keeping time `anchor` at the same place on screen.
  void zoomAt(int64_t anchor, double factor);
  // Moves the window by deltaNs (positive: later).
  void pan(int64_t deltaNs);
  // Moves the window so that its end is the trace's end (live auto-follow), width kept.
  void followEnd();

  // Pixel <-> time for a view widthPx wide.
  double timeToX(int64_t t, double widthPx) const;
  int64_t xToTime(double x, double widthPx) const;
  // Nanoseconds one pixel stands for.
  double nsPerPixel(double widthPx) const;

 private:
  int64_t margin() const;
  int64_t traceStart_ = 0, traceEnd_ = 0;
  int64_t start_ = 0, end_ = 1000;
  bool hasTrace_ = false;
};

// "Nice" tick spacing (1, 2, 5 × 10^k ns) such that ticks are at least minPx apart.
int64_t tickSpacingNs(double nsPerPixel, double minPx);

}  // namespace trainscope::plots
