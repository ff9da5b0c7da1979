// TimelineWidget: analysis overlays (bubbles, exposed communication, critical path) and the
// highlighted events behind a metric.
#include <QPainter>
#include <QScrollBar>
#include <algorithm>

#include "timeline_layout.h"
#include "trainscope/plots/timeline_widget.h"

namespace trainscope::plots {
namespace {

int flagOf(core::OverlayKind k) {
  switch (k) {
    case core::OverlayKind::Bubble:
      return TimelineWidget::BubbleOverlay;
    case core::OverlayKind::ExposedComm:
      return TimelineWidget::ExposedCommOverlay;
    case core::OverlayKind::CriticalPath:
      return TimelineWidget::CriticalPathOverlay;
  }
  return 0;
}

// Bubbles and exposed communication: a light wash and a hatch (readable over any event colour);
// the critical path: a solid band along the top of the rank.
QColor overlayColor(core::OverlayKind k) {
  switch (k) {
    case core::OverlayKind::Bubble:
      return {0xd0, 0x80, 0x00};
    case core::OverlayKind::ExposedComm:
      return {0xc8, 0x10, 0x28};
    case core::OverlayKind::CriticalPath:
      return {0x70, 0x20, 0xc0};
  }
  return {};
}

void fillOverlay(QPainter& p, const QRectF& r, core::OverlayKind k) {
  const QColor c = overlayColor(k);
  if (k == core::OverlayKind::CriticalPath) {
    p.fillRect(r, c);
    return;
  }
  QColor wash = c;
  wash.setAlpha(k == core::OverlayKind::Bubble ? 40 : 70);
  p.fillRect(r, wash);
  QColor hatch = c;
  hatch.setAlpha(150);
  p.fillRect(r, QBrush(hatch, k == core::OverlayKind::Bubble ? Qt::BDiagPattern : Qt::FDiagPattern));
}

QString kindName(core::OverlayKind k) {
  switch (k) {
    case core::OverlayKind::Bubble:
      return QObject::tr("Pipeline bubble");
    case core::OverlayKind::ExposedComm:
      return QObject::tr("Exposed communication");
    case core::OverlayKind::CriticalPath:
      return QObject::tr("Critical path");
  }
  return {};
}

}  // namespace

void TimelineWidget::setOverlays(std::vector<core::Overlay> overlays) {
  std::sort(overlays.begin(), overlays.end(),
            [](const core::Overlay& a, const core::Overlay& b) { return a.startNs < b.startNs; });
  setSortedOverlays(std::make_shared<const std::vector<core::Overlay>>(std::move(overlays)));
}

void TimelineWidget::setSortedOverlays(std::shared_ptr<const std::vector<core::Overlay>> sorted) {
  overlays_ = sorted ? std::move(sorted) : std::make_shared<const std::vector<core::Overlay>>();
  overlayMaxNs_ = 0;
  for (const core::Overlay& o : *overlays_) overlayMaxNs_ = std::max(overlayMaxNs_, o.endNs - o.startNs);
  update();
}

std::vector<core::Overlay>::const_iterator TimelineWidget::firstOverlayFrom(int64_t from) const {
  const int64_t startFrom = from - overlayMaxNs_;
  return std::partition_point(overlays_->begin(), overlays_->end(),
                              [startFrom](const core::Overlay& o) { return o.startNs < startFrom; });
}

void TimelineWidget::setOverlayMask(int mask) {
  overlayMask_ = mask;
  update();
}

std::map<core::RankId, std::pair<int, int>> TimelineWidget::rankSpans(int top) const {
  std::map<core::RankId, std::pair<int, int>> span;
  const int scroll = vbar_->value();
  for (const Lane& l : lanes_) {
    const int y = top + l.y - scroll + (l.header ? l.h : 0);
    auto [it, fresh] = span.try_emplace(l.rank, y, top + l.y - scroll + l.h);
    if (!fresh) it->second.second = top + l.y - scroll + l.h;
  }
  return span;
}

void TimelineWidget::paintOverlays(QPainter& p, int top, int bottom) {
  if (overlays_->empty() || overlayMask_ == 0) return;
  const double w = dataWidth();
  const int x0 = dataLeft();
  const auto spans = rankSpans(top);
  p.save();
  p.setClipRect(QRect(x0, top, static_cast<int>(w), bottom - top));
  for (auto it = firstOverlayFrom(zoom_.start()); it != overlays_->end(); ++it) {
    const core::Overlay& o = *it;
    if (o.startNs > zoom_.end()) break;
    if (o.endNs < zoom_.start() || !(overlayMask_ & flagOf(o.kind))) continue;
    auto s = spans.find(o.rank);
    if (s == spans.end() || s->second.second <= s->second.first) continue;
    const double xa = x0 + zoom_.timeToX(o.startNs, w);
    const double xb = std::max(xa + 1, x0 + zoom_.timeToX(o.endNs, w));
    if (o.kind == core::OverlayKind::CriticalPath) {  // a band along the top of the rank
      fillOverlay(p, QRectF(xa, s->second.first, xb - xa, 3), o.kind);
      continue;
    }
    if (o.kind == core::OverlayKind::ExposedComm) {  // a band along the bottom: it often lies in a bubble
      const QRectF r(xa, s->second.second - 6, xb - xa, 6);
      fillOverlay(p, r, o.kind);
      p.fillRect(QRectF(xa, r.bottom() - 2, xb - xa, 2), overlayColor(o.kind));
      continue;
    }
    const QRectF r(xa, s->second.first, xb - xa, s->second.second - s->second.first);
    fillOverlay(p, r, o.kind);
    p.setPen(QPen(overlayColor(o.kind), 1));
    p.drawLine(r.topLeft(), r.topRight());
  }
  p.restore();
}

void TimelineWidget::paintHighlights(QPainter& p) {
  if (highlights_.empty()) return;
  const double w = dataWidth();
  const int x0 = dataLeft();
  p.save();
  p.setClipRect(QRect(x0, rowsTop(), static_cast<int>(w), height() - layout::kLegendHeight - rowsTop()));
  p.setBrush(Qt::NoBrush);
  p.setPen(QPen(QColor(0x00, 0x90, 0xff), 2));
  for (const Highlight& h : highlights_) {
    if (!h.row || h.end < zoom_.start() || h.start > zoom_.end()) continue;
    for (const Lane& l : lanes_) {
      if (l.header || l.row != *h.row) continue;
      const double xa = x0 + zoom_.timeToX(h.start, w);
      const double xb = std::max(xa + 2, x0 + zoom_.timeToX(h.end, w));
      p.drawRect(QRectF(xa, laneY(l) + 1, xb - xa, l.h - 2));
    }
  }
  p.restore();
}

double TimelineWidget::paintOverlayLegend(QPainter& p, int y, double right) {
  // Right-aligned after the colours: the overlay kinds present and shown.
  int present = 0;
  for (auto it = firstOverlayFrom(zoom_.start()); it != overlays_->end() && it->startNs <= zoom_.end(); ++it)
    present |= flagOf(it->kind);
  present &= overlayMask_;
  const QFontMetrics fm = p.fontMetrics();
  double x = right;
  for (auto k :
       {core::OverlayKind::CriticalPath, core::OverlayKind::ExposedComm, core::OverlayKind::Bubble}) {
    if (!(present & flagOf(k))) continue;
    const QString name = kindName(k).toLower();
    x -= fm.horizontalAdvance(name) + 30;
    fillOverlay(p, QRectF(x, y + 5, 16, layout::kLegendHeight - 10), k);
    p.setPen(QColor(0x30, 0x30, 0x30));
    p.drawText(QPointF(x + 20, y + (layout::kLegendHeight + fm.ascent() - fm.descent()) / 2.0), name);
  }
  return x;
}

QString TimelineWidget::overlayAt(QPoint pos) const {
  if (overlays_->empty() || overlayMask_ == 0 || pos.x() < dataLeft()) return {};
  const Lane* lane = laneAt(pos.y());
  if (!lane) return {};
  const int64_t t = zoom_.xToTime(pos.x() - dataLeft(), dataWidth());
  for (auto it = firstOverlayFrom(t); it != overlays_->end(); ++it) {
    const core::Overlay& o = *it;
    if (o.startNs > t) break;
    if (o.endNs < t || o.rank != lane->rank || !(overlayMask_ & flagOf(o.kind))) continue;
    QString text = QStringLiteral("<b>%1</b> · rank %2").arg(kindName(o.kind)).arg(o.rank);
    if (o.stage >= 0) text += tr(" · stage %1").arg(o.stage);
    text += tr(" · step %1<br>%2").arg(o.step).arg(layout::formatDuration(o.endNs - o.startNs));
    if (!o.label.empty()) text += QStringLiteral("<br>") + QString::fromStdString(o.label).toHtmlEscaped();
    return text;
  }
  return {};
}

void TimelineWidget::highlightEvents(const std::vector<EventRef>& refs) {
  highlights_.clear();
  if (!data_) return;
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  {
    std::shared_lock lock(data_->mutex);
    for (const EventRef& r : refs) {
      if (!r.valid() || r.track >= data_->store.trackCount()) continue;
      const core::TrackEvents& ev = data_->store.rawEvents(r.track);
      if (r.index >= ev.size()) continue;
      Highlight h{r.track, ev.start(r.index), ev.end(r.index), data_->model.rowOf(r)};
      lo = std::min(lo, h.start);
      hi = std::max(hi, h.end);
      highlights_.push_back(h);
    }
  }
  if (highlights_.empty()) {
    update();
    return;
  }
  selectEvent(refs.front(), true);
  const int64_t pad = std::max<int64_t>((hi - lo) / 20, 1000);
  zoom_.setWindow(lo - pad, hi + pad);
  update();
  emit viewChanged();
}

}  // namespace trainscope::plots
