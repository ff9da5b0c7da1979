#include "bucket_overlap_view.h"

#include <QMouseEvent>
#include <QPainter>
#include <algorithm>
#include <cmath>

#include "analysis_charts.h"

namespace trainscope::plots {
namespace {

using Spans = std::vector<std::pair<double, double>>;

// a ∩ b and a \ b for sorted disjoint spans.
Spans intersectSpans(const Spans& a, const Spans& b) {
  Spans out;
  for (const auto& x : a)
    for (const auto& y : b) {
      const double s = std::max(x.first, y.first), e = std::min(x.second, y.second);
      if (s < e) out.push_back({s, e});
    }
  return out;
}

}  // namespace

BucketOverlapView::BucketOverlapView(const core::DataParallelResult& dp, QWidget* parent)
    : QWidget(parent), dp_(dp) {
  setMinimumSize(400, 250);
  setAutoFillBackground(true);
  QPalette pal = palette();
  pal.setColor(QPalette::Window, Qt::white);
  setPalette(pal);
}

QRectF BucketOverlapView::plotRect() const {
  return QRectF(110, 40, std::max(50, width() - 130), std::max(50, height() - 90));
}

double BucketOverlapView::rowHeight() const {
  const size_t rows = dp_.example.buckets.size() + 1;
  return plotRect().height() / static_cast<double>(rows);
}

void BucketOverlapView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), Qt::white);
  p.setRenderHint(QPainter::Antialiasing);
  const core::DpExample& ex = dp_.example;
  QFont title = font();
  title.setBold(true);
  p.setFont(title);
  if (ex.rank < 0) {
    p.drawText(rect(), Qt::AlignCenter, QStringLiteral("No gradient buckets in this session"));
    return;
  }
  p.drawText(QRectF(0, 8, width(), 24), Qt::AlignHCenter,
             QStringLiteral("Bucket communication against compute: rank %1, step %2 (overlap %3 %)")
                 .arg(ex.rank)
                 .arg(ex.step)
                 .arg(std::isnan(dp_.overlapRatio) ? 0.0 : 100 * dp_.overlapRatio, 0, 'f', 1));
  p.setFont(font());
  const QRectF pr = plotRect();
  const double span = ex.stepMs > 0 ? ex.stepMs : 1;
  auto xOf = [&](double ms) { return pr.left() + pr.width() * std::clamp(ms / span, 0.0, 1.0); };
  const double rh = rowHeight();
  auto bar = [&](int row, double a, double b, const QColor& c, double shrink) {
    const double y = pr.top() + row * rh;
    p.fillRect(QRectF(xOf(a), y + rh * shrink, std::max(1.0, xOf(b) - xOf(a)), rh * (1 - 2 * shrink)), c);
  };
  p.drawText(QRectF(0, pr.top(), pr.left() - 8, rh), Qt::AlignRight | Qt::AlignVCenter,
             QStringLiteral("compute"));
  for (const auto& [a, b] : ex.compute) bar(0, a, b, QColor(70, 130, 180), 0.15);
  int row = 1;
  for (const auto& [bucket, spans] : ex.buckets) {
    p.setPen(Qt::black);
    p.drawText(QRectF(0, pr.top() + row * rh, pr.left() - 8, rh), Qt::AlignRight | Qt::AlignVCenter,
               QStringLiteral("bucket %1").arg(bucket));
    for (const auto& s : spans) bar(row, s.first, s.second, QColor(220, 80, 60), 0.25);  // exposed
    for (const auto& s : intersectSpans(spans, ex.compute))
      bar(row, s.first, s.second, QColor(90, 170, 90), 0.25);  // hidden
    auto ready = ex.ready.find(bucket);
    if (ready != ex.ready.end()) {
      p.setPen(QPen(Qt::black, 2));
      const double x = xOf(ready->second), y = pr.top() + row * rh;
      p.drawLine(QPointF(x, y + rh * 0.1), QPointF(x, y + rh * 0.9));
    }
    ++row;
  }
  // Time axis
  p.setPen(Qt::black);
  p.drawLine(pr.bottomLeft(), pr.bottomRight());
  for (int i = 0; i <= 5; ++i) {
    const double ms = span * i / 5, x = xOf(ms);
    p.drawLine(QPointF(x, pr.bottom()), QPointF(x, pr.bottom() + 4));
    p.drawText(QRectF(x - 40, pr.bottom() + 6, 80, 16), Qt::AlignHCenter, QString::number(ms, 'g', 4));
  }
  p.drawText(
      QRectF(pr.left(), pr.bottom() + 22, pr.width(), 16), Qt::AlignHCenter,
      QStringLiteral("ms from the step start   |  black tick: bucket ready   green: hidden   red: exposed"));
}

void BucketOverlapView::mousePressEvent(QMouseEvent* e) {
  const QRectF pr = plotRect();
  const int row = static_cast<int>(std::floor((e->position().y() - pr.top()) / rowHeight()));
  if (row < 1 || row > static_cast<int>(dp_.example.buckets.size()) || !onClicked_) return;
  const int64_t bucket = std::next(dp_.example.buckets.begin(), row - 1)->first;
  for (size_t i = 0; i < dp_.buckets.size(); ++i)
    if (dp_.buckets[i].bucket == bucket) onClicked_(static_cast<int>(i));
}

ChartTab* makeBucketOverlapChart(const core::AnalysisResult& r) {
  auto* view = new BucketOverlapView(r.dataParallel);
  auto* tab = new ChartTab(QStringLiteral("Bucket overlap"), QStringLiteral("bucket_overlap"), view);
  view->setOnBucketClicked(
      [tab](int i) { emit tab->metricActivated(QStringLiteral("data_parallel.buckets[%1]").arg(i)); });
  QString csv = QStringLiteral(
      "bucket,samples,bytes,ready_ms,comm_start_ms,comm_end_ms,comm_ms,hidden_ms,exposed_ms,overlap_ratio\n");
  for (const core::BucketResult& b : r.dataParallel.buckets)
    csv += QStringLiteral("%1,%2,%3,%4,%5,%6,%7,%8,%9,%10\n")
               .arg(b.bucket)
               .arg(b.samples)
               .arg(csvNumber(b.bytes), csvNumber(b.readyMs), csvNumber(b.commStartMs),
                    csvNumber(b.commEndMs), csvNumber(b.commMs), csvNumber(b.hiddenMs),
                    csvNumber(b.exposedMs), csvNumber(b.overlapRatio));
  tab->setCsv(csv);
  return tab;
}

}  // namespace trainscope::plots
