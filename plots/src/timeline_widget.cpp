// TimelineWidget: layout of lanes, and everything the user does with mouse and keyboard.
// Painting is in timeline_paint.cpp.
#include "trainscope/plots/timeline_widget.h"

#include <QContextMenuEvent>
#include <QHelpEvent>
#include <QKeyEvent>
#include <QMenu>
#include <QMouseEvent>
#include <QPainter>
#include <QScrollBar>
#include <QTimer>
#include <QToolTip>
#include <QWheelEvent>
#include <algorithm>
#include <cmath>

#include "timeline_layout.h"
#include "trainscope/plots/timeline_details.h"

namespace trainscope::plots {

TimelineWidget::TimelineWidget(QWidget* parent)
    : QWidget(parent), vbar_(new QScrollBar(Qt::Vertical, this)), tick_(new QTimer(this)) {
  setObjectName("timeline");
  setFocusPolicy(Qt::StrongFocus);
  setMouseTracking(true);
  setMinimumSize(400, 200);
  setAttribute(Qt::WA_OpaquePaintEvent);
  connect(vbar_, &QScrollBar::valueChanged, this, [this] { update(); });
  connect(tick_, &QTimer::timeout, this, &TimelineWidget::onTick);
  tick_->start(33);  // picks up new data ~30 times a second; cheap when nothing changed
}

TimelineWidget::~TimelineWidget() = default;

void TimelineWidget::setData(std::shared_ptr<TimelineData> data) {
  data_ = std::move(data);
  selected_ = {};
  links_.clear();
  boxT0_.reset();
  boxT1_.reset();
  boxStats_.reset();
  seenGeneration_ = 0;
  seenLayout_ = UINT64_MAX;
  seenEviction_ = data_ ? data_->evictionGeneration.load() : 0;
  firstData_ = true;
  onTick();
  update();
}

void TimelineWidget::setPlaceholder(const QString& text) {
  placeholder_ = text;
  update();
}

void TimelineWidget::setColorMode(ColorMode mode) {
  mode_ = mode;
  update();
}

void TimelineWidget::setFollow(bool on) {
  follow_ = on;
  if (on) {
    followMode_ = FollowMode::LastSteps;
    // The step marks are the engine's to change: read them under the shared lock if it is free
    // now, else the next tick (which holds it) brings the last steps in.
    std::shared_lock<std::shared_mutex> lock;
    if (data_) lock = std::shared_lock(data_->mutex, std::try_to_lock);
    if (lock.owns_lock())
      followEnd();
    else
      zoom_.followEnd();
    update();
  }
}

void TimelineWidget::fitAll() {
  // Following, Zoom to Fit keeps following: every update shows all the data held (the live
  // window), growing with it. Otherwise it shows the whole trace once.
  if (follow_) followMode_ = FollowMode::Fit;
  zoom_.fit();
  update();
  emit viewChanged();
}

int64_t TimelineWidget::lastStepsWidth() const {
  if (!data_) return 0;
  // The start of the kFollowSteps-th most recent step (the one in progress counts) on any rank,
  // from the step marks, which the model keeps ordered by start.
  const auto& marks = data_->model.steps();
  std::vector<int64_t> seen;
  int64_t from = INT64_MAX;
  for (auto it = marks.rbegin(); it != marks.rend(); ++it) {
    if (std::find(seen.begin(), seen.end(), it->step) == seen.end()) {
      if (seen.size() == kFollowSteps) break;
      seen.push_back(it->step);
    }
    from = std::min(from, it->start);
  }
  if (from == INT64_MAX || zoom_.traceEnd() <= from) return 0;
  const int64_t w = zoom_.traceEnd() - from;
  return w + w / 20;  // a margin on the left
}

void TimelineWidget::followEnd() {
  switch (followMode_) {
    case FollowMode::Fit:
      zoom_.fit();
      return;
    case FollowMode::LastSteps:
      if (const int64_t w = lastStepsWidth(); w > 0) {
        zoom_.setWindow(zoom_.traceEnd() - w, zoom_.traceEnd());
        return;
      }
      break;  // no step marked yet: the width the view has
    case FollowMode::KeepWidth:
      break;
  }
  zoom_.followEnd();
}

void TimelineWidget::zoomBy(double factor) {
  zoom_.zoomAt(zoom_.start() + zoom_.width() / 2, factor);
  if (follow_) followMode_ = FollowMode::KeepWidth;  // following goes on at the width chosen
  update();
  emit viewChanged();
}

void TimelineWidget::panByFraction(double frac) {
  zoom_.pan(static_cast<int64_t>(static_cast<double>(zoom_.width()) * frac));
  if (frac < 0) follow_ = false;
  update();
  emit viewChanged();
}

int TimelineWidget::dataLeft() const {
  return layout::kLabelWidth;
}
int TimelineWidget::dataWidth() const {
  return std::max(10, width() - layout::kLabelWidth - vbar_->sizeHint().width());
}
int TimelineWidget::rowsTop() const {
  int h = 0;
  for (const Lane& l : pinned_) h += l.h;
  return layout::kRulerHeight + h + (pinned_.empty() ? 0 : 3);
}

TimelineWidget::RowKey TimelineWidget::keyOf(size_t row) const {
  const TimelineRow& r = data_->model.row(row);
  return {r.track, r.level, r.counter};
}

bool TimelineWidget::rowPinned(size_t row) const {
  if (!data_) return false;
  std::shared_lock lock(data_->mutex);
  return row < data_->model.rowCount() && pinnedKeys_.count(keyOf(row)) > 0;
}

void TimelineWidget::setRowPinned(size_t row, bool pinned) {
  if (!data_) return;
  {
    std::shared_lock lock(data_->mutex);
    if (row >= data_->model.rowCount()) return;
    if (pinned)
      pinnedKeys_.insert(keyOf(row));
    else
      pinnedKeys_.erase(keyOf(row));
    relayout();
  }
  update();
}

void TimelineWidget::setRankCollapsed(core::RankId rank, bool collapsed) {
  if (collapsed)
    collapsed_.insert(rank);
  else
    collapsed_.erase(rank);
  if (data_) {
    std::shared_lock lock(data_->mutex);
    relayout();
  }
  update();
}

// Requires the data lock (shared).
void TimelineWidget::relayout() {
  lanes_.clear();
  pinned_.clear();
  int y = 0;
  std::optional<core::RankId> prev;
  const TimelineModel& m = data_->model;
  int py = layout::kRulerHeight;
  for (size_t r = 0; r < m.rowCount(); ++r) {
    const TimelineRow& row = m.row(r);
    if (!prev || *prev != row.rank) {
      lanes_.push_back({true, row.rank, r, y, layout::kHeaderHeight, false});
      y += layout::kHeaderHeight;
      prev = row.rank;
    }
    const int h = row.kind == core::TrackKind::Counter ? layout::kCounterHeight : layout::kRowHeight;
    if (pinnedKeys_.count(keyOf(r))) {
      pinned_.push_back({false, row.rank, r, py, h, true});
      py += h;
    }
    if (collapsed_.count(row.rank)) continue;
    if (row.kind == core::TrackKind::CudaStream && emptyStreams_.count(row.track)) {
      if (row.level == 0) {  // one thin line per empty stream; its deeper levels go
        lanes_.push_back({false, row.rank, r, y, layout::kThinRowHeight, false, true});
        y += layout::kThinRowHeight;
      }
      continue;
    }
    lanes_.push_back({false, row.rank, r, y, h, false});
    y += h;
  }
  contentHeight_ = y + 8;
  seenLayout_ = data_->layoutGeneration.load();
  updateScrollBar();
}

bool TimelineWidget::updateEmptyStreams() {
  const uint64_t lay = data_->layoutGeneration.load();
  if (zoom_.start() == emptyFrom_ && zoom_.end() == emptyTo_ && lay == emptyLayout_) return false;
  emptyFrom_ = zoom_.start();
  emptyTo_ = zoom_.end();
  emptyLayout_ = lay;
  std::set<core::TrackId> empty;
  const TimelineModel& m = data_->model;
  for (size_t r = 0; r < m.rowCount(); ++r) {
    const TimelineRow& row = m.row(r);
    if (row.kind != core::TrackKind::CudaStream || row.level != 0) continue;
    if (!data_->store.rawEvents(row.track).anyOverlapping(emptyFrom_, emptyTo_)) empty.insert(row.track);
  }
  if (empty == emptyStreams_) return false;
  emptyStreams_ = std::move(empty);
  return true;
}

void TimelineWidget::updateScrollBar() {
  const int visible = std::max(0, height() - layout::kLegendHeight - rowsTop());
  vbar_->setRange(0, std::max(0, contentHeight_ - visible));
  vbar_->setPageStep(visible);
  vbar_->setSingleStep(layout::kRowHeight);
  vbar_->setGeometry(width() - vbar_->sizeHint().width(), layout::kRulerHeight, vbar_->sizeHint().width(),
                     height() - layout::kRulerHeight - layout::kLegendHeight);
}

void TimelineWidget::onTick() {
  if (!data_) return;
  const uint64_t gen = data_->generation.load();
  const uint64_t lay = data_->layoutGeneration.load();
  if (gen == seenGeneration_ && lay == seenLayout_) return;
  std::shared_lock lock(data_->mutex, std::try_to_lock);
  if (!lock.owns_lock()) return;  // the writer is busy; next tick
  seenGeneration_ = gen;
  if (const uint64_t ev = data_->evictionGeneration.load(); ev != seenEviction_) {
    // Older events left the store (live retention): indices moved. Find the selected event again
    // by its times; it is gone when it was older than the window.
    seenEviction_ = ev;
    if (selected_.valid()) {
      const core::TrackEvents& trk = data_->store.rawEvents(selected_.track);
      EventRef again;
      trk.forEachOverlapping(selStart_, std::max(selEnd_, selStart_ + 1), [&](size_t i) {
        if (!again.valid() && trk.start(i) == selStart_ && trk.end(i) == selEnd_)
          again = {selected_.track, static_cast<uint32_t>(i)};
      });
      selected_ = again;
      links_ = again.valid() ? data_->model.linkedEvents(again) : std::vector<TimelineModel::Link>{};
      if (!again.valid()) emit eventSelected(selected_);
    }
  } else {
    rememberSelection();
  }
  if (lay != seenLayout_) relayout();
  const TimelineModel& m = data_->model;
  if (m.eventCount() == 0) return;
  zoom_.setTrace(m.spanStart(), m.spanEnd(), firstData_);
  firstData_ = false;
  if (follow_) followEnd();
  update();
}

void TimelineWidget::resizeEvent(QResizeEvent* e) {
  QWidget::resizeEvent(e);
  updateScrollBar();
}

int TimelineWidget::laneY(const Lane& lane) const {
  return lane.pinned ? lane.y : rowsTop() + lane.y - vbar_->value();
}

const TimelineWidget::Lane* TimelineWidget::laneAt(int y) const {
  for (const Lane& l : pinned_)
    if (y >= l.y && y < l.y + l.h) return &l;
  if (y < rowsTop() || y >= height() - layout::kLegendHeight) return nullptr;
  const int ly = y - rowsTop() + vbar_->value();
  auto it =
      std::partition_point(lanes_.begin(), lanes_.end(), [ly](const Lane& l) { return l.y + l.h <= ly; });
  if (it == lanes_.end() || ly < it->y) return nullptr;
  return &*it;
}

std::optional<std::pair<size_t, uint32_t>> TimelineWidget::itemAt(QPoint pos) const {
  if (!data_ || pos.x() < dataLeft()) return std::nullopt;
  const Lane* lane = laneAt(pos.y());
  if (!lane || lane->header) return std::nullopt;
  const double w = dataWidth();
  const int64_t t = zoom_.xToTime(pos.x() - dataLeft(), w);
  const auto slack = static_cast<int64_t>(zoom_.nsPerPixel(w) * 3);
  auto hit = data_->model.eventAt(lane->row, t, slack);
  if (!hit) return std::nullopt;
  return std::make_pair(lane->row, *hit);
}

void TimelineWidget::wheelEvent(QWheelEvent* e) {
  const QPoint d = e->angleDelta();
  if (e->modifiers() & Qt::ShiftModifier) {
    vbar_->setValue(vbar_->value() - (d.y() != 0 ? d.y() : d.x()));
  } else if (d.y() != 0 && std::abs(d.y()) >= std::abs(d.x())) {
    const double w = dataWidth();
    const int64_t anchor = zoom_.xToTime(std::clamp<double>(e->position().x() - dataLeft(), 0, w), w);
    zoom_.zoomAt(anchor, std::pow(1.0015, d.y()));
    if (d.y() > 0) follow_ = false;  // zooming in looks at a moment: following stops
    else followMode_ = FollowMode::KeepWidth;  // zooming out while following keeps that width
    emit viewChanged();
  } else if (d.x() != 0) {
    zoom_.pan(static_cast<int64_t>(-d.x() * zoom_.nsPerPixel(dataWidth())));
    emit viewChanged();
  }
  update();
  e->accept();
}

void TimelineWidget::mousePressEvent(QMouseEvent* e) {
  setFocus();
  dragStart_ = dragNow_ = e->pos();
  if (e->button() == Qt::LeftButton && e->pos().x() < dataLeft()) {
    const Lane* lane = laneAt(e->pos().y());
    if (lane && lane->header) setRankCollapsed(lane->rank, !rankCollapsed(lane->rank));
    return;
  }
  if (e->button() == Qt::LeftButton) {
    drag_ = Drag::Box;
  } else if (e->button() == Qt::MiddleButton || e->button() == Qt::RightButton) {
    drag_ = Drag::Pan;
    panStartT0_ = zoom_.start();
    panStartScroll_ = vbar_->value();
    setCursor(Qt::ClosedHandCursor);
  }
}

void TimelineWidget::mouseMoveEvent(QMouseEvent* e) {
  dragNow_ = e->pos();
  if (drag_ == Drag::Pan) {
    const double dx = dragNow_.x() - dragStart_.x();
    const int64_t t0 = panStartT0_ - static_cast<int64_t>(dx * zoom_.nsPerPixel(dataWidth()));
    zoom_.setWindow(t0, t0 + zoom_.width());
    vbar_->setValue(panStartScroll_ - (dragNow_.y() - dragStart_.y()));
    follow_ = false;
    emit viewChanged();
    update();
  } else if (drag_ == Drag::Box) {
    update();
  }
}

void TimelineWidget::mouseReleaseEvent(QMouseEvent* e) {
  const Drag d = drag_;
  drag_ = Drag::None;
  unsetCursor();
  if (d == Drag::Pan) {
    if ((e->pos() - dragStart_).manhattanLength() < 4 && e->button() == Qt::RightButton) {
      QContextMenuEvent ce(QContextMenuEvent::Mouse, e->pos(), e->globalPosition().toPoint());
      contextMenuEvent(&ce);
    }
    return;
  }
  if (d != Drag::Box || !data_) return;
  if ((e->pos() - dragStart_).manhattanLength() >= 4) {
    finishBox(dragStart_, e->pos());
    return;
  }
  // A click: select the event under the cursor (or nothing).
  boxT0_.reset();
  boxT1_.reset();
  boxStats_.reset();
  std::shared_lock lock(data_->mutex);
  auto hit = itemAt(e->pos());
  if (!hit) {
    selected_ = {};
    links_.clear();
    lock.unlock();
    emit eventSelected(selected_);
    update();
    return;
  }
  selected_ = data_->model.ref(hit->first, hit->second);
  links_ = data_->model.linkedEvents(selected_);
  rememberSelection();
  lock.unlock();
  emit eventSelected(selected_);
  update();
}

void TimelineWidget::finishBox(QPoint a, QPoint b) {
  const double w = dataWidth();
  const int64_t t0 = zoom_.xToTime(std::clamp<double>(std::min(a.x(), b.x()) - dataLeft(), 0, w), w);
  const int64_t t1 = zoom_.xToTime(std::clamp<double>(std::max(a.x(), b.x()) - dataLeft(), 0, w), w);
  std::vector<size_t> rows;
  const int y0 = std::min(a.y(), b.y()), y1 = std::max(a.y(), b.y());
  auto take = [&](const Lane& l) {
    const int ly = laneY(l);
    if (l.header || ly + l.h <= y0 || ly > y1) return;
    if (!l.pinned && ly < rowsTop()) return;
    rows.push_back(l.row);
  };
  for (const Lane& l : pinned_) take(l);
  for (const Lane& l : lanes_) take(l);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  setBoxSelection(t0, t1, std::move(rows));
}

void TimelineWidget::setBoxSelection(int64_t t0, int64_t t1, std::vector<size_t> rows) {
  if (!data_) return;
  boxT0_ = t0;
  boxT1_ = t1;
  boxRows_ = std::move(rows);
  {
    std::shared_lock lock(data_->mutex);
    boxStats_ = data_->model.selectionStats(boxRows_, t0, t1);
  }
  emit boxSelected(t0, t1);
  update();
}

void TimelineWidget::mouseDoubleClickEvent(QMouseEvent* e) {
  if (e->pos().x() >= dataLeft()) {
    // Double click on an event: zoom to it.
    if (!data_) return;
    std::shared_lock lock(data_->mutex);
    auto hit = itemAt(e->pos());
    if (!hit) return;
    const auto ref = data_->model.ref(hit->first, hit->second);
    const auto& ev = data_->store.rawEvents(ref.track);
    const int64_t s = ev.start(ref.index), en = ev.end(ref.index);
    const int64_t pad = std::max<int64_t>((en - s) / 10, 50);
    zoom_.setWindow(s - pad, en + pad);
    follow_ = false;
    lock.unlock();
    emit viewChanged();
    update();
    return;
  }
  const Lane* lane = laneAt(e->pos().y());
  if (lane && !lane->header) setRowPinned(lane->row, !lane->pinned);
}

void TimelineWidget::contextMenuEvent(QContextMenuEvent* e) {
  const Lane* lane = laneAt(e->pos().y());
  if (!lane || !data_) return;
  QMenu menu(this);
  const core::RankId rank = lane->rank;
  menu.addAction(rankCollapsed(rank) ? tr("Expand rank %1").arg(rank) : tr("Collapse rank %1").arg(rank),
                 this, [this, rank] { setRankCollapsed(rank, !rankCollapsed(rank)); });
  if (!lane->header) {
    const size_t row = lane->row;
    const bool pinned = lane->pinned || rowPinned(row);
    menu.addAction(pinned ? tr("Unpin row") : tr("Pin row to top"), this,
                   [this, row, pinned] { setRowPinned(row, !pinned); });
  }
  menu.addAction(tr("Expand all ranks"), this, [this] {
    collapsed_.clear();
    if (data_) {
      std::shared_lock lock(data_->mutex);
      relayout();
    }
    update();
  });
  menu.exec(e->globalPos());
}

void TimelineWidget::keyPressEvent(QKeyEvent* e) {
  switch (e->key()) {
    case Qt::Key_W:
      zoomBy(1.25);
      break;
    case Qt::Key_S:
      zoomBy(0.8);
      break;
    case Qt::Key_A:
      panByFraction(-0.1);
      break;
    case Qt::Key_D:
      panByFraction(0.1);
      break;
    case Qt::Key_F:
      fitAll();
      break;
    case Qt::Key_Escape:
      boxT0_.reset();
      boxT1_.reset();
      boxStats_.reset();
      highlights_.clear();
      update();
      break;
    default:
      QWidget::keyPressEvent(e);
  }
}

bool TimelineWidget::event(QEvent* e) {
  if (e->type() != QEvent::ToolTip || !data_) return QWidget::event(e);
  auto* he = static_cast<QHelpEvent*>(e);
  std::shared_lock lock(data_->mutex, std::try_to_lock);
  if (!lock.owns_lock()) return true;
  auto hit = itemAt(he->pos());
  if (const QString o = hit ? QString() : overlayAt(he->pos()); !o.isEmpty()) {
    QToolTip::showText(he->globalPos(), o, this);
    return true;
  }
  if (!hit) {
    QToolTip::hideText();
    e->ignore();
    return true;
  }
  // How many events share this pixel column (what the level of detail merged here).
  const double w = dataWidth();
  const int64_t t = zoom_.xToTime(he->pos().x() - dataLeft(), w);
  const auto px = static_cast<int64_t>(zoom_.nsPerPixel(w));
  std::vector<DrawItem> items;
  data_->model.drawItems(hit->first, t - 2 * px, t + 2 * px, 2 * px, items);
  uint32_t merged = 1;
  for (const DrawItem& it : items)
    if (hit->second >= it.first && hit->second < it.first + it.count) merged = it.count;
  QToolTip::showText(he->globalPos(),
                     eventTooltipHtml(*data_, data_->model.ref(hit->first, hit->second), merged), this);
  return true;
}

void TimelineWidget::showRow(size_t row) {
  for (const Lane& l : lanes_) {
    if (l.header || l.row != row) continue;
    const int visible = height() - layout::kLegendHeight - rowsTop();
    if (l.y < vbar_->value() || l.y + l.h > vbar_->value() + visible) vbar_->setValue(l.y - visible / 3);
    return;
  }
}

void TimelineWidget::rememberSelection() {  // data_->mutex held
  if (!selected_.valid() || selected_.track >= data_->store.trackCount()) return;
  const core::TrackEvents& trk = data_->store.rawEvents(selected_.track);
  if (selected_.index >= trk.size()) return;
  selStart_ = trk.start(selected_.index);
  selEnd_ = trk.end(selected_.index);
}

void TimelineWidget::selectEvent(EventRef ev, bool reveal) {
  if (!data_) return;
  {
    std::shared_lock lock(data_->mutex);
    selected_ = ev;
    links_ = data_->model.linkedEvents(ev);
    rememberSelection();
    if (reveal && ev.valid()) {
      auto row = data_->model.rowOf(ev);
      if (row) {
        const core::RankId rank = data_->model.row(*row).rank;
        if (collapsed_.erase(rank)) relayout();
        showRow(*row);
      }
      const auto& e = data_->store.rawEvents(ev.track);
      const int64_t s = e.start(ev.index), en = e.end(ev.index);
      if (en - s > zoom_.width()) {
        zoom_.setWindow(s - (en - s) / 10, en + (en - s) / 10);
      } else if (s < zoom_.start() || en > zoom_.end()) {
        const int64_t c = s + (en - s) / 2;
        zoom_.setWindow(c - zoom_.width() / 2, c + zoom_.width() / 2);
      }
      follow_ = false;
    }
  }
  emit eventSelected(selected_);
  emit viewChanged();
  update();
}

bool TimelineWidget::search(const QString& text, bool forward) {
  if (!data_) return false;
  std::optional<TimelineModel::Hit> current;
  std::optional<TimelineModel::Hit> hit;
  {
    std::shared_lock lock(data_->mutex);
    const TimelineModel& m = data_->model;
    if (selected_.valid()) {
      if (auto row = m.rowOf(selected_)) {
        const auto& idx = m.row(*row).events;
        auto it = std::lower_bound(idx.begin(), idx.end(), selected_.index);
        current = TimelineModel::Hit{*row, static_cast<uint32_t>(it - idx.begin())};
      }
    }
    hit = m.findNext(text.toStdString(), forward ? zoom_.start() - 1 : zoom_.end(), forward, current);
  }
  if (!hit) return false;
  EventRef ref;
  {
    std::shared_lock lock(data_->mutex);
    ref = data_->model.ref(hit->row, hit->pos);
  }
  selectEvent(ref, true);
  return true;
}

}  // namespace trainscope::plots
