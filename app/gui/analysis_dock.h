// AnalysisDock: the Analysis dock's contents -- a one-line summary (steps, step time, bubble,
// overlap), "who is slow" (the ranks that held steps back, by last arrival), and
// plots::AnalysisPanel, for the current tab's analysis (SessionView::analysis()).
#pragma once

#include <QPointer>
#include <QWidget>

#include "trainscope/core/analysis/analysis.h"

class QLabel;
class QTreeWidget;

namespace trainscope::plots {
class AnalysisPanel;
}

namespace trainscope::app {

class SessionView;

class AnalysisDock : public QWidget {
  Q_OBJECT

 public:
  explicit AnalysisDock(QWidget* parent = nullptr);
  // Shows v's analysis and follows its updates (null: nothing).
  void setView(SessionView* v);
  plots::AnalysisPanel* panel() const { return panel_; }
  QString summary() const;
  // "Who is slow": the ranks that arrived last at their collectives (SessionView::stragglers()),
  // one row each; activating a row shows that rank's latest late step in the timeline.
  QTreeWidget* whoIsSlow() const { return slow_; }
  // "12 steps · step 45.20 ms · bubble 33.1 % (theory 30.0 %) · DP overlap 72 %".
  static QString summaryText(const core::AnalysisResult& r);

 protected:
  void showEvent(QShowEvent* e) override;

 private:
  void refresh();
  bool stale_ = true;
  QPointer<SessionView> view_;
  QMetaObject::Connection conn_;
  QLabel* summary_;
  QTreeWidget* slow_;
  plots::AnalysisPanel* panel_;
};

}  // namespace trainscope::app
