// SessionView: one tab of the main window -- a timeline over one TimelineData, filled either
// from a file (loaded off the GUI thread) or live from a running job (core::LiveSession, the
// engine `record` uses too).
// Saving and exporting also run off the GUI thread.
#pragma once

#include <QFutureWatcher>
#include <QWidget>

#include <atomic>
#include <mutex>
#include <optional>

class QLabel;
class QTimer;
#include <map>
#include <memory>

#include "trainscope/core/analysis/analysis.h"
#include "trainscope/core/analysis/stragglers.h"
#include "trainscope/core/live/hang.h"
#include "trainscope/core/wire/discovery.h"
#include "trainscope/core/session/tsdb.h"
#include "trainscope/core/live/live_session.h"
#include "trainscope/plots/timeline_data.h"
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

  // Starts loading a .tsdb session, a Chrome/Kineto JSON trace or an Nsight Systems SQLite
  // export; loaded() or failed() follows.
  void openFile(const QString& path);
  // Several per-rank trace files (JSON or nsys exports) as one session (core::importTraceFiles).
  void openFiles(const QStringList& paths);
  bool isBusy() const { return watcher_.isRunning(); }

  // Attaches to these ranks (one job) and streams into a fresh timeline. With recordPath, every
  // event also goes to that .tsdb as it arrives (a SessionWriter on the engine, as `record`
  // does), so the file holds what the live window let go; finishRecording() closes it.
  void attach(std::vector<core::discovery::Entry> entries, const QString& label,
              const QString& recordPath = {});
  void detach();
  // Live retention (docs/RELIABILITY.md, "Live memory"): events that start more than this long
  // before the newest leave memory, in chunks of 1/8 of it; 0 keeps everything. Applies to a
  // running tab at its next ingest round.
  void setLiveWindowSeconds(double seconds);
  // The window a new tab starts with (MainWindow::setLiveWindowSeconds, trainscope --live-window).
  static constexpr double kDefaultLiveWindowSeconds = 600;
  double liveWindowSeconds() const { return static_cast<double>(windowNs_->load()) / 1e9; }
  // The file this tab records into while live (empty: none).
  QString recordingPath() const { return recordPath_; }
  // Closes the recording (after detach()): saved() or failed() follows, at once.
  void finishRecording();
  void reattach();
  bool isLive() const;
  bool canReattach() const { return !entries_.empty(); }
  // The ranks this tab attached to (empty for files).
  const std::vector<core::discovery::Entry>& entries() const { return entries_; }
  core::LiveSnapshot liveStats() const;
  // The live-session engine of this tab (null for files): knob calls go through it.
  std::shared_ptr<core::LiveSession> liveSession() const { return live_; }

  // Saves everything received / loaded so far (off the GUI thread); saved() or failed().
  void saveAs(const QString& path);
  // Exports the visible time range as Chrome trace JSON (off the GUI thread), or the view as PNG.
  void exportVisibleJson(const QString& path);
  bool exportPng(const QString& path);

  // Analysis of this tab (docs/ANALYSIS.md), computed off the GUI thread under the data's shared
  // lock: once after a file loads, every 2 s while live. analysisChanged() follows a new result,
  // whose overlays the timeline then shows. Null until the first result.
  std::shared_ptr<const core::AnalysisResult> analysis() const { return analysis_; }
  // Starts an analysis now unless one is running or nothing changed since the last one.
  void analyzeNow();
  bool isAnalyzing() const { return analysisWatcher_.isRunning(); }
  double lastAnalysisMs() const { return analysisMs_; }
  // The events behind a metric key of the last result, resolved against the store as it is now.
  std::vector<plots::EventRef> sourcesOf(const QString& key) const;

  // Who held the steps back (core/analysis/stragglers.h), computed with the analysis: over the
  // whole file, or live over the last 10 s at most every 10 s. Null until the first one.
  std::shared_ptr<const core::StragglerReport> stragglers() const { return stragglers_; }
  // The hang a live job is in (core/live/hang.h), shown in a banner above the timeline: checked
  // off the GUI thread (Inspect on every rank) once no event has arrived for 5 s, and cleared as
  // soon as events flow again. Empty when not hung.
  const std::optional<core::HangReport>& hang() const { return hang_; }
  QString hangBannerText() const;
  // Shows rank's step in the timeline (uncollapsed, its step window selected and in view); the
  // rank's newest step when step < 0.
  void focusRank(core::RankId rank, int64_t step = -1);

  // A summary for the tree (ranks, tracks, per-track counts), cheap enough for a timer.
  core::SessionSummary quickSummary() const;

 signals:
  void loaded(const QString& path);
  void saved(const QString& path);
  void failed(const QString& what, const QString& message);
  void analysisChanged();
  void hangChanged();

 private:
  struct Job {
    std::shared_ptr<plots::TimelineData> data;
    QString error;
    QString path;
    bool replacesData = false;
  };
  // An analysed event by time: AnalysisResult refs are indices, which the live store's growth
  // invalidates, so they are kept as (track, start, end) and found again on use.
  struct StableRef {
    core::TrackId track = 0;
    int64_t start = 0, end = 0;
  };
  struct Analysis {
    std::shared_ptr<const core::AnalysisResult> result;
    std::map<std::string, std::vector<StableRef>> sources;
    std::shared_ptr<const core::StragglerReport> stragglers;  // null: not computed this round
    uint64_t generation = 0;
    double ms = 0;  // worker time, lock held
  };
  void startJob(std::function<Job()> fn);
  void startStreaming();
  void onAnalysisDone();
  void onJobDone();

  plots::TimelineWidget* timeline_;
  std::shared_ptr<plots::TimelineData> data_;
  std::shared_ptr<core::LiveSession> live_;
  std::vector<core::discovery::Entry> entries_;
  QString label_;
  QString path_;
  QFutureWatcher<Job> watcher_;
  std::shared_ptr<core::Analyzer> analyzer_;
  // Guards analyzer_ between the analysis task and the engine's eviction (which only tries it).
  std::shared_ptr<std::mutex> analyzerMutex_ = std::make_shared<std::mutex>();
  std::shared_ptr<std::atomic<bool>> cancelAnalysis_ = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<const core::AnalysisResult> analysis_;
  std::map<std::string, std::vector<StableRef>> sources_;
  uint64_t analysedGeneration_ = UINT64_MAX;
  double analysisMs_ = 0;
  QFutureWatcher<Analysis> analysisWatcher_;
  QTimer* analysisTimer_;
  std::shared_ptr<const core::StragglerReport> stragglers_;
  std::shared_ptr<std::atomic<int64_t>> stragglersAtNs_ = std::make_shared<std::atomic<int64_t>>(0);
  // Hang watch (live): events still for 5 s -> Inspect every rank off the GUI thread.
  void checkHang();
  void onHangChecked();
  QLabel* hangBanner_;
  QTimer* hangTimer_;
  QFutureWatcher<std::optional<core::HangReport>> hangWatcher_;
  std::optional<core::HangReport> hang_;
  uint64_t hangEvents_ = 0;
  int64_t stillSinceNs_ = 0;
  std::shared_ptr<std::atomic<int64_t>> windowNs_;
  std::unique_ptr<core::SessionWriter> recorder_;
  QString recordPath_;
};

}  // namespace trainscope::app
