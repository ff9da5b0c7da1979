#include "attach_dialog.h"

#include "trainscope/core/live/live_session.h"

#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QTimer>
#include <QTreeWidget>
#include <QVBoxLayout>
#include <map>

#include "trainscope/core/live/agent_client.h"

namespace trainscope::app {

AttachDialog::AttachDialog(QWidget* parent)
    : QDialog(parent),
      jobs_(new QTreeWidget),
      remote_(new QLineEdit),
      secret_(new QLineEdit),
      timer_(new QTimer(this)) {
  setWindowTitle(tr("Attach to a running job"));
  setObjectName("attachDialog");
  resize(640, 420);
  jobs_->setObjectName("jobList");
  jobs_->setHeaderLabels({tr("Job"), tr("Ranks"), tr("Started"), tr("PIDs"), tr("Host")});
  jobs_->setRootIsDecorated(false);
  jobs_->header()->setSectionResizeMode(0, QHeaderView::Stretch);
  remote_->setPlaceholderText(
      tr("job@host:port — a job on many machines, through any one of its relays; or host:port[,host:port…], "
         "one per rank (TRAINSCOPE_LISTEN=tcp)"));
  secret_->setPlaceholderText(tr("secret file (required over TCP)"));
  auto* browse = new QPushButton(tr("Browse…"));
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Secret file"));
    if (!f.isEmpty()) secret_->setText(f);
  });
  auto* secretRow = new QHBoxLayout;
  secretRow->addWidget(secret_);
  secretRow->addWidget(browse);
  auto* form = new QFormLayout;
  form->addRow(tr("Remote:"), remote_);
  form->addRow(tr("Secret:"), secretRow);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
  buttons->button(QDialogButtonBox::Ok)->setText(tr("Attach"));
  connect(buttons, &QDialogButtonBox::accepted, this, &AttachDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  connect(jobs_, &QTreeWidget::itemDoubleClicked, this, [this] { accept(); });
  auto* lay = new QVBoxLayout(this);
  lay->addWidget(new QLabel(tr("Jobs running on this machine (attaching does not restart or pause them):")));
  lay->addWidget(jobs_, 1);
  lay->addWidget(new QLabel(tr("Or an agent on another machine:")));
  lay->addLayout(form);
  lay->addWidget(buttons);
  connect(timer_, &QTimer::timeout, this, &AttachDialog::refresh);
  timer_->start(1000);
  refresh();
}

std::vector<std::vector<core::discovery::Entry>> AttachDialog::localJobs() {
  std::map<std::string, std::vector<core::discovery::Entry>> byJob;
  for (auto& e : core::discovery::listEntries()) byJob[e.jobId].push_back(std::move(e));
  std::vector<std::vector<core::discovery::Entry>> out;
  for (auto& [id, v] : byJob) out.push_back(std::move(v));
  return out;
}

std::vector<core::discovery::Entry> AttachDialog::remoteEntries(const QString& endpoints,
                                                                const QString& secretFile, QString* error) {
  std::vector<core::discovery::Entry> out;
  // job@host:port: the relays of a job on many machines (docs/RELAY.md) list every rank.
  if (const QString t = endpoints.trimmed(); t.contains('@') && !t.contains(',')) {
    const int at = static_cast<int>(t.lastIndexOf('@'));
    core::LiveSession::useRelay(t.mid(at + 1).toStdString(), secretFile.toStdString());
    auto r = core::LiveSession::relayRanks(t.left(at).toStdString());
    if (!r) {
      *error = QString::fromStdString(r.status().message());
      return {};
    }
    if (r->entries.empty()) *error = tr("the relay knows no rank of job %1 yet").arg(t.left(at));
    return std::move(r->entries);
  }
  int rank = 0;
  for (QString ep : endpoints.split(',', Qt::SkipEmptyParts)) {
    ep = ep.trimmed();
    if (!ep.startsWith("tcp:") && !ep.startsWith("unix:")) ep = "tcp:" + ep;
    if (ep.startsWith("tcp:") && ep.count(':') < 2) {
      *error = tr("\"%1\" is not host:port").arg(ep.mid(4));
      return {};
    }
    core::discovery::Entry e;
    e.jobId = "remote";
    e.rank = rank++;
    e.endpoint = ep.toStdString();
    e.secretFile = secretFile.toStdString();
    out.push_back(e);
  }
  for (auto& e : out) e.worldSize = static_cast<int32_t>(out.size());
  if (out.empty()) *error = tr("no endpoint given");
  return out;
}

void AttachDialog::refresh() {
  const QString current = jobs_->currentItem() ? jobs_->currentItem()->text(0) : QString();
  found_ = localJobs();
  jobs_->clear();
  for (const auto& job : found_) {
    const auto& e = job.front();
    QStringList pids;
    for (const auto& r : job) pids << QString::number(r.pid);
    const double age = static_cast<double>(core::monotonicNowNs() - e.startTimeNs) / 1e9;
    auto* item = new QTreeWidgetItem({QString::fromStdString(e.jobId),
                                      QStringLiteral("%1/%2").arg(job.size()).arg(e.worldSize),
                                      age >= 0 && age < 1e6 ? tr("%1 s ago").arg(age, 0, 'f', 0) : tr("?"),
                                      pids.join(','), QString::fromStdString(e.host)});
    jobs_->addTopLevelItem(item);
    if (item->text(0) == current || (current.isEmpty() && jobs_->topLevelItemCount() == 1))
      jobs_->setCurrentItem(item);
  }
  if (found_.empty()) {
    auto* item =
        new QTreeWidgetItem({tr("(no running jobs found — start one with trainscope-cli demo or launch)")});
    item->setFlags(Qt::NoItemFlags);
    jobs_->addTopLevelItem(item);
  }
}

void AttachDialog::accept() {
  if (!remote_->text().trimmed().isEmpty()) {
    QString error;
    chosen_ = remoteEntries(remote_->text(), secret_->text().trimmed(), &error);
    if (chosen_.empty()) {
      QMessageBox::warning(this, tr("Attach"), error);
      return;
    }
    label_ = tr("remote %1").arg(remote_->text().trimmed());
    QDialog::accept();
    return;
  }
  const int i = jobs_->currentItem() ? jobs_->indexOfTopLevelItem(jobs_->currentItem()) : -1;
  if (i < 0 || i >= static_cast<int>(found_.size())) {
    QMessageBox::information(this, tr("Attach"), tr("Choose a job, or give a remote endpoint."));
    return;
  }
  chosen_ = found_[static_cast<size_t>(i)];
  label_ = tr("job %1 (live)").arg(QString::fromStdString(chosen_.front().jobId));
  QDialog::accept();
}

}  // namespace trainscope::app
