// AnalysisPanel: the charts of an analysis result (docs/ANALYSIS.md) as tabs -- step time with
// knob changes, breakdown per rank, bubbles per stage, bucket overlap, bandwidth vs size, DISCO
// trade-off. Every chart exports PNG, SVG and CSV. Clicking a bar emits metricActivated with a
// metric key: "pipeline.per_stage[i]" and "data_parallel.buckets[i]" are keys of
// AnalysisResult::sources (the events to select); "breakdown.per_rank[i]" names
// result.breakdown[i], whose time the ExposedComm overlays of that rank show on the timeline.
#pragma once

#include <QPainter>
#include <QString>
#include <QTabWidget>
#include <QWidget>

#include "trainscope/core/analysis/analysis.h"

namespace trainscope::plots {

// One chart: its widget, the data behind it as CSV, and exports.
class ChartTab : public QWidget {
  Q_OBJECT
 public:
  ChartTab(const QString& title, const QString& slug, QWidget* chart, QWidget* parent = nullptr);
  QString title() const { return title_; }
  QString slug() const { return slug_; }  // file-name stem: "step_time", "breakdown", ...
  QWidget* chartWidget() const { return chart_; }
  QString csv() const { return csv_; }
  void setCsv(const QString& csv) { csv_ = csv; }

  // Render the chart at its current size (at least 800 x 450).
  bool exportPng(const QString& path) const;
  bool exportSvg(const QString& path) const;
  bool exportCsv(const QString& path) const;

 signals:
  void metricActivated(const QString& key);

 private:
  QSize renderSize() const;
  void renderTo(QPainter& p, QSize size) const;
  QString title_, slug_, csv_;
  QWidget* chart_ = nullptr;
};

class AnalysisPanel : public QTabWidget {
  Q_OBJECT
 public:
  explicit AnalysisPanel(QWidget* parent = nullptr);
  // Rebuilds every chart from the result (cheap: the result is already aggregated).
  void setResult(const core::AnalysisResult& result);
  int chartCount() const { return count(); }
  ChartTab* chart(int index) const;
  ChartTab* chart(const QString& slug) const;
  // Writes <dir>/<slug>.png, .svg and .csv for every chart; false if any write failed.
  bool exportAll(const QString& dir) const;

 signals:
  void metricActivated(const QString& key);
};

}  // namespace trainscope::plots
