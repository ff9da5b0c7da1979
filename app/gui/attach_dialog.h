// The "Attach to job" dialog: local jobs found by discovery (job, ranks, start time, pid),
// refreshed every second, or a remote agent given as host:port list plus a secret file.
#pragma once

#include <QDialog>
#include <vector>

#include "trainscope/core/wire/discovery.h"

class QLineEdit;
class QTreeWidget;
class QTimer;

namespace trainscope::app {

class AttachDialog : public QDialog {
  Q_OBJECT

 public:
  explicit AttachDialog(QWidget* parent = nullptr);

  // The ranks to attach to (after exec() returned Accepted), and a label for the tab.
  std::vector<core::discovery::Entry> entries() const { return chosen_; }
  QString label() const { return label_; }

  // Local jobs grouped by job id (live entries only).
  static std::vector<std::vector<core::discovery::Entry>> localJobs();
  // "host:port[,host:port...]" + secret file -> one entry per rank endpoint.
  static std::vector<core::discovery::Entry> remoteEntries(const QString& endpoints,
                                                           const QString& secretFile, QString* error);

 private:
  void refresh();
  void accept() override;

  QTreeWidget* jobs_;
  QLineEdit* remote_;
  QLineEdit* secret_;
  QTimer* timer_;
  std::vector<std::vector<core::discovery::Entry>> found_;
  std::vector<core::discovery::Entry> chosen_;
  QString label_;
};

}  // namespace trainscope::app
