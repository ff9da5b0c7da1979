// `trainscope-cli info FILE [--json]`: what a session holds, without loading its events.
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "commands.h"
#include "load.h"
#include "trainscope/core/session/tsdb.h"
#include "trainscope/core/session/summary.h"

namespace trainscope::cli {
namespace {

struct InfoOptions {
  std::string file;
  bool json = false;
};

void printText(const core::SessionSummary& s) {
  using namespace trainscope::core;
  std::printf("session   %s\n", s.path.string().c_str());
  std::printf("schema    v%d%s\n", s.schemaVersion, s.complete ? "" : "  (live or not closed cleanly)");
  if (!s.complete)
    std::printf("note      not closed: still being recorded, or the recorder stopped early (killed, out of\n"
                "          disk space); every committed event is here, events after the last commit are not\n");
  std::printf("events    %s\n", withThousands(s.eventCount).c_str());
  for (const auto& [kind, n] : s.eventsPerKind)
    std::printf("  %-12s %14s\n", std::string(eventKindName(kind)).c_str(), withThousands(n).c_str());
  const double ms = (static_cast<double>(s.endNs) - static_cast<double>(s.startNs)) / 1e6;  // no int64 overflow
  std::printf("span      %.3f ms  (%lld .. %lld ns)\n", ms, static_cast<long long>(s.startNs),
              static_cast<long long>(s.endNs));
  std::printf("ranks     %zu\n", s.ranks.size());
  std::printf("tracks    %zu\n", s.tracks.size());
  std::printf("dropped   %s\n", withThousands(s.droppedEvents).c_str());
  {
    uint64_t notReceived = 0;
    for (const auto& [k, v] : s.metadata)
      if (k.rfind("not_received_events.", 0) == 0) notReceived += std::strtoull(v.c_str(), nullptr, 10);
    if (notReceived)
      std::printf("NOT RECEIVED %s events: sent by the agents while the recorder fell behind, never received\n",
                  withThousands(notReceived).c_str());
  }
  for (const RankInfo& r : s.ranks) {
    uint64_t events = 0;
    for (const TrackSummary& t : s.tracks) events += t.info.rank == r.rank ? t.eventCount : 0;
    std::printf("rank %d  host %s  pid %lld  device %d  events %s  dropped %s", r.rank,
                r.host.empty() ? "?" : r.host.c_str(), static_cast<long long>(r.pid), r.device,
                withThousands(events).c_str(), withThousands(r.droppedEvents).c_str());
    // Sent by the agent and never received by the recorder (it fell behind): live sessions only.
    const auto nr = s.metadata.find("not_received_events." + std::to_string(r.rank));
    if (nr != s.metadata.end() && nr->second != "0") {
      std::printf("  NOT RECEIVED %s", withThousands(std::strtoull(nr->second.c_str(), nullptr, 10)).c_str());
      const auto ranges = s.metadata.find("not_received_ranges." + std::to_string(r.rank));
      if (ranges != s.metadata.end()) std::printf(" (in %s)", ranges->second.c_str());
    }
    std::printf("\n");
    for (const TrackSummary& t : s.tracks) {
      if (t.info.rank != r.rank) continue;
      std::printf("    %-14s %-28s %14s\n", std::string(trackKindName(t.info.kind)).c_str(),
                  t.info.name.c_str(), withThousands(t.eventCount).c_str());
    }
  }
  if (!s.metadata.empty()) {
    std::printf("metadata\n");
    for (const auto& [k, v] : s.metadata) std::printf("  %s = %s\n", k.c_str(), v.c_str());
  }
}

int runInfo(const InfoOptions& o) {
  core::SessionSummary summary;
  if (looksLikeJsonTrace(o.file)) {
    auto store = loadTrace(o.file);
    if (!store) return fail(store.status());
    summary = core::summarizeStore(store.value());
    summary.schemaVersion = 0;  // not a .tsdb
  } else {
    auto reader = core::SessionReader::open(o.file);
    if (!reader) return fail(reader.status());
    auto s = reader.value()->summary();
    if (!s) return fail(s.status());
    summary = std::move(s.value());
  }
  summary.path = o.file;
  if (o.json) std::cout << core::summaryToJson(summary) << "\n";
  else printText(summary);
  return kExitOk;
}

}  // namespace

void addInfoCommand(CLI::App& app, Runner& run) {
  auto opts = std::make_shared<InfoOptions>();
  CLI::App* cmd = app.add_subcommand(
      "info", "Ranks, tracks, event counts, time span, schema version and drops of a session (.tsdb, or a Chrome .json)");
  cmd->add_option("FILE", opts->file, "Session file")->required();
  cmd->add_flag("--json", opts->json, "Print JSON instead of text");
  cmd->callback([opts, &run] { run = [opts] { return runInfo(*opts); }; });
}

}  // namespace trainscope::cli
