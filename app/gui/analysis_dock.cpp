#include "analysis_dock.h"

#include <QElapsedTimer>
#include <QHeaderView>
#include <QLabel>
#include <QTreeWidget>
#include <QVBoxLayout>
#include <cmath>

#include "session_view.h"
#include "trainscope/plots/analysis_panel.h"

namespace trainscope::app {

AnalysisDock::AnalysisDock(QWidget* parent)
    : QWidget(parent), summary_(new QLabel), slow_(new QTreeWidget), panel_(new plots::AnalysisPanel) {
  auto* lay = new QVBoxLayout(this);
  lay->setContentsMargins(4, 4, 4, 4);
  lay->setSpacing(4);
  summary_->setObjectName("analysisSummary");
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  summary_->setStyleSheet("QLabel { padding: 3px 6px; background: #eef1f6; border-radius: 3px; }");
  panel_->setObjectName("analysisPanel");
  slow_->setObjectName("whoIsSlow");
  slow_->setHeaderLabels({tr("Who is slow"), tr("Late in"), tr("By"), tr("Cause")});
  slow_->setRootIsDecorated(false);
  slow_->setUniformRowHeights(true);
  slow_->setMaximumHeight(110);
  slow_->header()->setStretchLastSection(true);
  slow_->setToolTip(tr("The ranks that arrived last at their collectives, late enough to hold the step back "
                       "(docs/ANALYSIS.md, \"Straggler attribution\"). Double-click: show that rank's step."));
  connect(slow_, &QTreeWidget::itemActivated, this, [this](QTreeWidgetItem* item, int) {
    if (!view_ || !item) return;
    view_->focusRank(item->data(0, Qt::UserRole).toInt(), item->data(0, Qt::UserRole + 1).toLongLong());
  });
  lay->addWidget(summary_);
  lay->addWidget(slow_);
  lay->addWidget(panel_, 1);
}

void AnalysisDock::setView(SessionView* v) {
  if (view_ == v) return;
  disconnect(conn_);
  view_ = v;
  if (v) conn_ = connect(v, &SessionView::analysisChanged, this, &AnalysisDock::refresh);
  refresh();
}

QString AnalysisDock::summary() const {
  return summary_->text();
}

QString AnalysisDock::summaryText(const core::AnalysisResult& r) {
  auto pct = [](double f) { return QStringLiteral("%1 %").arg(100 * f, 0, 'f', 1); };
  QStringList parts;
  parts << (r.steps.count == 1 ? tr("1 step") : tr("%1 steps").arg(r.steps.count));
  if (!std::isnan(r.steps.meanMs)) parts << tr("step %1 ms").arg(r.steps.meanMs, 0, 'f', 2);
  if (r.pipeline.present && !std::isnan(r.pipeline.bubbleFraction)) {
    QString b = tr("bubble %1").arg(pct(r.pipeline.bubbleFraction));
    if (!std::isnan(r.pipeline.bubbleFractionTheory))
      b += tr(" (theory %1, %2)")
               .arg(pct(r.pipeline.bubbleFractionTheory), QString::fromStdString(r.pipeline.schedule));
    if (!std::isnan(r.pipeline.bubbleFractionSimulated))
      b += tr(", %1 with these stage times").arg(pct(r.pipeline.bubbleFractionSimulated));
    parts << b;
  }
  if (r.dataParallel.present && !std::isnan(r.dataParallel.overlapRatio)) {
    parts << tr("DP overlap %1").arg(pct(r.dataParallel.overlapRatio));
    if (!std::isnan(r.dataParallel.exposedCommMs))
      parts << tr("exposed comm %1 ms").arg(r.dataParallel.exposedCommMs, 0, 'f', 2);
  }
  if (r.stragglers.slowestRank >= 0 && r.stragglers.meanSkewMs > 0.005)
    parts << tr("skew %1 ms (rank %2)").arg(r.stragglers.meanSkewMs, 0, 'f', 2).arg(r.stragglers.slowestRank);
  return parts.join(QStringLiteral(" · "));
}

void AnalysisDock::showEvent(QShowEvent* e) {
  QWidget::showEvent(e);
  if (stale_) refresh();
}

void AnalysisDock::refresh() {
  // Rebuilding the charts costs GUI time: a hidden dock only notes that it is behind.
  stale_ = !isVisible();
  if (stale_) return;
  auto r = view_ ? view_->analysis() : nullptr;
  if (!r) {
    summary_->setText(view_ ? (view_->isAnalyzing() ? tr("Analysing…") : tr("No analysis yet"))
                            : tr("Open a session or attach to a job to see its analysis."));
    panel_->setResult({});
    slow_->clear();
    slow_->hide();
    return;
  }
  summary_->setText(summaryText(*r));
  slow_->clear();
  if (auto s = view_->stragglers()) {
    for (const core::Straggler& g : s->stragglers) {
      auto* item = new QTreeWidgetItem(slow_);
      item->setText(0, tr("rank %1").arg(g.rank));
      item->setText(1, tr("%1 of %2 steps").arg(g.steps.size()).arg(s->steps));
      item->setText(2, tr("%1 ms").arg(g.lateMs, 0, 'f', 1));
      item->setText(3, g.what.empty() ? QString::fromStdString(g.cause)
                                      : QString::fromStdString(g.cause + ": " + g.what));
      item->setData(0, Qt::UserRole, g.rank);
      item->setData(0, Qt::UserRole + 1, static_cast<qlonglong>(g.steps.empty() ? -1 : g.steps.back()));
    }
    if (s->stragglers.empty()) {
      auto* item = new QTreeWidgetItem(slow_);
      item->setText(0, s->matchedCollectives ? tr("nobody: every rank within %1 ms").arg(s->thresholdMs, 0, 'f', 1)
                                             : tr("no collectives to compare"));
      item->setFlags(Qt::ItemIsEnabled);
    }
  }
  slow_->setVisible(slow_->topLevelItemCount() > 0);
  QElapsedTimer clock;
  clock.start();
  panel_->setResult(*r);
  summary_->setToolTip(tr("Analysed in %1 ms (worker thread); charts drawn in %2 ms")
                           .arg(view_->lastAnalysisMs(), 0, 'f', 1)
                           .arg(static_cast<double>(clock.nsecsElapsed()) / 1e6, 0, 'f', 1));
}

}  // namespace trainscope::app
