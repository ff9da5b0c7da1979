// DISCO trade-off: for one split layer, latency against communication sparsity in pipelined
// mode max(L_comm, L_comp) and wait mode L_comm + L_comp (the cost model of background.md 1 fed
// with the layer's measured dense times), the measured points, held-out accuracy on the right
// axis, and the equilibrium sparsity where L_comm = L_comp. A recording of the inference
// benchmark adds a whole-model view of its table.
#include <QChart>
#include <QChartView>
#include <QComboBox>
#include <QLineSeries>
#include <QScatterSeries>
#include <QVBoxLayout>
#include <QValueAxis>
#include <cmath>

#include "analysis_charts.h"

namespace trainscope::plots {
namespace {

struct Model {
  double commDense, compDense, n;
  double comm(double s) const { return commDense * (1 - s); }
  double comp(double s) const { return compDense * (1 - (n - 1) / n * s); }
};

// The trade-off charts' axes: sparsity 0..1 below, latency (titled) left, accuracy 0..1 right.
struct SparsityAxes {
  QValueAxis *x, *latency, *accuracy;
};
SparsityAxes sparsityAxes(QChart* chart, const QString& latencyTitle) {
  SparsityAxes a{new QValueAxis, new QValueAxis, new QValueAxis};
  a.x->setRange(0, 1);
  a.x->setTitleText(QStringLiteral("communication sparsity"));
  a.latency->setTitleText(latencyTitle);
  a.accuracy->setRange(0, 1);
  a.accuracy->setTitleText(QStringLiteral("accuracy"));
  chart->addAxis(a.x, Qt::AlignBottom);
  chart->addAxis(a.latency, Qt::AlignLeft);
  chart->addAxis(a.accuracy, Qt::AlignRight);
  return a;
}

QChart* discoChart(const core::DiscoLayer& d) {
  auto* chart = new QChart;
  chart->setTitle(QStringLiteral("DISCO layer %1 (N=%2): latency vs sparsity; pipelined = max(L_comm, L_comp), wait = L_comm + L_comp").arg(d.layer).arg(d.nodes));
  auto [x, y, acc] = sparsityAxes(chart, QStringLiteral("layer latency, ms"));
  auto add = [&](QXYSeries* s, QValueAxis* ax) {
    chart->addSeries(s);
    s->attachAxis(x);
    s->attachAxis(ax);
  };
  double yMax = 0;
  const Model m{d.commDenseMs, d.compDenseMs, static_cast<double>(std::max(1, d.nodes))};
  if (!std::isnan(m.commDense) && !std::isnan(m.compDense)) {
    auto* pipe = new QLineSeries;
    pipe->setName(QStringLiteral("pipelined"));
    auto* wait = new QLineSeries;
    wait->setName(QStringLiteral("wait"));
    for (int i = 0; i <= 100; ++i) {
      const double s = i / 100.0;
      pipe->append(s, std::max(m.comm(s), m.comp(s)));
      wait->append(s, m.comm(s) + m.comp(s));
      yMax = std::max(yMax, m.comm(s) + m.comp(s));
    }
    add(pipe, y);
    add(wait, y);
  }
  auto* mp = new QScatterSeries;
  mp->setName(QStringLiteral("pipelined, measured"));
  auto* mw = new QScatterSeries;
  mw->setName(QStringLiteral("wait, measured"));
  auto* ma = new QLineSeries;
  ma->setName(QStringLiteral("accuracy"));
  for (const core::DiscoPoint& p : d.bySparsity) {
    mp->append(p.sparsity, std::max(p.lCommMs, p.lCompMs));
    mw->append(p.sparsity, p.lCommMs + p.lCompMs);
    yMax = std::max(yMax, p.lCommMs + p.lCompMs);
    if (!std::isnan(p.accuracy)) ma->append(p.sparsity, p.accuracy);
  }
  add(mp, y);
  add(mw, y);
  add(ma, acc);
  if (d.commBound && !std::isnan(d.equilibriumSparsity)) {
    auto* eq = new QLineSeries;
    eq->setName(QStringLiteral("S_eql %1").arg(d.equilibriumSparsity, 0, 'f', 3));
    eq->append(d.equilibriumSparsity, 0);
    eq->append(d.equilibriumSparsity, yMax > 0 ? yMax * 1.1 : 1);
    QPen pen(Qt::DashLine);
    pen.setColor(QColor(200, 80, 0));
    pen.setWidth(2);
    eq->setPen(pen);
    add(eq, y);
  }
  y->setRange(0, yMax > 0 ? yMax * 1.15 : 1);
  chart->legend()->setAlignment(Qt::AlignBottom);
  return chart;
}

// The inference benchmark's table (trainscope-train --disco-bench): whole-model latency per
// inference against sparsity in both modes, accuracy on the right axis; the independent
// branches (sparsity 1 from scratch) as single points.
QChart* inferenceChart(const std::vector<core::DiscoInferencePoint>& points) {
  auto* chart = new QChart;
  chart->setTitle(QStringLiteral("DISCO inference benchmark: latency per inference and accuracy vs sparsity"));
  auto [x, y, acc] = sparsityAxes(chart, QStringLiteral("latency per inference, ms"));
  auto series = [&](QXYSeries* s, const QString& name, QValueAxis* ax) {
    s->setName(name);
    chart->addSeries(s);
    s->attachAxis(x);
    s->attachAxis(ax);
    return s;
  };
  QXYSeries* pipe = series(new QLineSeries, QStringLiteral("pipelined"), y);
  QXYSeries* wait = series(new QLineSeries, QStringLiteral("wait"), y);
  QXYSeries* accuracy = series(new QLineSeries, QStringLiteral("accuracy"), acc);
  QXYSeries* indLatency = series(new QScatterSeries, QStringLiteral("independent: latency"), y);
  QXYSeries* indAccuracy = series(new QScatterSeries, QStringLiteral("independent: accuracy"), acc);
  double yMax = 0;
  for (const core::DiscoInferencePoint& p : points) {
    for (double v : {p.latencyPipelinedMs, p.latencyWaitMs})
      if (!std::isnan(v)) yMax = std::max(yMax, v);
    if (p.independent) {
      indLatency->append(p.sparsity, p.latencyPipelinedMs);
      indLatency->append(p.sparsity, p.latencyWaitMs);
      indAccuracy->append(p.sparsity, p.accuracy);
      continue;
    }
    pipe->append(p.sparsity, p.latencyPipelinedMs);
    wait->append(p.sparsity, p.latencyWaitMs);
    if (!std::isnan(p.accuracy)) accuracy->append(p.sparsity, p.accuracy);
  }
  y->setRange(0, yMax > 0 ? yMax * 1.15 : 1);
  chart->legend()->setAlignment(Qt::AlignBottom);
  return chart;
}

}  // namespace

ChartTab* makeDiscoChart(const core::AnalysisResult& r) {
  auto* box = new QWidget;
  auto* layout = new QVBoxLayout(box);
  layout->setContentsMargins(0, 0, 0, 0);
  auto* pick = new QComboBox;
  for (const core::DiscoLayer& d : r.disco) pick->addItem(QStringLiteral("layer %1").arg(d.layer));
  if (!r.discoInference.empty()) pick->addItem(QStringLiteral("inference benchmark (whole model)"));
  pick->setVisible(pick->count() > 1);
  auto* view = new QChartView;
  view->setRenderHint(QPainter::Antialiasing);
  view->setMinimumSize(400, 250);
  layout->addWidget(pick);
  layout->addWidget(view, 1);
  const std::vector<core::DiscoLayer> layers = r.disco;
  const std::vector<core::DiscoInferencePoint> inference = r.discoInference;
  auto show = [view, layers, inference](int i) {
    QChart* old = view->chart();
    if (i >= 0 && i < static_cast<int>(layers.size()))
      view->setChart(discoChart(layers[static_cast<size_t>(i)]));
    else if (i >= 0 && !inference.empty())
      view->setChart(inferenceChart(inference));
    else {
      auto* empty = new QChart;
      empty->setTitle(QStringLiteral("DISCO trade-off (no DISCO layers in this session)"));
      view->setChart(empty);
    }
    delete old;
  };
  show(pick->count() > 0 ? 0 : -1);
  QObject::connect(pick, &QComboBox::currentIndexChanged, view, show);
  auto* tab = new ChartTab(QStringLiteral("DISCO"), QStringLiteral("disco"), box);
  QString csv =
      QStringLiteral("layer,nodes,kind,sparsity,l_comm_ms,l_comp_ms,pipelined_ms,wait_ms,accuracy\n");
  for (const core::DiscoLayer& d : r.disco) {
    const Model m{d.commDenseMs, d.compDenseMs, static_cast<double>(std::max(1, d.nodes))};
    for (int i = 0; i <= 20; ++i) {
      const double s = i / 20.0;
      csv += QStringLiteral("%1,%2,model,%3,%4,%5,%6,%7,\n")
                 .arg(d.layer)
                 .arg(d.nodes)
                 .arg(csvNumber(s), csvNumber(m.comm(s)), csvNumber(m.comp(s)),
                      csvNumber(std::max(m.comm(s), m.comp(s))), csvNumber(m.comm(s) + m.comp(s)));
    }
    for (const core::DiscoPoint& p : d.bySparsity)
      csv += QStringLiteral("%1,%2,measured,%3,%4,%5,%6,%7,%8\n")
                 .arg(d.layer)
                 .arg(d.nodes)
                 .arg(csvNumber(p.sparsity), csvNumber(p.lCommMs), csvNumber(p.lCompMs),
                      csvNumber(std::max(p.lCommMs, p.lCompMs)), csvNumber(p.lCommMs + p.lCompMs),
                      csvNumber(p.accuracy));
    csv += QStringLiteral("%1,%2,equilibrium,%3,,,,,\n")
               .arg(d.layer)
               .arg(d.nodes)
               .arg(csvNumber(d.equilibriumSparsity));
  }
  for (const core::DiscoInferencePoint& p : r.discoInference)  // whole model: no layer, nodes
    csv += QStringLiteral(",,%1,%2,,,%3,%4,%5\n")
               .arg(p.independent ? QStringLiteral("inference-independent") : QStringLiteral("inference"),
                    csvNumber(p.sparsity), csvNumber(p.latencyPipelinedMs), csvNumber(p.latencyWaitMs),
                    csvNumber(p.accuracy));
  tab->setCsv(csv);
  return tab;
}

}  // namespace trainscope::plots
