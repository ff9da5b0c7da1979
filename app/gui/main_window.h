// The Trainscope main window: tabs of sessions (files or live jobs) around the timeline, a
// job/rank/track tree, a details pane, docks for analysis and knobs (filled by later issues),
// menus, shortcuts, recent files, a status bar (connection, events/s, drops, clock-sync error)
// and a layout that is remembered (QSettings).
#pragma once

#include <QMainWindow>
#include <vector>

#include "trainscope/core/session/tsdb.h"
#include "trainscope/core/wire/discovery.h"

class QActionGroup;
class QLabel;
class QLineEdit;
class QMenu;
class QTabWidget;
class QTextBrowser;
class QTreeView;
class QTimer;
class QAction;
class QDockWidget;

namespace trainscope::plots {
class SessionTreeModel;
struct EventRef;
}  // namespace trainscope::plots

namespace trainscope::app {

class SessionView;
class CompareDialog;
class AnalysisDock;
class KnobsDock;

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // Opens path in a new tab (loading runs off the GUI thread); loaded() or failed() follows.
  void openFile(const QString& path);
  // Several per-rank trace files (PyTorch JSON or Nsight Systems exports) as one session, one tab.
  void openFiles(const QStringList& paths);
  // Attaches to a local job by id in a new tab. False (and a message) when it is not running.
  bool attachJob(const QString& jobId, QString* error);
  // Attaches to the first local job that appears within timeoutMs; failed() when none does.
  void attachFirst(int timeoutMs);
  // Live retention for tabs attached from now on (and the current one): events older than this
  // leave memory; 0 keeps everything (docs/RELIABILITY.md, "Live memory").
  void setLiveWindowSeconds(double seconds);
  double liveWindowSeconds() const { return liveWindowSeconds_; }
  // The next attached tab also records every event into this .tsdb (trainscope --save-session).
  void setRecordPathForNextAttach(const QString& path) { nextRecordPath_ = path; }
  // Batch runs (--screenshot, --save-session): errors go to the status bar and the failed()
  // signal, never to a modal dialog (under a real X server one waited for a click forever).
  void setNonInteractive(bool on) { nonInteractive_ = on; }
  bool nonInteractive() const { return nonInteractive_; }
  SessionView* currentView() const;
  // File → Export Configuration: the current tab's knob values in force at the end and their
  // measurements as a tuned configuration (docs/FORMATS.md). False and a message on failure.
  // Computed on a snapshot off the GUI thread; this form waits for it (scripts, tests), the menu's
  // startExportConfiguration() does not and reports through configurationExported().
  bool exportConfiguration(const QString& path, QString* error);
  void startExportConfiguration(const QString& path);
  // Re-reads the status bar figures now (they refresh twice a second anyway).
  void refreshStatus();
  // Colours the current tab's timeline by mode (as the toolbar does).
  void setColorMode(int mode);
  AnalysisDock* analysisDock() const { return analysisDock_; }
  KnobsDock* knobsDock() const { return knobsDock_; }
  // Shows or hides the timeline overlays (TimelineWidget::OverlayFlag mask, 0 = none).
  void setOverlayMask(int mask);
  int overlayMask() const;
  // View → Compare Sessions: a dialog over the open tabs (the first two side by side); null and
  // an error when no tab is open. The caller owns it.
  CompareDialog* openCompare();
  // What a click on a metric in the Analysis dock does: select and zoom to its events.
  void activateMetric(const QString& key);

 signals:
  void loaded(const QString& path);
  void failed(const QString& path, const QString& message);
  // A live tab has received events from every rank of its job.
  void liveReady(int ranks, qulonglong events);
  // startExportConfiguration() finished: error is empty on success.
  void configurationExported(const QString& path, const QString& error);

 protected:
  void closeEvent(QCloseEvent* event) override;

 private:
  SessionView* addView(const QString& title);
  void attachEntries(std::vector<core::discovery::Entry> entries, const QString& label);
  void buildMenus();
  void buildDocks();
  void buildOverlayActions(QMenu* view);
  void updateStatus();
  void refreshTree();
  void showEventDetails(const plots::EventRef& ev);
  void showSelection();
  static QString overviewHtml(const core::SessionSummary& s);
  void onTabChanged();
  void addRecent(const QString& path);
  void rebuildRecentMenu();
  void search(bool forward);
  void reportError(const QString& title, const QString& message);

  QTabWidget* tabs_;
  plots::SessionTreeModel* treeModel_;
  QTreeView* tree_;
  QTextBrowser* details_;
  QLineEdit* search_;
  QMenu* recentMenu_ = nullptr;
  QActionGroup* colorGroup_ = nullptr;
  QAction* followAction_ = nullptr;
  QAction* overlaysAction_ = nullptr;  // master toggle
  std::vector<std::pair<QAction*, int>> overlayKinds_;
  AnalysisDock* analysisDock_ = nullptr;
  KnobsDock* knobsDock_ = nullptr;
  QDockWidget* analysisDockWidget_ = nullptr;
  QDockWidget* knobsDockWidget_ = nullptr;
  QLabel* statusSource_;
  QLabel* statusEvents_;
  QLabel* statusRate_;
  QLabel* statusDrops_;
  QLabel* statusClock_;
  QLabel* statusFrame_;
  QTimer* statusTimer_;
  int treeTicks_ = 0;
  bool liveReadySent_ = false;
  bool nonInteractive_ = false;
  double liveWindowSeconds_ = 600;  // SessionView::kDefaultLiveWindowSeconds
  QString nextRecordPath_;
  SessionView* endedShown_ = nullptr;
};

}  // namespace trainscope::app
