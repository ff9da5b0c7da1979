#include "knobs_dock.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <QTableWidget>
#include <QTimer>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>
#include <algorithm>
#include <climits>
#include <utility>

#include "session_view.h"
#include "trainscope/core/live/live_session.h"
#include "trainscope/core/tune/whatif.h"
#include "trainscope/plots/timeline_data.h"

namespace trainscope::app {
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
  buttons->addWidget(apply_);
  auto* lay = new QVBoxLayout(this);
  lay->setContentsMargins(4, 4, 4, 4);
  lay->addWidget(table_, 1);
  lay->addLayout(buttons);
  connect(apply_, &QPushButton::clicked, this, &KnobsDock::apply);
  connect(whatIf_, &QPushButton::clicked, this, &KnobsDock::whatIf);
  connect(&whatIfWatcher_, &QFutureWatcher<std::pair<bool, QString>>::finished, this, [this] {
    const auto [ok, text] = whatIfWatcher_.result();
    setStatus(text, !ok);
    emit predicted(ok, text);
  });
  connect(reload_, &QPushButton::clicked, this, [this] { refresh(); });
  connect(&watcher_, &QFutureWatcher<Reply>::finished, this, &KnobsDock::onReply);
  connect(poll_, &QTimer::timeout, this, [this] {
    if (isVisible()) refresh(false);
  });
  setView(nullptr);
}

KnobsDock::~KnobsDock() {
  watcher_.waitForFinished();
  whatIfWatcher_.waitForFinished();
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
  whatIfWatcher_.setFuture(QtConcurrent::run([td, changes]() -> std::pair<bool, QString> {
    std::unique_lock lock(td->mutex);  // the model's analysis flushes the store's tracks
    auto model = core::WhatIfModel::fromSession(td->store);
    if (!model) return {false, tr("What-if: %1").arg(QString::fromStdString(model.status().message()))};
    auto now = model->predict({});
    auto p = model->predict(changes);
    if (!p || !now)
      return {false, tr("What-if: %1").arg(QString::fromStdString((p ? now : p).status().message()))};
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
    return {true, text};
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
  // Over the tab's live-session engine: its connections, on its worker thread.
  auto live = live_;
  watcher_.setFuture(QtConcurrent::run([live] {
    Reply r;
    auto list = live->knobList();
    if (!list) {
      r.ok = false;
      r.message = QString::fromStdString(list.status().message());
      return r;
    }
    r.knobs = std::move(list.value().knobs);
    r.step = list.value().currentStep;
    return r;
  }));
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
    return;
  }
  setStatus(tr("Applying…"), false);
  apply_->setEnabled(false);
  auto live = live_;
  watcher_.setFuture(QtConcurrent::run([live, changes] {
    Reply r;
    r.isApply = true;
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
      const QString what = QString::fromStdString(a.name + "=" + a.value);
      parts << (lo == hi ? tr("%1 applied at step %2 on all ranks").arg(what).arg(lo)
                         : tr("%1 applied at steps %2..%3").arg(what).arg(lo).arg(hi));
    }
    r.message = parts.join(QStringLiteral("; "));
    if (auto list = live->knobList()) r.knobs = std::move(list.value().knobs);
    return r;
  }));
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
  } else if (!lastApplied_) {
    setStatus(tr("%1 knobs · step %2").arg(knobCount()).arg(r.step), false);
  }
  if (r.isApply) lastApplied_ = r.ok;
  if (r.isApply)
    emit applied(r.ok, r.message);
  else
    emit listed(r.ok ? knobCount() : -1);
  if (std::exchange(applyPending_, false)) apply();
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
