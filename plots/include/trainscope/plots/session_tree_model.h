// Ranks and their tracks as a Qt item model: the job/rank/track tree of the main window.
// Columns: name, kind, events, dropped. Built from a core::SessionSummary (no events needed).
#pragma once

#include <QAbstractItemModel>

#include "trainscope/core/session/tsdb.h"

namespace trainscope::plots {

class SessionTreeModel : public QAbstractItemModel {
  Q_OBJECT

 public:
  enum Column { Name = 0, Kind, Events, Dropped, ColumnCount };

  explicit SessionTreeModel(QObject* parent = nullptr);

  void setSummary(const core::SessionSummary& summary);
  void clear();
  const core::SessionSummary& summary() const { return summary_; }

  QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
  QModelIndex parent(const QModelIndex& child) const override;
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  struct RankRow {
    core::RankInfo info;
    uint64_t events = 0;
    std::vector<size_t> tracks;  // indices into summary_.tracks
  };
  // Internal ids: 0 for rank rows, rank row + 1 for track rows (so parent() is O(1)).
  core::SessionSummary summary_;
  std::vector<RankRow> ranks_;
};

}  // namespace trainscope::plots
