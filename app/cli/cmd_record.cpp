// `trainscope-cli record --job ID [--seconds S] --out FILE.tsdb`: attach to every rank, align
// clocks, stream the flight-recorder history and then live events straight into a session file.
//
// Events go to the SessionWriter as they arrive (the TraceStore only keeps strings, tracks and
// ranks), so memory stays flat however long the recording runs. Each rank's clock offset is
// measured before subscribing, again every --resync-seconds (see resyncClocks), and at the end;
// the offsets, the first error bound and the drift over the recording go into the metadata. If the job ends while recording, what arrived
// is saved and the command succeeds.
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "commands.h"
#include "live.h"
#include "trainscope/core/session_db.h"

namespace trainscope::cli {
namespace {

struct RecordOptions {
  std::string job;
  double seconds = 0;  // 0: until the job ends or Ctrl-C
  std::string out;
  int pings = 32;
  double resyncSeconds = 2;  // 0: measure the offsets only at the start (and the drift at the end)
};

std::atomic<bool> gStop{false};
void onSignal(int) {
  gStop = true;
}

struct RankState {
  core::AgentClient* client = nullptr;
  core::ClockSync sync;  // the first, before subscribing
  std::unique_ptr<core::BatchIngestor> ingestor;
  bool open = true;
  int offsetUpdates = 0;
};

// Clocks of different hosts drift apart (tens of ppm without good NTP: a millisecond in a minute),
// so the offsets are measured again every few seconds while recording. A new estimate replaces
// the offset for later batches only when it is about as tight as the first one (pongs queue
// behind event batches on a busy connection, which widens the round trip) and differs by more
// than its error bound; on one host the clocks are the same and nothing changes.
void resyncClocks(std::vector<RankState>& ranks) {
  for (auto& r : ranks) {
    if (!r.open) continue;
    auto s = r.client->estimateClockOffset(8);
    if (!s) continue;
    const int64_t limit = std::max<int64_t>(2 * r.sync.errorBoundNs, 200'000);
    const int64_t offset = -s->agentMinusClientNs;
    if (s->errorBoundNs > limit || std::llabs(offset - r.ingestor->rank().clockOffsetNs) <= s->errorBoundNs) continue;
    r.ingestor->setClockOffset(offset);
    ++r.offsetUpdates;
  }
}

int runRecord(const RecordOptions& o) {
  auto js = connectJob(o.job, false, 5000);
  if (!js) return fail(js.status());
  auto writer = core::SessionWriter::create(o.out);
  if (!writer) return fail(writer.status());
  core::SessionWriter& w = *writer.value();
  core::TraceStore store;  // strings, tracks and ranks only; events stream to the file
  size_t tracksWritten = 0;
  core::Status sinkError;
  auto sink = [&](core::TrackId t, const core::EventRecord& e,
                  std::span<const core::Attr> attrs) -> core::Status {
    while (tracksWritten < store.trackCount()) {
      if (core::Status s = w.putTrack(static_cast<core::TrackId>(tracksWritten), store.track(tracksWritten));
          !s.isOk())
        return s;
      ++tracksWritten;
    }
    return w.append(store, t, e, attrs);
  };

  (void)w.putMetadata("job_id", o.job);
  (void)w.putMetadata("created_by", std::string("trainscope-cli record ") + TRAINSCOPE_VERSION);
  // The recording machine's CLOCK_MONOTONIC; each rank's offset aligns its agent clock to it.
  (void)w.putMetadata("clock_domain", "monotonic");
  (void)w.putMetadata("clock_alignment",
                      "ping-pong, fastest of N round trips (docs/ARCHITECTURE.md, Protocol)");
  // Knob values when the recording starts (knob.<name>); later changes are KnobChange events.
  // Analysis reads the settings in force at each step from the two (docs/TRACE_CONVENTIONS.md).
  if (!js.value()->ranks().empty())
    if (auto list = js.value()->ranks().front()->knobList(); list.isOk())
      for (const auto& k : list->knobs) (void)w.putMetadata("knob." + k.name, k.currentValue);
  std::vector<RankState> ranks;
  for (auto& c : js.value()->ranks()) {
    RankState r;
    r.client = c.get();
    auto sync = c->estimateClockOffset(o.pings);
    if (!sync)
      return fail(core::Status(sync.status().code(), "rank " + std::to_string(c->job().rank) +
                                                         ": clock sync: " + sync.status().message()));
    r.sync = sync.value();
    r.ingestor = std::make_unique<core::BatchIngestor>(store, core::rankInfoFor(c->job(), r.sync));
    r.ingestor->setSink(sink, false);
    const std::string rk = std::to_string(c->job().rank);
    (void)w.putMetadata("clock_sync_error_ns." + rk, std::to_string(r.sync.errorBoundNs));
    (void)w.putMetadata("clock_offset_ns." + rk, std::to_string(r.ingestor->rank().clockOffsetNs));
    (void)w.putRank(r.ingestor->rank());
    if (core::Status s = c->subscribe(true); !s.isOk()) return fail(s);
    ranks.push_back(std::move(r));
  }
  std::fprintf(stderr, "recording job %s: %zu ranks -> %s%s\n", o.job.c_str(), ranks.size(), o.out.c_str(),
               o.seconds > 0 ? "" : " (until the job ends or Ctrl-C)");

  gStop = false;
  auto oldInt = std::signal(SIGINT, onSignal);
  auto oldTerm = std::signal(SIGTERM, onSignal);
  const int64_t t0 = core::monotonicNowNs();
  const int64_t deadline = o.seconds > 0 ? t0 + static_cast<int64_t>(o.seconds * 1e9) : INT64_MAX;
  const int64_t resyncEvery = o.resyncSeconds > 0 ? static_cast<int64_t>(o.resyncSeconds * 1e9) : INT64_MAX;
  int64_t nextResync = resyncEvery == INT64_MAX ? INT64_MAX : t0 + resyncEvery;
  bool jobEnded = false;
  while (!gStop && core::monotonicNowNs() < deadline && sinkError.isOk()) {
    if (core::monotonicNowNs() >= nextResync) {
      resyncClocks(ranks);
      nextResync = core::monotonicNowNs() + resyncEvery;
    }
    std::vector<pollfd> fds;
    for (const auto& r : ranks)
      if (r.open) fds.push_back({r.client->fd(), POLLIN, 0});
    if (fds.empty()) {
      jobEnded = true;
      break;
    }
    (void)::poll(fds.data(), fds.size(), 100);
    for (auto& r : ranks) {
      if (!r.open) continue;
      auto n = r.client->pollEvents(0, [&](const core::wire::EventBatch& b) {
        if (core::Status s = r.ingestor->ingest(b); !s.isOk() && sinkError.isOk()) sinkError = s;
      });
      if (!n) {
        r.open = false;
        std::fprintf(stderr, "rank %d: %s\n", r.client->job().rank, n.status().message().c_str());
      }
    }
  }
  std::signal(SIGINT, oldInt);
  std::signal(SIGTERM, oldTerm);
  if (!sinkError.isOk()) return fail(sinkError);

  uint64_t events = 0, dropped = 0;
  for (auto& r : ranks) {
    const std::string rk = std::to_string(r.client->job().rank);
    if (r.open) {  // measure drift over the recording; the offset itself is not changed mid-file
      if (auto end = r.client->estimateClockOffset(8); end.isOk())
        (void)w.putMetadata("clock_drift_ns." + rk,
                            std::to_string(end->agentMinusClientNs - r.sync.agentMinusClientNs));
      r.client->close();
    }
    (void)w.putRank(r.ingestor->rank());
    (void)w.putMetadata("clock_offset_updates." + rk, std::to_string(r.offsetUpdates));
    (void)w.putMetadata("clock_offset_ns." + rk, std::to_string(r.ingestor->rank().clockOffsetNs));
    (void)w.putMetadata("dropped_events." + rk, std::to_string(r.ingestor->rank().droppedEvents));
    if (r.ingestor->unknownTrackEvents() > 0)
      (void)w.putMetadata("unknown_track_events." + rk, std::to_string(r.ingestor->unknownTrackEvents()));
    events += r.ingestor->eventsIngested();
    dropped += r.ingestor->rank().droppedEvents;
  }
  const double secs = static_cast<double>(core::monotonicNowNs() - t0) / 1e9;
  (void)w.putMetadata("record_seconds", std::to_string(secs));
  while (tracksWritten < store.trackCount()) {
    (void)w.putTrack(static_cast<core::TrackId>(tracksWritten), store.track(tracksWritten));
    ++tracksWritten;
  }
  if (core::Status s = w.close(); !s.isOk()) return fail(s);
  if (jobEnded)
    std::fprintf(stderr, "note: the job ended during the recording (after %.1f s); saved what arrived\n",
                 secs);
  std::printf("recorded %s events from %zu ranks in %.1f s to %s (dropped by agents: %s)\n",
              withThousands(events).c_str(), ranks.size(), secs, o.out.c_str(),
              withThousands(dropped).c_str());
  return kExitOk;
}

}  // namespace

void addRecordCommand(CLI::App& app, Runner& run) {
  auto opts = std::make_shared<RecordOptions>();
  CLI::App* cmd = app.add_subcommand(
      "record", "Attach to a running job (flight-recorder history, then live) and save a session");
  cmd->add_option("--job", opts->job, "Job id (see `jobs`)")->required();
  cmd->add_option("--seconds", opts->seconds, "How long to record (default: until the job ends or Ctrl-C)");
  cmd->add_option("--out", opts->out, "Session file to write (.tsdb)")->required();
  cmd->add_option("--pings", opts->pings, "Clock-sync round trips per rank")->capture_default_str();
  cmd->add_option("--resync-seconds", opts->resyncSeconds,
                  "Measure clock offsets again this often while recording (0: only at the start)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->callback([opts, &run] { run = [opts] { return runRecord(*opts); }; });
}

}  // namespace trainscope::cli
