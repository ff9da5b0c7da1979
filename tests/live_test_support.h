// Helpers for tests that drive the real CLI against live jobs (tst_cli_live, tst_clock_resync).
#pragma once

#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QTemporaryDir>
#include <QProcess>
#include <QString>
#include <QStringList>

#include <map>
#include <string>
#include <utility>

#include "cli_test_support.h"
#include "trainscope/core/trace_store.h"

namespace live_test {

using namespace trainscope::core;

// Agents and clients of this test use a private runtime directory (mode 0700, as the agent
// requires), so no other job on the machine interferes.
inline void usePrivateRuntimeDir(const QTemporaryDir& dir) {
  QDir().mkpath(dir.filePath("run"));
  QFile::setPermissions(dir.filePath("run"), QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
  qputenv("TRAINSCOPE_RUNTIME_DIR", dir.filePath("run").toUtf8());
}

inline QString bin(const QString& name) { return QString(TRAINSCOPE_BIN_DIR) + "/" + name; }

using Run = trainscope::test::CliRun;
inline Run cli(const QStringList& args, int timeoutMs = 60000) { return trainscope::test::runCli(args, timeoutMs); }

inline QJsonDocument json(const Run& r) { return QJsonDocument::fromJson(r.out.toUtf8()); }

// KnobChange events of one knob in a session: rank -> (value, step).
inline std::map<RankId, std::pair<std::string, int64_t>> knobChanges(TraceStore& s, const std::string& knob) {
  std::map<RankId, std::pair<std::string, int64_t>> out;
  for (TrackId t = 0; t < s.trackCount(); ++t) {
    const TrackEvents& ev = s.events(t);
    for (size_t i = 0; i < ev.size(); ++i) {
      if (ev.kind(i) != EventKind::KnobChange) continue;
      const Attr* k = ev.findAttr(i, AttrKey::Knob);
      const Attr* v = ev.findAttr(i, AttrKey::KnobValue);
      const Attr* st = ev.findAttr(i, AttrKey::Step);
      if (k && v && st && s.str(k->asString()) == knob)
        out[s.track(t).rank] = {std::string(s.str(v->asString())), st->asInt()};
    }
  }
  return out;
}

// Step windows per rank: step number -> start.
inline std::map<RankId, std::map<int64_t, int64_t>> stepStarts(TraceStore& s) {
  std::map<RankId, std::map<int64_t, int64_t>> out;
  for (TrackId t = 0; t < s.trackCount(); ++t) {
    const TrackEvents& ev = s.events(t);
    for (size_t i = 0; i < ev.size(); ++i) {
      if (ev.kind(i) != EventKind::Step) continue;
      if (const Attr* st = ev.findAttr(i, AttrKey::Step)) out[s.track(t).rank][st->asInt()] = ev.start(i);
    }
  }
  return out;
}


}  // namespace live_test
