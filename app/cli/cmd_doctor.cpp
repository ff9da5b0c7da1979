// `trainscope-cli doctor --job ID [--seconds S] [--hang-after H] [--json]`: which rank holds the
// job back, and, when the job is hung, on which collective and which ranks.
//
// 1. Streams every rank (flight-recorder history first, then live) for --seconds into a store,
//    through the same live-session engine as `record` and the GUI.
// 2. Straggler attribution by last arrival over what arrived (core/analysis/stragglers.h): per
//    step, the rank that entered a collective last, by how much, and why.
// 3. Asks every rank what it is doing now (Inspect: open operations and its threads' kernel
//    states, answered by the agent's own thread while the job's threads stay as they are), and
//    reports a hang when a collective has been open for --hang-after seconds
//    (core/live/hang.h): the collective, the ranks that never entered it, their last events and
//    threads.
// Exit 0 when it could look (whatever it found), 1 when it could not reach the job.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <shared_mutex>
#include <thread>

#include "commands.h"
#include "live.h"
#include "trainscope/core/analysis/stragglers.h"
#include "trainscope/core/live/hang.h"
#include "trainscope/core/live/live_session.h"
#include "trainscope/core/model/trace_store.h"

namespace trainscope::cli {
namespace {

struct DoctorOptions {
  std::string job;
  double seconds = 3;
  double hangAfter = 10;
  bool json = false;
  int lastEvents = 8;
  core::StragglerOptions stragglers;
};

const char* kindWord(core::EventKind k) {
  switch (k) {
    case core::EventKind::Kernel: return "kernel";
    case core::EventKind::Collective: return "collective";
    case core::EventKind::P2PSend: return "send";
    case core::EventKind::P2PRecv: return "recv";
    case core::EventKind::Range: return "range";
    case core::EventKind::Step: return "step";
    case core::EventKind::Phase: return "phase";
    case core::EventKind::MicroBatchF: return "forward";
    case core::EventKind::MicroBatchB: return "backward";
    case core::EventKind::MicroBatchW: return "weight-grad";
    case core::EventKind::Bucket: return "bucket";
    case core::EventKind::Memcpy: return "memcpy";
    case core::EventKind::Memset: return "memset";
    case core::EventKind::KnobChange: return "knob change";
    case core::EventKind::Marker: return "marker";
    default: return "event";
  }
}

// Each rank's last completed events (counters left out), newest last, dated against now (the
// store is on this machine's monotonic clock: the engine aligned every rank to it).
std::map<core::RankId, std::vector<std::string>> lastEventsOf(const core::TraceStore& store, int n) {
  struct Ev {
    int64_t end;
    std::string text;
  };
  std::map<core::RankId, std::vector<Ev>> byRank;
  const int64_t now = core::monotonicNowNs();
  for (core::TrackId t = 0; t < store.trackCount(); ++t) {
    const core::TrackEvents& ev = store.events(t);
    auto& list = byRank[store.track(t).rank];
    // The last few by start are enough to find the last n by end on a track (events end in
    // nearly the order they start); look at 4n.
    const size_t from = ev.size() > static_cast<size_t>(4 * n) ? ev.size() - static_cast<size_t>(4 * n) : 0;
    for (size_t i = from; i < ev.size(); ++i) {
      if (ev.kind(i) == core::EventKind::Counter) continue;
      char buf[96];
      std::snprintf(buf, sizeof buf, "%.1f s ago: %s '", static_cast<double>(now - ev.end(i)) / 1e9,
                    kindWord(ev.kind(i)));
      std::string text = buf;
      text += std::string(store.str(ev.name(i))).substr(0, 120);
      std::snprintf(buf, sizeof buf, "' (%.3f ms)", static_cast<double>(ev.end(i) - ev.start(i)) / 1e6);
      text += buf;
      list.push_back({ev.end(i), std::move(text)});
    }
  }
  std::map<core::RankId, std::vector<std::string>> out;
  for (auto& [rank, list] : byRank) {
    std::sort(list.begin(), list.end(), [](const Ev& a, const Ev& b) { return a.end < b.end; });
    const size_t from = list.size() > static_cast<size_t>(n) ? list.size() - static_cast<size_t>(n) : 0;
    for (size_t i = from; i < list.size(); ++i) out[rank].push_back(std::move(list[i].text));
  }
  return out;
}

void printText(const DoctorOptions& o, const core::StragglerReport& rep, const std::optional<core::HangReport>& hang,
               int ranks, double seconds) {
  const core::StragglerReport& s = rep;
  std::printf("job %s: %d rank(s), %.1f s observed, %d step(s) with %d matched collective(s); median step %.3f ms\n",
              o.job.c_str(), ranks, seconds, s.steps, s.matchedCollectives, s.medianStepMs);
  if (s.stragglers.empty()) {
    std::printf("stragglers: none (no rank entered a collective more than %.3f ms after the others)\n",
                s.thresholdMs);
  } else {
    std::printf("stragglers (arrived last at a collective, more than %.3f ms after the others' median):\n",
                s.thresholdMs);
    for (const core::Straggler& g : s.stragglers)
      std::printf("  rank %-4d late in %zu of %d step(s) by %.3f ms (max %.3f), cause %s%s%s\n", g.rank,
                  g.steps.size(), s.steps, g.lateMs, g.maxLateMs, g.cause.c_str(), g.what.empty() ? "" : ": ",
                  g.what.c_str());
  }
  if (!s.collectives.empty()) {
    std::printf("last %zu collective(s) matched across ranks (ms from the first arrival: enter..leave):\n",
                s.collectives.size());
    for (const core::MatchedArrivals& m : s.collectives) {
      int64_t t0 = INT64_MAX;
      for (const auto& a : m.ranks) t0 = std::min(t0, a.enterNs);
      std::printf("  step %lld %s: last rank %d, late %.3f ms;", static_cast<long long>(m.step), m.op.c_str(),
                  m.lastRank, m.lateMs);
      for (const auto& a : m.ranks)
        std::printf(" %d:%.3f..%.3f", a.rank, static_cast<double>(a.enterNs - t0) / 1e6,
                    static_cast<double>(a.leaveNs - t0) / 1e6);
      std::printf("\n");
    }
  }
  if (!hang) {
    std::printf("hang: none (no collective open for %.0f s or more)\n", o.hangAfter);
    return;
  }
  const core::HangReport& h = *hang;
  std::printf("\nHANG: %s", h.op == "none" ? "no rank has finished a step" : ("collective " + h.op).c_str());
  if (h.seq >= 0) std::printf(" (seq %lld)", static_cast<long long>(h.seq));
  if (h.step >= 0) std::printf(" in step %lld", static_cast<long long>(h.step));
  if (h.bytes >= 0) std::printf(", %lld bytes", static_cast<long long>(h.bytes));
  std::printf(", for %.1f s\n", h.waitedS);
  auto list = [](const std::vector<core::RankId>& v) {
    std::string out;
    for (core::RankId r : v) out += (out.empty() ? "" : ", ") + std::to_string(r);
    return out.empty() ? std::string("none") : out;
  };
  std::printf("  waiting in it: %s\n  never entered it: %s\n", list(h.waitingRanks).c_str(),
              list(h.missingRanks).c_str());
  if (!h.silentRanks.empty()) std::printf("  did not answer: %s\n", list(h.silentRanks).c_str());
  for (const core::HangRank& r : h.ranks) {
    std::printf("  rank %d (step %lld%s):\n", r.rank, static_cast<long long>(r.step),
                r.entered ? ", in the collective" : ", not in the collective");
    for (const std::string& line : r.stacks) std::printf("    %s\n", line.c_str());
    if (!r.lastEvents.empty()) std::printf("    last events:\n");
    for (const std::string& line : r.lastEvents) std::printf("      %s\n", line.c_str());
  }
}

int runDoctor(const DoctorOptions& o) {
  auto entries = core::LiveSession::waitForEntries(o.job, 5000);
  if (!entries) return fail(entries.status());
  const int worldSize = entries->front().worldSize;

  // 1. What the ranks did: history, then --seconds live.
  core::TraceStore store;
  std::shared_mutex mutex;
  double observed = 0;
  {
    core::LiveOptions lo;
    lo.client.clientName = "trainscope-cli doctor";
    lo.pings = 16;
    lo.createdBy = std::string("trainscope-cli doctor ") + TRAINSCOPE_VERSION;
    core::LiveSession live(entries.value(), lo);
    live.setStore({&store, &mutex, {}, {}, nullptr});
    live.start();
    int64_t deadline = INT64_MAX;
    const int64_t giveUp = core::monotonicNowNs() + 15'000'000'000LL;
    for (;;) {
      const core::LiveSnapshot st = live.snapshot();
      if (deadline == INT64_MAX && st.state == core::LiveState::Live)
        deadline = core::monotonicNowNs() + static_cast<int64_t>(o.seconds * 1e9);
      const int64_t now = core::monotonicNowNs();
      if (now >= deadline || !live.streaming() || (deadline == INT64_MAX && now >= giveUp)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    live.detach();
    const core::LiveSnapshot st = live.snapshot();
    observed = st.seconds;
    if (st.state == core::LiveState::Failed) return fail(core::Status(core::ErrorCode::NotFound, st.message));
  }
  std::unique_lock lock(mutex);
  store.flush();
  const core::StragglerReport stragglers = core::findStragglers(store, o.stragglers);

  // 2. What every rank is doing now.
  std::vector<core::RankInspection> inspections;
  {
    auto session = connectJob(o.job, false, 5000);
    if (!session) return fail(session.status());
    std::map<core::RankId, bool> answered;
    for (core::AgentClient* c : session.value()->clients()) {
      core::RankInspection ri;
      ri.rank = c->job().rank;
      auto in = c->inspect();
      if (in) {
        ri.answered = true;
        ri.inspect = std::move(in).value();
      } else {
        ri.error = in.status().message();
      }
      answered[ri.rank] = true;
      inspections.push_back(std::move(ri));
    }
    for (core::RankId r = 0; r < worldSize; ++r)
      if (!answered.count(r)) {
        core::RankInspection ri;
        ri.rank = r;
        ri.error = "not reachable";
        inspections.push_back(std::move(ri));
      }
    std::sort(inspections.begin(), inspections.end(),
              [](const core::RankInspection& a, const core::RankInspection& b) { return a.rank < b.rank; });
  }
  const auto hang = core::findHang(inspections, o.hangAfter, lastEventsOf(store, o.lastEvents));

  if (o.json) {
    using J = nlohmann::ordered_json;
    J j;
    j["job"] = o.job;
    j["ranks"] = worldSize;
    j["observed_s"] = std::round(observed * 10) / 10;
    const J s = J::parse(core::stragglerReportJson(stragglers));
    j["stragglers"] = s["stragglers"];
    j["per_step"] = s["per_step"];
    if (s.contains("collectives")) j["collectives"] = s["collectives"];
    j["straggler_summary"] = {{"steps", s["steps"]},
                              {"matched_collectives", s["matched_collectives"]},
                              {"median_step_ms", s["median_step_ms"]},
                              {"threshold_ms", s["threshold_ms"]},
                              {"noise_ms", s["noise_ms"]}};
    j["hang"] = J::parse(core::hangReportJson(hang));
    std::cout << j.dump(2, ' ', false, J::error_handler_t::replace) << "\n";
  } else {
    printText(o, stragglers, hang, worldSize, observed);
  }
  return kExitOk;
}

}  // namespace

void addDoctorCommand(CLI::App& app, Runner& run) {
  auto opts = std::make_shared<DoctorOptions>();
  CLI::App* cmd = app.add_subcommand(
      "doctor", "Name the rank that holds a running job back (stragglers) and, when it is hung, the collective "
                "and the ranks it waits for (docs/ANALYSIS.md, \"Doctor\")");
  cmd->add_option("--job", opts->job, "Job id (see `jobs`)")->required();
  cmd->add_option("--seconds", opts->seconds, "How long to watch the job (after its flight-recorder history)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--hang-after", opts->hangAfter,
                  "A collective open this many seconds on some rank is a hang")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--last-events", opts->lastEvents, "Last events shown per rank in a hang report")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  cmd->add_option("--min-late-ms", opts->stragglers.minLateMs,
                  "Report a last arrival only when it is this much later than the others' median")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--collectives", opts->stragglers.keepCollectives,
                  "Also print the last N collectives matched across ranks: when each rank entered and left")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--noise-factor", opts->stragglers.noiseFactor,
                  "... and this many times the noise floor (p95 of the second-to-last arrival; 0: off)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--json", opts->json, "Print JSON (keys in docs/ANALYSIS.md, \"Doctor\")");
  cmd->callback([opts, &run] { run = [opts] { return runDoctor(*opts); }; });
}

}  // namespace trainscope::cli
