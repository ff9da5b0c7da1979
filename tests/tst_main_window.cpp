// The real main window, offscreen: open a .tsdb (off the GUI thread), zoom with keys, box-select,
// search with the toolbar field, read the details pane; save the session, export the visible
// range as Chrome JSON and the view as PNG, then open those files again in new tabs. A corrupt
// file gives a message and no tab.
#include <QLineEdit>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTextBrowser>
#include <QtTest>

#include "attach_dialog.h"
#include "main_window.h"
#include "session_view.h"
#include "trainscope/core/session/tsdb.h"
#include "trainscope/core/synth/synth.h"

using namespace trainscope;

class TstMainWindow : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;

  static bool waitLoaded(app::MainWindow& w, QSignalSpy& spy, int count) {
    for (int i = 0; i < 400 && spy.count() < count; ++i) QTest::qWait(25);
    (void)w;
    return spy.count() >= count;
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    qputenv("XDG_CONFIG_HOME", dir_.filePath("config").toUtf8());  // leave the user's settings alone
  }

  void openZoomSelectSearchSaveExport() {
    core::TraceStore store;
    core::synthesizeTrace(store, {.ranks = 3, .steps = 8, .kernelsPerStep = 16});
    const uint64_t events = store.eventCount();
    const QString session = dir_.filePath("s.tsdb");
    QVERIFY(core::saveSession(store, session.toStdString()).isOk());

    app::MainWindow w;
    w.resize(1400, 900);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QSignalSpy loaded(&w, &app::MainWindow::loaded);
    w.openFile(session);
    QVERIFY(waitLoaded(w, loaded, 1));
    app::SessionView* v = w.currentView();
    QVERIFY(v && v->data());
    QCOMPARE(v->data()->model.eventCount(), events);
    plots::TimelineWidget* t = v->timeline();

    // Zoom in with W, twice.
    const int64_t full = t->zoom().width();
    t->setFocus();
    QTest::keyClick(t, Qt::Key_W);
    QTest::keyClick(t, Qt::Key_W);
    QVERIFY(t->zoom().width() < full * 0.7);

    // Box selection: the details pane shows the per-kind totals.
    auto* details = w.findChild<QTextBrowser*>("details");
    QVERIFY(details);
    QTest::mousePress(t, Qt::LeftButton, Qt::NoModifier, QPoint(300, 60));
    QTest::mouseMove(t, QPoint(800, 600));
    QTest::mouseRelease(t, Qt::LeftButton, Qt::NoModifier, QPoint(800, 600));
    QVERIFY(t->boxStats().has_value());
    QVERIFY2(details->toPlainText().contains("Selection"), qPrintable(details->toPlainText()));

    // Search from the toolbar: the first "recv_activations" is selected and described.
    auto* search = w.findChild<QLineEdit*>("search");
    QVERIFY(search);
    search->setText("recv_act");
    QTest::keyClick(search, Qt::Key_Return);
    QVERIFY(t->selectedEvent().valid());
    QVERIFY2(details->toPlainText().contains("recv_activations"), qPrintable(details->toPlainText()));
    QVERIFY2(details->toPlainText().contains("send_activations"), "the linked send is listed");

    // Save, export the visible range and the view.
    QSignalSpy saved(v, &app::SessionView::saved);
    const QString copy = dir_.filePath("copy.tsdb"), json = dir_.filePath("visible.json"),
                  png = dir_.filePath("view.png");
    v->saveAs(copy);
    for (int i = 0; i < 400 && saved.count() < 1; ++i) QTest::qWait(25);
    QCOMPARE(saved.count(), 1);
    v->exportVisibleJson(json);
    for (int i = 0; i < 400 && saved.count() < 2; ++i) QTest::qWait(25);
    QCOMPARE(saved.count(), 2);
    QVERIFY(v->exportPng(png));
    QVERIFY(!QImage(png).isNull());
    auto reread = core::loadSession(copy.toStdString());
    QVERIFY(reread.isOk());
    QCOMPARE(uint64_t(reread->eventCount()), events);

    // The exported range opens (import path) with fewer events than the whole session.
    w.openFile(json);
    QVERIFY(waitLoaded(w, loaded, 2));
    auto* tabs = w.findChild<QTabWidget*>("sessionTabs");
    QCOMPARE(tabs->count(), 2);
    const uint64_t visible = w.currentView()->data()->model.eventCount();
    QVERIFY(visible > 0 && visible < events);
  }

  void remoteEndpointsBecomeRankEntries() {
    QString error;
    auto e = app::AttachDialog::remoteEntries(" 127.0.0.1:5000, gpu-node:6000 ", "/tmp/secret", &error);
    QCOMPARE(e.size(), size_t(2));
    QCOMPARE(e[0].endpoint, std::string("tcp:127.0.0.1:5000"));
    QCOMPARE(e[1].endpoint, std::string("tcp:gpu-node:6000"));
    QCOMPARE(e[1].rank, 1);
    QCOMPARE(e[0].worldSize, 2);
    QCOMPARE(e[0].secretFile, std::string("/tmp/secret"));
    QVERIFY(app::AttachDialog::remoteEntries("justahost", "", &error).empty());
    QVERIFY(error.contains("host:port"));
    QVERIFY(app::AttachDialog::remoteEntries(" ", "", &error).empty());
    // Attaching by id to a job that is not running is refused with the reason.
    app::MainWindow w;
    QVERIFY(!w.attachJob("no-such-job", &error));
    QVERIFY2(error.contains("no running job"), qPrintable(error));
  }

  void corruptFileIsRefusedWithoutATab() {
    const QString bad = dir_.filePath("bad.tsdb");
    QFile f(bad);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(QByteArray(4096, 'x'));
    f.close();
    app::MainWindow w;
    w.show();
    QSignalSpy failed(&w, &app::MainWindow::failed);
    w.openFile(bad);
    for (int i = 0; i < 400 && failed.count() < 1; ++i) QTest::qWait(25);
    QCOMPARE(failed.count(), 1);
    QVERIFY(!failed.at(0).at(1).toString().isEmpty());
    QTest::qWait(50);  // the empty tab is removed with deleteLater
    QCOMPARE(w.findChild<QTabWidget*>("sessionTabs")->count(), 0);
  }
};

QTEST_MAIN(TstMainWindow)
#include "tst_main_window.moc"
