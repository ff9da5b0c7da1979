// The rank overview (issue 35, item 4): a rank x step heat map of one metric -- step time,
// exposed communication, or lateness (compute beyond the step's median over ranks: what the
// others wait for) -- readable at 1,024 ranks. Painted from one QImage (one pixel per rank and
// step, scaled), rebuilt only when the result, the metric or the order changes, so a frame costs
// one drawImage whatever the rank count. The colour scale runs from the 5th to the 95th
// percentile (said on the chart; outliers are clipped). Rows sort by rank or by the metric's
// mean; a click names (rank, step).
#pragma once

#include <QImage>
#include <QWidget>
#include <functional>
#include <vector>

#include "trainscope/core/analysis/analysis.h"

class QComboBox;

namespace trainscope::plots {

class RankHeatmap : public QWidget {
  Q_OBJECT
 public:
  enum class Metric { StepTime = 0, ExposedComm = 1, Lateness = 2 };
  enum class Order { ByRank = 0, ByMeanDescending = 1 };
  explicit RankHeatmap(const core::AnalysisResult& r, QWidget* parent = nullptr);
  void setMetric(Metric m);
  void setOrder(Order o);
  void setOnCellClicked(std::function<void(core::RankId, int64_t)> f) { onClicked_ = std::move(f); }
  QSize sizeHint() const override { return {800, 450}; }
  // For tests and the CSV: rows (ranks in display order), steps, values (NaN: no data).
  const std::vector<core::RankId>& rows() const { return rowRanks_; }
  const std::vector<int64_t>& steps() const { return steps_; }
  double value(size_t row, size_t col) const;
  std::pair<double, double> scale() const { return {lo_, hi_}; }
  QString csv() const;

 protected:
  void paintEvent(QPaintEvent*) override;
  void mousePressEvent(QMouseEvent* e) override;
  void mouseMoveEvent(QMouseEvent* e) override;

 private:
  void rebuild();
  QRectF plotRect() const;
  bool cellAt(QPointF p, size_t& row, size_t& col) const;
  std::vector<core::RankId> ranks_;          // rank order
  std::vector<int64_t> steps_;               // columns
  std::vector<std::vector<double>> values_[3];  // [metric][rank index][step index]
  Metric metric_ = Metric::StepTime;
  Order order_ = Order::ByRank;
  std::vector<core::RankId> rowRanks_;
  std::vector<size_t> rowIndex_;  // display row -> index into ranks_
  QImage image_;
  double lo_ = 0, hi_ = 1;
  QComboBox* metricBox_ = nullptr;
  QComboBox* orderBox_ = nullptr;
  std::function<void(core::RankId, int64_t)> onClicked_;
};

}  // namespace trainscope::plots
