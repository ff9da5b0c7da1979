#include "trainscope/plots/session_tree_model.h"

#include <QLocale>

namespace trainscope::plots {

SessionTreeModel::SessionTreeModel(QObject* parent) : QAbstractItemModel(parent) {}

void SessionTreeModel::setSummary(const core::SessionSummary& summary) {
  beginResetModel();
  summary_ = summary;
  ranks_.clear();
  for (const core::RankInfo& r : summary_.ranks) ranks_.push_back({r, 0, {}});
  for (size_t t = 0; t < summary_.tracks.size(); ++t) {
    const auto& tr = summary_.tracks[t];
    auto it = std::find_if(ranks_.begin(), ranks_.end(), [&](const RankRow& r) { return r.info.rank == tr.info.rank; });
    if (it == ranks_.end()) {
      ranks_.push_back({core::RankInfo{.rank = tr.info.rank}, 0, {}});
      it = ranks_.end() - 1;
    }
    it->tracks.push_back(t);
    it->events += tr.eventCount;
  }
  endResetModel();
}

void SessionTreeModel::clear() { setSummary({}); }

QModelIndex SessionTreeModel::index(int row, int column, const QModelIndex& parent) const {
  if (row < 0 || column < 0 || column >= ColumnCount) return {};
  if (!parent.isValid()) return row < static_cast<int>(ranks_.size()) ? createIndex(row, column, quintptr(0)) : QModelIndex();
  if (parent.internalId() != 0) return {};  // tracks have no children
  const auto& rank = ranks_[static_cast<size_t>(parent.row())];
  if (row >= static_cast<int>(rank.tracks.size())) return {};
  return createIndex(row, column, quintptr(parent.row() + 1));
}

QModelIndex SessionTreeModel::parent(const QModelIndex& child) const {
  if (!child.isValid() || child.internalId() == 0) return {};
  return createIndex(static_cast<int>(child.internalId() - 1), 0, quintptr(0));
}

int SessionTreeModel::rowCount(const QModelIndex& parent) const {
  if (!parent.isValid()) return static_cast<int>(ranks_.size());
  if (parent.internalId() != 0 || parent.column() != 0) return 0;
  return static_cast<int>(ranks_[static_cast<size_t>(parent.row())].tracks.size());
}

int SessionTreeModel::columnCount(const QModelIndex&) const { return ColumnCount; }

QVariant SessionTreeModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid()) return {};
  const QLocale locale;
  if (index.internalId() == 0) {
    const RankRow& r = ranks_[static_cast<size_t>(index.row())];
    if (role == Qt::DisplayRole) {
      switch (index.column()) {
        case Name:
          return r.info.host.empty() ? QStringLiteral("rank %1").arg(r.info.rank)
                                     : QStringLiteral("rank %1 (%2)").arg(r.info.rank).arg(QString::fromStdString(r.info.host));
        case Kind: return r.info.device >= 0 ? QStringLiteral("rank · cuda:%1").arg(r.info.device) : QStringLiteral("rank");
        case Events: return locale.toString(static_cast<qulonglong>(r.events));
        case Dropped: return locale.toString(static_cast<qulonglong>(r.info.droppedEvents));
        default: return {};
      }
    }
    if (role == Qt::UserRole) return r.info.rank;
    if (role == Qt::TextAlignmentRole && index.column() >= Events) return int(Qt::AlignRight | Qt::AlignVCenter);
    return {};
  }
  const RankRow& r = ranks_[static_cast<size_t>(index.internalId() - 1)];
  const auto& t = summary_.tracks[r.tracks[static_cast<size_t>(index.row())]];
  if (role == Qt::DisplayRole) {
    switch (index.column()) {
      case Name: return QString::fromStdString(t.info.name);
      case Kind: return QString::fromUtf8(core::trackKindName(t.info.kind).data(), int(core::trackKindName(t.info.kind).size()));
      case Events: return locale.toString(static_cast<qulonglong>(t.eventCount));
      default: return {};
    }
  }
  if (role == Qt::UserRole) return static_cast<uint>(t.id);
  if (role == Qt::TextAlignmentRole && index.column() >= Events) return int(Qt::AlignRight | Qt::AlignVCenter);
  return {};
}

QVariant SessionTreeModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case Name: return tr("Rank / track");
    case Kind: return tr("Kind");
    case Events: return tr("Events");
    case Dropped: return tr("Dropped");
    default: return {};
  }
}

}  // namespace trainscope::plots
