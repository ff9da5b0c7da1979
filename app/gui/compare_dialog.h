// CompareDialog (View → Compare Sessions…): two open tabs -- two saved sessions, a live job and a
// file, or one session against itself in two step windows -- side by side: the metrics of each
// window with their spread over steps and the difference (core/tune/compare.h), and the median
// step of each window drawn on one time axis, aligned on the step's start (StepCompareView).
#pragma once

#include <QDialog>
#include <QFutureWatcher>
#include <QString>
#include <memory>
#include <vector>

class QComboBox;
class QLabel;
class QSpinBox;
class QTableWidget;

namespace trainscope::plots {
struct TimelineData;
class StepCompareView;
}  // namespace trainscope::plots

namespace trainscope::core {
struct Spread;
struct AnalysisResult;
}

namespace trainscope::app {

// "3.412 ± 0.205" (the mean and its spread over steps), "—" when there is no value; shared by the
// Knobs dock's change table and this dialog.
QString spreadText(const core::Spread& s, int decimals);

class CompareDialog : public QDialog {
  Q_OBJECT
 public:
  struct Source {
    QString title;
    std::shared_ptr<plots::TimelineData> data;
    // The tab's analysis (SessionView::analysis()) when it has one: then only bytes, loss and
    // the drawn step are read from the store, under its shared lock; without it the store is
    // analysed whole (off the GUI thread either way).
    std::shared_ptr<const core::AnalysisResult> analysis;
  };
  explicit CompareDialog(std::vector<Source> sources, QWidget* parent = nullptr);
  // Chooses the two sides and their step windows (INT_MIN/INT_MAX-like -1 = open end) and
  // recomputes; what the controls do.
  void setSides(int a, int b);
  void setWindows(int aFrom, int aTo, int bFrom, int bTo);
  // Measures both windows off the GUI thread; computed() follows (a request while one runs is
  // queued and runs after it).
  void recompute();
  bool isComputing() const;
  QTableWidget* table() const { return table_; }
  plots::StepCompareView* stepView() const { return view_; }
  QString statusText() const;

 signals:
  void computed();

 private:
  struct Side;
  struct Result;
  void showResult(const Result& r);
  QFutureWatcher<std::shared_ptr<Result>>* watcher_;
  bool again_ = false;
  std::vector<Source> sources_;
  QComboBox *a_, *b_;
  QSpinBox *aFrom_, *aTo_, *bFrom_, *bTo_;
  QTableWidget* table_;
  plots::StepCompareView* view_;
  QLabel* status_;
};

}  // namespace trainscope::app
