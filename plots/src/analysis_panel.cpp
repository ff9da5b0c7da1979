#include "trainscope/plots/analysis_panel.h"

#include <QChart>
#include <QChartView>
#include <QDir>
#include <QFile>
#include <QImage>
#include <QPainter>
#include <QSvgGenerator>
#include <QTextStream>
#include <QVBoxLayout>
#include <cmath>

#include "analysis_charts.h"

namespace trainscope::plots {

QString csvNumber(double v) {
  return std::isnan(v) ? QString() : QString::number(v, 'g', 12);
}

ChartTab::ChartTab(const QString& title, const QString& slug, QWidget* chart, QWidget* parent)
    : QWidget(parent), title_(title), slug_(slug), chart_(chart) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(chart_);
}

QSize ChartTab::renderSize() const {
  return chart_->isVisible() ? chart_->size() : chart_->size().expandedTo(QSize(800, 450));
}

// A visible chart renders itself. A chart on a tab that was never shown has no layout yet:
// a Qt Charts chart is laid out at the export size in its scene and rendered from there (then
// put back), a painted view is resized and rendered.
void ChartTab::renderTo(QPainter& p, QSize size) const {
  if (chart_->isVisible()) {
    chart_->render(&p);
    return;
  }
  auto* view = qobject_cast<QChartView*>(chart_);
  if (!view) view = chart_->findChild<QChartView*>();
  if (view && view->chart() && view->chart()->scene()) {
    QChart* c = view->chart();
    const QRectF old = c->geometry();
    c->setGeometry(QRectF(QPointF(0, 0), QSizeF(size)));
    c->scene()->render(&p, QRectF(QPointF(0, 0), QSizeF(size)), QRectF(QPointF(0, 0), QSizeF(size)));
    c->setGeometry(old);
    return;
  }
  chart_->resize(size);
  chart_->render(&p);
}

bool ChartTab::exportPng(const QString& path) const {
  const QSize size = renderSize();
  QImage img(size, QImage::Format_ARGB32);
  img.fill(Qt::white);
  QPainter p(&img);
  p.setRenderHint(QPainter::Antialiasing);
  renderTo(p, size);
  p.end();
  return img.save(path, "PNG");
}

bool ChartTab::exportSvg(const QString& path) const {
  const QSize size = renderSize();
  QSvgGenerator gen;
  gen.setFileName(path);
  gen.setSize(size);
  gen.setViewBox(QRect(QPoint(0, 0), size));
  gen.setTitle(title_);
  gen.setDescription(QStringLiteral("Trainscope analysis chart"));
  QPainter p;
  if (!p.begin(&gen)) return false;
  renderTo(p, size);
  return p.end() && QFile::exists(path);
}

bool ChartTab::exportCsv(const QString& path) const {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate | QIODevice::Text)) return false;
  QTextStream(&f) << csv_;
  return f.error() == QFile::NoError;
}

AnalysisPanel::AnalysisPanel(QWidget* parent) : QTabWidget(parent) {
  setDocumentMode(true);
}

void AnalysisPanel::setResult(const core::AnalysisResult& r) {
  const int current = currentIndex();
  while (count() > 0) {
    QWidget* w = widget(0);
    removeTab(0);
    w->deleteLater();
  }
  for (ChartTab* tab : {makeStepTimeChart(r), makeBreakdownChart(r), makeBubbleChart(r),
                        makeBucketOverlapChart(r), makeBandwidthChart(r), makeDiscoChart(r),
                        makeRanksChart(r)}) {
    connect(tab, &ChartTab::metricActivated, this, &AnalysisPanel::metricActivated);
    addTab(tab, tab->title());
  }
  if (current >= 0 && current < count()) setCurrentIndex(current);
}

ChartTab* AnalysisPanel::chart(int index) const {
  return qobject_cast<ChartTab*>(widget(index));
}

ChartTab* AnalysisPanel::chart(const QString& slug) const {
  for (int i = 0; i < count(); ++i)
    if (chart(i)->slug() == slug) return chart(i);
  return nullptr;
}

bool AnalysisPanel::exportAll(const QString& dir) const {
  bool ok = QDir().mkpath(dir);
  for (int i = 0; i < count(); ++i) {
    const ChartTab* c = chart(i);
    const QString stem = QDir(dir).filePath(c->slug());
    ok = c->exportPng(stem + ".png") && ok;
    ok = c->exportSvg(stem + ".svg") && ok;
    ok = c->exportCsv(stem + ".csv") && ok;
  }
  return ok;
}

}  // namespace trainscope::plots
