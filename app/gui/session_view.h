// SessionView: one tab of the main window -- a timeline over one TimelineData, filled either
// from a file (loaded off the GUI thread) or live from a running job (LiveIngest thread).
// Saving and exporting also run off the GUI thread.
#pragma once

#include <QFutureWatcher>
#include <QWidget>
#include <memory>

#include "trainscope/core/discovery.h"
#include "trainscope/core/session_db.h"
#include "trainscope/plots/live_ingest.h"
#include "trainscope/plots/timeline_widget.h"

namespace trainscope::app {

class SessionView : public QWidget {
  Q_OBJECT

 public:
  explicit SessionView(QWidget* parent = nullptr);
  ~SessionView() override;

  plots::TimelineWidget* timeline() const { return timeline_; }
  const std::shared_ptr<plots::TimelineData>& data() const { return data_; }
  QString title() const;
  QString sourcePath() const { return path_; }

  // Starts loading a .tsdb session or a Chrome/Kineto JSON trace; loaded() or failed() follows.
  void openFile(const QString& path);
  bool isBusy() const { return watcher_.isRunning(); }

  // Attaches to these ranks (one job) and streams into a fresh timeline.
  void attach(std::vector<core::discovery::Entry> entries, const QString& label);
  void detach();
  void reattach();
  bool isLive() const;
  bool canReattach() const { return !entries_.empty(); }
  plots::LiveIngest::Stats liveStats() const;

  // Saves everything received / loaded so far (off the GUI thread); saved() or failed().
  void saveAs(const QString& path);
  // Exports the visible time range as Chrome trace JSON (off the GUI thread), or the view as PNG.
  void exportVisibleJson(const QString& path);
  bool exportPng(const QString& path);

  // A summary for the tree (ranks, tracks, per-track counts), cheap enough for a timer.
  core::SessionSummary quickSummary() const;

 signals:
  void loaded(const QString& path);
  void saved(const QString& path);
  void failed(const QString& what, const QString& message);

 private:
  struct Job {
    std::shared_ptr<plots::TimelineData> data;
    QString error;
    QString path;
    bool replacesData = false;
  };
  void startJob(std::function<Job()> fn);
  void onJobDone();

  plots::TimelineWidget* timeline_;
  std::shared_ptr<plots::TimelineData> data_;
  std::unique_ptr<plots::LiveIngest> ingest_;
  std::vector<core::discovery::Entry> entries_;
  QString label_;
  QString path_;
  QFutureWatcher<Job> watcher_;
};

}  // namespace trainscope::app
