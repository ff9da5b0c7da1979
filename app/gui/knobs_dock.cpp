#include "knobs_dock.h"
#include "work_pool.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTabWidget>
#include <QTableWidget>
#include <QThread>
#include <QTimer>
#include <QVBoxLayout>
#include <QPromise>
#include <QtConcurrent/QtConcurrentRun>
#include <algorithm>
#include <climits>
#include <cmath>
#include <utility>

#include "compare_dialog.h"
#include "session_view.h"
#include "trainscope/core/analysis/analysis.h"
#include "trainscope/core/live/live_session.h"
#include "trainscope/core/tune/whatif.h"
#include "trainscope/plots/step_compare_view.h"
#include "trainscope/plots/timeline_data.h"

namespace trainscope::app {
namespace {
// What-if, Apply and the change's table read a snapshot of a live tab's last this-many seconds
// (knob changes of any time stay): the setting's recent steps, at the cost of that window.
constexpr double kRecentSeconds = 10;
}  // namespace

namespace {

using core::wire::KnobDescriptor;
using core::wire::KnobType;

enum Column { Name, Value, Current, Description, ColumnCount };
constexpr int kApplyTimeoutMs = 20000;
constexpr int kPollMs = 3000;  // current values (another client may change them)

QWidget* makeEditor(const KnobDescriptor& d) {
  const QString cur = QString::fromStdString(d.currentValue);
  switch (d.type) {
    case KnobType::Enum: {
      auto* c = new QComboBox;
      for (const auto& ch : d.choices) c->addItem(QString::fromStdString(ch));
      c->setCurrentText(cur);
      return c;
    }
    case KnobType::Int: {
      auto* s = new QSpinBox;
      s->setRange(static_cast<int>(std::max<double>(d.min, INT_MIN)),
                  static_cast<int>(std::min<double>(d.max, INT_MAX)));
      s->setValue(cur.toInt());
      s->setGroupSeparatorShown(true);
      return s;
    }
    case KnobType::Float: {
      auto* s = new QDoubleSpinBox;
      s->setDecimals(6);
      s->setRange(d.min, d.max);
      s->setSingleStep(std::max(1e-6, (d.max - d.min) / 100));
      s->setValue(cur.toDouble());
      return s;
    }
    case KnobType::Bool: {
      auto* c = new QCheckBox;
      c->setChecked(cur == "true" || cur == "1");
      return c;
    }
  }
  return new QLabel(cur);
}

}  // namespace

KnobsDock::KnobsDock(QWidget* parent)
    : QWidget(parent),
      table_(new QTableWidget(0, ColumnCount)),
      apply_(new QPushButton(tr("&Apply"))),
      whatIf_(new QPushButton(tr("&What-if"))),
      undo_(new QPushButton(tr("&Undo"))),
      ghost_(new plots::StepCompareView),
      changeTable_(new QTableWidget(0, 4)),
      changeTitle_(new QLabel),
      reload_(new QPushButton(tr("Re&load"))),
      status_(new QLabel),
      poll_(new QTimer(this)) {
  table_->setObjectName("knobTable");
  table_->setHorizontalHeaderLabels({tr("Knob"), tr("New value"), tr("Current"), tr("Description")});
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->verticalHeader()->hide();
  table_->setSelectionMode(QAbstractItemView::NoSelection);
  apply_->setObjectName("knobApply");
  whatIf_->setObjectName("knobWhatIf");
  whatIf_->setToolTip(
      tr("Predict step time, overlap, exposed communication and bytes for the edited values "
         "from this session's measurements, before applying them"));
  status_->setObjectName("knobStatus");
  status_->setWordWrap(true);
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(status_, 1);
  buttons->addWidget(reload_);
  buttons->addWidget(whatIf_);
  buttons->addWidget(undo_);
  buttons->addWidget(apply_);
  undo_->setObjectName("knobUndo");
  undo_->setToolTip(tr("Apply the values in force before the last change"));
  undo_->setEnabled(false);
  ghost_->setObjectName("ghostTimeline");
  ghost_->setVisible(false);
  changeTable_->setObjectName("changeTable");
  changeTable_->setHorizontalHeaderLabels({tr("Before"), tr("Predicted"), tr("After"), tr("After − before")});
  changeTable_->setVerticalHeaderLabels({});
  changeTable_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  changeTable_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  changeTable_->setSelectionMode(QAbstractItemView::NoSelection);
  changeTable_->setVisible(false);
  changeTitle_->setObjectName("changeTitle");
  changeTitle_->setWordWrap(true);
  changeTitle_->setVisible(false);
  auto* lay = new QVBoxLayout(this);
  lay->setContentsMargins(4, 4, 4, 4);
  // The knobs and their buttons above, the results below, in a splitter that never collapses a
  // side: the knob table keeps room for its rows (fill() sets its minimum) when the What-if or
  // change table appears, and the user can move the boundary.
  auto* top = new QWidget;
  auto* topLay = new QVBoxLayout(top);
  topLay->setContentsMargins(0, 0, 0, 0);
  topLay->addWidget(table_, 1);
  topLay->addLayout(buttons);
  auto* split = new QSplitter(Qt::Vertical);
  split->setObjectName("knobSplit");
  split->setChildrenCollapsible(false);
  split->addWidget(top);
  lay->addWidget(split, 1);
  // Below: the ghost timeline and the last change's table, each a tab with the whole width.
  auto* changePage = new QWidget;
  auto* changeLay = new QVBoxLayout(changePage);
  changeLay->setContentsMargins(0, 0, 0, 0);
  changeLay->addWidget(changeTitle_);
  changeLay->addWidget(changeTable_, 1);
  results_ = new QTabWidget;
  results_->setObjectName("knobResults");
  results_->addTab(ghost_, tr("What-if step"));
  results_->addTab(changePage, tr("Last change"));
  results_->setVisible(false);
  split->addWidget(results_);
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 1);
  connect(apply_, &QPushButton::clicked, this, &KnobsDock::apply);
  connect(whatIf_, &QPushButton::clicked, this, &KnobsDock::whatIf);
  connect(undo_, &QPushButton::clicked, this, &KnobsDock::undo);
  connect(&whatIfWatcher_, &QFutureWatcher<WhatIfReply>::finished, this, [this] {
    WhatIfReply r = whatIfWatcher_.result();
    setStatus(r.text, !r.ok);
    whatIfShown_ = true;  // stays until the next What-if or Apply, not the next knob poll
    if (r.ok) {
      ghost_->setSteps(std::move(r.measured), std::move(r.predicted));
      ghost_->setCaptions(tr("measured (step %1)").arg(r.measuredStep), tr("predicted"));
      ghost_->setVisible(true);
      results_->setVisible(true);
      results_->setCurrentIndex(0);
    }
    emit predicted(r.ok, r.text);
  });
  connect(&compareWatcher_, &QFutureWatcher<std::pair<core::WindowMetrics, bool>>::finished, this, [this] {
    const auto [after, complete] = compareWatcher_.result();
    if (!change_.active) return;
    change_.after = after;
    change_.haveAfter = after.steps > 0;
    change_.afterComplete = complete;
    fillChangeTable();
    emit compared(complete);
  });
  connect(reload_, &QPushButton::clicked, this, [this] { refresh(); });
  connect(&watcher_, &QFutureWatcher<Reply>::finished, this, &KnobsDock::onReply);
  connect(poll_, &QTimer::timeout, this, [this] {
    if (isVisible()) refresh(false);
    updateComparison();
  });
  setView(nullptr);
}

KnobsDock::~KnobsDock() {
  watcher_.waitForFinished();
  whatIfWatcher_.waitForFinished();
  compareWatcher_.waitForFinished();
}

void KnobsDock::whatIf() {
  if (!view_ || !view_->data() || whatIfWatcher_.isRunning()) return;
  std::map<std::string, std::string> changes;
  for (int row = 0; row < table_->rowCount() && row < knobCount(); ++row) {
    const std::string v = editorValue(row).toStdString();
    const KnobDescriptor& d = knobs_[static_cast<size_t>(row)];
    if (v != d.currentValue) changes[d.name] = v;
  }
  setStatus(tr("Predicting…"), false);
  auto td = view_->data();
  whatIfWatcher_.setFuture(runWork([td, changes]() -> WhatIfReply {
    WhatIfReply r;
    const auto snap = td->snapshot(kRecentSeconds);  // a const store: the engine and the painter go on
    auto model = core::WhatIfModel::fromSession(*snap);
    if (!model) {
      r.text = tr("What-if: %1").arg(QString::fromStdString(model.status().message()));
      return r;
    }
    auto now = model->predict({});
    auto p = model->predict(changes);
    if (!p || !now) {
      r.text = tr("What-if: %1").arg(QString::fromStdString((p ? now : p).status().message()));
      return r;
    }
    QStringList set;
    for (const auto& [k, v] : changes) set << QString::fromStdString(k + "=" + v);
    const auto measured = model->measured();
    QString text = tr("What-if %1: step %2 ms (now: model %3 ms, measured %4 ms)")
                       .arg(set.isEmpty() ? tr("(no change)") : set.join(' '))
                       .arg(p->stepTimeMs, 0, 'f', 3)
                       .arg(now->stepTimeMs, 0, 'f', 3)
                       .arg(measured.stepTimeMs, 0, 'f', 3);
    if (p->bubbleFraction >= 0) text += tr(", bubble %1").arg(p->bubbleFraction, 0, 'f', 3);
    if (p->overlapRatio >= 0) text += tr(", overlap %1").arg(p->overlapRatio, 0, 'f', 2);
    text +=
        tr(", exposed comm %1 ms, %2 bytes/step").arg(p->exposedCommMs, 0, 'f', 3).arg(p->bytes, 0, 'f', 0);
    text += tr(" (model from steps %1..%2%3)")
                .arg(model->fromStep())
                .arg(model->toStep())
                .arg(p->extrapolated ? tr("; extrapolated") : QString());
    r.ok = true;
    r.text = text;
    r.measured = model->measuredTimeline();
    r.measuredStep = model->measuredTimelineStep();
    r.predicted = std::move(p->timeline);
    return r;
  }));
}

void KnobsDock::setStatus(const QString& text, bool error) {
  status_->setText(text);
  status_->setStyleSheet(error ? "color: #b00000;" : "");
}

QString KnobsDock::statusText() const {
  return status_->text();
}

void KnobsDock::setView(SessionView* v) {
  watcher_.waitForFinished();
  compareWatcher_.waitForFinished();
  if (v != view_) {
    whatIfShown_ = false;
    change_ = ChangeRecord{};
    ghost_->clear();
    ghost_->setVisible(false);
    changeTable_->setVisible(false);
    changeTitle_->setVisible(false);
    results_->setVisible(false);
  }
  undo_->setEnabled(false);
  view_ = v;
  lastApplied_ = false;
  live_ = v ? v->liveSession() : nullptr;
  knobs_.clear();
  fill();
  const bool live = live_ != nullptr;
  apply_->setEnabled(false);
  whatIf_->setEnabled(v != nullptr);
  reload_->setEnabled(live);
  if (!live) {
    poll_->stop();
    setStatus(tr("Attach to a running job (Job → Attach…) to see and change its knobs."), false);
    return;
  }
  poll_->start(kPollMs);
  refresh();
}

void KnobsDock::refresh(bool announce) {
  if (!live_ || watcher_.isRunning()) return;
  if (announce) setStatus(tr("Reading knobs…"), false);
  // A knob call to the tab's live-session engine: its loop asks the ranks and completes the
  // promise when the answer is in; no thread waits for it.
  auto promise = std::make_shared<QPromise<Reply>>();
  promise->start();
  watcher_.setFuture(promise->future());
  live_->submitKnobList(false, [promise](const core::KnobCall::Outcome& o) {
    Reply r;
    if (!o.status.isOk() || o.lists.empty()) {
      r.ok = false;
      r.message = QString::fromStdString(o.status.isOk() ? "no ranks connected" : o.status.message());
    } else {
      r.knobs = o.lists.front().knobs;
      r.step = o.lists.front().currentStep;
    }
    promise->addResult(std::move(r));
    promise->finish();
  });
}

void KnobsDock::apply() {
  if (!live_) return;
  if (watcher_.isRunning()) {  // a poll of the current values (a few ms): apply after it
    applyPending_ = true;
    return;
  }
  std::vector<std::pair<std::string, std::string>> changes;
  for (int row = 0; row < table_->rowCount() && row < knobCount(); ++row) {
    const std::string v = editorValue(row).toStdString();
    const KnobDescriptor& d = knobs_[static_cast<size_t>(row)];
    if (v == d.currentValue) continue;
    if (const std::string why = core::validateKnobValue(d, v); !why.empty()) {
      setStatus(QString::fromStdString(why), true);
      emit applied(false, statusText());
      return;
    }
    changes.emplace_back(d.name, v);
  }
  if (changes.empty()) {
    setStatus(tr("Nothing changed."), false);
    emit applied(false, statusText());  // an answer to every Apply, also when there was nothing to do
    return;
  }
  applyChanges(std::move(changes), false);
}

bool KnobsDock::canUndo() const {
  return change_.active && !change_.previous.empty();
}

void KnobsDock::undo() {
  if (!live_ || !canUndo()) return;
  if (watcher_.isRunning()) {  // as apply(): after the poll in flight
    undoPending_ = true;
    return;
  }
  std::vector<std::pair<std::string, std::string>> back(change_.previous.begin(), change_.previous.end());
  applyChanges(std::move(back), true);
}

void KnobsDock::applyChanges(std::vector<std::pair<std::string, std::string>> changes, bool isUndo) {
  // Knobs that change the mathematics (compression, sparsity): ask first.
  QStringList math;
  std::map<std::string, std::string> previous;
  for (const auto& [name, value] : changes)
    for (const KnobDescriptor& d : knobs_)
      if (d.name == name) {
        previous[name] = d.currentValue;
        if (d.changesMath) math << QString::fromStdString(name + "=" + value);
      }
  if (!math.isEmpty()) {
    const QString q = tr("%1 changes the mathematics of training: the loss may follow another curve. "
                         "Apply it to the running job?")
                          .arg(math.join(", "));
    const bool ok = confirm_ ? confirm_(q)
                             : QMessageBox::question(this, tr("Change the mathematics?"), q) == QMessageBox::Yes;
    if (!ok) {
      setStatus(tr("Not applied."), false);
      return;
    }
  }
  whatIfShown_ = false;
  setStatus(isUndo ? tr("Undoing…") : tr("Applying…"), false);
  apply_->setEnabled(false);
  undo_->setEnabled(false);
  auto live = live_;
  auto td = view_ ? view_->data() : nullptr;
  auto analysis = view_ ? view_->analysis() : nullptr;  // the tab's live analysis (every 2 s)
  watcher_.setFuture(runWork([live, td, analysis, changes, previous, isUndo] {
    Reply r;
    r.isApply = true;
    r.isUndo = isUndo;
    r.changes = std::map<std::string, std::string>(changes.begin(), changes.end());
    r.previous = previous;
    if (td) {
      // What was measured before, and what the model predicts: the change's record. The step
      // numbers come from the tab's analysis; only bytes and loss are read from the store, under
      // its shared lock (the ingest and the painter go on).
      auto measureBefore = [&r](const core::AnalysisResult& a, const core::TraceStore& store) {
        const auto steps = core::completeSteps(a);
        if (steps.empty()) return;
        const size_t first = steps.size() > static_cast<size_t>(kCompareSteps) ? steps.size() - kCompareSteps : 0;
        r.before = core::measureWindow(a, store, steps[first], steps.back());
        r.haveBefore = r.before.steps > 0;
      };
      const auto snap = td->snapshot(kRecentSeconds);  // a const store: the engine and the painter go on
      if (analysis) measureBefore(*analysis, *snap);
      if (!r.haveBefore) {
        // No live analysis yet (Apply within the first 2 s of the attach): analyse the snapshot.
        const core::AnalysisResult a = core::analyzeStore(*snap);
        measureBefore(a, *snap);
      }
      if (auto model = core::WhatIfModel::fromSession(*snap)) {
        if (auto p = model->predict(r.changes)) {
          r.prediction = std::move(p.value());
          r.havePrediction = true;
        } else {
          r.predictionNote = QString::fromStdString(p.status().message());
        }
      } else {
        r.predictionNote = QString::fromStdString(model.status().message());
      }
    }
    auto done = live->setKnobs(changes, kApplyTimeoutMs);
    if (!done) {
      r.ok = false;
      r.message = tr("Refused: %1").arg(QString::fromStdString(done.status().message()));
      return r;
    }
    QStringList parts;
    for (const auto& a : done.value()) {
      int64_t lo = INT64_MAX, hi = INT64_MIN;
      for (const auto& [rank, step] : a.stepPerRank) {
        lo = std::min(lo, step);
        hi = std::max(hi, step);
      }
      r.appliedStep = std::max(r.appliedStep, hi);
      const QString what = QString::fromStdString(a.name + "=" + a.value);
      parts << (lo == hi ? tr("%1 applied at step %2 on all ranks").arg(what).arg(lo)
                         : tr("%1 applied at steps %2..%3").arg(what).arg(lo).arg(hi));
    }
    r.message = (isUndo ? tr("Undone: ") : QString()) + parts.join(QStringLiteral("; "));
    // Read back once the rank is past the applied step (a job restores a refused pair inside it),
    // at most 10 s.
    for (int tries = 0; tries < 200; ++tries) {
      auto list = live->knobList();
      if (!list) break;
      const bool past = list.value().currentStep > r.appliedStep;
      r.knobs = std::move(list.value().knobs);
      if (past) break;
      QThread::msleep(50);
    }
    // Applied is not kept: the job may refuse the combination at that step and restore the old
    // values (as `set` reports it, issue 40): read back, and say so.
    QStringList refused;
    for (const auto& [name, value] : changes)
      for (const auto& k : r.knobs)
        if (k.name == name && k.currentValue != value) {
          char* end = nullptr;
          const double x = std::strtod(k.currentValue.c_str(), &end);
          const bool numEqual = end && *end == 0 && !value.empty() && x == std::strtod(value.c_str(), nullptr);
          if (!numEqual)
            refused << tr("%1=%2 (it runs %3)").arg(QString::fromStdString(name), QString::fromStdString(value),
                                                   QString::fromStdString(k.currentValue));
        }
    if (!refused.isEmpty()) {
      r.ok = false;
      r.message = tr("Refused by the job at step %1, which restored the old values: %2")
                      .arg(r.appliedStep)
                      .arg(refused.join(QStringLiteral("; ")));
    }
    return r;
  }));
}

void KnobsDock::updateComparison() {
  if (!change_.active || change_.afterComplete || compareWatcher_.isRunning() || !view_ || !view_->data()) return;
  auto td = view_->data();
  auto analysis = view_->analysis();  // the tab's live analysis: the after-window's steps
  if (!analysis) return;
  const int64_t from = change_.appliedStep;
  compareWatcher_.setFuture(runWork([td, analysis, from]() -> std::pair<core::WindowMetrics, bool> {
    const auto snap = td->snapshot(kRecentSeconds);  // bytes and loss only
    core::WindowMetrics w = core::measureWindow(*analysis, *snap, from, from + kCompareSteps - 1);
    return {w, w.steps >= kCompareSteps};
  }));
}

namespace {

QString valueText(double v, int decimals) {
  return std::isfinite(v) && v >= 0 ? QString::number(v, 'f', decimals) : QStringLiteral("—");
}

}  // namespace

void KnobsDock::fillChangeTable() {
  const ChangeRecord& c = change_;
  QStringList what;
  for (const auto& [k, v] : c.changes) what << QString::fromStdString(k + "=" + v);
  QString title = tr("%1 applied at step %2.").arg(what.join(' ')).arg(c.appliedStep);
  if (c.haveBefore) title += tr(" Before: steps %1..%2.").arg(c.before.fromStep).arg(c.before.toStep);
  title += c.haveAfter ? tr(" After: %1 of %2 steps from %3.").arg(c.after.steps).arg(kCompareSteps).arg(c.appliedStep)
                       : tr(" After: waiting for steps from %1.").arg(c.appliedStep);
  if (!c.havePrediction && !c.predictionNote.isEmpty()) title += tr(" No prediction: %1").arg(c.predictionNote);
  changeTitle_->setText(title);
  struct Row {
    QString name;
    const core::Spread core::WindowMetrics::*field;
    double predicted;
    int decimals;
  };
  const core::WhatIfPrediction& p = c.prediction;
  const bool hp = c.havePrediction;
  const std::vector<Row> rows = {
      {tr("Step time (ms)"), &core::WindowMetrics::stepMs, hp ? p.stepTimeMs : -1, 3},
      {tr("Bubble"), &core::WindowMetrics::bubbleFraction, hp ? p.bubbleFraction : -1, 3},
      {tr("Overlap"), &core::WindowMetrics::overlapRatio, hp ? p.overlapRatio : -1, 3},
      {tr("Exposed comm (ms)"), &core::WindowMetrics::exposedCommMs, hp ? p.exposedCommMs : -1, 3},
      {tr("Bytes / step"), &core::WindowMetrics::bytes, hp && p.bytes > 0 ? p.bytes : -1, 0},
      {tr("Loss"), &core::WindowMetrics::loss, -1, 4},
  };
  changeTable_->setRowCount(static_cast<int>(rows.size()) + 1);
  QStringList names;
  for (int i = 0; i < static_cast<int>(rows.size()); ++i) {
    const Row& r = rows[static_cast<size_t>(i)];
    names << r.name;
    const core::Spread& b = c.before.*(r.field);
    const core::Spread& a = c.after.*(r.field);
    changeTable_->setItem(i, 0, new QTableWidgetItem(c.haveBefore ? spreadText(b, r.decimals) : "—"));
    changeTable_->setItem(i, 1, new QTableWidgetItem(valueText(r.predicted, r.decimals)));
    changeTable_->setItem(i, 2, new QTableWidgetItem(c.haveAfter ? spreadText(a, r.decimals) : "—"));
    const bool both = c.haveBefore && c.haveAfter && std::isfinite(a.mean) && std::isfinite(b.mean);
    changeTable_->setItem(i, 3, new QTableWidgetItem(both ? QString::number(a.mean - b.mean, 'f', r.decimals) : "—"));
  }
  // The loss trend: slope per step over each window.
  const int last = static_cast<int>(rows.size());
  names << tr("Loss trend (/step)");
  auto slope = [](double v) { return std::isfinite(v) ? QString::number(v, 'g', 3) : QStringLiteral("—"); };
  changeTable_->setItem(last, 0, new QTableWidgetItem(c.haveBefore ? slope(c.before.lossSlopePerStep) : "—"));
  changeTable_->setItem(last, 1, new QTableWidgetItem("—"));
  changeTable_->setItem(last, 2, new QTableWidgetItem(c.haveAfter ? slope(c.after.lossSlopePerStep) : "—"));
  changeTable_->setItem(last, 3, new QTableWidgetItem("—"));
  changeTable_->setVerticalHeaderLabels(names);
  changeTitle_->setVisible(true);
  changeTable_->setVisible(true);
  results_->setVisible(true);
  results_->setCurrentIndex(1);
}

bool KnobsDock::sameKnobs(const std::vector<core::wire::KnobDescriptor>& other) const {
  if (other.size() != knobs_.size()) return false;
  for (size_t i = 0; i < other.size(); ++i)
    if (other[i].name != knobs_[i].name) return false;
  return true;
}

void KnobsDock::updateCurrent(std::vector<core::wire::KnobDescriptor> fresh) {
  // Same knobs: new current values; an editor the user has not touched follows them.
  for (int row = 0; row < knobCount(); ++row) {
    auto& old = knobs_[static_cast<size_t>(row)];
    const auto& now = fresh[static_cast<size_t>(row)];
    const bool untouched = editorValue(row).toStdString() == old.currentValue;
    old = now;
    table_->item(row, Current)->setText(QString::fromStdString(now.currentValue));
    if (untouched) setEditorValue(QString::fromStdString(now.name), QString::fromStdString(now.currentValue));
  }
}

void KnobsDock::onReply() {
  Reply r = watcher_.result();
  if (!r.knobs.empty() && sameKnobs(r.knobs)) {
    updateCurrent(std::move(r.knobs));
  } else if (!r.knobs.empty() || !r.isApply) {
    knobs_ = std::move(r.knobs);
    fill();
  }
  apply_->setEnabled(!knobs_.empty());
  if (!r.ok) {
    setStatus(r.message, true);
  } else if (r.isApply) {
    setStatus(r.message, false);
  } else if (!lastApplied_ && !whatIfShown_) {
    setStatus(tr("%1 knobs · step %2").arg(knobCount()).arg(r.step), false);
  }
  if (r.isApply) lastApplied_ = r.ok;
  if (r.isApply && r.ok) {
    change_ = ChangeRecord{};
    change_.active = true;
    change_.changes = std::move(r.changes);
    change_.previous = std::move(r.previous);
    change_.appliedStep = r.appliedStep;
    change_.before = r.before;
    change_.haveBefore = r.haveBefore;
    change_.prediction = std::move(r.prediction);
    change_.havePrediction = r.havePrediction;
    change_.predictionNote = r.predictionNote;
    fillChangeTable();
    updateComparison();
  }
  undo_->setEnabled(live_ && canUndo());
  if (r.isApply)
    emit applied(r.ok, r.message);
  else
    emit listed(r.ok ? knobCount() : -1);
  if (std::exchange(applyPending_, false)) apply();
  if (std::exchange(undoPending_, false)) undo();
}

void KnobsDock::fill() {
  table_->setRowCount(0);
  table_->setRowCount(knobCount());
  for (int row = 0; row < knobCount(); ++row) {
    const KnobDescriptor& d = knobs_[static_cast<size_t>(row)];
    auto item = [](const std::string& s) {
      auto* it = new QTableWidgetItem(QString::fromStdString(s));
      it->setFlags(Qt::ItemIsEnabled);
      return it;
    };
    table_->setItem(row, Name, item(d.name));
    table_->setCellWidget(row, Value, makeEditor(d));
    table_->setItem(row, Current, item(d.currentValue));
    std::string desc = d.description;
    if (d.changesMath) desc += " (changes the math)";
    table_->setItem(row, Description, item(desc));
    table_->item(row, Description)->setToolTip(QString::fromStdString(desc));
  }
  table_->resizeColumnsToContents();
  // Room for every knob up to eight rows (then it scrolls), also when the results are shown.
  const int rows = std::min(knobCount(), 8);
  table_->setMinimumHeight(table_->horizontalHeader()->height() + 2 * table_->frameWidth() +
                           rows * table_->verticalHeader()->defaultSectionSize() + 2);
}

QString KnobsDock::editorValue(int row) const {
  QWidget* w = table_->cellWidget(row, Value);
  if (auto* c = qobject_cast<QComboBox*>(w)) return c->currentText();
  if (auto* spin = qobject_cast<QSpinBox*>(w)) return QString::number(spin->value());
  if (auto* dspin = qobject_cast<QDoubleSpinBox*>(w)) return QString::number(dspin->value(), 'g', 10);
  if (auto* check = qobject_cast<QCheckBox*>(w)) return check->isChecked() ? "true" : "false";
  return QString::fromStdString(knobs_[static_cast<size_t>(row)].currentValue);
}

bool KnobsDock::setEditorValue(const QString& name, const QString& value) {
  for (int row = 0; row < knobCount(); ++row) {
    if (QString::fromStdString(knobs_[static_cast<size_t>(row)].name) != name) continue;
    QWidget* w = table_->cellWidget(row, Value);
    if (auto* c = qobject_cast<QComboBox*>(w)) {
      const int i = c->findText(value);
      if (i < 0) return false;
      c->setCurrentIndex(i);
    } else if (auto* spin = qobject_cast<QSpinBox*>(w)) {
      spin->setValue(value.toInt());
    } else if (auto* dspin = qobject_cast<QDoubleSpinBox*>(w)) {
      dspin->setValue(value.toDouble());
    } else if (auto* check = qobject_cast<QCheckBox*>(w)) {
      check->setChecked(value == "true" || value == "1");
    } else {
      return false;
    }
    return true;
  }
  return false;
}

}  // namespace trainscope::app
