// LiveSession: connections, clock sync, subscription, ingest, statistics and knob calls for one
// live job (see the header). Everything network-bound runs on one worker thread while streaming.
#include "trainscope/core/live/live_session.h"

#include <poll.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "trainscope/core/session/tsdb.h"
#include "live/live_session_impl.h"

namespace trainscope::core {

const char* liveStateName(LiveState s) {
  switch (s) {
    case LiveState::Connecting:
      return "connecting";
    case LiveState::Live:
      return "live";
    case LiveState::Ended:
      return "job ended";
    case LiveState::Failed:
      return "failed";
    case LiveState::Detached:
      return "detached";
  }
  return "?";
}

namespace {
constexpr size_t kMaxOffsetLog = 64;  // clock_offset_log.<rank> keeps the first updates
constexpr int64_t kRetryNs = 2'000'000'000;  // a rank that could not be reached is tried again after this
}  // namespace


LiveSession::LiveSession(std::vector<discovery::Entry> entries, LiveOptions options)
    : entries_(std::move(entries)), options_(std::move(options)) {
  if (!entries_.empty()) {
    jobId_ = entries_.front().jobId;
    for (const auto& e : entries_) worldSize_ = std::max(worldSize_, e.worldSize);
    worldSize_ = std::max(worldSize_, static_cast<int>(entries_.size()));
  }
  snapshot_.jobId = jobId_;
  snapshot_.ranksTotal = worldSize_;
  metadata_["job_id"] = jobId_;
  metadata_["created_by"] = options_.createdBy;
  metadata_["world_size"] = std::to_string(worldSize_);
  // The attaching machine's CLOCK_MONOTONIC; each rank's offset aligns its agent clock to it.
  metadata_["clock_domain"] = "monotonic";
  metadata_["clock_alignment"] = "ping-pong, fastest of N round trips (docs/ARCHITECTURE.md, Protocol)";
}

LiveSession::~LiveSession() {
  detach();
}

Result<std::unique_ptr<LiveSession>> LiveSession::connect(std::vector<discovery::Entry> entries, LiveOptions options) {
  auto s = std::make_unique<LiveSession>(std::move(entries), std::move(options));
  for (const auto& e : s->entries_) {
    auto& slot = s->ranks_[e.rank];
    if (!slot) slot = std::make_unique<Rank>();
    slot->rank = e.rank;
    if (Status st = s->connectRank(*slot, e, false); !st.isOk()) return st;
  }
  return s;
}

void LiveSession::setStore(StoreTarget target) {
  target_ = std::move(target);
}

void LiveSession::setWriter(SessionWriter* writer) {
  writer_ = writer;
}

std::vector<AgentClient*> LiveSession::clients() {
  std::vector<AgentClient*> out;
  for (auto& [rank, r] : ranks_)
    if (r->open()) out.push_back(r->client.get());
  return out;
}

// ---- connections ---------------------------------------------------------------------------

Status LiveSession::connectRank(Rank& r, const discovery::Entry& e, bool subscribe) {
  auto fail = [&](const Status& s, const std::string& what) {
    r.problem = "rank " + std::to_string(e.rank) + ": " + what + s.message();
    r.retryAtNs = monotonicNowNs() + kRetryNs;
    if (r.client) r.client->close();
    r.client.reset();
    return Status(s.code(), r.problem);
  };
  r.entry = e;
  AgentClient::Options o = options_.client;
  if (o.secretFile.empty()) o.secretFile = e.secretFile;
  auto c = AgentClient::connect(e.endpoint, o);
  if (!c) return fail(c.status(), "");
  r.client = std::move(c).value();
  r.entry = e;
  r.rank = r.client->job().rank;
  if (worldSize_ < r.client->job().worldSize) worldSize_ = r.client->job().worldSize;
  if (jobId_.empty()) jobId_ = r.client->job().jobId;
  if (!subscribe) {
    r.problem.clear();
    return Status::ok();
  }
  auto sync = r.client->estimateClockOffset(options_.pings);
  if (!sync) return fail(sync.status(), "clock sync: ");
  const bool sameProcess = r.ingestor && r.ingestor->rank().pid == r.client->job().pid &&
                           r.ingestor->rank().host == r.client->job().host;
  if (sameProcess) {
    r.skipOnPublish = true;  // the history repeats what we have
    r.offsetOnPublish = -sync->agentMinusClientNs;
  } else {
    r.newIngestor = rankInfoFor(r.client->job(), sync.value());
    r.firstSync = sync.value();
  }
  r.lastSync = sync.value();
  if (r.attaches == 0) r.firstSync = sync.value();
  if (Status s = r.client->subscribe(options_.history); !s.isOk()) return fail(s, "subscribe: ");
  ++r.attaches;
  r.problem.clear();
  recordKnobs();
  return Status::ok();
}

// Knob values when the session starts (knob.<name>); later changes are KnobChange events. A job
// registers its knobs after its agent starts (after MPI_Init), so an empty list is asked again
// at the next rediscovery tick.
void LiveSession::recordKnobs() {
  if (knobsRecorded_) return;
  for (auto& [rank, r] : ranks_) {
    if (!r->open()) continue;
    auto list = r->client->knobList();
    if (!list.isOk() || list->knobs.empty()) return;
    knobsRecorded_ = true;
    std::lock_guard g(infoMutex_);
    for (const auto& k : list->knobs) metadata_["knob." + k.name] = k.currentValue;
    return;
  }
}

void LiveSession::connectKnown(bool subscribe) {
  for (const auto& e : entries_) {
    auto& slot = ranks_[e.rank];
    if (!slot) {
      slot = std::make_unique<Rank>();
      slot->rank = e.rank;
    }
    if (slot->open()) continue;
    if (stop_) return;
    (void)connectRank(*slot, e, subscribe);
  }
}

// Ranks that registered after we attached, and ranks that went away and are back (a new
// process, or the same one reachable again), are attached; an entry that does not answer is
// tried again a little later.
void LiveSession::rediscover() {
  if (jobId_.empty()) return;
  const int64_t now = monotonicNowNs();
  std::vector<discovery::Entry> found;
  if (relayHost().empty()) {
    found = discovery::listEntries();
  } else if (now >= relayListAtNs_) {
    // Through a relay the rank list is a round trip: asked every few seconds, briefly.
    relayListAtNs_ = now + 3'000'000'000;
    if (auto r = relayRanks(jobId_, 500); r.isOk()) found = std::move(r->entries);
  }
  for (const auto& e : found) {
    if (e.jobId != jobId_) continue;
    auto& slot = ranks_[e.rank];
    if (!slot) {
      slot = std::make_unique<Rank>();
      slot->rank = e.rank;
    }
    if (slot->open()) continue;
    const bool newProcess = slot->entry.pid != e.pid || slot->entry.endpoint != e.endpoint;
    if (!newProcess && now < slot->retryAtNs) continue;
    if (std::none_of(entries_.begin(), entries_.end(), [&](const auto& k) { return k.rank == e.rank; }))
      entries_.push_back(e);
    else
      for (auto& k : entries_)
        if (k.rank == e.rank) k = e;
    worldSize_ = std::max(worldSize_, e.worldSize);
    if (stop_) return;
    (void)connectRank(*slot, e, true);
  }
  // Ranks known only from the entries we were given (remote ones) are retried too.
  for (const auto& e : entries_) {
    auto& slot = ranks_[e.rank];
    if (slot && !slot->open() && now >= slot->retryAtNs && !stop_) (void)connectRank(*slot, e, true);
  }
}

// Clocks of different hosts drift apart (tens of ppm without good NTP: a millisecond in a
// minute), so offsets are measured again every few seconds. A new estimate replaces the offset
// for later batches only when it is about as tight as the first one (pongs queue behind event
// batches on a busy connection, which widens the round trip) and differs by more than its error
// bound; on one host the clocks are the same and nothing changes.
void LiveSession::resync() {
  // A bounded number of ranks per round, in turn: pings are round trips on the owner's thread,
  // and at a thousand ranks all of them every round would be seconds without ingest.
  constexpr int kRanksPerRound = 16;
  int done = 0;
  auto it = ranks_.upper_bound(resyncAfterRank_);
  for (size_t seen = 0; seen < ranks_.size() && done < kRanksPerRound; ++seen, ++it) {
    if (it == ranks_.end()) it = ranks_.begin();
    auto& [rank, r] = *it;
    resyncAfterRank_ = rank;
    if (!r->open()) continue;
    ++done;
    auto s = r->client->estimateClockOffset(8);
    if (!s) continue;
    const int64_t limit = std::max<int64_t>(2 * r->firstSync.errorBoundNs, 200'000);
    const int64_t offset = -s->agentMinusClientNs;
    if (s->errorBoundNs > limit || std::llabs(offset - r->offsetNs()) <= s->errorBoundNs) continue;
    r->offsetOnPublish = offset;  // for the batches published from the next round on
    r->lastSync = s.value();
    ++r->offsetUpdates;
    if (r->offsetLogEntries < kMaxOffsetLog) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s%.3f:%lld", r->offsetLog.empty() ? "" : " ",
                    static_cast<double>(monotonicNowNs() - startNs_) / 1e9, static_cast<long long>(offset));
      r->offsetLog += buf;
      ++r->offsetLogEntries;
    }
  }
}

void LiveSession::closeRank(Rank& r, const std::string& why) {
  if (r.client) r.client->close();
  r.problem = "rank " + std::to_string(r.rank) + " went away: " + why;
  r.retryAtNs = monotonicNowNs() + kRetryNs / 4;
  std::lock_guard g(infoMutex_);
  snapshot_.message = r.problem;
}

// ---- ingest --------------------------------------------------------------------------------

// With a writer, every ingested event is kept here during the locked round and written to the
// session file after the lock is released: SQLite never runs while a reader could wait.
Status LiveSession::sink(TrackId t, const EventRecord& e, std::span<const Attr> attrs) {
  deferred_.push_back({t, e, static_cast<uint32_t>(deferredAttrs_.size()), static_cast<uint32_t>(attrs.size())});
  deferredAttrs_.insert(deferredAttrs_.end(), attrs.begin(), attrs.end());
  return Status::ok();
}

// One publish: under the store's lock, the ranks' pending store changes, then every pending batch,
// a flush (readers get every track sorted) and the view's update; then, unlocked, the writer.
// Without `block` the lock is only tried: a reader holding it (an analysis, a snapshot, a paint)
// makes the events wait for the next round while the sockets keep being read.
Status LiveSession::publish(bool block) {
  std::unique_lock lock(*target_.mutex, std::defer_lock);
  if (block) lock.lock();
  else if (!lock.try_lock()) {
    if (target_.ownerWaiting) target_.ownerWaiting->store(true);
    return Status(ErrorCode::Io, "busy");
  }
  if (target_.ownerWaiting) target_.ownerWaiting->store(false);
  TraceStore& store = *target_.store;
  std::vector<RankInfo> newRanks;
  for (auto& [rank, r] : ranks_) {
    if (r->newIngestor) {
      r->ingestor = std::make_unique<BatchIngestor>(store, *r->newIngestor);
      if (writer_)
        r->ingestor->setSink([this](TrackId t, const EventRecord& ev, std::span<const Attr> a) { return sink(t, ev, a); },
                             target_.store != ownStore_.get());
      newRanks.push_back(*r->newIngestor);
      r->newIngestor.reset();
    }
    if (r->skipOnPublish && r->ingestor) r->ingestor->skipReceived();
    r->skipOnPublish = false;
    if (r->offsetOnPublish && r->ingestor) r->ingestor->setClockOffset(*r->offsetOnPublish);
    r->offsetOnPublish.reset();
  }
  bool layout = false;
  std::map<std::string, std::string> md;
  writeMetadata(md);
  for (auto& [r, b] : pending_) {
    if (!r->ingestor) continue;
    if (Status s = r->ingestor->ingest(b); !s.isOk() && sinkError_.isOk()) sinkError_ = s;
    r->seen = true;
  }
  pending_.clear();
  // The view's update reads each track's new tail before it sorts it in; then every track is
  // sorted before the lock goes: readers only read.
  if (target_.underLock) layout = target_.underLock();
  store.flush();
  for (auto& [k, v] : md) store.metadata()[k] = v;
  lock.unlock();
  {
    std::lock_guard g(infoMutex_);
    metadataFull_ = std::move(md);
  }
  if (pendingSinceNs_ > 0) {
    const int64_t gap = monotonicNowNs() - pendingSinceNs_;
    if (gap > maxPublishGapNs_.load()) maxPublishGapNs_.store(gap);
  }
  pendingSinceNs_ = 0;
  // The writer, off the readers' path: only this thread changes the store, so it reads strings
  // and tracks without the lock.
  if (writer_) {
    for (const RankInfo& ri : newRanks) (void)writer_->putRank(ri);
    for (const DeferredEvent& d : deferred_) {
      while (tracksWritten_ < store.trackCount()) {
        if (Status s = writer_->putTrack(static_cast<TrackId>(tracksWritten_), store.track(tracksWritten_)); !s.isOk()) {
          if (sinkError_.isOk()) sinkError_ = s;
          break;
        }
        ++tracksWritten_;
      }
      if (!sinkError_.isOk()) break;
      if (Status s = writer_->append(store, d.track, d.event, {deferredAttrs_.data() + d.attrBegin, d.attrCount});
          !s.isOk() && sinkError_.isOk())
        sinkError_ = s;
    }
  }
  deferred_.clear();
  deferredAttrs_.clear();
  if (target_.afterUnlock) target_.afterUnlock(layout);
  return Status::ok();
}

void LiveSession::flush(bool final) {
  const int64_t now = monotonicNowNs();
  const bool storeChanges = std::any_of(ranks_.begin(), ranks_.end(), [](const auto& kv) {
    return kv.second->newIngestor || kv.second->skipOnPublish || kv.second->offsetOnPublish;
  });
  if ((pending_.empty() && !storeChanges) ||
      (!final && now - lastFlushNs_ < static_cast<int64_t>(options_.flushMs) * 1'000'000))
    return;
  if (publish(final).isOk()) lastFlushNs_ = now;
}

void LiveSession::writeMetadata(std::map<std::string, std::string>& md) const {
  {
    std::lock_guard g(infoMutex_);
    md = metadata_;
  }
  md["job_id"] = jobId_;
  md["world_size"] = std::to_string(worldSize_);
  for (const auto& [rank, r] : ranks_) {
    if (!r->ingestor) continue;
    const std::string rk = std::to_string(rank);
    md["clock_sync_error_ns." + rk] = std::to_string(r->firstSync.errorBoundNs);
    md["clock_offset_initial_ns." + rk] = std::to_string(-r->firstSync.agentMinusClientNs);
    md["clock_offset_ns." + rk] = std::to_string(r->ingestor->rank().clockOffsetNs);
    md["clock_offset_updates." + rk] = std::to_string(r->offsetUpdates);
    md["clock_offset_log." + rk] = r->offsetLog;
    if (r->hasDrift) md["clock_drift_ns." + rk] = std::to_string(r->clockDriftNs);
    md["dropped_events." + rk] = std::to_string(r->ingestor->rank().droppedEvents);
    // Events the agent sent and this session never received (it fell behind: the agent dropped
    // them for it), with the time ranges they fell in: "from_ns-to_ns:events;..." (session clock).
    md["not_received_events." + rk] = std::to_string(r->ingestor->notReceivedEvents());
    if (!r->ingestor->notReceivedGaps().empty()) {
      std::string ranges;
      for (const BatchIngestor::Gap& g : r->ingestor->notReceivedGaps())
        ranges += (ranges.empty() ? "" : ";") + std::to_string(g.fromNs) + "-" + std::to_string(g.toNs) + ":" +
                  std::to_string(g.events);
      md["not_received_ranges." + rk] = ranges;
    }
    md["unknown_track_events." + rk] = std::to_string(r->ingestor->unknownTrackEvents());
    md["attaches." + rk] = std::to_string(r->attaches);
  }
  if (startNs_ > 0) {
    md["record_seconds"] = std::to_string(static_cast<double>(monotonicNowNs() - startNs_) / 1e9);
    // What observing cost: this process's CPU since the session started and the events it took
    // in, on which host and with how many CPUs. Where the observer shares the ranks' cores and
    // none is left over, that CPU comes out of the ranks' steps (what-if's observer term).
    uint64_t events = 0;
    for (const auto& [rank, r] : ranks_)
      if (r->ingestor) events += r->ingestor->eventsIngested();
    md["observer_cpu_seconds"] = std::to_string(processCpuSeconds() - startCpuSeconds_);
    md["observer_events"] = std::to_string(events);
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) == 0) md["observer_host"] = host;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) md["observer_cpus"] = std::to_string(CPU_COUNT(&set));
  }
}

double LiveSession::processCpuSeconds() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

void LiveSession::publishStats(int64_t now, bool force) {
  if (!force && now - lastStatsNs_ < 100'000'000) return;
  lastStatsNs_ = now;
  LiveSnapshot s;
  s.jobId = jobId_;
  s.ranksTotal = worldSize_;
  s.seconds = startNs_ > 0 ? static_cast<double>(now - startNs_) / 1e9 : 0;
  std::string problems;
  for (const auto& [rank, r] : ranks_) {
    LiveRankStatus rs;
    rs.rank = rank;
    rs.pid = r->entry.pid;
    rs.host = r->entry.host;
    rs.endpoint = r->entry.endpoint;
    rs.connected = r->open();
    rs.seen = r->seen;
    rs.attaches = r->attaches;
    rs.offsetUpdates = r->offsetUpdates;
    rs.problem = r->problem;
    if (r->ingestor) {
      rs.events = r->ingestor->eventsIngested();
      rs.dropped = r->ingestor->rank().droppedEvents;
      rs.notReceived = r->ingestor->notReceivedEvents();
      rs.clockOffsetNs = r->ingestor->rank().clockOffsetNs;
      rs.clockErrorNs = r->lastSync.errorBoundNs;
    }
    s.ranksConnected += rs.connected;
    s.ranksSeen += rs.seen;
    s.events += rs.events;
    s.dropped += rs.dropped;
    s.notReceived += rs.notReceived;
    if (rs.connected || rs.seen) s.clockErrorNs = std::max(s.clockErrorNs, rs.clockErrorNs);
    if (!rs.connected && !rs.problem.empty()) problems += (problems.empty() ? "" : "; ") + rs.problem;
    s.ranks.push_back(std::move(rs));
  }
  rate_.emplace_back(now, s.events);
  while (rate_.size() > 2 && now - rate_.front().first > 2'000'000'000) rate_.pop_front();
  const double dt = static_cast<double>(now - rate_.front().first) / 1e9;
  s.eventsPerSecond = dt > 0.2 ? static_cast<double>(s.events - rate_.front().second) / dt : 0;
  std::lock_guard g(infoMutex_);
  s.state = snapshot_.state;
  s.message = !problems.empty() ? problems : snapshot_.message;
  if (!sinkError_.isOk()) s.message = "writing the session: " + sinkError_.message();
  snapshot_ = std::move(s);
}

// ---- the worker ----------------------------------------------------------------------------

void LiveSession::start() {
  std::lock_guard op(opMutex_);
  if (thread_.joinable()) {
    if (!finished_) return;
    thread_.join();
  }
  if (!target_.store) {
    ownStore_ = std::make_unique<TraceStore>();
    target_.store = ownStore_.get();
    target_.mutex = &ownMutex_;
  }
  if (!target_.mutex) target_.mutex = &ownMutex_;
  stop_ = false;
  finished_ = false;
  {
    std::lock_guard g(infoMutex_);
    snapshot_.state = LiveState::Connecting;
    snapshot_.message.clear();
  }
  // Connections made for knob calls before streaming are replaced by subscribed ones.
  for (auto& [rank, r] : ranks_)
    if (r->open()) {
      r->client->close();
      r->client.reset();
    }
  thread_ = std::thread([this] { run(); });
}

void LiveSession::run() {
  startNs_ = monotonicNowNs();
  startCpuSeconds_ = processCpuSeconds();
  connectKnown(true);
  const bool any = !clients().empty();
  publishStats(monotonicNowNs(), true);
  {
    std::lock_guard g(infoMutex_);
    snapshot_.state = any ? LiveState::Live : LiveState::Failed;
    if (!any) {
      std::string problems;
      for (const auto& [rank, r] : ranks_)
        if (!r->problem.empty()) problems += (problems.empty() ? "" : "; ") + r->problem;
      snapshot_.message = problems.empty() ? "no ranks to attach to" : problems;
    }
  }
  if (!any) {
    publishStats(monotonicNowNs(), true);
    std::lock_guard g(infoMutex_);
    snapshot_.state = LiveState::Failed;
    finished_ = true;
    return;
  }
  const int64_t resyncEvery =
      options_.resyncSeconds > 0 ? static_cast<int64_t>(options_.resyncSeconds * 1e9) : INT64_MAX;
  const int64_t rediscoverEvery =
      options_.rediscoverSeconds > 0 ? static_cast<int64_t>(options_.rediscoverSeconds * 1e9) : INT64_MAX;
  nextResyncNs_ = resyncEvery == INT64_MAX ? INT64_MAX : startNs_ + resyncEvery;
  nextRediscoverNs_ = rediscoverEvery == INT64_MAX ? INT64_MAX : startNs_ + rediscoverEvery;
  bool ended = false;
  while (!stop_ && sinkError_.isOk()) {
    takeKnobCommands();
    int64_t now = monotonicNowNs();
    if (now >= nextResyncNs_) {
      resync();
      nextResyncNs_ = monotonicNowNs() + resyncEvery;
    }
    if (now >= nextRediscoverNs_) {
      rediscover();
      recordKnobs();
      nextRediscoverNs_ = monotonicNowNs() + rediscoverEvery;
    }
    std::vector<pollfd> fds;
    for (const auto& [rank, r] : ranks_)
      if (r->open()) fds.push_back({r->client->fd(), POLLIN, 0});
    if (fds.empty()) {
      // Every rank is gone: the job ended, unless one comes back right now.
      advanceKnobs();  // calls in flight learn that their ranks went away
      flush(true);
      rediscover();
      if (clients().empty()) {
        ended = true;
        break;
      }
      continue;
    }
    // Wait for data, a little longer when events are waiting for the store's lock.
    (void)::poll(fds.data(), fds.size(), pending_.empty() ? 20 : 2);
    for (auto& [rank, r] : ranks_) {
      if (!r->open()) continue;
      Rank* rp = r.get();
      pumpReplies(*r, 0);
      // Even when that read found the connection closed: the batches it queued are delivered.
      auto n = r->client->takeEvents(0, [&](wire::EventBatch&& b) { pending_.emplace_back(rp, std::move(b)); });
      if (!n) closeRank(*r, n.status().message());
    }
    if (!pending_.empty() && pendingSinceNs_ == 0) pendingSinceNs_ = monotonicNowNs();
    advanceKnobs();
    flush(false);
    publishStats(monotonicNowNs(), false);
  }
  flush(true);
  // The drift over the session, measured where the rank is still there; the offset in force is
  // not changed retroactively.
  for (auto& [rank, r] : ranks_) {
    if (!r->open()) continue;
    if (auto end = r->client->estimateClockOffset(8); end.isOk()) {
      r->clockDriftNs = end->agentMinusClientNs - r->firstSync.agentMinusClientNs;
      r->hasDrift = true;
    }
  }
  finish();
  {
    std::lock_guard g(infoMutex_);
    snapshot_.state = ended && !stop_ ? LiveState::Ended : LiveState::Detached;
  }
  publishStats(monotonicNowNs(), true);
  {
    std::lock_guard g(infoMutex_);
    snapshot_.ranksConnected = 0;
    snapshot_.eventsPerSecond = 0;
    if (snapshot_.state == LiveState::Ended)
      snapshot_.message = "the job ended; " + std::to_string(snapshot_.events) + " events received are kept";
    if (!sinkError_.isOk()) {
      snapshot_.state = LiveState::Failed;
      snapshot_.message = "writing the session: " + sinkError_.message();
    }
  }
  // Knob calls still in flight or queued get an answer instead of waiting forever.
  std::lock_guard g(cmdMutex_);
  finished_ = true;
  for (auto& op : commands_) knobQueue_.push_back(std::move(op));
  commands_.clear();
  while (!knobQueue_.empty()) finishOp(Status(ErrorCode::NotFound, "the live session has ended"));
}

// Closes the connections and leaves the final metadata, ranks and tracks in the store and the
// writer (the writer's owner closes it).
void LiveSession::finish() {
  for (auto& [rank, r] : ranks_)
    if (r->open()) r->client->close();
  std::map<std::string, std::string> md;
  writeMetadata(md);
  {
    std::lock_guard g(infoMutex_);
    metadataFull_ = md;
  }
  {
    std::unique_lock lock(*target_.mutex);
    for (auto& [k, v] : md) target_.store->metadata()[k] = v;
    for (auto& [rank, r] : ranks_)
      if (r->ingestor) target_.store->setRank(r->ingestor->rank());
  }
  if (writer_) {
    for (auto& [k, v] : md) (void)writer_->putMetadata(k, v);
    for (auto& [rank, r] : ranks_)
      if (r->ingestor) (void)writer_->putRank(r->ingestor->rank());
    while (tracksWritten_ < target_.store->trackCount()) {
      (void)writer_->putTrack(static_cast<TrackId>(tracksWritten_), target_.store->track(tracksWritten_));
      ++tracksWritten_;
    }
  }
}

void LiveSession::detach() {
  std::lock_guard op(opMutex_);
  if (!thread_.joinable()) return;
  stop_ = true;
  thread_.join();
}

LiveSnapshot LiveSession::snapshot() const {
  std::lock_guard g(infoMutex_);
  return snapshot_;
}

std::map<std::string, std::string> LiveSession::metadata() const {
  std::lock_guard g(infoMutex_);
  return metadataFull_.empty() ? metadata_ : metadataFull_;
}

// ---- knob calls ----------------------------------------------------------------------------

}  // namespace trainscope::core
