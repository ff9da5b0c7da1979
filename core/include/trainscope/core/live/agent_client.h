// AgentClient: one connection from the workstation to one rank's agent (docs/ARCHITECTURE.md,
// "Protocol"). Blocking calls with timeouts; single-threaded use.
//
// Replies and streamed EventBatches share the connection, so a call that waits for a reply keeps
// every other message it reads in a queue that pollEvents() delivers later -- nothing is lost
// when a knob is set while events stream.
//
// Clock convention: estimateClockOffset() returns agentMinusClientNs (agent clock − client
// clock). RankInfo::clockOffsetNs is what is *added* to agent timestamps, i.e. its negation;
// BatchIngestor applies that so every rank lands on the client's CLOCK_MONOTONIC.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "trainscope/core/base/status.h"
#include "trainscope/core/model/trace_store.h"
#include "trainscope/core/wire/protocol.h"

namespace trainscope::core {

// CLOCK_MONOTONIC in nanoseconds: the clock every agent stamps events with.
int64_t monotonicNowNs();

struct ClockSync {
  int64_t agentMinusClientNs = 0;  // agentNs − (send + recv) / 2 of the fastest round trip
  int64_t errorBoundNs = 0;        // that round trip / 2: the true offset lies within ± this
  int64_t minRttNs = 0;
  int samples = 0;
};

class AgentClient {
 public:
  struct Options {
    int timeoutMs = 5000;  // connect, handshake and each request
    std::string clientName = "trainscope";
    std::string secretFile;  // read when the agent requires authentication
  };

  // Connects to "unix:/path" or "tcp:host:port" and completes Hello/Challenge/(Auth)/Welcome;
  // "relay:host:port/rank" reaches rank through a relay (docs/RELAY.md), "relay:host:port" the
  // relay itself (job() has rank -1 then).
  static Result<std::unique_ptr<AgentClient>> connect(const std::string& endpoint, const Options& options);
  static Result<std::unique_ptr<AgentClient>> connect(const std::string& endpoint) {
    return connect(endpoint, Options{});
  }
  ~AgentClient();
  AgentClient(const AgentClient&) = delete;
  AgentClient& operator=(const AgentClient&) = delete;

  const wire::JobInfo& job() const { return job_; }
  const std::string& endpoint() const { return endpoint_; }
  bool closed() const { return fd_ < 0; }
  int fd() const { return fd_; }

  Result<wire::KnobList> knobList();
  // Sends SetKnob and returns the agent's first KnobAck for changeSeq (accepted or refused).
  Result<wire::KnobAck> setKnob(uint64_t changeSeq, const std::string& name, const std::string& value);
  // Waits for the KnobAck of changeSeq with applied = true (or a refusal).
  Result<wire::KnobAck> waitForApplied(uint64_t changeSeq, int timeoutMs);
  Result<wire::Stats> stats();
  // A relay connection ("relay:HOST:PORT"): every rank of the job, on every machine.
  Result<wire::RankList> rankList();
  // What the rank is doing now: its open operations and its threads' states (doctor).
  Result<wire::Inspect> inspect();
  Result<ClockSync> estimateClockOffset(int pings = 32);

  Status subscribe(bool history);
  // Delivers queued and newly arriving EventBatches to handler, waiting at most timeoutMs for the
  // first one. Returns how many were delivered; an error when the connection failed or closed
  // (closed() tells which; a clean close has code NotFound).
  Result<int> pollEvents(int timeoutMs, const std::function<void(const wire::EventBatch&)>& handler);
  // The same, handing each batch over (no copy).
  Result<int> takeEvents(int timeoutMs, const std::function<void(wire::EventBatch&&)>& handler);
  // Sends Bye and closes (best effort).
  void close();

  // Non-blocking requests for an owner's poll loop (LiveSession's knob calls): send a request
  // and return at once; the answers (KnobList, KnobAck, ErrorMsg) come out of takeReplies().
  Status sendKnobListRequest() { return send(wire::KnobListRequest{}); }
  Status sendSetKnob(uint64_t changeSeq, const std::string& name, const std::string& value);
  // Delivers queued and newly arriving KnobList, KnobAck and ErrorMsg messages to handler (event
  // batches stay for takeEvents), waiting at most timeoutMs for data when none is queued.
  Result<int> takeReplies(int timeoutMs, const std::function<void(wire::Message&&)>& handler);

 private:
  AgentClient() = default;
  Status handshake(const Options& options);
  Status send(const wire::Message& m);
  // Reads what is available (waiting up to timeoutMs for something) into queue_.
  Status readSome(int timeoutMs);
  // Waits for the first queued/arriving message that matches; others stay queued.
  Result<wire::Message> waitFor(const std::function<bool(const wire::Message&)>& match, int timeoutMs,
                                const char* what);
  void shutdown();

  int fd_ = -1;
  std::string endpoint_;
  int timeoutMs_ = 5000;
  wire::FrameDecoder decoder_;
  wire::FrameSealer sealer_;  // TCP: MACs on what we send, once authenticated
  std::deque<wire::Message> queue_;
  wire::JobInfo job_;
};

// Turns one rank's EventBatches into TraceStore content: agent-local string and track ids are
// mapped to the store's (per connection), timestamps get rank.clockOffsetNs added, and the rank's
// RankInfo (with droppedEvents from the batches) is kept up to date in the store.
class BatchIngestor {
 public:
  // Called for every ingested event (after mapping), e.g. to stream it into a SessionWriter.
  using Sink = std::function<Status(TrackId, const EventRecord&, std::span<const Attr>)>;

  BatchIngestor(TraceStore& store, RankInfo rank) : store_(store), rank_(std::move(rank)) {
    store_.setRank(rank_);
  }
  // With a sink and keepEvents = false the store holds only strings, tracks and ranks (bounded
  // memory while recording to a file).
  void setSink(Sink sink, bool keepEvents) {
    sink_ = std::move(sink);
    keepEvents_ = keepEvents;
  }
  Status ingest(const wire::EventBatch& batch);

  const RankInfo& rank() const { return rank_; }
  // A refreshed clock offset (a re-synchronization during a long session) for later batches.
  void setClockOffset(int64_t ns) {
    rank_.clockOffsetNs = ns;
    store_.setRank(rank_);
  }
  uint64_t eventsIngested() const { return events_; }
  // Events naming a track the agent never announced (skipped) and unknown string ids (mapped to "").
  uint64_t unknownTrackEvents() const { return unknownTrack_; }
  uint64_t unknownStrings() const { return unknownString_; }
  bool sawLive() const { return sawLive_; }
  // Events of this agent's stream that never arrived here: a gap in the sequence numbers after
  // the first batch (the agent dropped batches for this client while it did not read -- a slow
  // or stopped recorder -- or they left the flight recorder while detached). Not the agent's own
  // drops (RankInfo::droppedEvents). With the time ranges they fell in (client clock; the
  // newest 64, older ones merged into the first).
  uint64_t notReceivedEvents() const { return notReceived_; }
  struct Gap {
    int64_t fromNs = 0, toNs = 0;
    uint64_t events = 0;
  };
  const std::vector<Gap>& notReceivedGaps() const { return gaps_; }
  // Before ingesting from a new connection to the same agent process: events of its stream
  // already ingested (by sequence number) are skipped, so a re-attach with history adds only
  // what is new.
  void skipReceived() { skipBelow_ = nextSeq_; }
  uint64_t skippedDuplicates() const { return skipped_; }

 private:
  StringId mapString(uint32_t agentId);

  TraceStore& store_;
  RankInfo rank_;
  Sink sink_;
  bool keepEvents_ = true;
  std::unordered_map<uint32_t, StringId> strings_;
  std::unordered_map<uint32_t, TrackId> tracks_;
  std::vector<Attr> attrs_;
  uint64_t events_ = 0, unknownTrack_ = 0, unknownString_ = 0, skipped_ = 0;
  uint64_t nextSeq_ = 0, skipBelow_ = 0;
  bool haveSeq_ = false;   // a batch with events arrived: later ones must continue it
  int64_t lastEndNs_ = 0;  // newest event end ingested (client clock)
  uint64_t notReceived_ = 0;
  std::vector<Gap> gaps_;
  bool sawLive_ = false;
};

// RankInfo for a connected rank (host, pid, local rank, device, clock offset from a sync).
RankInfo rankInfoFor(const wire::JobInfo& job, const ClockSync& sync);

}  // namespace trainscope::core
