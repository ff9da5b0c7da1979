#include "rank_heatmap.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "analysis_charts.h"

namespace trainscope::plots {
namespace {

constexpr size_t kMaxSteps = 400;  // the latest steps; older ones are in the step-time chart
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
const char* const kMetricNames[] = {"step time", "exposed communication", "lateness (compute beyond the step's median)"};
const char* const kMetricSlugs[] = {"step_ms", "exposed_comm_ms", "lateness_ms"};

double median(std::vector<double> v) {
  if (v.empty()) return kNaN;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// White (low) through amber to dark red (high).
QRgb colourOf(double t) {
  t = std::clamp(t, 0.0, 1.0);
  const double r = 255 - 75 * t * t, g = 250 - 210 * t, b = 235 - 215 * std::sqrt(t);
  return qRgb(static_cast<int>(r), static_cast<int>(std::max(0.0, g)), static_cast<int>(std::max(0.0, b)));
}

}  // namespace

RankHeatmap::RankHeatmap(const core::AnalysisResult& r, QWidget* parent) : QWidget(parent) {
  setMinimumSize(400, 250);
  setMouseTracking(true);
  setAutoFillBackground(true);
  QPalette pal = palette();
  pal.setColor(QPalette::Window, Qt::white);
  setPalette(pal);
  // Columns: the latest steps any rank has.
  std::vector<int64_t> all;
  for (const auto& b : r.breakdown)
    for (const auto& s : b.perStep) all.push_back(s.step);
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  if (all.size() > kMaxSteps) all.erase(all.begin(), all.end() - static_cast<long>(kMaxSteps));
  steps_ = all;
  std::map<int64_t, size_t> col;
  for (size_t i = 0; i < steps_.size(); ++i) col[steps_[i]] = i;
  for (const auto& b : r.breakdown) ranks_.push_back(b.rank);
  for (auto& v : values_) v.assign(ranks_.size(), std::vector<double>(steps_.size(), kNaN));
  for (size_t ri = 0; ri < r.breakdown.size(); ++ri)
    for (const auto& s : r.breakdown[ri].perStep)
      if (auto it = col.find(s.step); it != col.end()) {
        values_[0][ri][it->second] = s.stepMs;
        values_[1][ri][it->second] = s.exposedCommMs;
        values_[2][ri][it->second] = s.computeMs;  // made relative below
      }
  for (size_t c = 0; c < steps_.size(); ++c) {  // lateness: compute beyond the step's median
    std::vector<double> col2;
    for (size_t ri = 0; ri < ranks_.size(); ++ri)
      if (!std::isnan(values_[2][ri][c])) col2.push_back(values_[2][ri][c]);
    const double m = median(col2);
    for (size_t ri = 0; ri < ranks_.size(); ++ri)
      if (!std::isnan(values_[2][ri][c])) values_[2][ri][c] = std::max(0.0, values_[2][ri][c] - m);
  }
  auto* bar = new QHBoxLayout;
  bar->setContentsMargins(8, 4, 8, 0);
  metricBox_ = new QComboBox;
  metricBox_->setObjectName("rankHeatmapMetric");
  for (const char* n : kMetricNames) metricBox_->addItem(QString::fromUtf8(n));
  orderBox_ = new QComboBox;
  orderBox_->setObjectName("rankHeatmapOrder");
  orderBox_->addItems({tr("by rank"), tr("slowest first")});
  bar->addWidget(new QLabel(tr("Colour:")));
  bar->addWidget(metricBox_);
  bar->addWidget(new QLabel(tr("Rows:")));
  bar->addWidget(orderBox_);
  bar->addStretch(1);
  auto* lay = new QVBoxLayout(this);
  lay->setContentsMargins(0, 0, 0, 0);
  lay->addLayout(bar);
  lay->addStretch(1);
  connect(metricBox_, &QComboBox::currentIndexChanged, this, [this](int i) { setMetric(static_cast<Metric>(i)); });
  connect(orderBox_, &QComboBox::currentIndexChanged, this, [this](int i) { setOrder(static_cast<Order>(i)); });
  rebuild();
}

void RankHeatmap::setMetric(Metric m) {
  metric_ = m;
  if (metricBox_->currentIndex() != static_cast<int>(m)) metricBox_->setCurrentIndex(static_cast<int>(m));
  rebuild();
}

void RankHeatmap::setOrder(Order o) {
  order_ = o;
  if (orderBox_->currentIndex() != static_cast<int>(o)) orderBox_->setCurrentIndex(static_cast<int>(o));
  rebuild();
}

double RankHeatmap::value(size_t row, size_t col) const {
  return values_[static_cast<int>(metric_)][rowIndex_.at(row)].at(col);
}

void RankHeatmap::rebuild() {
  const auto& v = values_[static_cast<int>(metric_)];
  rowIndex_.resize(ranks_.size());
  std::iota(rowIndex_.begin(), rowIndex_.end(), size_t{0});
  if (order_ == Order::ByMeanDescending) {
    std::vector<double> mean(ranks_.size(), 0);
    for (size_t i = 0; i < ranks_.size(); ++i) {
      double s = 0;
      int n = 0;
      for (double x : v[i])
        if (!std::isnan(x)) s += x, ++n;
      mean[i] = n ? s / n : -1;
    }
    std::stable_sort(rowIndex_.begin(), rowIndex_.end(), [&](size_t a, size_t b) { return mean[a] > mean[b]; });
  }
  rowRanks_.clear();
  for (size_t i : rowIndex_) rowRanks_.push_back(ranks_[i]);
  // Robust scale: 5th to 95th percentile of every cell.
  std::vector<double> cells;
  for (const auto& row : v)
    for (double x : row)
      if (!std::isnan(x)) cells.push_back(x);
  std::sort(cells.begin(), cells.end());
  if (cells.empty()) {
    lo_ = 0;
    hi_ = 1;
  } else {
    lo_ = cells[cells.size() * 5 / 100];
    hi_ = cells[std::min(cells.size() - 1, cells.size() * 95 / 100)];
    if (hi_ <= lo_) hi_ = lo_ + 1e-9;
  }
  image_ = QImage(static_cast<int>(std::max<size_t>(1, steps_.size())), static_cast<int>(std::max<size_t>(1, ranks_.size())),
                  QImage::Format_RGB32);
  image_.fill(qRgb(238, 238, 238));
  for (size_t row = 0; row < rowIndex_.size(); ++row) {
    auto* line = reinterpret_cast<QRgb*>(image_.scanLine(static_cast<int>(row)));
    const auto& src = v[rowIndex_[row]];
    for (size_t c = 0; c < steps_.size(); ++c)
      line[c] = std::isnan(src[c]) ? qRgb(238, 238, 238) : colourOf((src[c] - lo_) / (hi_ - lo_));
  }
  update();
}

QRectF RankHeatmap::plotRect() const {
  return QRectF(70, 70, std::max(50, width() - 150), std::max(50, height() - 110));
}

bool RankHeatmap::cellAt(QPointF p, size_t& row, size_t& col) const {
  const QRectF r = plotRect();
  if (!r.contains(p) || ranks_.empty() || steps_.empty()) return false;
  row = std::min(ranks_.size() - 1, static_cast<size_t>((p.y() - r.top()) / r.height() * double(ranks_.size())));
  col = std::min(steps_.size() - 1, static_cast<size_t>((p.x() - r.left()) / r.width() * double(steps_.size())));
  return true;
}

void RankHeatmap::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), Qt::white);
  const QRectF r = plotRect();
  QFont bold = font();
  bold.setBold(true);
  p.setFont(bold);
  const QString what = QString::fromUtf8(kMetricNames[static_cast<int>(metric_)]);
  if (ranks_.empty() || steps_.empty()) {
    p.drawText(rect(), Qt::AlignCenter, tr("No steps per rank in this session"));
    return;
  }
  p.drawText(QRectF(0, 36, width(), 22), Qt::AlignHCenter,
             tr("%1 ranks \u00d7 %2 steps: %3, colour clipped to its 5th\u201395th percentile")
                 .arg(ranks_.size())
                 .arg(steps_.size())
                 .arg(what));
  p.setFont(font());
  // One image, scaled: the cost of a frame does not grow with the ranks.
  p.setRenderHint(QPainter::SmoothPixmapTransform, false);
  p.drawImage(r, image_);
  p.setPen(Qt::darkGray);
  p.drawRect(r);
  // Row labels: as many as fit.
  const double rowH = r.height() / double(ranks_.size());
  const int every = std::max(1, static_cast<int>(std::ceil(14.0 / std::max(rowH, 1e-9))));
  for (size_t row = 0; row < rowRanks_.size(); row += static_cast<size_t>(every))
    p.drawText(QRectF(0, r.top() + double(row) * rowH, r.left() - 6, std::max(rowH, 14.0)),
               Qt::AlignRight | Qt::AlignTop, tr("rank %1").arg(rowRanks_[row]));
  // Step axis: first, middle, last.
  for (size_t c : {size_t{0}, steps_.size() / 2, steps_.size() - 1}) {
    const double x = r.left() + (double(c) + 0.5) / double(steps_.size()) * r.width();
    p.drawText(QRectF(x - 40, r.bottom() + 2, 80, 16), Qt::AlignHCenter, QString::number(steps_[c]));
  }
  p.drawText(QRectF(r.left(), r.bottom() + 18, r.width(), 16), Qt::AlignHCenter, tr("step"));
  // Legend.
  const QRectF lg(r.right() + 12, r.top(), 14, r.height());
  for (int i = 0; i < 64; ++i)
    p.fillRect(QRectF(lg.left(), lg.bottom() - (i + 1) * lg.height() / 64, lg.width(), lg.height() / 64 + 1),
               QColor(colourOf(i / 63.0)));
  p.drawText(QRectF(lg.left() - 8, lg.top() - 16, 60, 14), Qt::AlignLeft, QStringLiteral("%1 ms").arg(hi_, 0, 'f', 2));
  p.drawText(QRectF(lg.left() - 8, lg.bottom() + 2, 60, 14), Qt::AlignLeft, QStringLiteral("%1 ms").arg(lo_, 0, 'f', 2));
}

void RankHeatmap::mousePressEvent(QMouseEvent* e) {
  size_t row = 0, col = 0;
  if (onClicked_ && cellAt(e->position(), row, col)) onClicked_(rowRanks_[row], steps_[col]);
}

void RankHeatmap::mouseMoveEvent(QMouseEvent* e) {
  size_t row = 0, col = 0;
  if (!cellAt(e->position(), row, col)) return QToolTip::hideText();
  const double v = value(row, col);
  QToolTip::showText(e->globalPosition().toPoint(),
                     tr("rank %1, step %2: %3").arg(rowRanks_[row]).arg(steps_[col])
                         .arg(std::isnan(v) ? tr("no data") : QStringLiteral("%1 ms").arg(v, 0, 'f', 3)),
                     this);
}

QString RankHeatmap::csv() const {
  QString out = QStringLiteral("rank,step,step_ms,exposed_comm_ms,lateness_ms\n");
  for (size_t ri = 0; ri < ranks_.size(); ++ri)
    for (size_t c = 0; c < steps_.size(); ++c) {
      if (std::isnan(values_[0][ri][c])) continue;
      out += QStringLiteral("%1,%2,%3,%4,%5\n")
                 .arg(ranks_[ri])
                 .arg(steps_[c])
                 .arg(csvNumber(values_[0][ri][c]), csvNumber(values_[1][ri][c]), csvNumber(values_[2][ri][c]));
    }
  return out;
}

ChartTab* makeRanksChart(const core::AnalysisResult& r) {
  auto* view = new RankHeatmap(r);
  auto* tab = new ChartTab(QStringLiteral("Ranks"), QStringLiteral("ranks"), view);
  view->setOnCellClicked([tab](core::RankId rank, int64_t step) {
    emit tab->metricActivated(QStringLiteral("rank.%1.%2").arg(rank).arg(step));
  });
  tab->setCsv(view->csv());
  return tab;
}

}  // namespace trainscope::plots
