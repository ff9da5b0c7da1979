// StepCompareView: one measured step and one predicted step (the what-if's "ghost") drawn on the
// same time axis, lane by lane: for each lane ("compute", "gradient sync", "stage 0", ...) the
// measured ops as solid boxes and, right below, the predicted ops as translucent boxes with a
// dashed outline. Both steps start at 0 ms, so a longer bar or a later end is visible at once.
// Also used for two measured steps (two sessions or two windows): setCaptions names the rows.
#pragma once

#include <QString>
#include <QWidget>
#include <vector>

#include "trainscope/core/tune/whatif.h"

namespace trainscope::plots {

class StepCompareView : public QWidget {
  Q_OBJECT
 public:
  explicit StepCompareView(QWidget* parent = nullptr);
  void setSteps(std::vector<core::StepOp> measured, std::vector<core::StepOp> predicted);
  void setCaptions(const QString& measured, const QString& predicted);
  void clear();
  bool isEmpty() const { return measured_.empty() && predicted_.empty(); }
  const std::vector<core::StepOp>& measuredOps() const { return measured_; }
  const std::vector<core::StepOp>& predictedOps() const { return predicted_; }
  // The lanes drawn, in order (measured lanes first, then lanes only the prediction has).
  QStringList lanes() const;
  // Both steps' end: the longest op end of each.
  double measuredEndMs() const;
  double predictedEndMs() const;
  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent*) override;

 private:
  std::vector<core::StepOp> measured_, predicted_;
  QString measuredCaption_, predictedCaption_;
};

}  // namespace trainscope::plots
