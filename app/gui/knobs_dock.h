// KnobsDock: the Knobs dock's contents -- the live knobs of the current tab's job (descriptor,
// current value, an editor suited to the type: enum combo, int/float spin box with the range,
// bool check box) and Apply, which runs the tab's LiveSession::setKnobs on a worker thread and says
// "applied at step N on all ranks" or why the job refused. Nothing here blocks the GUI.
//
// What-if predicts the edited values from the session (core/tune/whatif.h) and draws the
// predicted step as a ghost beside a measured one (plots::StepCompareView). Apply records the
// change: the steps before it, the prediction, and -- as steps run -- the steps after it, in a
// before / predicted / after table with each metric's spread over steps (core/tune/compare.h).
// Undo applies the values in force before the last change. Knobs that change the mathematics
// ask for confirmation first.
#pragma once

#include <QFutureWatcher>
#include <QPointer>
#include <QString>
#include <QWidget>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "trainscope/core/tune/compare.h"
#include "trainscope/core/tune/whatif.h"
#include "trainscope/core/wire/discovery.h"
#include "trainscope/core/wire/protocol.h"

class QLabel;
class QPushButton;
class QTabWidget;
class QTableWidget;
class QTimer;

namespace trainscope::core {
class LiveSession;
}
namespace trainscope::plots {
class StepCompareView;
}

namespace trainscope::app {

class SessionView;

class KnobsDock : public QWidget {
  Q_OBJECT

 public:
  explicit KnobsDock(QWidget* parent = nullptr);
  ~KnobsDock() override;
  // Lists the knobs of v's job when v is attached to one.
  void setView(SessionView* v);
  // Re-reads the knob list (off the GUI thread; also every 3 s while shown); listed() follows.
  void refresh(bool announce = true);
  int knobCount() const { return static_cast<int>(knobs_.size()); }
  // Sets the editor of knob `name` to value (as the user would); false when it cannot.
  bool setEditorValue(const QString& name, const QString& value);
  // Sends every edited value (off the GUI thread); applied() follows.
  void apply();
  // What-if: the tab's session as a model (core/tune/whatif.h), evaluated for the edited values
  // (off the GUI thread); predicted() follows, and the status line shows the numbers.
  void whatIf();
  QString statusText() const;
  // Applies the values in force before the last applied change; applied() follows.
  void undo();
  bool canUndo() const;
  // Asked before applying a change to a knob that changes the mathematics; the default shows a
  // dialog. Return false to cancel.
  void setConfirmHandler(std::function<bool(const QString& question)> confirm) { confirm_ = std::move(confirm); }
  // Steps measured before and after a change (the comparison windows).
  static constexpr int kCompareSteps = 8;

  plots::StepCompareView* ghostView() const { return ghost_; }
  // The before / predicted / after table of the last applied change (rows: metrics).
  QTableWidget* changeTable() const { return changeTable_; }
  // The last change's after-window has all kCompareSteps steps.
  bool comparisonComplete() const { return change_.afterComplete; }

 signals:
  void listed(int knobs);
  void applied(bool ok, const QString& message);
  void predicted(bool ok, const QString& message);
  // The last change's table was refreshed; `complete` once the after-window is full.
  void compared(bool complete);

 private:
  struct Reply {
    std::vector<core::wire::KnobDescriptor> knobs;
    int64_t step = -1;
    QString message;  // apply: what happened; list: an error
    bool ok = true;
    bool isApply = false;
    bool isUndo = false;
    // Apply: the change's record (before-window, prediction, the step it took effect).
    std::map<std::string, std::string> changes, previous;
    int64_t appliedStep = -1;
    core::WindowMetrics before;
    bool haveBefore = false;
    core::WhatIfPrediction prediction;
    bool havePrediction = false;
    QString predictionNote;
  };
  struct WhatIfReply {
    bool ok = false;
    QString text;
    std::vector<core::StepOp> measured, predicted;
    int64_t measuredStep = -1;
  };
  struct ChangeRecord {
    bool active = false;
    std::map<std::string, std::string> changes, previous;
    int64_t appliedStep = -1;
    core::WindowMetrics before, after;
    bool haveBefore = false, haveAfter = false, afterComplete = false;
    core::WhatIfPrediction prediction;
    bool havePrediction = false;
    QString predictionNote;
  };
  void applyChanges(std::vector<std::pair<std::string, std::string>> changes, bool isUndo);
  void updateComparison();
  void fillChangeTable();
  void onReply();
  void fill();
  bool sameKnobs(const std::vector<core::wire::KnobDescriptor>& other) const;
  void updateCurrent(std::vector<core::wire::KnobDescriptor> fresh);
  QString editorValue(int row) const;
  void setStatus(const QString& text, bool error);

  QPointer<SessionView> view_;
  std::shared_ptr<core::LiveSession> live_;
  std::vector<core::wire::KnobDescriptor> knobs_;
  QTableWidget* table_;
  QPushButton* apply_;
  QPushButton* whatIf_;
  QPushButton* undo_;
  QFutureWatcher<WhatIfReply> whatIfWatcher_;
  bool whatIfShown_ = false;  // the status line shows a What-if result
  plots::StepCompareView* ghost_;
  QTableWidget* changeTable_;
  QLabel* changeTitle_;
  QTabWidget* results_ = nullptr;
  ChangeRecord change_;
  QFutureWatcher<std::pair<core::WindowMetrics, bool>> compareWatcher_;
  std::function<bool(const QString&)> confirm_;
  QPushButton* reload_;
  QLabel* status_;
  QTimer* poll_;
  bool lastApplied_ = false;
  bool applyPending_ = false;  // keep "applied at step N" in view while polling
  bool undoPending_ = false;
  QFutureWatcher<Reply> watcher_;
};

}  // namespace trainscope::app
