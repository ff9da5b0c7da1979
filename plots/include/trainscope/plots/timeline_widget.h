// TimelineWidget: the multi-rank timeline (a plain QWidget; QOpenGLWidget crashes offscreen).
//
// Lanes: per rank a header (click to collapse) and its rows -- CPU threads (one row per nesting
// depth), pipeline stages, CUDA streams, communicators, counters (a line per counter). Pinned
// rows stay at the top. What is drawn comes from TimelineModel::drawItems (level of detail in the
// model); painting never scans a row.
//
// Mouse: wheel zooms at the cursor, Shift+wheel scrolls rows, horizontal wheel pans; left drag
// selects a box (duration and per-kind totals), left click selects an event (details, flow arrows
// to linked events); right/middle drag pans. Keys: W/S zoom, A/D pan, F fits.
#pragma once

#include <QPixmap>
#include <QWidget>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "trainscope/core/analysis/analysis.h"
#include "trainscope/plots/timeline_data.h"
#include "trainscope/plots/timeline_palette.h"
#include "trainscope/plots/zoom_control.h"

class QScrollBar;
class QTimer;

namespace trainscope::plots {

class TimelineWidget : public QWidget {
  Q_OBJECT

 public:
  explicit TimelineWidget(QWidget* parent = nullptr);
  ~TimelineWidget() override;

  void setData(std::shared_ptr<TimelineData> data);
  // What the widget says while it has no data ("Loading …", an error).
  void setPlaceholder(const QString& text);
  const std::shared_ptr<TimelineData>& data() const { return data_; }
  ZoomControl& zoom() { return zoom_; }

  ColorMode colorMode() const { return mode_; }
  void setColorMode(ColorMode mode);
  bool follow() const { return follow_; }
  void setFollow(bool on);

  void fitAll();
  void zoomBy(double factor);       // around the centre
  void panByFraction(double frac);  // of the visible width

  EventRef selectedEvent() const { return selected_; }
  // Selects ev (details, arrows) and scrolls/zooms so it is visible.
  void selectEvent(EventRef ev, bool reveal);
  // Next/previous event whose name contains text; false when there is none.
  bool search(const QString& text, bool forward);

  // Box selection in trace time over display rows (empty when none).
  void setBoxSelection(int64_t t0, int64_t t1, std::vector<size_t> rows);
  std::optional<SelectionStats> boxStats() const { return boxStats_; }

  void setRankCollapsed(core::RankId rank, bool collapsed);
  bool rankCollapsed(core::RankId rank) const { return collapsed_.count(rank) > 0; }
  void setRowPinned(size_t row, bool pinned);
  bool rowPinned(size_t row) const;

  // Analysis overlays (time ranges per rank, drawn translucent over the rank's rows): pipeline
  // bubbles, exposed communication, the critical path. The mask says which kinds are shown.
  enum OverlayFlag { BubbleOverlay = 1, ExposedCommOverlay = 2, CriticalPathOverlay = 4 };
  void setOverlays(std::vector<core::Overlay> overlays);
  // The same without a copy: `sorted` is ordered by startNs (the analysis task sorts it off the
  // GUI thread) and shared with the analysis result it belongs to.
  void setSortedOverlays(std::shared_ptr<const std::vector<core::Overlay>> sorted);
  const std::vector<core::Overlay>& overlays() const { return *overlays_; }
  void setOverlayMask(int mask);
  int overlayMask() const { return overlayMask_; }
  // The label of the shown overlay under pos ("" when none): what the tooltip says.
  QString overlayAt(QPoint pos) const;
  // Outlines these events, selects the first and zooms to the span of all of them (the events
  // behind a metric). Refs are resolved now, so later growth of the store does not matter.
  void highlightEvents(const std::vector<EventRef>& refs);
  size_t highlightCount() const { return highlights_.size(); }

  // Items drawn in the last frame and the time it took to prepare them (model queries only).
  size_t lastFrameItems() const { return lastItems_; }
  double lastFramePrepMs() const { return lastPrepMs_; }

 signals:
  void eventSelected(trainscope::plots::EventRef ev);
  void boxSelected(qint64 t0, qint64 t1);
  void viewChanged();

 protected:
  void paintEvent(QPaintEvent* e) override;
  void resizeEvent(QResizeEvent* e) override;
  void wheelEvent(QWheelEvent* e) override;
  void mousePressEvent(QMouseEvent* e) override;
  void mouseMoveEvent(QMouseEvent* e) override;
  void mouseReleaseEvent(QMouseEvent* e) override;
  void mouseDoubleClickEvent(QMouseEvent* e) override;
  void keyPressEvent(QKeyEvent* e) override;
  void contextMenuEvent(QContextMenuEvent* e) override;
  bool event(QEvent* e) override;

 private:
  struct Lane {
    bool header = false;
    core::RankId rank = 0;
    size_t row = 0;  // display row of the model (rows only)
    int y = 0;       // top, in lane coordinates (scrolled part) or widget coordinates (pinned)
    int h = 0;
    bool pinned = false;
    bool thin = false;  // a GPU stream with no event in view: a thin line, no label
  };
  using RowKey = std::tuple<core::TrackId, uint32_t, core::StringId>;

  void render(QPainter& p);
  void paintLane(QPainter& p, const Lane& lane, int y);
  void paintRowItems(QPainter& p, const Lane& lane, int y);
  void paintCounterRow(QPainter& p, const Lane& lane, int y);
  void paintRuler(QPainter& p);
  void paintMarks(QPainter& p, int top, int bottom);
  void paintSelection(QPainter& p);
  void paintArrows(QPainter& p);
  void paintLegend(QPainter& p);
  void paintOverlays(QPainter& p, int top, int bottom);
  void paintHighlights(QPainter& p);
  double paintOverlayLegend(QPainter& p, int y, double right);  // returns its left edge
  // Widget y range [first, second) of each rank's scrolled lanes.
  std::map<core::RankId, std::pair<int, int>> rankSpans(int top) const;
  void paintLabels(QPainter& p, int top);
  QColor itemColor(const TimelineRow& row, uint32_t eventIndex) const;

  void relayout();
  void onTick();
  void updateScrollBar();
  int dataLeft() const;
  int dataWidth() const;
  int rowsTop() const;  // below the ruler and the pinned lanes
  // The lane at widget y (pinned or scrolled), if any.
  const Lane* laneAt(int y) const;
  int laneY(const Lane& lane) const;                                    // widget y of a lane
  std::optional<std::pair<size_t, uint32_t>> itemAt(QPoint pos) const;  // (row, position)
  void finishBox(QPoint a, QPoint b);
  void showRow(size_t row);
  RowKey keyOf(size_t row) const;

  std::shared_ptr<TimelineData> data_;
  ZoomControl zoom_;
  ColorMode mode_ = ColorMode::Kind;
  bool follow_ = false;
  // GPU streams with nothing in the window collapse to a thin line (their tracks); recomputed
  // when the window or the layout changes, under the frame's shared lock.
  std::set<core::TrackId> emptyStreams_;
  int64_t emptyFrom_ = 0, emptyTo_ = -1;
  uint64_t emptyLayout_ = UINT64_MAX;
  bool updateEmptyStreams();  // true when the set changed (relayout then)
  // What following shows: the last few steps (the default), everything held (Zoom to Fit while
  // following), or the width the user zoomed out to.
  enum class FollowMode { LastSteps, Fit, KeepWidth };
  FollowMode followMode_ = FollowMode::LastSteps;
  static constexpr size_t kFollowSteps = 3;
  int64_t lastStepsWidth() const;  // 0: no step marked yet
  void followEnd();
  QScrollBar* vbar_;
  QTimer* tick_;
  QPixmap frame_;
  QString placeholder_;
  uint64_t seenGeneration_ = 0, seenLayout_ = UINT64_MAX;
  bool firstData_ = true;

  std::vector<Lane> lanes_;   // scrolled lanes
  std::vector<Lane> pinned_;  // pinned lanes (widget coordinates below the ruler)
  int contentHeight_ = 0;
  std::set<core::RankId> collapsed_;
  std::set<RowKey> pinnedKeys_;

  void rememberSelection();
  EventRef selected_;
  int64_t selStart_ = 0, selEnd_ = 0;  // selected_'s times, to find it again after an eviction
  uint64_t seenEviction_ = 0;
  std::vector<TimelineModel::Link> links_;
  std::optional<int64_t> boxT0_, boxT1_;
  std::vector<size_t> boxRows_;
  std::optional<SelectionStats> boxStats_;

  enum class Drag { None, Box, Pan } drag_ = Drag::None;
  QPoint dragStart_, dragNow_;
  int64_t panStartT0_ = 0;
  int panStartScroll_ = 0;

  std::shared_ptr<const std::vector<core::Overlay>> overlays_ = std::make_shared<std::vector<core::Overlay>>();
  int64_t overlayMaxNs_ = 0;  // the longest overlay: where a search by start time begins
  // The overlays that may reach [from, ...): a binary search by start, not a scan from the first.
  std::vector<core::Overlay>::const_iterator firstOverlayFrom(int64_t from) const;
  int overlayMask_ = BubbleOverlay | ExposedCommOverlay;
  struct Highlight {
    core::TrackId track = 0;
    int64_t start = 0, end = 0;
    std::optional<size_t> row;
  };
  std::vector<Highlight> highlights_;

  size_t lastItems_ = 0;
  double lastPrepMs_ = 0;
};

}  // namespace trainscope::plots
