// Text about events for tooltips and the details pane (HTML; links are "event:<track>:<index>").
// Callers hold the data's lock (shared).
#pragma once

#include <QString>

#include "trainscope/plots/timeline_data.h"

namespace trainscope::plots {

// Name, kind, times, duration, track and rank; `merged` > 1 says how many events the drawn item
// under the cursor stands for.
QString eventTooltipHtml(const TimelineData& data, EventRef ev, uint32_t merged);
// Everything about one event: all attributes and the linked events (as links).
QString eventDetailsHtml(const TimelineData& data, EventRef ev);
// Box selection: duration, event count and per-kind totals.
QString selectionHtml(const SelectionStats& st);
// Parses "event:<track>:<index>".
EventRef parseEventLink(const QString& link);

}  // namespace trainscope::plots
