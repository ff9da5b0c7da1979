// TimelineWidget driven like a user, offscreen: wheel zoom keeps the time under the cursor, W/S/A/D,
// box selection totals, click selects an event (and its links), search next/previous, collapse and
// pin; a frame of a 400k-event trace draws a bounded number of items (level of detail).
#include <QSignalSpy>
#include <QWheelEvent>
#include <QtTest>

#include <limits>

#include "trainscope/core/synth/synth.h"
#include "trainscope/plots/timeline_details.h"
#include "trainscope/plots/timeline_widget.h"

using namespace trainscope;

namespace {

std::shared_ptr<plots::TimelineData> synthData(int ranks, int steps, int kernels) {
  auto d = std::make_shared<plots::TimelineData>();
  core::synthesizeTrace(d->store, {.ranks = ranks, .steps = steps, .kernelsPerStep = kernels});
  d->model.rebuild();
  ++d->layoutGeneration;
  ++d->generation;
  return d;
}

void wheel(QWidget* w, QPoint pos, int delta, Qt::KeyboardModifiers mods = Qt::NoModifier) {
  QWheelEvent e(QPointF(pos), QPointF(w->mapToGlobal(pos)), QPoint(), QPoint(0, delta), Qt::NoButton, mods,
                Qt::NoScrollPhase, false);
  QApplication::sendEvent(w, &e);
}

}  // namespace

class TstTimelineWidget : public QObject {
  Q_OBJECT
  plots::TimelineWidget* w_ = nullptr;

 private slots:
  void init() {
    w_ = new plots::TimelineWidget;
    w_->resize(1200, 800);
    w_->setData(synthData(2, 6, 16));
    w_->show();
    QVERIFY(QTest::qWaitForWindowExposed(w_));
  }
  void cleanup() { delete w_; }

  void startsFittedAndWheelZoomsAtCursor() {
    const auto& m = w_->data()->model;
    QCOMPARE(w_->zoom().start(), m.spanStart());
    QCOMPARE(w_->zoom().end(), m.spanEnd());
    // Zooming in with the wheel (ZoomControl keeps the time under the cursor: tst_timeline_model).
    const int x = 600;
    const int64_t before = w_->zoom().width();
    wheel(w_, QPoint(x, 300), 240);
    QVERIFY(w_->zoom().width() < before);
    // Shift+wheel scrolls rows, not time.
    const int64_t width = w_->zoom().width();
    wheel(w_, QPoint(x, 300), -120, Qt::ShiftModifier);
    QCOMPARE(w_->zoom().width(), width);
  }

  void keysZoomAndPan() {
    const int64_t w0 = w_->zoom().width();
    QTest::keyClick(w_, Qt::Key_W);
    QVERIFY(w_->zoom().width() < w0);
    const int64_t s0 = w_->zoom().start();
    QTest::keyClick(w_, Qt::Key_D);
    QVERIFY(w_->zoom().start() > s0);
    QTest::keyClick(w_, Qt::Key_A);
    QCOMPARE(w_->zoom().start(), s0);
    QTest::keyClick(w_, Qt::Key_S);
    QTest::keyClick(w_, Qt::Key_F);
    QCOMPARE(w_->zoom().width(), w0);
  }

  void boxSelectionGivesTotals() {
    QSignalSpy spy(w_, &plots::TimelineWidget::boxSelected);
    QTest::mousePress(w_, Qt::LeftButton, Qt::NoModifier, QPoint(400, 70));
    QTest::mouseMove(w_, QPoint(700, 500));
    QTest::mouseRelease(w_, Qt::LeftButton, Qt::NoModifier, QPoint(700, 500));
    QCOMPARE(spy.count(), 1);
    const auto st = w_->boxStats();
    QVERIFY(st.has_value());
    QVERIFY(st->events > 0);
    QCOMPARE(st->durationNs, spy.at(0).at(1).toLongLong() - spy.at(0).at(0).toLongLong());
    int64_t sum = 0;
    for (int64_t ns : st->nsPerKind) sum += ns;
    QVERIFY(sum > 0);
    QVERIFY(plots::selectionHtml(*st).contains("kernel"));
    if (qEnvironmentVariableIsSet("TS_TEST_SHOT"))  // to look at the overlay by hand
      w_->grab().save(qEnvironmentVariable("TS_TEST_SHOT"));
  }

  void clickSelectsAndSearchWalks() {
    QSignalSpy spy(w_, &plots::TimelineWidget::eventSelected);
    QVERIFY(w_->search("adam", true));
    const plots::EventRef first = w_->selectedEvent();
    QVERIFY(first.valid());
    const auto& store = w_->data()->store;
    QCOMPARE(store.str(store.rawEvents(first.track).name(first.index)), std::string_view("adam_kernel"));
    QVERIFY(w_->search("adam", true));
    const plots::EventRef second = w_->selectedEvent();
    QVERIFY(!(second == first));
    QVERIFY(store.rawEvents(second.track).start(second.index) >=
            store.rawEvents(first.track).start(first.index));
    QVERIFY(w_->search("adam", false));
    QCOMPARE(w_->selectedEvent(), first);
    QVERIFY(!w_->search("nothing-like-this", true));
    QVERIFY(spy.count() >= 3);
    // The details of a kernel name its launch as a linked event.
    QVERIFY(w_->search("gemm", true));
    const QString html = plots::eventDetailsHtml(*w_->data(), w_->selectedEvent());
    QVERIFY2(html.contains("cudaLaunchKernel") && html.contains("correlation"), qPrintable(html));
    // Clicking empty space clears the selection.
    QTest::mouseClick(w_, Qt::LeftButton, Qt::NoModifier, QPoint(w_->width() - 30, w_->height() - 40));
    QVERIFY(!w_->selectedEvent().valid());
  }

  void collapseAndPin() {
    QVERIFY(!w_->rankCollapsed(0));
    // The first rank header is the first lane under the ruler; a click on its label collapses it.
    QTest::mouseClick(w_, Qt::LeftButton, Qt::NoModifier, QPoint(30, 42 + 8));
    QVERIFY(w_->rankCollapsed(0));
    w_->setRankCollapsed(0, false);
    QVERIFY(!w_->rankCollapsed(0));
    w_->setRowPinned(0, true);
    QVERIFY(w_->rowPinned(0));
    w_->setRowPinned(0, false);
    QVERIFY(!w_->rowPinned(0));
  }

  void frameIsBoundedByPixelsNotEvents() {
    w_->setData(synthData(4, 400, 128));  // ~400k events
    QVERIFY(w_->data()->model.eventCount() > 400'000);
    const QImage img = w_->grab().toImage();
    QVERIFY(!img.isNull());
    const size_t items = w_->lastFrameItems();
    QVERIFY(items > 0);
    // At most ~one item per pixel column per visible row (about 40 rows fit).
    QVERIFY2(items < size_t(40 * 1000), qPrintable(QString::number(items)));
  }

  // Timestamps at the int64 limits (a crafted trace: +-9.2e15 us, one event from INT64_MIN to
  // INT64_MAX): the widget paints, zooms and pans in bounded time -- the ruler used to loop
  // forever -- with the view clamped to +-ZoomControl::kLimitNs.
  void int64ExtremesPaintInBoundedTime() {
    auto d = std::make_shared<plots::TimelineData>();
    core::TraceStore& s = d->store;
    const core::TrackId t = s.addTrack({0, core::TrackKind::CpuThread, "extremes", 1});
    constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
    s.append(t, {kMin, kMax, s.intern("everything"), core::EventKind::Range});
    s.append(t, {-9'200'000'000'000'000'000, -9'200'000'000'000'000'000 + 5, s.intern("far past"),
                 core::EventKind::Range});
    s.append(t, {9'200'000'000'000'000'000, 9'200'000'000'000'000'000 + 5, s.intern("far future"),
                 core::EventKind::Range});
    d->model.rebuild();
    ++d->layoutGeneration;
    ++d->generation;
    w_->setData(d);
    QVERIFY(!w_->grab().toImage().isNull());
    QVERIFY(w_->zoom().start() >= -plots::ZoomControl::kLimitNs - plots::ZoomControl::kLimitNs / 10);
    QVERIFY(w_->zoom().end() <= plots::ZoomControl::kLimitNs + plots::ZoomControl::kLimitNs / 10);
    QVERIFY(w_->zoom().width() > 0);
    for (int i = 0; i < 5; ++i) wheel(w_, QPoint(600, 300), 240);  // zoom in
    QVERIFY(!w_->grab().toImage().isNull());
    QTest::keyClick(w_, Qt::Key_D);  // pan
    QTest::keyClick(w_, Qt::Key_A);
    for (int i = 0; i < 8; ++i) wheel(w_, QPoint(600, 300), -240);  // out past the whole trace
    QVERIFY(!w_->grab().toImage().isNull());
    QVERIFY(w_->zoom().width() > 0);
  }

  // Issue 40: an event named with 64 MB (the GUI died at 3.4 GB on a 300 MB one) paints with
  // no more of its name than the bar can show.
  void aGiantNamePaints() {
    auto d = std::make_shared<plots::TimelineData>();
    core::TraceStore& s = d->store;
    const core::TrackId t = s.addTrack({0, core::TrackKind::CpuThread, "giant", 1});
    s.append(t, {0, 1'000'000, s.intern(std::string(64u << 20, 'g')), core::EventKind::Range});
    d->model.rebuild();
    ++d->layoutGeneration;
    ++d->generation;
    w_->setData(d);
    for (int i = 0; i < 20; ++i) QVERIFY(!w_->grab().toImage().isNull());
  }
};

QTEST_MAIN(TstTimelineWidget)
#include "tst_timeline_widget.moc"
