#include "compare_dialog.h"
#include "work_pool.h"

#include <QComboBox>
#include <QDialogButtonBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <QTableWidget>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>
#include <climits>
#include <cmath>
#include <mutex>
#include <shared_mutex>
#include <utility>

#include "trainscope/core/analysis/analysis.h"
#include "trainscope/core/tune/compare.h"
#include "trainscope/plots/step_compare_view.h"
#include "trainscope/plots/timeline_data.h"

namespace trainscope::app {

namespace {

QSpinBox* stepBox() {
  auto* s = new QSpinBox;
  s->setRange(-1, INT_MAX);
  s->setSpecialValueText(QObject::tr("any"));
  s->setValue(-1);
  return s;
}

}  // namespace

QString spreadText(const core::Spread& s, int decimals) {
  if (!std::isfinite(s.mean)) return QStringLiteral("—");
  QString t = QString::number(s.mean, 'f', decimals);
  if (std::isfinite(s.sd)) t += QStringLiteral(" ± ") + QString::number(s.sd, 'f', decimals);
  return t;
}

CompareDialog::CompareDialog(std::vector<Source> sources, QWidget* parent)
    : QDialog(parent),
      sources_(std::move(sources)),
      a_(new QComboBox),
      b_(new QComboBox),
      aFrom_(stepBox()),
      aTo_(stepBox()),
      bFrom_(stepBox()),
      bTo_(stepBox()),
      table_(new QTableWidget(0, 4)),
      view_(new plots::StepCompareView),
      status_(new QLabel) {
  setWindowTitle(tr("Compare Sessions"));
  setObjectName("compareDialog");
  watcher_ = new QFutureWatcher<std::shared_ptr<Result>>(this);
  connect(watcher_, &QFutureWatcherBase::finished, this, [this] {
    showResult(*watcher_->result());
    if (again_) {
      recompute();
      return;
    }
    emit computed();
  });
  for (const Source& s : sources_) {
    a_->addItem(s.title);
    b_->addItem(s.title);
  }
  if (b_->count() > 1) b_->setCurrentIndex(1);
  auto* form = new QFormLayout;
  auto row = [](QComboBox* c, QSpinBox* f, QSpinBox* t) {
    auto* h = new QHBoxLayout;
    h->addWidget(c, 1);
    h->addWidget(new QLabel(tr("steps")));
    h->addWidget(f);
    h->addWidget(new QLabel(tr("to")));
    h->addWidget(t);
    return h;
  };
  form->addRow(tr("A:"), row(a_, aFrom_, aTo_));
  form->addRow(tr("B:"), row(b_, bFrom_, bTo_));
  table_->setObjectName("compareTable");
  table_->setHorizontalHeaderLabels({tr("A"), tr("B"), tr("B − A"), tr("B / A")});
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  status_->setWordWrap(true);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close);
  QPushButton* go = buttons->addButton(tr("&Compare"), QDialogButtonBox::ApplyRole);
  connect(go, &QPushButton::clicked, this, &CompareDialog::recompute);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  auto* lay = new QVBoxLayout(this);
  lay->addLayout(form);
  lay->addWidget(table_);
  lay->addWidget(view_, 1);
  lay->addWidget(status_);
  lay->addWidget(buttons);
  resize(900, 640);
  if (!sources_.empty()) recompute();
}

void CompareDialog::setSides(int a, int b) {
  a_->setCurrentIndex(a);
  b_->setCurrentIndex(b);
}

void CompareDialog::setWindows(int aFrom, int aTo, int bFrom, int bTo) {
  aFrom_->setValue(aFrom);
  aTo_->setValue(aTo);
  bFrom_->setValue(bFrom);
  bTo_->setValue(bTo);
}

QString CompareDialog::statusText() const {
  return status_->text();
}

struct CompareDialog::Side {
  core::WindowMetrics w;
  std::vector<core::StepOp> ops;
  int64_t step = -1;
};

struct CompareDialog::Result {
  Side a, b;
};

bool CompareDialog::isComputing() const {
  return watcher_->isRunning() || again_;
}

void CompareDialog::recompute() {
  const int ia = a_->currentIndex(), ib = b_->currentIndex();
  if (ia < 0 || ib < 0 || ia >= static_cast<int>(sources_.size()) || ib >= static_cast<int>(sources_.size())) return;
  if (watcher_->isRunning()) {
    again_ = true;  // the controls changed meanwhile: once more when this one is done
    return;
  }
  again_ = false;
  auto measure = [](const Source& s, int from, int to) {
    Side side;
    const int64_t f = from < 0 ? INT64_MIN : from, t = to < 0 ? INT64_MAX : to;
    std::shared_ptr<const core::AnalysisResult> r = s.analysis;
    const auto snap = s.data->snapshot(300);  // a const store: the engines and painters go on
    if (!r) r = std::make_shared<const core::AnalysisResult>(core::analyzeStore(*snap));
    side.w = core::measureWindow(*r, *snap, f, t);
    side.step = core::medianStep(*r, f, t);
    if (side.step >= 0 && !r->ranks.empty()) side.ops = core::stepTimeline(*snap, r->ranks.front(), side.step);
    return side;
  };
  Source sa = sources_[static_cast<size_t>(ia)], sb = sources_[static_cast<size_t>(ib)];
  const int af = aFrom_->value(), at = aTo_->value(), bf = bFrom_->value(), bt = bTo_->value();
  status_->setText(tr("Measuring…"));
  watcher_->setFuture(runWork([=] {
    auto r = std::make_shared<Result>();
    r->a = measure(sa, af, at);
    r->b = measure(sb, bf, bt);
    return r;
  }));
}

void CompareDialog::showResult(const Result& res) {
  const Side& A = res.a;
  const Side& B = res.b;
  struct Row {
    QString name;
    const core::Spread core::WindowMetrics::*field;
    int decimals;
  };
  const std::vector<Row> rows = {{tr("Step time (ms)"), &core::WindowMetrics::stepMs, 3},
                                 {tr("Bubble"), &core::WindowMetrics::bubbleFraction, 3},
                                 {tr("Overlap"), &core::WindowMetrics::overlapRatio, 3},
                                 {tr("Exposed comm (ms)"), &core::WindowMetrics::exposedCommMs, 3},
                                 {tr("Bytes / step"), &core::WindowMetrics::bytes, 0},
                                 {tr("Loss"), &core::WindowMetrics::loss, 4}};
  table_->setRowCount(static_cast<int>(rows.size()));
  QStringList names;
  for (int i = 0; i < static_cast<int>(rows.size()); ++i) {
    const Row& r = rows[static_cast<size_t>(i)];
    names << r.name;
    const core::Spread& x = A.w.*(r.field);
    const core::Spread& y = B.w.*(r.field);
    table_->setItem(i, 0, new QTableWidgetItem(spreadText(x, r.decimals)));
    table_->setItem(i, 1, new QTableWidgetItem(spreadText(y, r.decimals)));
    const bool both = std::isfinite(x.mean) && std::isfinite(y.mean);
    table_->setItem(i, 2, new QTableWidgetItem(both ? QString::number(y.mean - x.mean, 'f', r.decimals) : "—"));
    table_->setItem(i, 3,
                    new QTableWidgetItem(both && x.mean != 0 ? QString::number(y.mean / x.mean, 'f', 3) : "—"));
  }
  table_->setVerticalHeaderLabels(names);
  // The two median steps on one axis, each from its own start; lanes named per side.
  auto tag = [](std::vector<core::StepOp> ops) {
    for (auto& op : ops) {
      const auto dot = op.lane.find(" · ");
      if (dot != std::string::npos) op.lane = op.lane.substr(dot + std::string(" · ").size());
    }
    return ops;
  };
  view_->setSteps(tag(A.ops), tag(B.ops));
  view_->setCaptions(tr("A step %1").arg(A.step), tr("B step %1").arg(B.step));
  status_->setText(tr("A: %1 steps, B: %2 steps; drawn: the median step of each window (lowest rank), "
                      "aligned on its start.")
                       .arg(A.w.steps)
                       .arg(B.w.steps));
}

}  // namespace trainscope::app
