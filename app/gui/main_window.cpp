#include "main_window.h"
#include "metadata_view.h"
#include "work_pool.h"

#include <QPointer>
#include <QtConcurrent/QtConcurrentRun>

#include <QAction>
#include <QActionGroup>
#include <QApplication>
#include <QCloseEvent>
#include <QComboBox>
#include <QDockWidget>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QHeaderView>
#include <QInputDialog>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QMenuBar>
#include <QMessageBox>
#include <QSaveFile>
#include <QSettings>
#include <QStatusBar>
#include <QTabWidget>
#include <QTextBrowser>
#include <QTimer>
#include <QToolBar>
#include <QTreeView>
#include <cmath>
#include <mutex>
#include <utility>
#include <tuple>

#include "analysis_dock.h"
#include "attach_dialog.h"
#include "compare_dialog.h"
#include "knobs_dock.h"
#include "session_view.h"
#include "trainscope/core/live/agent_client.h"
#include "trainscope/core/tune/config.h"
#include "trainscope/plots/analysis_panel.h"
#include "trainscope/plots/session_tree_model.h"
#include "trainscope/plots/timeline_details.h"

namespace trainscope::app {

namespace {
constexpr int kMaxRecent = 8;

bool offscreen() {
  return QApplication::platformName().startsWith("offscreen");
}

QLabel* statusLabel(const QString& name) {
  auto* l = new QLabel;
  l->setObjectName(name);
  l->setContentsMargins(6, 0, 6, 0);
  return l;
}
}  // namespace

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent),
      tabs_(new QTabWidget),
      treeModel_(new plots::SessionTreeModel(this)),
      tree_(new QTreeView),
      details_(new QTextBrowser),
      search_(new QLineEdit),
      statusSource_(statusLabel("statusSource")),
      statusEvents_(statusLabel("statusEvents")),
      statusRate_(statusLabel("statusRate")),
      statusDrops_(statusLabel("statusDrops")),
      statusClock_(statusLabel("statusClock")),
      statusFrame_(statusLabel("statusFrame")),
      statusTimer_(new QTimer(this)) {
  setWindowTitle(tr("Trainscope"));
  setObjectName("MainWindow");
  tabs_->setObjectName("sessionTabs");
  tabs_->setTabsClosable(true);
  tabs_->setDocumentMode(true);
  setCentralWidget(tabs_);
  connect(tabs_, &QTabWidget::currentChanged, this, &MainWindow::onTabChanged);
  connect(tabs_, &QTabWidget::tabCloseRequested, this, [this](int i) {
    QWidget* w = tabs_->widget(i);
    tabs_->removeTab(i);
    delete w;
  });
  buildDocks();
  buildMenus();
  statusBar()->addWidget(statusSource_, 1);
  for (QLabel* l : {statusEvents_, statusRate_, statusDrops_, statusClock_, statusFrame_})
    statusBar()->addPermanentWidget(l);
  connect(statusTimer_, &QTimer::timeout, this, &MainWindow::updateStatus);
  statusTimer_->start(500);

  QSettings settings;
  if (!restoreGeometry(settings.value("window/geometry").toByteArray())) resize(1400, 860);
  if (!restoreState(settings.value("window/state").toByteArray())) {
    resizeDocks({analysisDockWidget_}, {height() * 2 / 5}, Qt::Vertical);
    resizeDocks({analysisDockWidget_, knobsDockWidget_}, {width() * 2 / 3, width() / 3}, Qt::Horizontal);
  }
  rebuildRecentMenu();
  onTabChanged();
}

MainWindow::~MainWindow() = default;

void MainWindow::buildDocks() {
  tree_->setModel(treeModel_);
  tree_->setObjectName("sessionTree");
  tree_->setUniformRowHeights(true);
  tree_->setAlternatingRowColors(true);
  tree_->header()->setStretchLastSection(false);
  tree_->header()->setSectionResizeMode(plots::SessionTreeModel::Name, QHeaderView::Stretch);
  details_->setObjectName("details");
  details_->setOpenLinks(false);
  connect(details_, &QTextBrowser::anchorClicked, this, [this](const QUrl& url) {
    const plots::EventRef ref = plots::parseEventLink(url.toString());
    if (SessionView* v = currentView(); v && ref.valid()) v->timeline()->selectEvent(ref, true);
  });
  auto dock = [this](const QString& title, const QString& name, QWidget* w, Qt::DockWidgetArea area) {
    auto* d = new QDockWidget(title, this);
    d->setObjectName(name);
    d->setWidget(w);
    addDockWidget(area, d);
    return d;
  };
  QDockWidget* treeDock = dock(tr("Ranks & tracks"), "treeDock", tree_, Qt::LeftDockWidgetArea);
  QDockWidget* detailsDock = dock(tr("Details"), "detailsDock", details_, Qt::RightDockWidgetArea);
  analysisDock_ = new AnalysisDock;
  knobsDock_ = new KnobsDock;
  connect(analysisDock_->panel(), &plots::AnalysisPanel::metricActivated, this, &MainWindow::activateMetric);
  analysisDockWidget_ = dock(tr("Analysis"), "analysisDock", analysisDock_, Qt::BottomDockWidgetArea);
  knobsDockWidget_ = dock(tr("Knobs"), "knobsDock", knobsDock_, Qt::BottomDockWidgetArea);
  splitDockWidget(analysisDockWidget_, knobsDockWidget_, Qt::Horizontal);
  knobsDockWidget_->hide();
  connect(knobsDock_, &KnobsDock::applied, this,
          [this](bool, const QString& msg) { statusBar()->showMessage(msg, 10000); });
  resizeDocks({treeDock, detailsDock}, {300, 300}, Qt::Horizontal);
}

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  QAction* open = file->addAction(tr("&Open Session…"), this, [this] {
    // Several files: one trace per rank, imported into one session.
    const QStringList paths = QFileDialog::getOpenFileNames(
        this, tr("Open session or traces"), {},
        tr("Sessions and traces (*.tsdb *.json *.json.gz *.sqlite);;All files (*)"));
    if (paths.size() == 1) openFile(paths.first());
    if (paths.size() > 1) openFiles(paths);
  });
  open->setShortcut(QKeySequence::Open);
  file->addAction(tr("&Import Chrome / PyTorch JSON or Nsight Systems SQLite…"), this, [this] {
    const QStringList paths =
        QFileDialog::getOpenFileNames(this, tr("Import traces (one per rank)"), {},
                                      tr("Traces (*.json *.json.gz *.sqlite);;Nsight Systems export "
                                         "(*.sqlite);;Chrome trace JSON (*.json *.json.gz)"));
    if (!paths.isEmpty()) openFiles(paths);
  });
  recentMenu_ = file->addMenu(tr("Open &Recent"));
  file->addSeparator();
  QAction* save = file->addAction(tr("&Save Session As…"), this, [this] {
    SessionView* v = currentView();
    if (!v || !v->data()) return;
    const QString path = QFileDialog::getSaveFileName(this, tr("Save session"), {}, tr("Sessions (*.tsdb)"));
    if (!path.isEmpty()) v->saveAs(path);
  });
  save->setShortcut(QKeySequence::Save);
  QAction* exportJson = file->addAction(tr("&Export Visible Range as Chrome JSON…"), this, [this] {
    SessionView* v = currentView();
    if (!v || !v->data()) return;
    const QString path =
        QFileDialog::getSaveFileName(this, tr("Export visible range"), {}, tr("Chrome trace (*.json)"));
    if (!path.isEmpty()) v->exportVisibleJson(path);
  });
  exportJson->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_E));
  file->addAction(tr("Export &Configuration…"), this, [this] {
    if (!currentView() || !currentView()->data()) return;
    const QString path = QFileDialog::getSaveFileName(this, tr("Export configuration"), {},
                                                      tr("Tuned configuration (*.json)"));
    if (!path.isEmpty()) startExportConfiguration(path);
  });
  connect(this, &MainWindow::configurationExported, this, [this](const QString& path, const QString& error) {
    if (!error.isEmpty()) reportError(tr("Export"), error);
    else statusBar()->showMessage(tr("Configuration exported to %1").arg(path), 5000);
  });
  file->addAction(tr("Export View as &PNG…"), this, [this] {
    SessionView* v = currentView();
    if (!v) return;
    const QString path = QFileDialog::getSaveFileName(this, tr("Export PNG"), {}, tr("PNG image (*.png)"));
    if (!path.isEmpty() && !v->exportPng(path)) reportError(tr("Export"), tr("Could not write %1").arg(path));
  });
  file->addSeparator();
  QAction* closeTab = file->addAction(tr("&Close Tab"), this, [this] {
    if (tabs_->count() > 0) emit tabs_->tabCloseRequested(tabs_->currentIndex());
  });
  closeTab->setShortcut(QKeySequence::Close);
  QAction* quit = file->addAction(tr("&Quit"), qApp, &QApplication::closeAllWindows);
  quit->setShortcut(QKeySequence::Quit);

  QMenu* job = menuBar()->addMenu(tr("&Job"));
  QAction* attach = job->addAction(tr("&Attach to Job…"), this, [this] {
    AttachDialog dlg(this);
    if (dlg.exec() == QDialog::Accepted) attachEntries(dlg.entries(), dlg.label());
  });
  attach->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_J));
  QAction* detach = job->addAction(tr("&Detach"), this, [this] {
    if (SessionView* v = currentView()) v->detach();
  });
  QAction* reattach = job->addAction(tr("&Re-attach"), this, [this] {
    if (SessionView* v = currentView(); v && v->canReattach()) {
      liveReadySent_ = false;
      v->reattach();
    }
  });
  job->addAction(tr("Live &Window…"), this, [this] {
    bool ok = false;
    const double s = QInputDialog::getDouble(
        this, tr("Live window"),
        tr("Keep the last … seconds of a live job in memory (0: everything).\nOlder events leave "
           "memory; a recording (--save-session) still gets them."),
        liveWindowSeconds_, 0, 7 * 24 * 3600, 1, &ok);
    if (ok) setLiveWindowSeconds(s);
  });
  followAction_ = job->addAction(tr("&Follow Live Data"));
  followAction_->setCheckable(true);
  followAction_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_L));
  connect(followAction_, &QAction::toggled, this, [this](bool on) {
    if (SessionView* v = currentView()) v->timeline()->setFollow(on);
  });

  QMenu* view = menuBar()->addMenu(tr("&View"));
  auto onTimeline = [this](auto fn) {
    return [this, fn] {
      if (SessionView* v = currentView()) fn(v->timeline());
    };
  };
  QAction* fit =
      view->addAction(tr("Zoom to &Fit"), this, onTimeline([](plots::TimelineWidget* t) { t->fitAll(); }));
  fit->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_0));
  view->addAction(tr("Zoom &In (W)"), this, onTimeline([](plots::TimelineWidget* t) { t->zoomBy(1.5); }))
      ->setShortcut(QKeySequence::ZoomIn);
  view->addAction(tr("Zoom &Out (S)"), this, onTimeline([](plots::TimelineWidget* t) { t->zoomBy(1 / 1.5); }))
      ->setShortcut(QKeySequence::ZoomOut);
  QMenu* colors = view->addMenu(tr("&Colour by"));
  colorGroup_ = new QActionGroup(this);
  for (auto mode : {plots::ColorMode::Kind, plots::ColorMode::MicroBatch, plots::ColorMode::Phase}) {
    QAction* a = colors->addAction(plots::colorModeName(mode));
    a->setCheckable(true);
    a->setChecked(mode == plots::ColorMode::Kind);
    a->setData(static_cast<int>(mode));
    colorGroup_->addAction(a);
  }
  connect(colorGroup_, &QActionGroup::triggered, this, [this](QAction* a) {
    if (SessionView* v = currentView())
      v->timeline()->setColorMode(static_cast<plots::ColorMode>(a->data().toInt()));
  });
  buildOverlayActions(view);
  view->addSeparator();
  QAction* find = view->addAction(tr("&Find…"), this, [this] {
    search_->setFocus();
    search_->selectAll();
  });
  find->setShortcut(QKeySequence::Find);
  view->addAction(tr("Find &Next"), this, [this] { search(true); })->setShortcut(QKeySequence::FindNext);
  view->addAction(tr("Find &Previous"), this, [this] { search(false); })
      ->setShortcut(QKeySequence::FindPrevious);
  view->addSeparator();
  view->addAction(tr("&Compare Sessions…"), this, [this] {
    if (CompareDialog* d = openCompare()) {
      d->setAttribute(Qt::WA_DeleteOnClose);
      d->show();
    }
  });
  view->addSeparator();
  for (QDockWidget* d : findChildren<QDockWidget*>()) view->addAction(d->toggleViewAction());

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("&Keys and Mouse"), this, [this] {
    QMessageBox::information(
        this, tr("Keys and mouse"),
        tr("<table cellspacing=4><tr><td><b>Wheel</b></td><td>zoom at the cursor</td></tr>"
           "<tr><td><b>Shift+wheel</b></td><td>scroll rows</td></tr>"
           "<tr><td><b>W / S</b></td><td>zoom in / out</td></tr><tr><td><b>A / D</b></td><td>pan left / "
           "right</td></tr>"
           "<tr><td><b>F</b>, Ctrl+0</td><td>fit everything</td></tr>"
           "<tr><td><b>Left drag</b></td><td>box selection: duration and per-kind totals</td></tr>"
           "<tr><td><b>Right / middle drag</b></td><td>pan</td></tr>"
           "<tr><td><b>Click</b></td><td>event details and links (arrows)</td></tr>"
           "<tr><td><b>Double click</b></td><td>zoom to event; on a row label: pin it</td></tr>"
           "<tr><td><b>Click a rank header</b></td><td>collapse / expand the rank</td></tr>"
           "<tr><td><b>Ctrl+F, F3, Shift+F3</b></td><td>find by name, next, previous</td></tr></table>"));
  });
  help->addAction(tr("&About Trainscope"), this, [this] {
    QMessageBox::about(this, tr("About Trainscope"),
                       tr("<b>Trainscope %1</b><p>See and tune distributed training while it runs.</p>")
                           .arg(QStringLiteral(TRAINSCOPE_VERSION)));
  });

  QToolBar* tb = addToolBar(tr("Main"));
  tb->setObjectName("mainToolBar");
  tb->setMovable(false);
  tb->addAction(open);
  tb->addAction(attach);
  tb->addAction(detach);
  tb->addAction(reattach);
  tb->addAction(followAction_);
  tb->addSeparator();
  tb->addAction(fit);
  tb->addWidget(new QLabel(tr(" Colour by ")));
  auto* combo = new QComboBox;
  combo->setObjectName("colorMode");
  for (QAction* a : colorGroup_->actions()) combo->addItem(a->text(), a->data());
  connect(combo, &QComboBox::activated, this, [this](int i) { colorGroup_->actions()[i]->trigger(); });
  connect(colorGroup_, &QActionGroup::triggered, combo,
          [combo](QAction* a) { combo->setCurrentIndex(combo->findData(a->data())); });
  tb->addWidget(combo);
  tb->addAction(overlaysAction_);
  tb->addSeparator();
  search_->setObjectName("search");
  search_->setPlaceholderText(tr("Find by name (Ctrl+F)"));
  search_->setClearButtonEnabled(true);
  search_->setMaximumWidth(260);
  connect(search_, &QLineEdit::returnPressed, this, [this] { search(true); });
  tb->addWidget(search_);
  tb->addAction(tr("◀"), this, [this] { search(false); })->setToolTip(tr("Previous match (Shift+F3)"));
  tb->addAction(tr("▶"), this, [this] { search(true); })->setToolTip(tr("Next match (F3)"));
}

void MainWindow::buildOverlayActions(QMenu* view) {
  QMenu* menu = view->addMenu(tr("Analysis &Overlays"));
  overlaysAction_ = menu->addAction(tr("Show &Overlays"));
  overlaysAction_->setObjectName("overlaysAction");
  overlaysAction_->setCheckable(true);
  overlaysAction_->setChecked(true);
  overlaysAction_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_B));
  overlaysAction_->setText(tr("Overlays"));
  overlaysAction_->setToolTip(
      tr("Shade pipeline bubbles and exposed communication on the timeline (Ctrl+B)"));
  menu->addSeparator();
  for (auto [name, flag, on] :
       {std::tuple{tr("Pipeline &Bubbles"), int(plots::TimelineWidget::BubbleOverlay), true},
        std::tuple{tr("&Exposed Communication"), int(plots::TimelineWidget::ExposedCommOverlay), true},
        std::tuple{tr("&Critical Path"), int(plots::TimelineWidget::CriticalPathOverlay), false}}) {
    QAction* a = menu->addAction(name);
    a->setCheckable(true);
    a->setChecked(on);
    overlayKinds_.emplace_back(a, flag);
    connect(a, &QAction::toggled, this, [this] { setOverlayMask(overlayMask()); });
  }
  connect(overlaysAction_, &QAction::toggled, this, [this] { setOverlayMask(overlayMask()); });
}

int MainWindow::overlayMask() const {
  if (!overlaysAction_->isChecked()) return 0;
  int mask = 0;
  for (const auto& [a, flag] : overlayKinds_)
    if (a->isChecked()) mask |= flag;
  return mask;
}

void MainWindow::setOverlayMask(int mask) {
  overlaysAction_->setChecked(mask != 0);
  if (mask != 0)
    for (const auto& [a, flag] : overlayKinds_) a->setChecked(mask & flag);
  for (int i = 0; i < tabs_->count(); ++i)
    if (auto* v = qobject_cast<SessionView*>(tabs_->widget(i))) v->timeline()->setOverlayMask(mask);
}

void MainWindow::activateMetric(const QString& key) {
  SessionView* v = currentView();
  if (!v) return;
  const auto refs = v->sourcesOf(key);
  if (!refs.empty()) {
    v->timeline()->highlightEvents(refs);
    statusBar()->showMessage(tr("%1: %n event(s) selected", nullptr, static_cast<int>(refs.size())).arg(key),
                             8000);
    return;
  }
  if (key.startsWith(QStringLiteral("rank."))) {  // the rank overview: "rank.R.STEP"
    const QStringList parts = key.split('.');
    if (parts.size() >= 2) v->focusRank(parts[1].toInt(), parts.size() >= 3 ? parts[2].toLongLong() : -1);
    return;
  }
  if (key.startsWith(QStringLiteral("breakdown."))) {
    for (const auto& [a, flag] : overlayKinds_)
      if (flag == plots::TimelineWidget::ExposedCommOverlay) a->setChecked(true);
    overlaysAction_->setChecked(true);
    statusBar()->showMessage(tr("%1: exposed communication is shaded red on the timeline").arg(key), 8000);
    return;
  }
  statusBar()->showMessage(tr("%1: no events to select").arg(key), 5000);
}

namespace {
// The tuned configuration of a session, written to path; the error text, empty on success.
// Runs off the GUI thread on a snapshot.
QString writeConfiguration(const std::shared_ptr<plots::TimelineData>& td, const std::string& source,
                           const QString& path) {
  const auto snap = td->snapshot(60);  // live: the last minute (knob changes of any time stay)
  auto cfg = core::configFromSession(*snap, source);
  if (!cfg) return QString::fromStdString(cfg.status().message());
  cfg->createdBy = std::string("trainscope (GUI) ") + TRAINSCOPE_VERSION;
  auto text = core::exportConfig(cfg.value(), "config");
  // QSaveFile: written beside the target and renamed over it once complete (issue 40), so a
  // failed write never leaves the old file cut short.
  QSaveFile f(path);
  if (!text || !f.open(QIODevice::WriteOnly) || f.write(QByteArray::fromStdString(text.value())) < 0 ||
      !f.commit())
    return QObject::tr("Could not write %1").arg(path);
  return {};
}
}  // namespace

bool MainWindow::exportConfiguration(const QString& path, QString* error) {
  SessionView* v = currentView();
  if (!v || !v->data()) {
    if (error) *error = tr("No session to export");
    return false;
  }
  auto td = v->data();
  const std::string source = windowTitle().toStdString();
  auto f = runWork([td, source, path] { return writeConfiguration(td, source, path); });
  const QString e = f.result();
  if (error) *error = e;
  return e.isEmpty();
}

void MainWindow::startExportConfiguration(const QString& path) {
  SessionView* v = currentView();
  if (!v || !v->data()) {
    emit configurationExported(path, tr("No session to export"));
    return;
  }
  auto td = v->data();
  const std::string source = windowTitle().toStdString();
  QPointer<MainWindow> self(this);
  (void)runWork([td, source, path, self] {
    const QString e = writeConfiguration(td, source, path);
    QMetaObject::invokeMethod(qApp, [self, path, e] {
      if (self) emit self->configurationExported(path, e);
    });
  });
}

CompareDialog* MainWindow::openCompare() {
  std::vector<CompareDialog::Source> sources;
  for (int i = 0; i < tabs_->count(); ++i)
    if (auto* v = qobject_cast<SessionView*>(tabs_->widget(i)); v && v->data())
      sources.push_back({tabs_->tabText(i), v->data(), v->analysis()});
  if (sources.empty()) {
    reportError(tr("Compare Sessions"), tr("Open a session or attach to a job first."));
    return nullptr;
  }
  // Two tabs: one against the other; one tab: its first half against its second (adjust the
  // step windows in the dialog).
  auto* d = new CompareDialog(std::move(sources), this);
  return d;
}

SessionView* MainWindow::currentView() const {
  return qobject_cast<SessionView*>(tabs_->currentWidget());
}

SessionView* MainWindow::addView(const QString& title) {
  auto* v = new SessionView;
  v->timeline()->setOverlayMask(overlayMask());
  connect(v->timeline(), &plots::TimelineWidget::eventSelected, this, [this, v](plots::EventRef ev) {
    if (v == currentView()) showEventDetails(ev);
  });
  connect(v->timeline(), &plots::TimelineWidget::boxSelected, this, [this, v] {
    if (v == currentView()) showSelection();
  });
  connect(v, &SessionView::loaded, this, [this, v](const QString& path) {
    tabs_->setTabText(tabs_->indexOf(v), v->title());
    setWindowTitle(tr("%1 — Trainscope").arg(v->title()));
    if (QFileInfo::exists(path)) addRecent(path);  // not "a, b" of several files
    refreshTree();
    updateStatus();
    showEventDetails({});
    analysisDockWidget_->show();
    emit loaded(path);
  });
  connect(v, &SessionView::saved, this,
          [this](const QString& path) { statusBar()->showMessage(tr("Saved %1").arg(path), 5000); });
  connect(v, &SessionView::failed, this, [this, v](const QString& path, const QString& msg) {
    if (!v->data()) {  // a load that failed leaves an empty tab behind: drop it
      tabs_->removeTab(tabs_->indexOf(v));
      v->deleteLater();
    }
    statusSource_->setText(tr("Failed: %1").arg(path));
    reportError(tr("Trainscope"), msg);
    emit failed(path, msg);
  });
  tabs_->setCurrentIndex(tabs_->addTab(v, title));
  return v;
}

void MainWindow::openFile(const QString& path) {
  openFiles({path});
}

void MainWindow::openFiles(const QStringList& paths) {
  if (paths.isEmpty()) return;
  const QString name =
      paths.size() == 1 ? QFileInfo(paths.first()).fileName() : tr("%1 files").arg(paths.size());
  SessionView* v = addView(tr("Opening %1…").arg(name));
  statusSource_->setText(tr("Opening %1…").arg(paths.join(", ")));
  v->openFiles(paths);
}

void MainWindow::attachEntries(std::vector<core::discovery::Entry> entries, const QString& label) {
  liveReadySent_ = false;
  SessionView* v = addView(label);
  v->setLiveWindowSeconds(liveWindowSeconds_);
  v->attach(std::move(entries), label, std::exchange(nextRecordPath_, QString()));
  knobsDock_->setView(v);
  analysisDockWidget_->show();
  knobsDockWidget_->show();
  followAction_->setChecked(true);
  setWindowTitle(tr("%1 — Trainscope").arg(label));
  updateStatus();
}

bool MainWindow::attachJob(const QString& jobId, QString* error) {
  auto entries = core::LiveSession::entriesOf(jobId.toStdString(), false);
  if (!entries) {
    *error = QString::fromStdString(entries.status().message());
    return false;
  }
  attachEntries(std::move(entries).value(), tr("job %1 (live)").arg(jobId));
  return true;
}

void MainWindow::setLiveWindowSeconds(double seconds) {
  liveWindowSeconds_ = std::max(0.0, seconds);
  if (SessionView* v = currentView(); v && v->canReattach()) v->setLiveWindowSeconds(liveWindowSeconds_);
}

namespace {
QString windowText(double seconds) {
  if (seconds >= 120 && std::fmod(seconds, 60) == 0) return MainWindow::tr("%1 min").arg(seconds / 60);
  return MainWindow::tr("%1 s").arg(seconds);
}
}  // namespace

void MainWindow::attachFirst(int timeoutMs) {
  // Polls discovery (a directory listing) until a job with all its ranks shows up.
  auto* timer = new QTimer(this);
  auto waited = std::make_shared<int>(0);
  connect(timer, &QTimer::timeout, this, [this, timer, waited, timeoutMs] {
    *waited += 200;
    for (auto& job : AttachDialog::localJobs()) {
      if (static_cast<int>(job.size()) < job.front().worldSize && *waited < timeoutMs / 2) continue;
      timer->deleteLater();
      const QString id = QString::fromStdString(job.front().jobId);
      attachEntries(std::move(job), tr("job %1 (live)").arg(id));
      return;
    }
    statusSource_->setText(tr("Waiting for a job to attach to… (%1 s)").arg(*waited / 1000));
    if (*waited >= timeoutMs) {
      timer->deleteLater();
      reportError(tr("Attach"), tr("No running job appeared within %1 s.").arg(timeoutMs / 1000));
      emit failed(QStringLiteral("--attach-first"), tr("no running job found"));
    }
  });
  timer->start(200);
}

void MainWindow::reportError(const QString& title, const QString& message) {
  statusBar()->showMessage(message, 10000);
  if (!offscreen() && !nonInteractive_) QMessageBox::warning(this, title, message);
}

void MainWindow::onTabChanged() {
  SessionView* v = currentView();
  refreshTree();
  analysisDock_->setView(v);
  knobsDock_->setView(v);
  if (!v) {
    details_->setHtml(
        tr("<h3>No session open</h3><p><b>File → Open Session…</b> opens a <code>.tsdb</code> "
           "session or a Chrome/PyTorch trace (<code>.json</code>); <b>Job → Attach…</b> "
           "(Ctrl+J) connects to a running job.</p><p>Make a session with "
           "<code>trainscope-cli synth --out demo.tsdb</code>, or start a job with "
           "<code>make run</code>.</p>"));
    setWindowTitle(tr("Trainscope"));
    return;
  }
  setWindowTitle(tr("%1 — Trainscope").arg(v->title()));
  followAction_->setChecked(v->timeline()->follow());
  for (QAction* a : colorGroup_->actions())
    if (a->data().toInt() == static_cast<int>(v->timeline()->colorMode())) a->setChecked(true);
  showEventDetails(v->timeline()->selectedEvent());
  updateStatus();
}

void MainWindow::refreshTree() {
  SessionView* v = currentView();
  if (!v || !v->data()) {
    treeModel_->clear();
    return;
  }
  const bool first = treeModel_->rowCount() == 0;
  treeModel_->setSummary(v->quickSummary());
  if (first) tree_->expandAll();
  for (int c = 1; c < plots::SessionTreeModel::ColumnCount; ++c) tree_->resizeColumnToContents(c);
}

void MainWindow::showEventDetails(const plots::EventRef& ev) {
  SessionView* v = currentView();
  if (!v || !v->data()) return;
  if (!ev.valid()) {
    details_->setHtml(overviewHtml(v->quickSummary()));
    return;
  }
  QString html;
  {
    std::shared_lock lock(v->data()->mutex);  // the engine holds it for one round at most
    html = plots::eventDetailsHtml(*v->data(), ev);
  }
  details_->setHtml(html);
}

QString MainWindow::overviewHtml(const core::SessionSummary& s) {
  const QLocale loc;
  QString html =
      tr("<h3>Session</h3><p style='color:#555'>Click an event for its attributes and links; drag "
         "to measure a range.</p><table cellspacing=3>");
  auto row = [&](const QString& k, const QString& val) {
    html += QStringLiteral("<tr><td style='color:#555'>%1</td><td>%2</td></tr>").arg(k, val);
  };
  row(tr("events"), loc.toString(static_cast<qulonglong>(s.eventCount)));
  row(tr("span"), tr("%1 ms").arg(loc.toString(static_cast<double>(s.endNs - s.startNs) / 1e6, 'f', 3)));
  row(tr("ranks"), QString::number(s.ranks.size()));
  row(tr("tracks"), QString::number(s.tracks.size()));
  row(tr("dropped"), loc.toString(static_cast<qulonglong>(s.droppedEvents)));
  html += QStringLiteral("</table>");
  if (!s.metadata.empty()) {
    html += tr("<h4>Metadata</h4><table cellspacing=3>");
    for (const auto& [k, val] : metadataRows(s.metadata)) row(k.toHtmlEscaped(), val.toHtmlEscaped());
    html += QStringLiteral("</table>");
  }
  return html;
}

void MainWindow::showSelection() {
  SessionView* v = currentView();
  if (!v) return;
  if (auto st = v->timeline()->boxStats()) details_->setHtml(plots::selectionHtml(*st));
}

void MainWindow::search(bool forward) {
  SessionView* v = currentView();
  if (!v || search_->text().isEmpty()) return;
  if (!v->timeline()->search(search_->text(), forward))
    statusBar()->showMessage(
        tr("No %1 match for \"%2\"").arg(forward ? tr("further") : tr("earlier"), search_->text()), 4000);
}

void MainWindow::refreshStatus() {
  updateStatus();
}

void MainWindow::setColorMode(int mode) {
  for (QAction* a : colorGroup_->actions())
    if (a->data().toInt() == mode) a->trigger();
}

void MainWindow::updateStatus() {
  SessionView* v = currentView();
  const QLocale loc;
  if (!v) {
    statusSource_->setText(tr("No session"));
    for (QLabel* l : {statusEvents_, statusRate_, statusDrops_, statusClock_, statusFrame_}) l->clear();
    return;
  }
  plots::TimelineWidget* t = v->timeline();
  statusFrame_->setText(
      tr("frame %1 items · %2 µs").arg(t->lastFrameItems()).arg(t->lastFramePrepMs() * 1e3, 0, 'f', 0));
  statusFrame_->setMinimumWidth(statusFrame_->fontMetrics().horizontalAdvance(statusFrame_->text()) + 16);
  statusFrame_->setToolTip(
      tr("Level-of-detail items drawn in the last frame and the time the model took to prepare them"));
  if (v->canReattach()) {
    const auto st = v->liveStats();
    statusSource_->setText(
        tr("%1: %2 · %3/%4 ranks connected%5")
            .arg(QString::fromStdString(st.jobId), QString::fromLatin1(core::liveStateName(st.state)))
            .arg(st.ranksConnected)
            .arg(st.ranksTotal)
            .arg(st.message.empty() ? QString()
                                    : QStringLiteral(" — ") + QString::fromStdString(st.message)));
    statusEvents_->setText(tr("%1 events").arg(loc.toString(static_cast<qulonglong>(st.events))));
    statusEvents_->setToolTip({});
    if (const uint64_t gone = v->data() ? v->data()->evictedEvents.load() : 0; gone > 0) {
      // Live retention let older events go: say so, and where they are.
      const QString where = v->recordingPath().isEmpty()
                                ? tr("not kept (record with --save-session to keep them)")
                                : tr("in %1").arg(v->recordingPath());
      statusEvents_->setText(tr("%1 events · showing the last %2; %3 older ones left memory")
                                 .arg(loc.toString(static_cast<qulonglong>(st.events)),
                                      windowText(v->liveWindowSeconds()),
                                      loc.toString(static_cast<qulonglong>(gone))));
      statusEvents_->setToolTip(tr("Live window (Job → Live Window…): events older than the window left "
                                   "memory; they are %1")
                                    .arg(where));
    }
    statusRate_->setText(tr("%1 events/s").arg(loc.toString(st.eventsPerSecond, 'f', 0)));
    QString drops = tr("dropped %1").arg(loc.toString(static_cast<qulonglong>(st.dropped)));
    if (st.notReceived)  // sent by the agents, never received here: this GUI fell behind (issue 40)
      drops += tr(" · not received %1").arg(loc.toString(static_cast<qulonglong>(st.notReceived)));
    statusDrops_->setText(drops);
    statusDrops_->setStyleSheet(st.dropped || st.notReceived ? "color: #b00000;" : "");
    statusClock_->setText(tr("clock ±%1 µs").arg(static_cast<double>(st.clockErrorNs) / 1e3, 0, 'f', 1));
    if (++treeTicks_ % 4 == 0) {
      refreshTree();
      if (!t->selectedEvent().valid() && !t->boxStats()) showEventDetails({});
    }
    if (st.state == core::LiveState::Ended && endedShown_ != v) {
      endedShown_ = v;  // once per tab: the job went away, what arrived is kept
      statusBar()->showMessage(tr("%1: %2 — File → Save Session As… keeps it")
                                   .arg(QString::fromStdString(st.jobId), QString::fromStdString(st.message)),
                               15000);
    }
    if (!liveReadySent_ && st.ranksTotal > 0 && st.ranksSeen >= st.ranksTotal && st.events > 0) {
      liveReadySent_ = true;
      emit liveReady(st.ranksSeen, st.events);
    }
    return;
  }
  if (!v->data()) return;
  const core::SessionSummary s = v->quickSummary();
  statusSource_->setText(v->sourcePath());
  statusEvents_->setText(tr("%1 events").arg(loc.toString(static_cast<qulonglong>(s.eventCount))));
  statusRate_->clear();
  statusDrops_->setText(tr("dropped %1").arg(loc.toString(static_cast<qulonglong>(s.droppedEvents))));
  int64_t clockErr = 0;
  for (const auto& [k, val] : s.metadata)
    if (k.rfind("clock_sync_error_ns.", 0) == 0)
      clockErr = std::max<int64_t>(clockErr, std::atoll(val.c_str()));
  statusClock_->setText(clockErr ? tr("clock ±%1 µs").arg(static_cast<double>(clockErr) / 1e3, 0, 'f', 1)
                                 : QString());
}

void MainWindow::addRecent(const QString& path) {
  QSettings settings;
  QStringList recent = settings.value("recentFiles").toStringList();
  recent.removeAll(path);
  recent.prepend(path);
  while (recent.size() > kMaxRecent) recent.removeLast();
  settings.setValue("recentFiles", recent);
  rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu() {
  recentMenu_->clear();
  const QStringList recent = QSettings().value("recentFiles").toStringList();
  for (const QString& path : recent) recentMenu_->addAction(path, this, [this, path] { openFile(path); });
  recentMenu_->setEnabled(!recent.isEmpty());
}

void MainWindow::closeEvent(QCloseEvent* event) {
  QSettings settings;
  settings.setValue("window/geometry", saveGeometry());
  settings.setValue("window/state", saveState());
  event->accept();
}

}  // namespace trainscope::app
