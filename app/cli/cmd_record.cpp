// `trainscope-cli record --job ID [--seconds S] --out FILE.tsdb`: the live-session engine
// (core/live/live_session.h) streams the flight-recorder history and then live events of every
// rank straight into a session file; ranks that register after the recording started join it.
//
// Events go to the SessionWriter as they arrive (the engine's store keeps only strings, tracks
// and ranks), so memory stays flat however long the recording runs. Clock offsets are measured
// at attach, again every --resync-seconds, and at the end (the drift); they and the other
// session metadata are the same a live GUI tab saves. If the job ends while recording, what
// arrived is saved and the command succeeds. Batches are committed at least every second, so a
// killed recorder loses about a second; when writing fails (disk full) the command says how many
// events the file holds (it opens as it is) and how many were lost, and exits 1.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "commands.h"
#include "live.h"
#include "out_path.h"
#include "trainscope/core/live/live_session.h"
#include "trainscope/core/session/tsdb.h"

namespace trainscope::cli {
namespace {

struct RecordOptions {
  std::string job;
  double seconds = 0;  // 0: until the job ends or Ctrl-C
  std::string out;
  bool force = false;
  int pings = 32;
  double resyncSeconds = 2;  // 0: measure the offsets only at the start (and the drift at the end)
};

std::atomic<bool> gStop{false};
void onSignal(int) {
  gStop = true;
}

int runRecord(const RecordOptions& o) {
  // An existing file is not replaced without --force; with it, the recording goes beside it and
  // replaces it at the end (a failed start leaves the old session as it was). A new file is
  // written in place, so that a killed recorder leaves its committed events where asked.
  auto output = OutputFile::create(o.out, {}, o.force, {.session = true, .directWhenNew = true});
  if (!output) return fail(output.status());
  // A job that is still coming up: wait for its first rank; the others join as they register.
  auto entries = core::LiveSession::waitForEntries(o.job, 5000);
  if (!entries) return fail(entries.status());
  // Committed at least every second: a kill or a full disk loses about a second of events.
  core::SessionWriter::Options wo;
  wo.commitMs = 1000;
  auto writer = core::SessionWriter::create(output->writePath(), wo);
  if (!writer) return fail(writer.status());
  core::SessionWriter& w = *writer.value();
  core::LiveOptions lo;
  lo.client.clientName = "trainscope-cli";
  lo.pings = o.pings;
  lo.resyncSeconds = o.resyncSeconds;
  lo.createdBy = std::string("trainscope-cli record ") + TRAINSCOPE_VERSION;
  core::LiveSession live(std::move(entries).value(), lo);
  live.setWriter(&w);
  for (const auto& [k, v] : live.metadata()) (void)w.putMetadata(k, v);

  gStop = false;
  auto oldInt = std::signal(SIGINT, onSignal);
  auto oldTerm = std::signal(SIGTERM, onSignal);
  live.start();
  // --seconds counts from the moment every rank known at the start is attached.
  int64_t deadline = INT64_MAX;
  bool announced = false;
  core::LiveSnapshot st;
  for (;;) {
    st = live.snapshot();
    if (!announced && st.state == core::LiveState::Live) {
      std::fprintf(stderr, "recording job %s: %d of %d ranks -> %s%s\n", o.job.c_str(), st.ranksConnected,
                   st.ranksTotal, o.out.c_str(), o.seconds > 0 ? "" : " (until the job ends or Ctrl-C)");
      announced = true;
      if (o.seconds > 0) deadline = core::monotonicNowNs() + static_cast<int64_t>(o.seconds * 1e9);
    }
    if (gStop || core::monotonicNowNs() >= deadline || !live.streaming()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  live.detach();
  std::signal(SIGINT, oldInt);
  std::signal(SIGTERM, oldTerm);
  st = live.snapshot();
  for (const auto& r : st.ranks)
    if (!r.problem.empty()) std::fprintf(stderr, "%s\n", r.problem.c_str());
  if (core::Status wf = w.failure(); !wf.isOk()) {
    // Writing failed (a full disk above all): what was committed stays readable; say how much.
    const uint64_t kept = w.eventsCommitted();
    (void)w.close();
    (void)output->commit();  // what was committed is worth more than the old file --force replaces
    (void)fail(wf);
    std::fprintf(stderr,
                 "note: %s holds the %s events committed before the error and opens as it is; the %s "
                 "events received after them were not saved\n",
                 o.out.c_str(), withThousands(kept).c_str(),
                 withThousands(st.events > kept ? st.events - kept : 0).c_str());
    return kExitFailed;
  }
  if (st.state == core::LiveState::Failed) return fail(core::Status(core::ErrorCode::NotFound, st.message));
  if (core::Status s = w.close(); !s.isOk()) return fail(s);
  if (core::Status s = output->commit(); !s.isOk()) return fail(s);
  if (st.state == core::LiveState::Ended)
    std::fprintf(stderr, "note: the job ended during the recording (after %.1f s); saved what arrived\n",
                 st.seconds);
  std::printf("recorded %s events from %d ranks in %.1f s to %s (dropped by agents: %s; not received: %s)\n",
              withThousands(st.events).c_str(), st.ranksSeen, st.seconds, o.out.c_str(),
              withThousands(st.dropped).c_str(), withThousands(st.notReceived).c_str());
  if (st.notReceived > 0) {
    // Never silent (issue 40): the recorder fell behind and the agents dropped what it did not read.
    std::fprintf(stderr,
                 "warning: %s events were sent by the agents but never received: this recorder fell behind "
                 "(stopped, or the machine too busy) and the agents dropped what it did not read. Per rank:",
                 withThousands(st.notReceived).c_str());
    for (const auto& r : st.ranks)
      if (r.notReceived) std::fprintf(stderr, " rank %d %s", r.rank, withThousands(r.notReceived).c_str());
    std::fprintf(stderr, "; the time ranges are in the file's metadata (not_received_ranges.RANK)\n");
  }
  {
    const auto md = live.metadata();
    const auto cpu = md.find("observer_cpu_seconds"), ev = md.find("observer_events");
    if (cpu != md.end() && ev != md.end()) {
      const double c = std::atof(cpu->second.c_str()), n = std::atof(ev->second.c_str());
      std::printf("recorder CPU %.2f s (%.2f us per event)\n", c, n > 0 ? c * 1e6 / n : 0.0);
    }
  }
  return kExitOk;
}

}  // namespace

void addRecordCommand(CLI::App& app, Runner& run) {
  auto opts = std::make_shared<RecordOptions>();
  CLI::App* cmd = app.add_subcommand(
      "record", "Attach to a running job (flight-recorder history, then live) and save a session");
  cmd->add_option("--job", opts->job, "Job id (see `jobs`)")->required();
  cmd->add_option("--seconds", opts->seconds, "How long to record (default: until the job ends or Ctrl-C)");
  cmd->add_option("--out", opts->out, "Session file to write (.tsdb; not an existing file, unless --force)")
      ->required();
  cmd->add_flag("--force", opts->force,
                "Replace --out when it exists (the recording goes beside it and replaces it at the end)");
  cmd->add_option("--pings", opts->pings, "Clock-sync round trips per rank")->capture_default_str();
  cmd->add_option("--resync-seconds", opts->resyncSeconds,
                  "Measure clock offsets again this often while recording (0: only at the start)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->callback([opts, &run] { run = [opts] { return runRecord(*opts); }; });
}

}  // namespace trainscope::cli
