#include "main_window.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QFileDialog>
#include <QHeaderView>
#include <QLabel>
#include <QLocale>
#include <QMenuBar>
#include <QMessageBox>
#include <QSettings>
#include <QSplitter>
#include <QStatusBar>
#include <QTextBrowser>
#include <QTreeView>
#include <QtConcurrent/QtConcurrentRun>

#include "trainscope/core/chrome_trace.h"
#include "trainscope/core/summary.h"
#include "trainscope/plots/session_tree_model.h"

namespace trainscope::app {

namespace {
constexpr int kMaxRecent = 8;
QString fromStd(std::string_view s) { return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size())); }
}  // namespace

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent),
      model_(new plots::SessionTreeModel(this)),
      tree_(new QTreeView),
      details_(new QTextBrowser),
      statusFile_(new QLabel(tr("No session"))),
      statusEvents_(new QLabel),
      statusDrops_(new QLabel) {
  setWindowTitle(tr("Trainscope"));
  setObjectName("MainWindow");

  tree_->setModel(model_);
  tree_->setObjectName("sessionTree");
  tree_->setUniformRowHeights(true);
  tree_->setAlternatingRowColors(true);
  tree_->header()->setStretchLastSection(false);
  tree_->header()->setSectionResizeMode(plots::SessionTreeModel::Name, QHeaderView::Stretch);
  details_->setObjectName("details");
  details_->setOpenExternalLinks(false);

  auto* split = new QSplitter;
  split->setObjectName("mainSplitter");
  split->addWidget(tree_);
  split->addWidget(details_);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  setCentralWidget(split);

  QMenu* file = menuBar()->addMenu(tr("&File"));
  QAction* open = file->addAction(tr("&Open Session…"), this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Open session"), {},
                                                      tr("Sessions (*.tsdb *.json);;All files (*)"));
    if (!path.isEmpty()) openFile(path);
  });
  open->setShortcut(QKeySequence::Open);
  recentMenu_ = file->addMenu(tr("Open &Recent"));
  file->addSeparator();
  QAction* quit = file->addAction(tr("&Quit"), qApp, &QApplication::closeAllWindows);
  quit->setShortcut(QKeySequence::Quit);
  QMenu* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("&About Trainscope"), this, [this] {
    QMessageBox::about(this, tr("About Trainscope"),
                       tr("<b>Trainscope %1</b><p>See and tune distributed training while it runs.</p>")
                           .arg(QStringLiteral(TRAINSCOPE_VERSION)));
  });

  statusBar()->addWidget(statusFile_, 1);
  statusBar()->addPermanentWidget(statusEvents_);
  statusBar()->addPermanentWidget(statusDrops_);

  connect(&watcher_, &QFutureWatcher<LoadResult>::finished, this, &MainWindow::onLoaded);

  QSettings settings;
  if (!restoreGeometry(settings.value("window/geometry").toByteArray())) resize(1100, 700);
  restoreState(settings.value("window/state").toByteArray());
  split->restoreState(settings.value("window/splitter").toByteArray());
  rebuildRecentMenu();
  showDetails();
}

MainWindow::~MainWindow() { watcher_.waitForFinished(); }

bool MainWindow::isLoading() const { return watcher_.isRunning(); }

MainWindow::LoadResult MainWindow::load(const QString& path) {
  LoadResult r;
  const std::filesystem::path p = path.toStdString();
  if (path.endsWith(".json", Qt::CaseInsensitive)) {
    auto store = core::importChromeTraceFile(p);
    if (!store) {
      r.error = QString::fromStdString(store.status().message());
      return r;
    }
    r.summary = core::summarizeStore(store.value());
    r.summary.schemaVersion = 0;
  } else {
    auto reader = core::SessionReader::open(p);
    if (!reader) {
      r.error = QString::fromStdString(reader.status().message());
      return r;
    }
    auto s = reader.value()->summary();
    if (!s) {
      r.error = QString::fromStdString(s.status().message());
      return r;
    }
    r.summary = std::move(s.value());
  }
  r.summary.path = p;
  return r;
}

void MainWindow::openFile(const QString& path) {
  if (watcher_.isRunning()) return;
  loadingPath_ = path;
  statusFile_->setText(tr("Opening %1…").arg(path));
  watcher_.setFuture(QtConcurrent::run(&MainWindow::load, path));
}

void MainWindow::onLoaded() {
  const LoadResult r = watcher_.result();
  if (!r.error.isEmpty()) {
    statusFile_->setText(tr("Could not open %1").arg(loadingPath_));
    emit failed(loadingPath_, r.error);
    if (!QApplication::platformName().startsWith("offscreen"))
      QMessageBox::warning(this, tr("Could not open session"), r.error);
    return;
  }
  model_->setSummary(r.summary);
  tree_->expandAll();
  for (int c = 1; c < plots::SessionTreeModel::ColumnCount; ++c) tree_->resizeColumnToContents(c);
  setWindowTitle(tr("%1 — Trainscope").arg(QFileInfo(loadingPath_).fileName()));
  const QLocale locale;
  statusFile_->setText(loadingPath_);
  statusEvents_->setText(tr("%1 events").arg(locale.toString(static_cast<qulonglong>(r.summary.eventCount))));
  statusDrops_->setText(tr("dropped %1").arg(locale.toString(static_cast<qulonglong>(r.summary.droppedEvents))));
  addRecent(loadingPath_);
  showDetails();
  emit loaded(loadingPath_);
}

void MainWindow::showDetails() {
  const core::SessionSummary& s = model_->summary();
  if (s.path.empty()) {
    details_->setHtml(tr("<h3>No session open</h3><p>Use <b>File → Open Session…</b> to open a "
                         "<code>.tsdb</code> session or a Chrome/PyTorch trace (<code>.json</code>).</p>"
                         "<p>Make one with <code>trainscope-cli synth --out demo.tsdb</code>.</p>"));
    return;
  }
  const QLocale locale;
  QString html = QStringLiteral("<h3>%1</h3><table cellspacing=4>").arg(QString::fromStdString(s.path.filename().string()).toHtmlEscaped());
  auto row = [&](const QString& k, const QString& v) { html += QStringLiteral("<tr><td><b>%1</b></td><td>%2</td></tr>").arg(k, v); };
  row(tr("Schema"), s.schemaVersion ? QStringLiteral("v%1").arg(s.schemaVersion) : tr("Chrome JSON"));
  row(tr("Events"), locale.toString(static_cast<qulonglong>(s.eventCount)));
  row(tr("Span"), tr("%1 ms").arg(locale.toString(double(s.endNs - s.startNs) / 1e6, 'f', 3)));
  row(tr("Ranks"), QString::number(s.ranks.size()));
  row(tr("Tracks"), QString::number(s.tracks.size()));
  row(tr("Dropped"), locale.toString(static_cast<qulonglong>(s.droppedEvents)));
  html += "</table><h4>" + tr("Events by kind") + "</h4><table cellspacing=4>";
  for (const auto& [kind, n] : s.eventsPerKind) row(fromStd(core::eventKindName(kind)), locale.toString(static_cast<qulonglong>(n)));
  html += "</table>";
  if (!s.metadata.empty()) {
    html += "<h4>" + tr("Metadata") + "</h4><table cellspacing=4>";
    for (const auto& [k, v] : s.metadata) row(QString::fromStdString(k).toHtmlEscaped(), QString::fromStdString(v).toHtmlEscaped());
    html += "</table>";
  }
  details_->setHtml(html);
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
  if (auto* split = findChild<QSplitter*>("mainSplitter")) settings.setValue("window/splitter", split->saveState());
  event->accept();
}

}  // namespace trainscope::app
