// Step time, breakdown, bubbles and bandwidth charts (Qt Charts).
#include "analysis_charts.h"

#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QScatterSeries>
#include <QStackedBarSeries>
#include <QValueAxis>
#include <cmath>
#include <algorithm>
#include <map>

namespace trainscope::plots {
namespace {

QChartView* viewOf(QChart* chart) {
  chart->legend()->setAlignment(Qt::AlignBottom);
  auto* v = new QChartView(chart);
  v->setRenderHint(QPainter::Antialiasing);
  v->setMinimumSize(400, 250);
  return v;
}

double orZero(double v) {
  return std::isnan(v) ? 0 : v;
}

QString knobText(const core::KnobChangeEntry& k) {
  QStringList parts;
  for (const auto& [name, value] : k.values) parts << QString::fromStdString(name + "=" + value);
  return parts.join(", ");
}

}  // namespace

ChartTab* makeStepTimeChart(const core::AnalysisResult& r) {
  auto* chart = new QChart;
  chart->setTitle(QStringLiteral("Step time (mean over ranks)"));
  auto* line = new QLineSeries;
  line->setName(QStringLiteral("step time, ms"));
  QString csv = QStringLiteral("step,time_ms,span_ms,ranks,knob_change\n");
  std::map<int64_t, const core::KnobChangeEntry*> knobs;
  for (const core::KnobChangeEntry& k : r.knobChanges) knobs[k.step] = &k;
  double yMax = 0;
  // At most ~2,000 points: a live session accumulates tens of thousands of steps, and QtCharts
  // lays out and paints every point on the GUI thread. Past 2,000 steps, each of 1,000 buckets
  // contributes its fastest and its slowest step, in step order, so no spike is lost.
  const auto& per = r.steps.perStep;
  const size_t buckets = per.size() > 2000 ? 1000 : per.size();
  for (size_t b = 0; b < buckets; ++b) {
    const size_t lo = b * per.size() / buckets, hi = (b + 1) * per.size() / buckets;
    if (hi - lo == 1) {
      line->append(static_cast<double>(per[lo].step), per[lo].timeMs);
      continue;
    }
    size_t mn = lo, mx = lo;
    for (size_t i = lo; i < hi; ++i) {
      if (per[i].timeMs < per[mn].timeMs) mn = i;
      if (per[i].timeMs > per[mx].timeMs) mx = i;
    }
    for (size_t i : {std::min(mn, mx), std::max(mn, mx)})
      line->append(static_cast<double>(per[i].step), per[i].timeMs);
  }
  for (const core::StepStat& s : r.steps.perStep) {
    yMax = std::max(yMax, s.timeMs);
    auto it = knobs.find(s.step);
    csv += QStringLiteral("%1,%2,%3,%4,\"%5\"\n")
               .arg(s.step)
               .arg(csvNumber(s.timeMs), csvNumber(s.spanMs))
               .arg(s.ranks)
               .arg(it == knobs.end() ? QString() : knobText(*it->second));
  }
  chart->addSeries(line);
  // A robust scale: warm-up steps (allocation, first collectives, a schedule rebuilt) can be 10-100x
  // the steady step and would flatten the curve. When the slowest step is more than 3x the 95th
  // percentile, the axis stops at 1.5x that percentile and the title says how many steps lie
  // above it (the CSV keeps every value).
  {
    std::vector<double> t;
    t.reserve(r.steps.perStep.size());
    for (const core::StepStat& s : r.steps.perStep) t.push_back(s.timeMs);
    if (t.size() >= 10) {
      const size_t k = static_cast<size_t>(0.95 * static_cast<double>(t.size() - 1));
      std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(k), t.end());
      const double p95 = t[k];
      if (p95 > 0 && yMax > 3 * p95) {
        const double clip = 1.5 * p95;
        const auto above = std::count_if(r.steps.perStep.begin(), r.steps.perStep.end(),
                                         [clip](const core::StepStat& s) { return s.timeMs > clip; });
        chart->setTitle(QStringLiteral("Step time (mean over ranks) — axis clipped at %1 ms: %2 step(s) above, "
                                       "slowest %3 ms")
                            .arg(clip, 0, 'f', 2)
                            .arg(above)
                            .arg(yMax, 0, 'f', 1));
        yMax = clip / 1.15;
      }
    }
  }
  auto* x = new QValueAxis;
  x->setTitleText(QStringLiteral("step"));
  x->setLabelFormat(QStringLiteral("%d"));
  auto* y = new QValueAxis;
  y->setTitleText(QStringLiteral("ms"));
  y->setRange(0, yMax > 0 ? yMax * 1.15 : 1);
  chart->addAxis(x, Qt::AlignBottom);
  chart->addAxis(y, Qt::AlignLeft);
  line->attachAxis(x);
  line->attachAxis(y);
  // Knob changes: a vertical marker at the step where every rank applied them. Up to three, a
  // series (and a legend entry) each; more share one series whose legend names the count and
  // the last -- a legend entry per change made QtCharts' layout of this chart cost 0.7 s of GUI
  // thread per rebuild after a few dozen live changes (every change is in the CSV).
  const double top = yMax > 0 ? yMax * 1.1 : 1;
  auto addMark = [&](const QString& name) {
    auto* mark = new QLineSeries;
    mark->setName(name);
    QPen pen(Qt::DashLine);
    pen.setColor(QColor(200, 80, 0));
    mark->setPen(pen);
    return mark;
  };
  auto attach = [&](QLineSeries* mark) {
    chart->addSeries(mark);
    mark->attachAxis(x);
    mark->attachAxis(y);
  };
  if (r.knobChanges.size() <= 3) {
    for (const core::KnobChangeEntry& k : r.knobChanges) {
      auto* mark = addMark(QStringLiteral("step %1: %2").arg(k.step).arg(knobText(k)));
      mark->append(static_cast<double>(k.step), 0);
      mark->append(static_cast<double>(k.step), top);
      attach(mark);
    }
  } else {
    const core::KnobChangeEntry& last = r.knobChanges.back();
    auto* mark = addMark(QStringLiteral("%1 knob changes (last: step %2: %3)")
                             .arg(r.knobChanges.size())
                             .arg(last.step)
                             .arg(knobText(last)));
    for (const core::KnobChangeEntry& k : r.knobChanges) {  // up and down again along the axis
      mark->append(static_cast<double>(k.step), 0);
      mark->append(static_cast<double>(k.step), top);
      mark->append(static_cast<double>(k.step), 0);
    }
    attach(mark);
  }
  auto* tab = new ChartTab(QStringLiteral("Step time"), QStringLiteral("step_time"), viewOf(chart));
  tab->setCsv(csv);
  return tab;
}

ChartTab* makeBreakdownChart(const core::AnalysisResult& r) {
  auto* chart = new QChart;
  chart->setTitle(QStringLiteral("Breakdown per rank (ms per step)"));
  const char* names[] = {"compute", "overlapped comm", "exposed comm", "idle"};
  const QColor colors[] = {QColor(70, 130, 180), QColor(120, 190, 120), QColor(220, 80, 60),
                           QColor(200, 200, 200)};
  QBarSet* sets[4];
  for (int i = 0; i < 4; ++i) {
    sets[i] = new QBarSet(QString::fromLatin1(names[i]));
    sets[i]->setColor(colors[i]);
  }
  QStringList cats;
  QString csv = QStringLiteral(
      "rank,steps,step_ms,compute_ms,overlapped_comm_ms,exposed_comm_ms,idle_ms,outside_steps_ms\n");
  for (const core::RankBreakdown& b : r.breakdown) {
    cats << QStringLiteral("rank %1").arg(b.rank);
    *sets[0] << orZero(b.computeMs);
    *sets[1] << orZero(b.overlappedCommMs);
    *sets[2] << orZero(b.exposedCommMs);
    *sets[3] << orZero(b.idleMs);
    csv += QStringLiteral("%1,%2,%3,%4,%5,%6,%7,%8\n")
               .arg(b.rank)
               .arg(b.steps)
               .arg(csvNumber(b.stepMs), csvNumber(b.computeMs), csvNumber(b.overlappedCommMs),
                    csvNumber(b.exposedCommMs), csvNumber(b.idleMs), csvNumber(b.outsideStepsMs));
  }
  auto* series = new QStackedBarSeries;
  for (QBarSet* s : sets) series->append(s);
  chart->addSeries(series);
  auto* x = new QBarCategoryAxis;
  x->append(cats);
  auto* y = new QValueAxis;
  y->setTitleText(QStringLiteral("ms per step"));
  chart->addAxis(x, Qt::AlignBottom);
  chart->addAxis(y, Qt::AlignLeft);
  series->attachAxis(x);
  series->attachAxis(y);
  auto* tab = new ChartTab(QStringLiteral("Breakdown"), QStringLiteral("breakdown"), viewOf(chart));
  QObject::connect(series, &QStackedBarSeries::clicked, tab, [tab](int index, QBarSet*) {
    emit tab->metricActivated(QStringLiteral("breakdown.per_rank[%1]").arg(index));
  });
  tab->setCsv(csv);
  return tab;
}

ChartTab* makeBubbleChart(const core::AnalysisResult& r) {
  const core::PipelineResult& p = r.pipeline;
  auto* chart = new QChart;
  chart->setTitle(p.present ? QStringLiteral("Pipeline bubble per stage: %1, p=%2, m=%3, v=%4")
                                  .arg(QString::fromStdString(p.schedule))
                                  .arg(p.stages)
                                  .arg(p.microbatches)
                                  .arg(p.virtualStages)
                            : QStringLiteral("Pipeline bubble per stage (no pipeline in this session)"));
  auto* measured = new QBarSet(QStringLiteral("measured"));
  auto* simulated = new QBarSet(QStringLiteral("simulated (measured op times)"));
  auto* theory = new QBarSet(QStringLiteral("theory"));
  measured->setColor(QColor(220, 120, 60));
  simulated->setColor(QColor(230, 190, 120));
  theory->setColor(QColor(150, 150, 150));
  QStringList cats;
  QString csv = QStringLiteral(
      "stage,bubble_fraction,bubble_fraction_theory,bubble_ms,warmup_ms,steady_ms,cooldown_ms,f_ms,b_ms,w_"
      "ms,bubble_fraction_simulated\n");
  for (const core::StageResult& s : p.perStage) {
    cats << QStringLiteral("stage %1").arg(s.stage);
    *measured << orZero(s.bubbleFraction);
    *simulated << orZero(s.bubbleFractionSimulated);
    *theory << orZero(s.bubbleFractionTheory);
    csv += QStringLiteral("%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11\n")
               .arg(s.stage)
               .arg(csvNumber(s.bubbleFraction), csvNumber(s.bubbleFractionTheory), csvNumber(s.bubbleMs),
                    csvNumber(s.warmupMs), csvNumber(s.steadyMs), csvNumber(s.cooldownMs), csvNumber(s.fMs),
                    csvNumber(s.bMs), csvNumber(s.wMs))
               .arg(csvNumber(s.bubbleFractionSimulated));
  }
  auto* series = new QBarSeries;
  series->append(measured);
  series->append(simulated);
  series->append(theory);
  chart->addSeries(series);
  auto* x = new QBarCategoryAxis;
  x->append(cats);
  auto* y = new QValueAxis;
  y->setTitleText(QStringLiteral("bubble / step"));
  y->setRange(0, 1);
  chart->addAxis(x, Qt::AlignBottom);
  chart->addAxis(y, Qt::AlignLeft);
  series->attachAxis(x);
  series->attachAxis(y);
  auto* tab = new ChartTab(QStringLiteral("Bubbles"), QStringLiteral("bubbles"), viewOf(chart));
  QObject::connect(series, &QBarSeries::clicked, tab, [tab](int index, QBarSet*) {
    emit tab->metricActivated(QStringLiteral("pipeline.per_stage[%1]").arg(index));
  });
  tab->setCsv(csv);
  return tab;
}

ChartTab* makeBandwidthChart(const core::AnalysisResult& r) {
  auto* chart = new QChart;
  chart->setTitle(QStringLiteral("Bus bandwidth vs message size (NCCL conventions)"));
  auto* x = new QLogValueAxis;
  x->setBase(2);
  x->setTitleText(QStringLiteral("message size class, bytes"));
  x->setLabelFormat(QStringLiteral("%.0f"));
  auto* y = new QValueAxis;
  y->setTitleText(QStringLiteral("GB/s"));
  chart->addAxis(x, Qt::AlignBottom);
  chart->addAxis(y, Qt::AlignLeft);
  std::map<std::string, std::pair<QLineSeries*, QScatterSeries*>> byType;
  QString csv =
      QStringLiteral("collective,size_class_bytes,ranks,count,bytes,time_ms,algbw_gbps,busbw_gbps\n");
  double yMax = 0, xMin = 1, xMax = 2;
  bool first = true;
  for (const core::BandwidthClass& b : r.collectives) {
    csv += QStringLiteral("%1,%2,%3,%4,%5,%6,%7,%8\n")
               .arg(QString::fromStdString(b.collective))
               .arg(b.sizeClassBytes)
               .arg(b.ranks)
               .arg(b.count)
               .arg(csvNumber(b.bytes), csvNumber(b.timeMs), csvNumber(b.algbwGBps), csvNumber(b.busbwGBps));
    if (b.sizeClassBytes < 1 || std::isnan(b.busbwGBps)) continue;
    auto& [line, dots] = byType[b.collective];
    if (!line) {
      line = new QLineSeries;
      line->setName(QString::fromStdString(b.collective) + QStringLiteral(" busbw"));
      line->setPointsVisible(true);
      dots = new QScatterSeries;
      dots->setName(QString::fromStdString(b.collective) + QStringLiteral(" algbw"));
      dots->setMarkerSize(7);
    }
    const double sx = static_cast<double>(b.sizeClassBytes);
    line->append(sx, b.busbwGBps);
    dots->append(sx, b.algbwGBps);
    yMax = std::max({yMax, b.busbwGBps, b.algbwGBps});
    xMin = first ? sx : std::min(xMin, sx);
    xMax = first ? sx * 2 : std::max(xMax, sx * 2);
    first = false;
  }
  for (auto& [type, s] : byType) {
    chart->addSeries(s.first);
    chart->addSeries(s.second);
    for (QAbstractSeries* series :
         {static_cast<QAbstractSeries*>(s.first), static_cast<QAbstractSeries*>(s.second)}) {
      series->attachAxis(x);
      series->attachAxis(y);
    }
  }
  x->setRange(xMin / 2, xMax);
  y->setRange(0, yMax > 0 ? yMax * 1.15 : 1);
  auto* tab = new ChartTab(QStringLiteral("Bandwidth"), QStringLiteral("bandwidth"), viewOf(chart));
  tab->setCsv(csv);
  return tab;
}

}  // namespace trainscope::plots
