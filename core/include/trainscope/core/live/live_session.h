// LiveSession: the one headless engine that owns a live job, for every front end (the GUI's live
// tab, `record`, `knobs`, `set`, and the tuner). What Tracy's Worker is to its profiler UI.
//
// It holds a connection per rank, measures each rank's clock offset (ping-pong) before
// subscribing and again every few seconds, subscribes with the flight recorder's history, and
// ingests EventBatches into a TraceStore (under the owner's lock, one short round at a time)
// and/or streams them into a .tsdb SessionWriter. It keeps events/s, drops and the clock error
// bound per rank, notices ranks that go away, and looks for ranks that register late or come
// back (a rank re-attached to the same process continues where it stopped: events already
// received are skipped by their stream sequence numbers). Knob lists and changes go over the
// same connections.
//
// Threads (docs/ARCHITECTURE.md, "Who owns what"): start() runs everything network-bound on one
// worker thread, the session's owner. It never waits on a reader: a round's events are
// published into the target store only when its lock is free at once (try_lock); otherwise they
// stay pending and the sockets keep being read. SQLite writes happen after the lock is released.
// snapshot() and metadata() only take a small mutex the worker holds for microseconds, so a GUI
// thread may call them at any time. Knob calls are requests (KnobCall): the worker sends them
// and completes them in its poll loop as the answers arrive, every rank's stream flowing
// meanwhile; submit*() return at once, the blocking forms wait for the call (not from a GUI
// thread). When not streaming, the caller's thread drives the same state machine. No Qt.
//
// Metadata (docs/FORMATS.md, "Live session metadata") is the same whichever front end drives
// the engine: job and clock conventions, knob values at attach (knob.<name>), per rank the clock
// offset, its updates and sync error bound, the drift, drops and re-attaches.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "trainscope/core/base/status.h"
#include "trainscope/core/live/agent_client.h"
#include "trainscope/core/model/trace_store.h"
#include "trainscope/core/wire/discovery.h"

namespace trainscope::core {

class SessionWriter;

struct LiveOptions {
  AgentClient::Options client;      // per connection: timeout, client name, secret file
  int pings = 32;                   // clock-sync round trips when a rank attaches
  double resyncSeconds = 2;         // measure offsets again this often (0: only at attach)
  double rediscoverSeconds = 0.5;   // look for late and returning ranks this often (0: never)
  bool history = true;              // subscribe with the flight recorder's history
  int flushMs = 30;                 // batches are ingested in rounds at most this often
  std::string createdBy = "trainscope";  // metadata "created_by"
};

enum class LiveState { Connecting, Live, Ended, Failed, Detached };
const char* liveStateName(LiveState s);

struct LiveRankStatus {
  int32_t rank = 0;
  int32_t pid = 0;
  std::string host, endpoint;
  bool connected = false;
  bool seen = false;  // delivered at least one batch
  uint64_t events = 0;
  uint64_t dropped = 0;  // reported by the agent
  uint64_t notReceived = 0;  // sent by the agent, never received here (BatchIngestor::notReceivedEvents)
  int64_t clockOffsetNs = 0;
  int64_t clockErrorNs = 0;
  int offsetUpdates = 0;
  int attaches = 0;
  std::string problem;  // last connection problem
};

struct LiveSnapshot {
  LiveState state = LiveState::Connecting;
  std::string jobId;
  int ranksTotal = 0;      // the job's world size
  int ranksConnected = 0;  // connected now
  int ranksSeen = 0;       // ranks that delivered at least one batch
  uint64_t events = 0;
  double eventsPerSecond = 0;
  uint64_t dropped = 0;
  uint64_t notReceived = 0;  // over the ranks: events this client never got (it fell behind)
  int64_t clockErrorNs = 0;  // largest current sync error bound over the ranks
  double seconds = 0;        // since start()
  std::string message;       // last problem, for a status bar
  std::vector<LiveRankStatus> ranks;
};

// A knob call in flight (list the knobs, or change them on every rank): the owner's poll loop
// advances it as the answers arrive. progress() says where it stands, for a status bar; done()
// and wait() give the outcome; onDone (set at submit) runs on the thread that completes it.
class KnobCall {
 public:
  struct Applied {
    std::string name, value;
    uint64_t changeSeq = 0;
    std::vector<std::pair<int32_t, int64_t>> stepPerRank;  // (rank, applied step)
  };
  struct Outcome {
    Status status;
    std::vector<wire::KnobList> lists;  // list calls: one per answering rank, by rank
    std::vector<Applied> applied;       // set calls: per change, where every rank applied it
  };
  std::string progress() const;
  bool done() const;
  // Waits for the outcome (never call from a GUI thread; use onDone there).
  const Outcome& wait() const;
  bool waitFor(int ms) const;

 private:
  friend class LiveSession;
  void setProgress(std::string p);
  void complete(Outcome o);
  mutable std::mutex m_;
  mutable std::condition_variable cv_;
  std::string progress_;
  bool done_ = false;
  Outcome outcome_;
  std::function<void(const Outcome&)> onDone_;
};

class LiveSession {
 public:
  using Applied = KnobCall::Applied;
  // Where ingested events go when streaming. The store is filled under `mutex`, taken only when
  // it is free at once (try_lock: the engine never waits for a reader) and held for one round,
  // after which the store is flushed (sorted: readers never sort); underLock runs at the end of
  // the round, still locked (e.g. a view model's update; returns whether rows changed),
  // afterUnlock after it is released.
  struct StoreTarget {
    TraceStore* store = nullptr;
    std::shared_mutex* mutex = nullptr;
    std::function<bool()> underLock;
    std::function<void(bool layoutChanged)> afterUnlock;
    // Set while a round waits for the lock (a reader had it when the engine tried): readers that
    // work in slices let the engine in before they take it again.
    std::atomic<bool>* ownerWaiting = nullptr;
  };

  // A session over these discovery entries (remote ones carry a tcp endpoint and a secret
  // file); ranks of the same job that register later on this machine join by themselves.
  LiveSession(std::vector<discovery::Entry> entries, LiveOptions options);
  ~LiveSession();  // detaches
  LiveSession(const LiveSession&) = delete;
  LiveSession& operator=(const LiveSession&) = delete;

  // Live discovery entries of jobId on this machine -- or, after useRelay(), every rank the
  // relay knows of on every machine; an error when there are none, or when requireAllRanks and
  // some rank is missing.
  static Result<std::vector<discovery::Entry>> entriesOf(const std::string& jobId, bool requireAllRanks);
  // From now on, in this process, jobs are found through the relay at hostPort (a front end's
  // --host; docs/RELAY.md) instead of this machine's runtime directory. secretFile: the job's
  // secret ("" -- $TRAINSCOPE_SECRET_FILE, else the runtime directory's <job>.secret).
  static void useRelay(const std::string& hostPort, const std::string& secretFile);
  static std::string relayHost();  // "" when jobs are found in the runtime directory
  // What the relay at hostPort knows: the job's ranks as entries (endpoint relay:HOST:PORT/RANK),
  // and its problems (relays that went away). jobId "" accepts the relay's job.
  struct RelayRanks {
    std::string jobId;
    std::vector<discovery::Entry> entries;
    std::vector<wire::RankEntry> ranks;
    std::vector<std::string> problems;
  };
  static Result<RelayRanks> relayRanks(const std::string& jobId, int timeoutMs = 5000);
  // Entries of jobId, waiting up to waitMs for the first one (a job that is still coming up).
  static Result<std::vector<discovery::Entry>> waitForEntries(const std::string& jobId, int waitMs);
  // Connects every entry now, on the caller's thread (knobs/set: a change must reach all ranks).
  static Result<std::unique_ptr<LiveSession>> connect(std::vector<discovery::Entry> entries, LiveOptions options);
  static Result<std::unique_ptr<LiveSession>> connect(std::vector<discovery::Entry> entries,
                                                      const AgentClient::Options& client) {
    LiveOptions o;
    o.client = client;
    return connect(std::move(entries), std::move(o));
  }

  // Before start(): where events go. Without a store the engine keeps its own (strings, tracks
  // and ranks only when a writer is set).
  void setStore(StoreTarget target);
  void setWriter(SessionWriter* writer);

  // Streams on the worker thread until detach() or the job ends. Starting again after a detach
  // re-attaches: history already received is not ingested twice.
  void start();
  // Stops streaming and closes the connections; what arrived stays, and the final metadata (drift,
  // drops, seconds) goes to the store and the writer. Idempotent.
  void detach();
  bool streaming() const { return thread_.joinable() && !finished_; }

  LiveSnapshot snapshot() const;
  // The longest time, since the last call, that received events waited to be published into
  // the store (a round held back by a reader or by the loop itself); resets it.
  double takeMaxPublishGapMs() { return static_cast<double>(maxPublishGapNs_.exchange(0)) / 1e6; }
  std::map<std::string, std::string> metadata() const;
  const std::string& jobId() const { return jobId_; }
  int worldSize() const { return worldSize_; }
  const std::vector<discovery::Entry>& entries() const { return entries_; }

  // Knob calls over the connected ranks (see the thread rules above). submit* return at once;
  // onDone runs on the engine's thread (or the caller's, when not streaming) when it completes.
  using KnobDone = std::function<void(const KnobCall::Outcome&)>;
  std::shared_ptr<KnobCall> submitKnobList(bool allRanks, KnobDone onDone = {});
  std::shared_ptr<KnobCall> submitSetKnobs(std::vector<std::pair<std::string, std::string>> changes,
                                           int applyTimeoutMs, KnobDone onDone = {});
  // Blocking forms: submit and wait.
  Result<wire::KnobList> knobList();                 // the lowest connected rank's
  Result<std::vector<wire::KnobList>> knobLists();   // every connected rank's, by rank
  // knobList on every rank -> fill sequence gaps an earlier client left -> validate locally ->
  // changeSeq = max(lastChangeSeq) + 1 (+1 per further change), taken at the lowest rank first (the
  // sequence authority; a number already used there is skipped) -> SetKnob to the others -> all
  // must accept -> wait until all applied. Errors name the rank and the agent's reason; after
  // applyTimeoutMs, the ranks that did not apply it (gone or still waiting).
  Result<std::vector<Applied>> setKnobs(const std::vector<std::pair<std::string, std::string>>& changes,
                                        int applyTimeoutMs);
  // The connected clients by rank, for direct requests (only while not streaming).
  std::vector<AgentClient*> clients();

 private:
  struct Rank;

  Status connectRank(Rank& r, const discovery::Entry& e, bool subscribe);
  void connectKnown(bool subscribe);
  void rediscover();
  void resync();
  void recordKnobs();
  void closeRank(Rank& r, const std::string& why);
  void flush(bool final);
  void publishStats(int64_t now, bool force);
  void writeMetadata(std::map<std::string, std::string>& md) const;
  Status sink(TrackId t, const EventRecord& e, std::span<const Attr> attrs);
  void run();
  void finish();
  struct KnobOp;
  std::shared_ptr<KnobCall> submit(std::unique_ptr<KnobOp> op);
  // The knob state machine (knob_protocol.cpp), run by the owner's loop or an idle caller.
  void takeKnobCommands();
  void pumpReplies(Rank& r, int timeoutMs);
  void onReply(Rank& r, wire::Message&& m);
  void advanceKnobs();
  void startOp(KnobOp& op);
  void stepOp(KnobOp& op);
  void finishOp(Status st);
  void driveIdle(const std::shared_ptr<KnobCall>& call);
  Status publish(bool block);

  std::string jobId_;
  int worldSize_ = 0;
  std::vector<discovery::Entry> entries_;
  LiveOptions options_;
  StoreTarget target_;
  std::unique_ptr<TraceStore> ownStore_;
  std::shared_mutex ownMutex_;
  SessionWriter* writer_ = nullptr;
  size_t tracksWritten_ = 0;
  Status sinkError_;

  std::map<int32_t, std::unique_ptr<Rank>> ranks_;  // by rank; touched by the worker (or the caller when idle)
  std::vector<std::pair<Rank*, wire::EventBatch>> pending_;
  bool knobsRecorded_ = false;
  int64_t startNs_ = 0, lastFlushNs_ = 0, nextResyncNs_ = 0, nextRediscoverNs_ = 0, lastStatsNs_ = 0;
  double startCpuSeconds_ = 0;  // this process's CPU (user + system) when the session started
  int64_t relayListAtNs_ = 0;  // rediscover(): next rank list from the relay
  int32_t resyncAfterRank_ = -1;  // resync(): the last rank measured (ranks take turns)
  static double processCpuSeconds();
  std::deque<std::pair<int64_t, uint64_t>> rate_;

  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> finished_{false};
  std::mutex opMutex_;  // serialises start/detach and idle knob calls

  std::mutex cmdMutex_;
  std::deque<std::unique_ptr<KnobOp>> commands_;  // submitted, not yet taken by the loop
  std::deque<std::unique_ptr<KnobOp>> knobQueue_;  // taken; the front one is in flight
  std::map<int32_t, int> staleLists_;  // KnobLists still owed to a call that ended: dropped
  struct DeferredEvent {
    TrackId track;
    EventRecord event;
    uint32_t attrBegin, attrCount;
  };
  std::atomic<int64_t> maxPublishGapNs_{0};  // longest wait between two publishes with events pending
  int64_t pendingSinceNs_ = 0;
  std::vector<DeferredEvent> deferred_;  // for the writer: written after the store lock is released
  std::vector<Attr> deferredAttrs_;

  mutable std::mutex infoMutex_;  // guards snapshot_ and metadata_
  LiveSnapshot snapshot_;
  std::map<std::string, std::string> metadata_;      // job-wide keys
  std::map<std::string, std::string> metadataFull_;  // with the per-rank keys, as of the last round
};

// Client-side validation against a descriptor ("" when fine, else the reason). The agent
// validates again; this only gives clear messages before anything is sent.
std::string validateKnobValue(const wire::KnobDescriptor& d, const std::string& value);

// Why a change every rank accepted did not apply on every rank, for `set`'s error: which ranks
// applied it (at which step), which went away (connection closed), which had not applied it
// when the wait ended, and what becomes of it (docs/AGENT.md, "A rank that dies or stalls").
std::string describeUnapplied(const std::string& change, uint64_t seq, size_t ranks,
                              const std::vector<std::pair<int32_t, int64_t>>& applied,
                              const std::vector<int32_t>& gone, const std::vector<int32_t>& waiting,
                              int timeoutMs);

}  // namespace trainscope::core
