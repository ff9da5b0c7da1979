// The Trainscope main window. For now it opens sessions (.tsdb or Chrome JSON) and shows their
// ranks, tracks and counts; the timeline, attach dialog and analysis docks come with later issues.
#pragma once

#include <QFutureWatcher>
#include <QMainWindow>

#include "trainscope/core/session_db.h"

class QLabel;
class QMenu;
class QTextBrowser;
class QTreeView;

namespace trainscope::plots {
class SessionTreeModel;
}

namespace trainscope::app {

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // Starts loading path off the GUI thread; loaded() or failed() follows.
  void openFile(const QString& path);
  bool isLoading() const;

 signals:
  void loaded(const QString& path);
  void failed(const QString& path, const QString& message);

 protected:
  void closeEvent(QCloseEvent* event) override;

 private:
  struct LoadResult {
    core::SessionSummary summary;
    QString error;
  };
  static LoadResult load(const QString& path);
  void onLoaded();
  void showDetails();
  void addRecent(const QString& path);
  void rebuildRecentMenu();

  plots::SessionTreeModel* model_;
  QTreeView* tree_;
  QTextBrowser* details_;
  QLabel* statusFile_;
  QLabel* statusEvents_;
  QLabel* statusDrops_;
  QMenu* recentMenu_;
  QFutureWatcher<LoadResult> watcher_;
  QString loadingPath_;
};

}  // namespace trainscope::app
