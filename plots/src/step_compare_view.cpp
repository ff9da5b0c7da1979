#include "trainscope/plots/step_compare_view.h"

#include <QFontMetrics>
#include <QPainter>
#include <QPainterPath>
#include <algorithm>
#include <cmath>

namespace trainscope::plots {

namespace {

constexpr int kRowH = 18;
constexpr int kRowGap = 2;
constexpr int kLaneGap = 6;
constexpr int kRulerH = 18;
constexpr int kLabelW = 150;

QColor colorOf(core::StepOp::Kind k) {
  switch (k) {
    case core::StepOp::Kind::Compute:
      return QColor(0x4a, 0x7f, 0xc1);
    case core::StepOp::Kind::Communication:
      return QColor(0xe0, 0x8a, 0x2e);
    case core::StepOp::Kind::Other:
      break;
  }
  return QColor(0x90, 0x90, 0x90);
}

double endOf(const std::vector<core::StepOp>& ops) {
  double e = 0;
  for (const auto& op : ops) e = std::max(e, op.endMs);
  return e;
}

// A "nice" tick step (1, 2, 5 x 10^k) giving about `want` ticks over `span`.
double tickStep(double span, int want) {
  if (span <= 0) return 1;
  const double raw = span / want;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

}  // namespace

StepCompareView::StepCompareView(QWidget* parent)
    : QWidget(parent), measuredCaption_(tr("measured")), predictedCaption_(tr("predicted")) {
  setObjectName("stepCompare");
  setMinimumHeight(60);
}

void StepCompareView::setSteps(std::vector<core::StepOp> measured, std::vector<core::StepOp> predicted) {
  measured_ = std::move(measured);
  predicted_ = std::move(predicted);
  updateGeometry();
  update();
}

void StepCompareView::setCaptions(const QString& measured, const QString& predicted) {
  measuredCaption_ = measured;
  predictedCaption_ = predicted;
  update();
}

void StepCompareView::clear() {
  setSteps({}, {});
}

QStringList StepCompareView::lanes() const {
  QStringList out;
  for (const auto* ops : {&measured_, &predicted_})
    for (const auto& op : *ops) {
      const QString l = QString::fromStdString(op.lane);
      if (!out.contains(l)) out << l;
    }
  return out;
}

double StepCompareView::measuredEndMs() const {
  return endOf(measured_);
}
double StepCompareView::predictedEndMs() const {
  return endOf(predicted_);
}

QSize StepCompareView::sizeHint() const {
  const int lanesN = std::max<int>(1, static_cast<int>(lanes().size()));
  return {640, kRulerH + lanesN * (2 * kRowH + kRowGap + kLaneGap) + 8};
}

QSize StepCompareView::minimumSizeHint() const {
  return {320, std::min(sizeHint().height(), 160)};
}

void StepCompareView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().base());
  if (isEmpty()) {
    p.setPen(palette().color(QPalette::PlaceholderText));
    p.drawText(rect(), Qt::AlignCenter, tr("What-if draws the predicted step here, beside a measured one."));
    return;
  }
  const double span = std::max({measuredEndMs(), predictedEndMs(), 1e-6});
  const int x0 = kLabelW, x1 = width() - 8;
  const double pxPerMs = (x1 - x0) / span;
  auto xOf = [&](double ms) { return x0 + ms * pxPerMs; };
  const QFontMetrics fm(font());

  // Ruler.
  p.setPen(palette().color(QPalette::Text));
  const double tick = tickStep(span, std::max(2, (x1 - x0) / 90));
  for (double t = 0; t <= span + 1e-9; t += tick) {
    const double x = xOf(t);
    p.drawLine(QPointF(x, kRulerH - 5), QPointF(x, kRulerH));
    p.drawText(QPointF(x + 2, kRulerH - 6), QString::number(t, 'g', 4) + (t == 0 ? " ms" : ""));
  }
  int y = kRulerH + 2;
  const QStringList ls = lanes();
  for (const QString& lane : ls) {
    for (int row = 0; row < 2; ++row) {
      const bool ghost = row == 1;
      const auto& ops = ghost ? predicted_ : measured_;
      p.setPen(palette().color(QPalette::Text));
      const QString caption = lane + " · " + (ghost ? predictedCaption_ : measuredCaption_);
      p.drawText(QRectF(4, y, kLabelW - 8, kRowH), Qt::AlignVCenter | Qt::AlignLeft,
                 fm.elidedText(caption, Qt::ElideMiddle, kLabelW - 8));
      for (const auto& op : ops) {
        if (QString::fromStdString(op.lane) != lane) continue;
        QRectF r(xOf(op.startMs), y + 1, std::max(1.0, (op.endMs - op.startMs) * pxPerMs), kRowH - 2);
        QColor c = colorOf(op.kind);
        if (ghost) {
          QColor fill = c;
          fill.setAlpha(70);
          p.fillRect(r, fill);
          QPen pen(c.darker(120), 1, Qt::DashLine);
          p.setPen(pen);
          p.drawRect(r);
        } else {
          p.fillRect(r, c);
          p.setPen(c.darker(140));
          p.drawRect(r);
        }
        const QString label = QString::fromStdString(op.label);
        if (fm.horizontalAdvance(label) + 4 < r.width()) {
          p.setPen(ghost ? c.darker(170) : Qt::white);
          p.drawText(r, Qt::AlignCenter, label);
        }
      }
      // The step's end on each row.
      const double e = ghost ? predictedEndMs() : measuredEndMs();
      p.setPen(QPen(palette().color(QPalette::Text), 1, ghost ? Qt::DashLine : Qt::SolidLine));
      p.drawLine(QPointF(xOf(e), y), QPointF(xOf(e), y + kRowH));
      y += kRowH + kRowGap;
    }
    y += kLaneGap;
  }
}

}  // namespace trainscope::plots
