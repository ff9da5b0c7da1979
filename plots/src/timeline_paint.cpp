// TimelineWidget painting: lanes, level-of-detail items, counters, ruler, step and knob marks,
// selection, flow arrows, legend. Every pass asks the model for what is visible; nothing scans.
#include <QPainter>
#include <QPainterPath>
#include <QPicture>
#include <QScrollBar>
#include <QTimer>
#include <algorithm>
#include <chrono>
#include <cmath>

#include "timeline_layout.h"
#include "trainscope/plots/timeline_details.h"
#include "trainscope/plots/timeline_widget.h"

namespace trainscope::plots {
namespace {

const QColor kBackground(0xfa, 0xfa, 0xfb);
const QColor kAltRow(0xf2, 0xf3, 0xf5);
const QColor kHeaderBg(0xe4, 0xe7, 0xec);
const QColor kLabelBg(0xee, 0xf0, 0xf3);
const QColor kGrid(0xdd, 0xdf, 0xe3);
const QColor kKnob(0xe0, 0x60, 0x00);

QString q(std::string_view s) {
  return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size()));
}

// A bar's label: no more of the name than the bar can show (a glyph is at least a pixel, a
// UTF-8 character at most 4 bytes). A 300 MB name was converted and elided on every frame.
QString qLabel(std::string_view s, double widthPx) {
  const size_t cap = static_cast<size_t>(std::max(16.0, 4 * widthPx + 16));
  return q(s.size() > cap ? s.substr(0, cap) : s);
}

}  // namespace

void TimelineWidget::paintEvent(QPaintEvent*) {
  QPainter out(this);
  if (!data_) {
    out.fillRect(rect(), kBackground);
    out.setPen(Qt::darkGray);
    out.drawText(rect(), Qt::AlignCenter,
                 placeholder_.isEmpty() ? tr("Open a session (Ctrl+O) or attach to a running job (Ctrl+J)")
                                        : placeholder_);
    return;
  }
  // Two passes, so that no lock is held while the raster engine paints (it may wait on Qt's
  // thread pool): under the shared lock, render() only records the frame's drawing into a
  // QPicture -- a display list; QPicture's engine serialises commands and never touches a pool or
  // a pixel -- and the lock is released before the picture is played onto the frame. The engine
  // holds the lock for one ingest round at most and only takes it when it is free, so when it
  // has it now the last frame stays and the next one follows in a few ms.
  QPicture list;
  {
    // A round of the engine waiting for the lock goes first: the painter keeps the last frame
    // rather than take the lock again in front of it.
    std::shared_lock lock(data_->mutex, std::defer_lock);
    if (data_->ownerWaiting.load() || !lock.try_lock()) {
      if (!frame_.isNull()) out.drawPixmap(0, 0, frame_);
      QTimer::singleShot(8, this, qOverload<>(&QWidget::update));
      return;
    }
    const bool streamsChanged = updateEmptyStreams();
    if (streamsChanged || data_->layoutGeneration.load() != seenLayout_) relayout();
    QPainter rec(&list);
    rec.setFont(font());
    render(rec);
  }
  const qreal dpr = devicePixelRatioF();
  if (frame_.size() != size() * dpr) {
    frame_ = QPixmap(size() * dpr);
    frame_.setDevicePixelRatio(dpr);
  }
  {
    QPainter p(&frame_);
    p.drawPicture(0, 0, list);
  }
  out.drawPixmap(0, 0, frame_);
}

void TimelineWidget::render(QPainter& p) {
  lastItems_ = 0;
  lastPrepMs_ = 0;
  p.fillRect(rect(), kBackground);
  QFont f = font();
  f.setPointSizeF(8.5);
  p.setFont(f);
  const int top = rowsTop();
  const int bottom = height() - layout::kLegendHeight;
  // Scrolled lanes, then the pinned ones over them.
  p.save();
  p.setClipRect(QRect(0, top, width(), bottom - top));
  const int scroll = vbar_->value();
  auto first = std::partition_point(lanes_.begin(), lanes_.end(),
                                    [scroll](const Lane& l) { return l.y + l.h <= scroll; });
  for (auto it = first; it != lanes_.end() && top + it->y - scroll < bottom; ++it)
    paintLane(p, *it, top + it->y - scroll);
  paintMarks(p, top, bottom);
  p.restore();
  paintOverlays(p, top, bottom);
  if (!pinned_.empty()) {
    p.fillRect(QRect(0, layout::kRulerHeight, width(), top - layout::kRulerHeight), kBackground);
    for (const Lane& l : pinned_) paintLane(p, l, l.y);
    p.fillRect(QRect(0, top - 3, width(), 3), QColor(0x9a, 0xa4, 0xb5));
  }
  paintSelection(p);
  paintHighlights(p);
  paintArrows(p);
  paintLabels(p, top);
  paintRuler(p);
  paintLegend(p);
}

void TimelineWidget::paintLane(QPainter& p, const Lane& lane, int y) {
  const int x0 = dataLeft();
  if (lane.header) {
    p.fillRect(QRect(x0, y, width() - x0, lane.h), kHeaderBg);
    return;
  }
  const TimelineRow& row = data_->model.row(lane.row);
  if (lane.thin) {  // an empty GPU stream: a hairline, so that the rows with work stay together
    p.fillRect(QRect(x0, y, width() - x0, lane.h), kAltRow);
    p.fillRect(QRect(x0, y + lane.h / 2, width() - x0, 1), kGrid);
    return;
  }
  p.fillRect(QRect(x0, y, width() - x0, lane.h), (lane.row % 2) ? kAltRow : kBackground);
  if (row.kind == core::TrackKind::Counter)
    paintCounterRow(p, lane, y);
  else
    paintRowItems(p, lane, y);
}

QColor TimelineWidget::itemColor(const TimelineRow& row, uint32_t i) const {
  const core::TrackEvents& ev = data_->store.rawEvents(row.track);
  const core::EventKind k = ev.kind(i);
  switch (mode_) {
    case ColorMode::Kind:
      return kindColor(k);
    case ColorMode::MicroBatch: {
      const core::Attr* a = ev.findAttr(i, core::AttrKey::MicroBatch);
      return a ? microBatchColor(a->asInt()) : neutralColor().lighter(110);
    }
    case ColorMode::Phase: {
      if (k == core::EventKind::MicroBatchF) return phaseColor("F");
      if (k == core::EventKind::MicroBatchB) return phaseColor("B");
      if (k == core::EventKind::MicroBatchW) return phaseColor("W");
      if (k == core::EventKind::Phase) return phaseColor(data_->store.str(ev.name(i)));
      const auto ph = data_->model.phaseAt(row.rank, ev.start(i) + (ev.end(i) - ev.start(i)) / 2);
      return ph ? phaseColor(data_->store.str(*ph)) : neutralColor();
    }
  }
  return neutralColor();
}

void TimelineWidget::paintRowItems(QPainter& p, const Lane& lane, int y) {
  const TimelineModel& m = data_->model;
  const TimelineRow& row = m.row(lane.row);
  const core::TrackEvents& ev = data_->store.rawEvents(row.track);
  const double w = dataWidth();
  const double nsPx = zoom_.nsPerPixel(w);
  const int x0 = dataLeft();
  static thread_local std::vector<DrawItem> items;
  const auto t0 = std::chrono::steady_clock::now();
  m.drawItems(lane.row, zoom_.start(), zoom_.end(), static_cast<int64_t>(nsPx * layout::kMergePx), items);
  lastPrepMs_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  lastItems_ += items.size();
  const QFontMetrics fm = p.fontMetrics();
  const int h = lane.h - 2;
  for (const DrawItem& it : items) {
    const double xa = std::max(-2.0, zoom_.timeToX(it.start, w));
    const double xb = std::min(w + 2, zoom_.timeToX(it.end, w));
    const QRectF r(x0 + xa, y + 1, std::max(1.0, xb - xa), h);
    const uint32_t idx = row.events[it.first];
    QColor c = itemColor(row, idx);
    if (it.count == 1) {
      p.fillRect(r, c);
      if (r.width() >= 5)
        p.fillRect(QRectF(r.right() - 1, r.top(), 1, r.height()), c.darker(125));  // edge between neighbours
      if (r.width() > 28) {
        p.setPen(textOn(c));
        const QString name = qLabel(data_->store.str(ev.name(idx)), r.width());
        p.drawText(r.adjusted(3, 0, -2, 0), Qt::AlignVCenter | Qt::AlignLeft,
                   fm.elidedText(name, Qt::ElideRight, static_cast<int>(r.width()) - 5));
      }
      if (selected_.track == row.track && selected_.index == idx) {
        p.setPen(QPen(QColor(0x10, 0x10, 0x10), 2));
        p.drawRect(r.adjusted(0.5, 0.5, -0.5, -0.5));
      }
    } else {
      // A merged run: the colour of its first event, hatched, with the count when it fits.
      c = c.darker(112);
      p.fillRect(r, c);
      if (r.width() >= 6) p.fillRect(r, QBrush(c.darker(135), Qt::BDiagPattern));
      if (r.width() > 70) {
        p.setPen(textOn(c));
        p.drawText(
            r.adjusted(3, 0, -2, 0), Qt::AlignVCenter | Qt::AlignLeft,
            fm.elidedText(tr("%1 events").arg(it.count), Qt::ElideRight, static_cast<int>(r.width()) - 5));
      }
    }
  }
}

void TimelineWidget::paintCounterRow(QPainter& p, const Lane& lane, int y) {
  const TimelineModel& m = data_->model;
  const TimelineRow& row = m.row(lane.row);
  const core::TrackEvents& ev = data_->store.rawEvents(row.track);
  const double w = dataWidth();
  const int x0 = dataLeft();
  static thread_local std::vector<DrawItem> items;
  // One sample per pixel column: the level of detail of a line is its pixel grid.
  m.drawItems(lane.row, zoom_.start(), zoom_.end(), static_cast<int64_t>(zoom_.nsPerPixel(w)), items);
  lastItems_ += items.size();
  auto value = [&](uint32_t pos) {
    const core::Attr* a = ev.findAttr(row.events[pos], core::AttrKey::Value);
    return a ? a->asDouble() : 0.0;
  };
  // Also the sample just before the window, so the line enters from the left.
  auto [a, b] = m.visibleRange(lane.row, zoom_.start(), zoom_.end());
  (void)b;
  std::vector<std::pair<double, double>> pts;  // (x, value)
  if (a > 0) pts.emplace_back(-1.0, value(static_cast<uint32_t>(a - 1)));
  double lo = INFINITY, hi = -INFINITY;
  for (const DrawItem& it : items) {
    const uint32_t last = it.first + it.count - 1;
    for (uint32_t pos : {it.first, last}) {
      pts.emplace_back(zoom_.timeToX(ev.start(row.events[pos]), w), value(pos));
      if (it.count == 1) break;
    }
  }
  if (pts.empty()) return;
  for (const auto& pt : pts) lo = std::min(lo, pt.second), hi = std::max(hi, pt.second);
  if (hi - lo < 1e-12) hi = lo + 1;
  const double top = y + 4, hgt = lane.h - 8;
  auto ypos = [&](double v) { return top + hgt - (v - lo) / (hi - lo) * hgt; };
  QPainterPath path, fill;
  path.moveTo(x0 + std::max(0.0, pts.front().first), ypos(pts.front().second));
  for (size_t i = 1; i < pts.size(); ++i) {
    path.lineTo(x0 + pts[i].first,
                ypos(pts[i - 1].second));  // a counter holds its value until the next sample
    path.lineTo(x0 + pts[i].first, ypos(pts[i].second));
  }
  path.lineTo(x0 + w, ypos(pts.back().second));
  fill = path;
  fill.lineTo(x0 + w, top + hgt);
  fill.lineTo(x0 + std::max(0.0, pts.front().first), top + hgt);
  fill.closeSubpath();
  p.save();
  p.setRenderHint(QPainter::Antialiasing, true);
  p.setClipRect(QRect(x0, y, static_cast<int>(w), lane.h), Qt::IntersectClip);
  QColor c = kindColor(core::EventKind::Counter);
  p.fillPath(fill, QColor(c.red(), c.green(), c.blue(), 50));
  p.setPen(QPen(c, 1.4));
  p.drawPath(path);
  p.setPen(QColor(0x55, 0x55, 0x55));
  p.drawText(QRectF(x0 + 4, y, w - 8, lane.h), Qt::AlignRight | Qt::AlignTop,
             QStringLiteral("max %1").arg(hi, 0, 'g', 4));
  p.drawText(QRectF(x0 + 4, y, w - 8, lane.h), Qt::AlignRight | Qt::AlignBottom,
             QStringLiteral("min %1").arg(lo, 0, 'g', 4));
  p.restore();
}

void TimelineWidget::paintMarks(QPainter& p, int top, int bottom) {
  // Step boundaries of each rank across its lanes, and knob changes across everything.
  const double w = dataWidth();
  const int x0 = dataLeft();
  const TimelineModel& m = data_->model;
  std::map<core::RankId, std::pair<int, int>> span;  // rank -> widget y range of its lanes
  const int scroll = vbar_->value();
  for (const Lane& l : lanes_) {
    const int y = top + l.y - scroll;
    auto [it, fresh] = span.try_emplace(l.rank, y, y + l.h);
    if (!fresh) it->second.second = y + l.h;
  }
  const auto& steps = m.steps();
  auto it = std::partition_point(steps.begin(), steps.end(),
                                 [&](const TimelineMark& s) { return s.end < zoom_.start(); });
  auto end =
      std::partition_point(it, steps.end(), [&](const TimelineMark& s) { return s.start <= zoom_.end(); });
  const auto visibleSteps = static_cast<double>(end - it) / std::max<size_t>(1, span.size());
  if (visibleSteps < w / 24) {  // only when boundaries are at least ~24 px apart
    p.setPen(QPen(QColor(0x70, 0x78, 0x88, 150), 1, Qt::DashLine));
    for (; it != end; ++it) {
      auto s = span.find(it->rank);
      if (s == span.end()) continue;
      for (int64_t t : {it->start, it->end}) {
        const double x = x0 + zoom_.timeToX(t, w);
        if (x < x0 || x > x0 + w) continue;
        p.drawLine(QPointF(x, std::max(top, s->second.first)),
                   QPointF(x, std::min(bottom, s->second.second)));
      }
    }
  }
  p.setPen(QPen(kKnob, 1.5));
  for (const TimelineMark& k : m.knobChanges()) {
    if (k.start < zoom_.start() || k.start > zoom_.end()) continue;
    const double x = x0 + zoom_.timeToX(k.start, w);
    auto s = span.find(k.rank);
    if (s == span.end()) continue;
    p.drawLine(QPointF(x, std::max(top, s->second.first)), QPointF(x, std::min(bottom, s->second.second)));
  }
}

void TimelineWidget::paintRuler(QPainter& p) {
  const double w = dataWidth();
  const int x0 = dataLeft();
  p.fillRect(QRect(0, 0, width(), layout::kRulerHeight), QColor(0xff, 0xff, 0xff));
  p.fillRect(QRect(0, layout::kAxisHeight, width(), layout::kMarksHeight), QColor(0xf4, 0xf5, 0xf7));
  p.setPen(kGrid);
  p.drawLine(0, layout::kRulerHeight - 1, width(), layout::kRulerHeight - 1);
  p.drawLine(0, layout::kAxisHeight, width(), layout::kAxisHeight);
  const TimelineModel& m = data_->model;
  const double nsPx = zoom_.nsPerPixel(w);
  const int64_t tick = tickSpacingNs(nsPx, 110);
  // The zoom's (clamped) trace start: window and origin stay within +-ZoomControl::kLimitNs, so
  // these differences cannot overflow, and the loop draws at most width / tick (~ width / 110 px)
  // labels even for a trace from INT64_MIN to INT64_MAX.
  const int64_t origin = zoom_.traceStart();
  int64_t t = origin + ((zoom_.start() - origin) / tick) * tick;
  if (t < zoom_.start()) t += tick;
  p.setPen(QColor(0x40, 0x40, 0x40));
  for (int n = 0; t <= zoom_.end() && n < 1000; t += tick, ++n) {
    const double x = x0 + zoom_.timeToX(t, w);
    p.setPen(kGrid);
    p.drawLine(QPointF(x, 14), QPointF(x, layout::kAxisHeight));
    p.setPen(QColor(0x40, 0x40, 0x40));
    const QString label =
        t == origin ? QStringLiteral("0") : QStringLiteral("+") + layout::formatDuration(t - origin, tick);
    if (x + 3 + p.fontMetrics().horizontalAdvance(label) < x0 + w) p.drawText(QPointF(x + 3, 13), label);
  }
  // Live retention: the time before the cutoff left memory -- shaded on the axis, with a word.
  if (const int64_t cut = data_->evictedBeforeNs.load(); data_->evictedEvents.load() > 0 && cut > zoom_.start()) {
    const double xc = x0 + std::min(w, zoom_.timeToX(std::min(cut, zoom_.end()), w));
    p.fillRect(QRectF(x0, 0, xc - x0, layout::kAxisHeight), QColor(0xe2, 0xe4, 0xe8));
    p.setPen(QColor(0x50, 0x50, 0x50));
    const QString text = tr("older events left memory");
    if (xc - x0 > p.fontMetrics().horizontalAdvance(text) + 8)
      p.drawText(QRectF(x0, 0, xc - x0 - 4, layout::kAxisHeight), Qt::AlignVCenter | Qt::AlignRight, text);
  }
  // Left corner: the visible width.
  p.fillRect(QRect(0, 0, x0, layout::kRulerHeight), QColor(0xff, 0xff, 0xff));
  p.setPen(QColor(0x20, 0x20, 0x20));
  p.drawText(
      QRect(6, 0, x0 - 8, layout::kAxisHeight), Qt::AlignVCenter | Qt::AlignLeft,
      tr("view %1").arg(layout::formatDuration(zoom_.width())) + (follow_ ? tr(" · following") : QString()) +
          (data_->evictedEvents.load() > 0 ? tr(" · window") : QString()));
  p.setPen(QColor(0x60, 0x60, 0x60));
  p.drawText(QRect(6, layout::kAxisHeight, x0 - 8, layout::kMarksHeight), Qt::AlignVCenter | Qt::AlignLeft,
             tr("steps · knob changes"));
  // Step numbers of the first rank, where there is room.
  const auto& steps = m.steps();
  if (!steps.empty()) {
    const core::RankId r0 = steps.front().rank;
    double lastX = -1e9;
    auto it = std::partition_point(steps.begin(), steps.end(),
                                   [&](const TimelineMark& s) { return s.end < zoom_.start(); });
    p.save();
    p.setClipRect(QRect(x0, layout::kAxisHeight, static_cast<int>(w), layout::kMarksHeight));
    for (; it != steps.end() && it->start <= zoom_.end(); ++it) {
      if (it->rank != r0) continue;
      const double x = x0 + zoom_.timeToX(it->start, w);
      if (x - lastX < 46) continue;
      lastX = x;
      p.setPen(QColor(0x70, 0x78, 0x88));
      p.drawLine(QPointF(x, layout::kAxisHeight + 2), QPointF(x, layout::kRulerHeight - 2));
      p.setPen(QColor(0x30, 0x30, 0x30));
      p.drawText(QPointF(x + 3, layout::kRulerHeight - 6),
                 it->step >= 0 ? tr("step %1").arg(it->step) : tr("step"));
    }
    double lastKnobX = -1e9;
    for (const TimelineMark& k : m.knobChanges()) {
      if (k.start < zoom_.start() || k.start > zoom_.end()) continue;
      const double x = x0 + zoom_.timeToX(k.start, w);
      if (x - lastKnobX < 120) continue;
      lastKnobX = x;
      const QString label = q(data_->store.str(k.name)) + "=" + q(data_->store.str(k.value));
      const QRectF box(x, layout::kAxisHeight + 2, p.fontMetrics().horizontalAdvance(label) + 10,
                       layout::kMarksHeight - 4);
      p.setRenderHint(QPainter::Antialiasing, true);
      p.setBrush(kKnob);
      p.setPen(Qt::NoPen);
      p.drawRoundedRect(box, 3, 3);
      p.setPen(Qt::white);
      p.drawText(box.adjusted(5, 0, 0, 0), Qt::AlignVCenter | Qt::AlignLeft, label);
      p.setRenderHint(QPainter::Antialiasing, false);
    }
    p.restore();
  }
}

void TimelineWidget::paintSelection(QPainter& p) {
  const double w = dataWidth();
  const int x0 = dataLeft();
  if (drag_ == Drag::Box) {
    const QRect r = QRect(dragStart_, dragNow_).normalized();
    p.fillRect(r, QColor(0x30, 0x70, 0xd0, 40));
    p.setPen(QPen(QColor(0x30, 0x70, 0xd0), 1));
    p.drawRect(r);
    const int64_t a = zoom_.xToTime(r.left() - x0, w), b = zoom_.xToTime(r.right() - x0, w);
    p.drawText(r.topLeft() + QPoint(4, 14), layout::formatDuration(b - a));
    return;
  }
  if (!boxT0_ || !boxT1_) return;
  const double xa = x0 + zoom_.timeToX(*boxT0_, w), xb = x0 + zoom_.timeToX(*boxT1_, w);
  p.fillRect(QRectF(xa, layout::kRulerHeight, xb - xa, height()), QColor(0x30, 0x70, 0xd0, 28));
  p.setPen(QPen(QColor(0x30, 0x70, 0xd0), 1));
  p.drawLine(QPointF(xa, layout::kAxisHeight), QPointF(xa, height()));
  p.drawLine(QPointF(xb, layout::kAxisHeight), QPointF(xb, height()));
  if (boxStats_) {
    // Summary box: duration, count and the biggest kinds.
    QStringList lines;
    lines << tr("Δ %1 · %2 events").arg(layout::formatDuration(boxStats_->durationNs)).arg(boxStats_->events);
    std::vector<int> kinds;
    for (int k = 0; k < core::kEventKindCount; ++k)
      if (boxStats_->countPerKind[k]) kinds.push_back(k);
    std::sort(kinds.begin(), kinds.end(),
              [&](int a, int b) { return boxStats_->nsPerKind[a] > boxStats_->nsPerKind[b]; });
    for (size_t i = 0; i < kinds.size() && i < 6; ++i)
      lines << QStringLiteral("%1: %2 (%3)")
                   .arg(q(core::eventKindName(static_cast<core::EventKind>(kinds[i]))))
                   .arg(layout::formatDuration(boxStats_->nsPerKind[kinds[i]]))
                   .arg(boxStats_->countPerKind[kinds[i]]);
    const QFontMetrics fm = p.fontMetrics();
    int bw = 0;
    for (const QString& l : lines) bw = std::max(bw, fm.horizontalAdvance(l));
    const QRectF box(std::min(xb + 6, x0 + w - bw - 16), layout::kRulerHeight + 6, bw + 12,
                     lines.size() * fm.height() + 8);
    p.setPen(QColor(0x30, 0x70, 0xd0));
    p.setBrush(QColor(255, 255, 255, 235));
    p.drawRect(box);
    p.setPen(QColor(0x20, 0x20, 0x20));
    for (int i = 0; i < lines.size(); ++i)
      p.drawText(QPointF(box.left() + 6, box.top() + 4 + fm.ascent() + i * fm.height()), lines[i]);
    p.setBrush(Qt::NoBrush);
  }
}

void TimelineWidget::paintArrows(QPainter& p) {
  if (!selected_.valid() || links_.empty()) return;
  const TimelineModel& m = data_->model;
  const double w = dataWidth();
  const int x0 = dataLeft();
  auto anchor = [&](EventRef ref, bool atEnd) -> std::optional<QPointF> {
    auto row = m.rowOf(ref);
    if (!row) return std::nullopt;
    const Lane* lane = nullptr;
    for (const Lane& l : pinned_)
      if (l.row == *row) lane = &l;
    if (!lane)
      for (const Lane& l : lanes_)
        if (!l.header && l.row == *row) lane = &l;
    if (!lane) return std::nullopt;
    const auto& ev = data_->store.rawEvents(ref.track);
    const int64_t t = atEnd ? ev.end(ref.index) : ev.start(ref.index);
    return QPointF(x0 + zoom_.timeToX(t, w), laneY(*lane) + lane->h / 2.0);
  };
  const auto from = anchor(selected_, true);
  if (!from) return;
  p.save();
  p.setClipRect(QRect(x0, layout::kRulerHeight, static_cast<int>(w), height()));
  p.setRenderHint(QPainter::Antialiasing, true);
  for (const auto& l : links_) {
    const auto& sev = data_->store.rawEvents(selected_.track);
    const auto& lev = data_->store.rawEvents(l.ref.track);
    // Flows run from the end of the earlier event to the start of the later one; the ranks of
    // one collective are joined start to start.
    const bool collective = std::string_view(l.why) == "collective";
    const bool forward = lev.start(l.ref.index) >= sev.start(selected_.index);
    const auto a = forward ? anchor(selected_, !collective) : anchor(l.ref, !collective);
    const auto b = forward ? anchor(l.ref, false) : anchor(selected_, false);
    if (!a || !b) continue;
    const QColor c =
        std::string_view(l.why) == "collective" ? QColor(0x8a, 0x3f, 0xb0) : QColor(0x20, 0x20, 0x20);
    QPainterPath path(*a);
    const double dx = std::max(30.0, std::abs(b->x() - a->x()) / 2);
    path.cubicTo(*a + QPointF(dx, 0), *b - QPointF(dx, 0), *b);
    p.setPen(QPen(c, 1.4, std::string_view(l.why) == "collective" ? Qt::DashLine : Qt::SolidLine));
    p.setBrush(Qt::NoBrush);
    p.drawPath(path);
    QPolygonF head;
    head << *b << *b + QPointF(-7, -4) << *b + QPointF(-7, 4);
    p.setBrush(c);
    p.setPen(Qt::NoPen);
    p.drawPolygon(head);
  }
  p.restore();
}

void TimelineWidget::paintLabels(QPainter& p, int top) {
  const int lw = dataLeft();
  const TimelineModel& m = data_->model;
  const QFontMetrics fm = p.fontMetrics();
  auto label = [&](const Lane& l, int y) {
    if (l.header) {
      p.fillRect(QRect(0, y, width(), 1), QColor(0xc8, 0xcd, 0xd5));
      p.fillRect(QRect(0, y + 1, lw, l.h - 1), kHeaderBg);
      const core::RankInfo* info = data_->store.rank(l.rank);
      QString text =
          (rankCollapsed(l.rank) ? QStringLiteral("▸ ") : QStringLiteral("▾ ")) + tr("Rank %1").arg(l.rank);
      if (info) {
        text += QStringLiteral("  ") + q(info->host);
        if (info->device >= 0) text += tr(" · GPU %1").arg(info->device);
      }
      QFont bold = p.font();
      bold.setBold(true);
      p.save();
      p.setFont(bold);
      p.setPen(QColor(0x20, 0x24, 0x30));
      p.drawText(QRect(6, y, width() - 12, l.h), Qt::AlignVCenter | Qt::AlignLeft, text);
      p.restore();
      return;
    }
    const TimelineRow& row = m.row(l.row);
    p.fillRect(QRect(0, y, lw, l.h), l.pinned ? QColor(0xe6, 0xee, 0xfa) : kLabelBg);
    if (l.thin) return;  // an empty GPU stream: no room for a label
    QString text;
    if (row.kind == core::TrackKind::Counter)
      text = q(data_->store.str(row.counter));
    else if (row.level == 0)
      text = q(data_->store.track(row.track).name);
    if (l.pinned)
      text = tr("r%1 ").arg(row.rank) + (text.isEmpty() ? q(data_->store.track(row.track).name) : text);
    p.setPen(row.level == 0 ? QColor(0x20, 0x20, 0x20) : QColor(0x90, 0x90, 0x90));
    const int indent = 16 + std::min<int>(static_cast<int>(row.level), 4) * 8;
    p.drawText(QRect(indent, y, lw - indent - 4, l.h), Qt::AlignVCenter | Qt::AlignLeft,
               fm.elidedText(text, Qt::ElideRight, lw - indent - 6));
    if (l.pinned) p.fillRect(QRect(4, y + 5, 6, l.h - 10), QColor(0x30, 0x70, 0xd0));
  };
  p.save();
  p.setClipRect(QRect(0, top, width(), height() - layout::kLegendHeight - top));
  const int scroll = vbar_->value();
  for (const Lane& l : lanes_) {
    const int y = top + l.y - scroll;
    if (y + l.h < top) continue;
    if (y > height()) break;
    label(l, y);
  }
  p.restore();
  for (const Lane& l : pinned_) label(l, l.y);
  p.setPen(QColor(0xc8, 0xcd, 0xd5));
  p.drawLine(lw - 1, layout::kRulerHeight, lw - 1, height());
}

void TimelineWidget::paintLegend(QPainter& p) {
  // A strip at the bottom: the colours of the current mode.
  const int y = height() - layout::kLegendHeight;
  p.fillRect(QRect(0, y, width(), layout::kLegendHeight), QColor(0xff, 0xff, 0xff));
  p.setPen(kGrid);
  p.drawLine(0, y, width(), y);
  const QFontMetrics fm = p.fontMetrics();
  p.setPen(QColor(0x50, 0x50, 0x50));
  p.drawText(QRect(6, y, dataLeft() - 8, layout::kLegendHeight), Qt::AlignVCenter | Qt::AlignLeft,
             tr("colour by %1").arg(colorModeName(mode_)));
  double x = dataLeft() + 4;
  const double right = paintOverlayLegend(p, y, dataLeft() + dataWidth()) - 8;
  for (const auto& [name, c] : legend(mode_)) {
    const double w = fm.horizontalAdvance(name) + 24;
    if (x + w > right) break;
    p.fillRect(QRectF(x, y + 6, 10, layout::kLegendHeight - 12), c);
    p.setPen(QColor(0x30, 0x30, 0x30));
    p.drawText(QPointF(x + 14, y + (layout::kLegendHeight + fm.ascent() - fm.descent()) / 2.0), name);
    x += w;
  }
}

}  // namespace trainscope::plots
