// Per-bucket overlap chart, painted: one window (rank, step) of the session with the compute
// intervals on top and, per gradient bucket, its ready time and its communication bar split into
// the part hidden behind compute (green) and the exposed part (red).
#pragma once

#include <QWidget>
#include <functional>

#include "trainscope/core/analysis/analysis.h"

namespace trainscope::plots {

class BucketOverlapView : public QWidget {
 public:
  explicit BucketOverlapView(const core::DataParallelResult& dp, QWidget* parent = nullptr);
  // Called with the bucket's index in dp.buckets when its row is clicked.
  void setOnBucketClicked(std::function<void(int)> f) { onClicked_ = std::move(f); }
  QSize sizeHint() const override { return {800, 450}; }

 protected:
  void paintEvent(QPaintEvent*) override;
  void mousePressEvent(QMouseEvent* e) override;

 private:
  QRectF plotRect() const;
  double rowHeight() const;
  core::DataParallelResult dp_;
  std::function<void(int)> onClicked_;
};

}  // namespace trainscope::plots
