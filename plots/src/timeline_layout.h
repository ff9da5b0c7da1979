// Geometry of the timeline widget (pixels), shared by its layout and paint code.
#pragma once

#include <QString>
#include <cstdint>

namespace trainscope::plots::layout {

inline constexpr int kLabelWidth = 210;  // track names on the left
inline constexpr int kAxisHeight = 22;   // time axis
inline constexpr int kMarksHeight = 20;  // step numbers and knob-change flags
inline constexpr int kRulerHeight = kAxisHeight + kMarksHeight;
inline constexpr int kLegendHeight = 22;  // colour legend at the bottom
inline constexpr int kHeaderHeight = 22;  // rank header
inline constexpr int kRowHeight = 18;
inline constexpr int kCounterHeight = 34;
inline constexpr int kThinRowHeight = 5;  // a GPU stream with no event in view
inline constexpr double kMergePx = 2.0;  // events narrower than this many pixels are merged

// "1.250 s", "12.5 ms", "350 µs", "80 ns" for a duration, with precision from `resolutionNs`.
QString formatDuration(int64_t ns, int64_t resolutionNs = 0);

}  // namespace trainscope::plots::layout
