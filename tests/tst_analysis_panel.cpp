// AnalysisPanel offscreen: the seven charts build from real analysis results of the constructed
// cases (tests/data), export PNG/SVG/CSV with the numbers of the result, and clicks name the
// metric whose events the timeline should select.
#include <QChartView>
#include <QComboBox>
#include <QImage>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

#include "trainscope/core/analysis/analysis.h"
#include "trainscope/core/interop/chrome_trace.h"
#include "trainscope/plots/analysis_panel.h"

using namespace trainscope;

namespace {

core::AnalysisResult analyse(const char* name) {
  auto r = core::importChromeTraceFile(std::string(TRAINSCOPE_TEST_DATA) + "/" + name + "/trace.json");
  if (!r) qFatal("%s", r.status().toString().c_str());
  return core::analyzeStore(r.value());
}

int inkPixels(const QImage& img) {
  int n = 0;
  for (int y = 0; y < img.height(); y += 2)
    for (int x = 0; x < img.width(); x += 2) n += img.pixelColor(x, y) != QColor(Qt::white);
  return n;
}

}  // namespace

class TstAnalysisPanel : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;

 private slots:
  void buildsSevenCharts() {
    plots::AnalysisPanel panel;
    panel.setResult(analyse("pp_1f1b_balanced"));
    QCOMPARE(panel.chartCount(), 7);
    QStringList slugs;
    for (int i = 0; i < panel.chartCount(); ++i) slugs << panel.chart(i)->slug();
    QCOMPARE(slugs,
             (QStringList{"step_time", "breakdown", "bubbles", "bucket_overlap", "bandwidth", "disco", "ranks"}));
    // Rebuilding keeps the tab the user is on.
    panel.setCurrentIndex(2);
    panel.setResult(analyse("pp_gpipe"));
    QCOMPARE(panel.currentIndex(), 2);
    QCOMPARE(panel.chartCount(), 7);
  }

  void exportsPngSvgCsv() {
    plots::AnalysisPanel panel;
    panel.resize(1000, 600);
    panel.setResult(analyse("pp_1f1b_balanced"));
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    QVERIFY(panel.exportAll(dir_.filePath("pp")));
    for (const char* slug : {"step_time", "breakdown", "bubbles", "bucket_overlap", "bandwidth", "disco", "ranks"}) {
      const QString stem = dir_.filePath(QStringLiteral("pp/%1").arg(slug));
      QImage img(stem + ".png");
      QVERIFY2(!img.isNull(), slug);
      QVERIFY(img.width() >= 400 && img.height() >= 250);
      // Something was drawn (no buckets and no DISCO layers in this case: those say so only).
      if (QString(slug) != "bucket_overlap" && QString(slug) != "disco") QVERIFY2(inkPixels(img) > 500, slug);
      QFile svg(stem + ".svg");
      QVERIFY(svg.open(QIODevice::ReadOnly));
      QVERIFY2(svg.readAll().contains("<svg"), slug);
      QVERIFY(QFile::exists(stem + ".csv"));
    }
    // CSV carries the result's numbers: bubble 9/21 measured and theory 3/7 for every stage.
    QFile csv(dir_.filePath("pp/bubbles.csv"));
    QVERIFY(csv.open(QIODevice::ReadOnly));
    const QStringList lines = QString::fromUtf8(csv.readAll()).trimmed().split('\n');
    QCOMPARE(lines.size(), 5);
    QVERIFY(lines[0].startsWith("stage,bubble_fraction,bubble_fraction_theory"));
    for (int s = 0; s < 4; ++s) {
      const QStringList f = lines[s + 1].split(',');
      QCOMPARE(f[0].toInt(), s);
      QVERIFY(qAbs(f[1].toDouble() - 3.0 / 7) < 1e-9);
      QVERIFY(qAbs(f[2].toDouble() - 3.0 / 7) < 1e-9);
      QVERIFY(qAbs(f[10].toDouble() - 3.0 / 7) < 1e-9);  // simulated: this trace follows the schedule
    }
    const QString steps = panel.chart("step_time")->csv();
    QVERIFY(steps.contains("\n0,21,21,4,"));
  }

  void bucketChartAndClicks() {
    plots::AnalysisPanel panel;
    panel.resize(1000, 600);
    panel.setResult(analyse("dp_buckets"));
    panel.setCurrentIndex(3);
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    plots::ChartTab* tab = panel.chart("bucket_overlap");
    QVERIFY(tab->csv().contains("\n1,2,4194304,4,5,7,2,0.5,1.5,0.25\n"));
    QSignalSpy spy(&panel, &plots::AnalysisPanel::metricActivated);
    // Rows: compute, bucket 0, 1, 2 over the plot height (top 40, bottom margin 50).
    QWidget* view = tab->chartWidget();
    const double rowH = (view->height() - 90) / 4.0;
    QTest::mouseClick(view, Qt::LeftButton, {}, QPoint(view->width() / 2, static_cast<int>(40 + rowH * 2.5)));
    QCOMPARE(spy.count(), 1);
    QCOMPARE(spy.at(0).at(0).toString(), QStringLiteral("data_parallel.buckets[1]"));
    QVERIFY(tab->exportPng(dir_.filePath("bucket.png")));
    QVERIFY(inkPixels(QImage(dir_.filePath("bucket.png"))) > 500);
    QVERIFY(panel.chart("breakdown")->csv().contains("\n0,1,10,2.5,4,2.5,1,1.5\n"));
    QVERIFY(panel.chart("bandwidth")->csv().contains("allgather,8388608,2,2,8388608,1,8.388608,4.194304"));
  }

  void discoChart() {
    plots::AnalysisPanel panel;
    panel.setResult(analyse("disco"));
    const QString csv = panel.chart("disco")->csv();
    // Model at S = 0.5 for layer 0: L_comm 2, L_comp 1.5 -> pipelined 2, wait 3.5
    QVERIFY2(csv.contains("\n0,2,model,0.5,2,1.5,2,3.5,\n"), qPrintable(csv));
    QVERIFY(csv.contains("\n0,2,measured,0.5,2,1.5,2,3.5,0.87\n"));
    QVERIFY(csv.contains("\n0,2,equilibrium,0.666666666667"));
    // The inference benchmark's rows (whole model: no layer, no nodes).
    QVERIFY2(csv.contains("\n,,inference,0.5,,,0.2,0.3,0.88\n"), qPrintable(csv));
    QVERIFY(csv.contains("\n,,inference-independent,1,,,0.05,0.06,0.8\n"));
    // Layers 0 and 1, then the benchmark's whole-model view: it draws (title and series).
    auto* pick = panel.chart("disco")->chartWidget()->findChild<QComboBox*>();
    QVERIFY(pick && pick->count() == 3);
    pick->setCurrentIndex(2);
    auto* view = panel.chart("disco")->chartWidget()->findChild<QChartView*>();
    QVERIFY(view && view->chart()->title().contains("inference benchmark"));
    QCOMPARE(view->chart()->series().size(), 5);  // pipelined, wait, accuracy, independent x 2
    view->resize(1000, 600);
    QVERIFY(inkPixels(view->grab().toImage()) > 500);
    if (qEnvironmentVariableIsSet("TRAINSCOPE_CHART_DIR"))
      view->grab().save(qEnvironmentVariable("TRAINSCOPE_CHART_DIR") + "/disco_inference.png");
    QVERIFY(panel.chart("disco")->exportSvg(dir_.filePath("disco.svg")));
    if (qEnvironmentVariableIsSet("TRAINSCOPE_CHART_DIR")) {  // for looking at the charts
      panel.resize(1000, 600);
      panel.exportAll(qEnvironmentVariable("TRAINSCOPE_CHART_DIR") + "/disco");
      plots::AnalysisPanel dp;
      dp.resize(1000, 600);
      dp.setResult(analyse("dp_buckets"));
      dp.exportAll(qEnvironmentVariable("TRAINSCOPE_CHART_DIR") + "/dp");
    }
  }

  // The rank overview: rank x step, by hand. Three ranks, two steps; compute 4/6/5 ms in step 7
  // (median 5: rank 1 is 1 ms late), 3/3/9 in step 8 (median 3: rank 2 is 6 ms late).
  void ranksHeatmap() {
    core::AnalysisResult r;
    const double compute[2][3] = {{4, 6, 5}, {3, 3, 9}};
    for (int rank = 0; rank < 3; ++rank) {
      core::RankBreakdown b;
      b.rank = rank;
      for (int s = 0; s < 2; ++s) {
        core::BreakdownStep st;
        st.step = 7 + s;
        st.stepMs = 10 + s;
        st.computeMs = compute[s][rank];
        st.exposedCommMs = rank * 0.5;
        b.perStep.push_back(st);
      }
      r.breakdown.push_back(b);
    }
    plots::AnalysisPanel panel;
    panel.resize(1000, 600);
    panel.setResult(r);
    plots::ChartTab* tab = panel.chart("ranks");
    QVERIFY(tab);
    const QString csv = tab->csv();
    QVERIFY2(csv.startsWith("rank,step,step_ms,exposed_comm_ms,lateness_ms\n"), qPrintable(csv));
    QVERIFY2(csv.contains("\n1,7,10,0.5,1\n"), qPrintable(csv));
    QVERIFY2(csv.contains("\n2,8,11,1,6\n"), qPrintable(csv));
    QVERIFY2(csv.contains("\n0,8,11,0,0\n"), qPrintable(csv));
    // Lateness, slowest first: rank 2 (mean 3), rank 1 (0.5), rank 0 (0).
    QWidget* view = tab->chartWidget();
    auto* metric = view->findChild<QComboBox*>("rankHeatmapMetric");
    auto* order = view->findChild<QComboBox*>("rankHeatmapOrder");
    QVERIFY(metric && order);
    metric->setCurrentIndex(2);
    order->setCurrentIndex(1);
    panel.setCurrentWidget(tab);
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    // A click on the top row, right half: the slowest rank (2) in the later step (8).
    QSignalSpy spy(&panel, &plots::AnalysisPanel::metricActivated);
    const QRect plot(70, 70, view->width() - 150, view->height() - 110);
    QTest::mouseClick(view, Qt::LeftButton, {}, QPoint(plot.left() + plot.width() * 3 / 4, plot.top() + plot.height() / 6));
    QCOMPARE(spy.count(), 1);
    QCOMPARE(spy.at(0).at(0).toString(), QStringLiteral("rank.2.8"));
    QVERIFY(tab->exportPng(dir_.filePath("ranks.png")));
    QVERIFY(inkPixels(QImage(dir_.filePath("ranks.png"))) > 500);
  }

  void emptyResult() {
    plots::AnalysisPanel panel;
    panel.setResult(core::AnalysisResult{});
    QCOMPARE(panel.chartCount(), 7);
    QVERIFY(panel.exportAll(dir_.filePath("empty")));
  }
};

QTEST_MAIN(TstAnalysisPanel)
#include "tst_analysis_panel.moc"
