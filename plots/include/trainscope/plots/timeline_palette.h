// Colours of the timeline: by event kind, by micro-batch, or by training phase, and the legend
// for each mode. Chosen from Tableau-10-like hues so that neighbours stay distinguishable.
#pragma once

#include <QColor>
#include <QString>
#include <utility>
#include <vector>

#include "trainscope/core/model/events.h"

namespace trainscope::plots {

enum class ColorMode { Kind = 0, MicroBatch = 1, Phase = 2 };

QColor kindColor(core::EventKind k);
// Micro-batch m (>= 0) gets a hue of its own; -1 (none) a neutral grey.
QColor microBatchColor(int64_t m);
// "forward", "backward", "optimizer" (and pipeline F/B/W); anything else neutral.
QColor phaseColor(std::string_view phase);
QColor neutralColor();
// Text colour readable on `fill`.
QColor textOn(const QColor& fill);
std::vector<std::pair<QString, QColor>> legend(ColorMode mode);
QString colorModeName(ColorMode mode);

}  // namespace trainscope::plots
