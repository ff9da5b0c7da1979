// The real main window, offscreen, on a constructed 1F1B trace (tests/data/pp_1f1b_balanced:
// p = 4, m = 4, bubble 3/7 by hand, see tst_analysis): the Analysis dock shows the result with
// that bubble, the timeline shades the bubbles (and stops when the overlay toggle is off), and
// a click on a stage's bar in the panel selects that stage's events and zooms to them.
#include <QAction>
#include <QImage>
#include <QSignalSpy>
#include <QtTest>

#include <QChartView>
#include <QScrollBar>
#include <QValueAxis>

#include "analysis_dock.h"
#include "metadata_view.h"
#include "main_window.h"
#include "session_view.h"
#include "trainscope/plots/analysis_panel.h"

using namespace trainscope;

class TstGuiAnalysis : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  std::unique_ptr<app::MainWindow> w_;

  app::SessionView* view() const { return w_->currentView(); }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    qputenv("XDG_CONFIG_HOME", dir_.filePath("config").toUtf8());
    w_ = std::make_unique<app::MainWindow>();
    w_->resize(1400, 900);
    w_->show();
    QVERIFY(QTest::qWaitForWindowExposed(w_.get()));
    QSignalSpy loaded(w_.get(), &app::MainWindow::loaded);
    w_->openFile(QString(TRAINSCOPE_TEST_DATA) + "/pp_1f1b_balanced/trace.json");
    QTRY_COMPARE_WITH_TIMEOUT(loaded.count(), 1, 10000);
    QVERIFY(view());
    QTRY_VERIFY_WITH_TIMEOUT(view()->analysis() != nullptr, 10000);
  }

  void dockShowsTheBubble() {
    const auto r = view()->analysis();
    QVERIFY(r->pipeline.present);
    QCOMPARE(r->pipeline.stages, 4);
    QVERIFY(std::abs(r->pipeline.bubbleFraction - 3.0 / 7) < 1e-9);
    const QString summary = w_->analysisDock()->summary();
    QVERIFY2(summary.contains("2 steps") && summary.contains("bubble 42.9 %") && summary.contains("1f1b"),
             qPrintable(summary));
    plots::AnalysisPanel* panel = w_->analysisDock()->panel();
    QVERIFY(panel->isVisible());
    QVERIFY(panel->chart("bubbles") != nullptr);
  }

  void overlaysShadeBubblesAndToggle() {
    plots::TimelineWidget* t = view()->timeline();
    int bubbles = 0;
    for (const auto& o : t->overlays()) bubbles += o.kind == core::OverlayKind::Bubble;
    QVERIFY(bubbles >= 4);  // every stage waits at least in warm-up and cool-down
    QVERIFY(t->overlayMask() & plots::TimelineWidget::BubbleOverlay);
    t->fitAll();
    const QImage with = t->grab().toImage();
    w_->setOverlayMask(0);
    QCOMPARE(t->overlayMask(), 0);
    const QImage without = t->grab().toImage();
    QVERIFY(with != without);  // the shading is drawn
    // The toolbar/menu toggle brings them back.
    auto* toggle = w_->findChild<QAction*>("overlaysAction");
    QVERIFY(toggle && !toggle->isChecked());
    toggle->trigger();
    QVERIFY(t->overlayMask() & plots::TimelineWidget::BubbleOverlay);
    QCOMPARE(t->grab().toImage(), with);
  }

  void overlayTooltipSaysWhichBubble() {
    plots::TimelineWidget* t = view()->timeline();
    t->fitAll();
    // Somewhere on the timeline a bubble's tooltip names its stage and what it waited for.
    QString found;
    for (int y = 0; y < t->height() && found.isEmpty(); y += 4)
      for (int x = 0; x < t->width() && found.isEmpty(); x += 6)
        if (const QString o = t->overlayAt({x, y}); o.contains("Pipeline bubble")) found = o;
    QVERIFY2(found.contains("stage") && found.contains("step"), qPrintable(found));
    w_->setOverlayMask(0);
    for (int y = 0; y < t->height(); y += 8)
      for (int x = 0; x < t->width(); x += 12) QVERIFY(t->overlayAt({x, y}).isEmpty());
    w_->setOverlayMask(plots::TimelineWidget::BubbleOverlay | plots::TimelineWidget::ExposedCommOverlay);
  }

  void metricClickSelectsItsEvents() {
    const auto r = view()->analysis();
    const auto& st = r->pipeline.perStage.at(1);
    QCOMPARE(st.ranks.size(), size_t{1});
    const QString key = "pipeline.per_stage[1]";
    const auto refs = view()->sourcesOf(key);
    QVERIFY(!refs.empty());
    plots::TimelineWidget* t = view()->timeline();
    t->zoomBy(4);                                            // somewhere else first
    emit w_->analysisDock()->panel()->metricActivated(key);  // what a click on the bar emits
    QCOMPARE(t->highlightCount(), refs.size());
    const plots::EventRef sel = t->selectedEvent();
    QVERIFY(sel.valid());
    std::shared_lock lock(view()->data()->mutex);
    const core::TraceStore& store = view()->data()->store;
    QCOMPARE(store.track(sel.track).rank, st.ranks.front());
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (const auto& ref : refs) {
      QCOMPARE(store.track(ref.track).rank, st.ranks.front());
      lo = std::min(lo, store.rawEvents(ref.track).start(ref.index));
      hi = std::max(hi, store.rawEvents(ref.track).end(ref.index));
    }
    QVERIFY(t->zoom().start() <= lo && t->zoom().end() >= hi);
    QVERIFY(t->zoom().width() <= (hi - lo) * 6 / 5);
  }

  void breakdownClickShowsExposedCommunication() {
    w_->setOverlayMask(plots::TimelineWidget::BubbleOverlay);
    emit w_->analysisDock()->panel()->metricActivated("breakdown.per_rank[0]");
    QVERIFY(view()->timeline()->overlayMask() & plots::TimelineWidget::ExposedCommOverlay);
  }

  // Step-time chart: a warm-up step 50x the steady one does not flatten the curve; the axis is
  // clipped and the title says so (issue #34).
  void stepChartClipsWarmUpSpikes() {
    core::AnalysisResult r;
    for (int i = 0; i < 40; ++i) {
      core::StepStat s;
      s.step = i;
      s.timeMs = i == 0 ? 500 : 10 + i % 3;
      s.ranks = 4;
      r.steps.perStep.push_back(s);
    }
    plots::AnalysisPanel panel;
    panel.setResult(r);
    auto* view = qobject_cast<QChartView*>(panel.chart("step_time")->chartWidget());
    QVERIFY(view);
    QVERIFY2(view->chart()->title().contains("clipped") && view->chart()->title().contains("1 step(s) above"),
             qPrintable(view->chart()->title()));
    auto* y = qobject_cast<QValueAxis*>(view->chart()->axes(Qt::Vertical).value(0));
    QVERIFY(y);
    QVERIFY2(y->max() > 12 && y->max() < 30, qPrintable(QString::number(y->max())));
    QVERIFY(panel.chart("step_time")->csv().contains("\n0,500"));  // the CSV keeps every value
    // A steady run is not clipped.
    r.steps.perStep[0].timeMs = 11;
    panel.setResult(r);
    view = qobject_cast<QChartView*>(panel.chart("step_time")->chartWidget());
    QVERIFY(!view->chart()->title().contains("clipped"));
  }

  // Metadata as people read it: per-rank keys grouped with labels and units, logs counted.
  void metadataIsReadable() {
    const std::map<std::string, std::string> md = {
        {"job_id", "j1"},
        {"world_size", "4"},
        {"clock_sync_error_ns.0", "1200"},
        {"clock_sync_error_ns.1", "3400"},
        {"clock_offset_log.0", "0.100:5 0.200:6"},
        {"clock_offset_log.1", "0.100:7"},
        {"dropped_events.0", "0"},
        {"dropped_events.1", "0"},
        {"some_custom_key", "x"},
    };
    std::map<QString, QString> v;
    for (const auto& [k, val] : app::metadataRows(md)) {
      QVERIFY2(!k.contains('.') && !k.contains('_'), qPrintable(k));
      v[k] = val;
    }
    QCOMPARE(v.size(), size_t{6});
    QCOMPARE(v["Job"], QString("j1"));
    QCOMPARE(v["World size"], QString("4"));
    QVERIFY2(v["Clock sync error bound"].contains("1.2 µs") && v["Clock sync error bound"].contains("3.4 µs") &&
                 v["Clock sync error bound"].contains("rank 1"),
             qPrintable(v["Clock sync error bound"]));
    QCOMPARE(v["Clock offset log"], QString("3 entries over 2 ranks (in the session file)"));
    QCOMPARE(v["Dropped events"], QString("0 (2 ranks)"));
    QCOMPARE(v["Some custom key"], QString("x"));
  }

  // GPU stream rows with no event in view collapse to a thin line (issue #34): on a sampled
  // PyTorch trace (HTA's test data: 5 streams a rank, two with a handful of kernels), a 30 ms
  // window has less to scroll than the whole trace, and a paint in each does the relayout.
  void emptyGpuStreamsCollapse() {
    app::MainWindow w;
    w.resize(1400, 900);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QSignalSpy loaded(&w, &app::MainWindow::loaded);
    const QString dir = QString(TRAINSCOPE_TEST_DATA) + "/hta_sampled/";
    w.openFiles({dir + "sampled_rank-0.json.gz", dir + "sampled_rank-1.json.gz"});
    QTRY_COMPARE_WITH_TIMEOUT(loaded.count(), 1, 20000);
    plots::TimelineWidget* t = w.currentView()->timeline();
    auto* bar = t->findChild<QScrollBar*>();
    QVERIFY(bar);
    t->fitAll();
    (void)t->grab();
    const int whole = bar->maximum();
    const int64_t t0 = t->zoom().traceStart() + 1'500'000'000;
    t->zoom().setWindow(t0, t0 + 30'000'000);
    (void)t->grab();
    const int narrow = bar->maximum();
    QVERIFY2(narrow < whole, qPrintable(QString("scroll range %1 in 30 ms vs %2 over the whole trace").arg(narrow).arg(whole)));
    if (qEnvironmentVariableIsSet("TRAINSCOPE_SCREENSHOT_DIR")) {
      bar->setValue(bar->maximum());
      w.grab().save(qEnvironmentVariable("TRAINSCOPE_SCREENSHOT_DIR") + "/screenshot-gpu-streams-collapsed.png");
    }
  }

  void cleanupTestCase() { w_.reset(); }
};

QTEST_MAIN(TstGuiAnalysis)
#include "tst_gui_analysis.moc"
