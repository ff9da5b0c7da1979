// KnobsDock: the Knobs dock's contents -- the live knobs of the current tab's job (descriptor,
// current value, an editor suited to the type: enum combo, int/float spin box with the range,
// bool check box) and Apply, which runs the tab's LiveSession::setKnobs on a worker thread and says
// "applied at step N on all ranks" or why the job refused. Nothing here blocks the GUI.
#pragma once

#include <QFutureWatcher>
#include <QPointer>
#include <QString>
#include <QWidget>
#include <memory>
#include <utility>
#include <vector>

#include "trainscope/core/wire/discovery.h"
#include "trainscope/core/wire/protocol.h"

class QLabel;
class QPushButton;
class QTableWidget;
class QTimer;

namespace trainscope::core {
class LiveSession;
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

 signals:
  void listed(int knobs);
  void applied(bool ok, const QString& message);
  void predicted(bool ok, const QString& message);

 private:
  struct Reply {
    std::vector<core::wire::KnobDescriptor> knobs;
    int64_t step = -1;
    QString message;  // apply: what happened; list: an error
    bool ok = true;
    bool isApply = false;
  };
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
  QFutureWatcher<std::pair<bool, QString>> whatIfWatcher_;
  QPushButton* reload_;
  QLabel* status_;
  QTimer* poll_;
  bool lastApplied_ = false;
  bool applyPending_ = false;  // keep "applied at step N" in view while polling
  QFutureWatcher<Reply> watcher_;
};

}  // namespace trainscope::app
