#include "metadata_view.h"

#include <QCoreApplication>
#include <QLocale>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>

namespace trainscope::app {
namespace {

enum class Unit { None, Ns, Seconds, Count };

struct Label {
  const char* key;
  const char* text;
  Unit unit;
};

// Keys written by the live engine, `record`, the importers and the trainer; anything else gets
// its key with the underscores as spaces.
constexpr Label kLabels[] = {
    {"job_id", "Job", Unit::None},
    {"world_size", "World size", Unit::Count},
    {"record_seconds", "Recorded for", Unit::Seconds},
    {"created_by", "Created by", Unit::None},
    {"clock_sync_error_ns", "Clock sync error bound", Unit::Ns},
    {"clock_offset_initial_ns", "Clock offset at attach", Unit::Ns},
    {"clock_offset_ns", "Clock offset now", Unit::Ns},
    {"clock_offset_updates", "Clock resyncs", Unit::Count},
    {"clock_drift_ns", "Clock drift since attach", Unit::Ns},
    {"dropped_events", "Dropped events", Unit::Count},
    {"unknown_track_events", "Events on unknown tracks", Unit::Count},
    {"attaches", "Attaches", Unit::Count},
};

// Shown as a count of entries only: their content is for tools (the session file keeps it).
constexpr const char* kLogs[] = {"clock_offset_log"};

const Label* labelOf(const std::string& base) {
  for (const Label& l : kLabels)
    if (base == l.key) return &l;
  return nullptr;
}

bool endsWithNs(const std::string& key) { return key.size() > 3 && key.compare(key.size() - 3, 3, "_ns") == 0; }

QString humanise(const std::string& key) {
  QString s = QString::fromStdString(endsWithNs(key) ? key.substr(0, key.size() - 3) : key);
  s.replace('_', ' ');
  if (!s.isEmpty()) s[0] = s[0].toUpper();
  return s;
}

std::optional<double> number(const std::string& v) {
  double d = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), d);
  if (ec != std::errc() || p != v.data() + v.size()) return std::nullopt;
  return d;
}

QString formatValue(double v, Unit unit) {
  const QLocale loc;
  switch (unit) {
    case Unit::Ns: {
      const double a = std::abs(v);
      if (a >= 1e9) return QStringLiteral("%1 s").arg(loc.toString(v / 1e9, 'f', 3));
      if (a >= 1e6) return QStringLiteral("%1 ms").arg(loc.toString(v / 1e6, 'f', 3));
      if (a >= 1e3) return QStringLiteral("%1 µs").arg(loc.toString(v / 1e3, 'f', 1));
      return QStringLiteral("%1 ns").arg(loc.toString(v, 'f', 0));
    }
    case Unit::Seconds:
      return QStringLiteral("%1 s").arg(loc.toString(v, 'f', 1));
    case Unit::Count:
      return loc.toString(static_cast<qlonglong>(std::llround(v)));
    case Unit::None:
      break;
  }
  return loc.toString(v);
}

struct Group {
  std::vector<std::pair<long, std::string>> perRank;  // rank, value
};

}  // namespace

std::vector<std::pair<QString, QString>> metadataRows(const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<QString, QString>> rows;
  std::map<std::string, Group> groups;  // base key -> values per rank
  std::vector<std::pair<std::string, std::string>> plain;
  for (const auto& [k, v] : metadata) {
    if (k.rfind("knob.", 0) == 0) {  // the knobs at attach: their names are identifiers
      rows.emplace_back(QCoreApplication::translate("metadata", "Knob %1 at attach").arg(QString::fromStdString(k.substr(5))),
                        QString::fromStdString(v));
      continue;
    }
    const auto dot = k.rfind('.');
    long rank = -1;
    if (dot != std::string::npos && dot + 1 < k.size()) {
      const auto [p, ec] = std::from_chars(k.data() + dot + 1, k.data() + k.size(), rank);
      if (ec != std::errc() || p != k.data() + k.size()) rank = -1;
    }
    if (rank >= 0)
      groups[k.substr(0, dot)].perRank.emplace_back(rank, v);
    else
      plain.emplace_back(k, v);
  }
  for (const auto& [k, v] : plain) {
    const Label* l = labelOf(k);
    const auto n = number(v);
    const QString text = l ? QCoreApplication::translate("metadata", l->text) : humanise(k);
    const Unit unit = l ? l->unit : endsWithNs(k) ? Unit::Ns : Unit::None;
    rows.emplace_back(text, n && unit != Unit::None ? formatValue(*n, unit) : QString::fromStdString(v));
  }
  for (auto& [base, g] : groups) {
    std::sort(g.perRank.begin(), g.perRank.end());
    const Label* l = labelOf(base);
    const QString text = l ? QCoreApplication::translate("metadata", l->text) : humanise(base);
    const size_t n = g.perRank.size();
    const QString ranks = n == 1 ? QCoreApplication::translate("metadata", "rank %1").arg(g.perRank[0].first)
                                 : QCoreApplication::translate("metadata", "%1 ranks").arg(n);
    if (std::find(std::begin(kLogs), std::end(kLogs), base) != std::end(kLogs)) {
      size_t entries = 0;
      for (const auto& [r, v] : g.perRank) entries += v.empty() ? 0 : 1 + std::count(v.begin(), v.end(), ' ');
      rows.emplace_back(text, QCoreApplication::translate("metadata", "%1 entries over %2 (in the session file)")
                                  .arg(entries)
                                  .arg(ranks));
      continue;
    }
    const Unit unit = l ? l->unit : endsWithNs(base) ? Unit::Ns : Unit::None;
    std::optional<double> lo, hi;
    long hiRank = -1;
    bool numeric = true;
    for (const auto& [r, v] : g.perRank) {
      const auto x = number(v);
      if (!x) {
        numeric = false;
        break;
      }
      if (!lo || *x < *lo) lo = x;
      if (!hi || *x > *hi) {
        hi = x;
        hiRank = r;
      }
    }
    if (!numeric) {
      const bool same = std::all_of(g.perRank.begin(), g.perRank.end(),
                                    [&](const auto& p) { return p.second == g.perRank[0].second; });
      rows.emplace_back(text, same ? QStringLiteral("%1 (%2)").arg(QString::fromStdString(g.perRank[0].second), ranks)
                                   : QCoreApplication::translate("metadata", "differs over %1").arg(ranks));
      continue;
    }
    if (*lo == *hi)
      rows.emplace_back(text, QStringLiteral("%1 (%2)").arg(formatValue(*lo, unit), ranks));
    else
      rows.emplace_back(text, QCoreApplication::translate("metadata", "%1 … %2 over %3, highest on rank %4")
                                  .arg(formatValue(*lo, unit), formatValue(*hi, unit), ranks)
                                  .arg(hiRank));
  }
  return rows;
}

}  // namespace trainscope::app
