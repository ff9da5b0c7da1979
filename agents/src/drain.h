// The drain thread: polls every thread's ring, pairs begin/end records into complete events on
// the right tracks, assigns sequence numbers and hands batches to the Hub. Sleeps ~1 ms when
// all rings are empty (no busy spin); everything that allocates happens here, not in the job.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <thread>
#include <unordered_map>
#include <vector>

#include "capture.h"
#include "external.h"
#include "hub.h"
#include "trainscope/core/wire/protocol.h"

namespace trainscope::agent {

struct DrainConfig {
  size_t maxBatchEvents = 4096;
  int64_t maxBatchAgeNs = 50'000'000;  // latency bound for live clients
  // TSC calibration: a new (tsc, ns) pair every this often once warmed up (the first pairs
  // come 1, 2, 4, ... ms apart so that early records are not extrapolated far on a short base).
  int64_t calibrationPeriodNs = 100'000'000;
};

class Drain {
 public:
  Drain(Hub& hub, DrainConfig cfg);
  ~Drain();
  void start();
  void stop();  // drains what is left, publishes, joins
  void setPaused(bool p) { paused_.store(p); }  // test hook: leave the rings alone
  uint64_t eventsRecorded() const { return recorded_.load(std::memory_order_relaxed); }
  // Processes everything currently in the rings and publishes (used by stop and by tests).
  void flushNow();
  // TSC calibration pairs taken since start (0 in monotonic mode).
  uint64_t calibrations() const { return calibrations_.load(std::memory_order_relaxed); }
  // The operations begun and not ended, as of the drain's last pass that saw a change (at most
  // ~50 ms old while records flow; current once they stop), oldest first, names resolved: what
  // `doctor` asks a hung rank (Inspect). Called by the server thread; a mutex held for a copy.
  std::vector<core::wire::OpenOp> openOps() const;

 private:
  struct Open {
    int64_t ts = 0;
    uint32_t name = 0;
    uint8_t sub = 0;
    uint64_t a = 0, b = 0;
    uint32_t track = 0;
    uint32_t extra = 0;  // micro-batch ops: the record's name field (segment length)
  };
  struct ThreadState {
    uint32_t cpuTrack = UINT32_MAX;
    uint32_t commTrack = UINT32_MAX;
    int64_t lastTs = INT64_MIN;  // converted timestamps never go back within a thread
    std::vector<Open> ranges, phases, mbs, comms, steps, kernels;
  };
  // Bucket collectives: ts_bucket_comm_begin and _end may come from different threads (a DDP
  // hook begins on the autograd thread and ends in a future callback on the backend's thread),
  // whose rings the drain empties at different moments. Begins and ends therefore wait in
  // per-bucket FIFOs and pair in time order (bucketPair), never "the latest begin".
  struct BucketBegin {
    int64_t readyNs = -1, commNs = -1;
    int64_t tid = 0, step = -1;
    uint64_t seq = 0;  // bucket collectives this process began before it
    uint64_t bytes = 0;
    uint32_t track = 0;
    uint32_t algorithm = 0;  // string id, 0: none
  };
  struct BucketEnd {
    int64_t ns = 0;
    bool counted = false;  // BucketCommBytes seen: sent/received hold the job's counts
    uint64_t sent = 0, received = 0;
  };
  struct BucketState {
    int64_t readyNs = -1;  // ts_bucket_ready not yet taken by a begin
    uint64_t readyBytes = 0;
    BucketEnd pendingBytes;  // ts_bucket_comm_end2's counts, taken by the next end
    std::deque<BucketBegin> begins;
    std::deque<BucketEnd> ends;
  };
  static constexpr size_t kMaxOpenBucketOps = 64;  // per bucket and side; older ones are dropped
  static constexpr size_t kMaxBuckets = 4096;  // bucket ids a job may use (a deque pair each)
  BucketState* bucketState(int32_t bucket);  // null beyond kMaxBuckets ids
  void bucketPair(int32_t bucket, BucketState& q);
  void bucketEmit(int32_t bucket, const BucketBegin& b, const BucketEnd& e);

  void run();
  size_t pollOnce();  // records consumed
  size_t pollExternal();  // events taken from ExternalQueue (CUPTI, NCCL)
  // Takes a new calibration pair when one is due (or when force and not ready yet).
  void calibrate(int64_t nowMonoNs, bool force);
  int64_t toAgentNs(const Record& r, ThreadState& st);
  void handle(ThreadRing& ring, ThreadState& st, const Record& r);
  uint32_t cpuTrack(ThreadRing& ring, ThreadState& st);
  uint32_t commTrack(ThreadRing& ring, ThreadState& st);
  uint32_t newTrack(core::TrackKind kind, int64_t externalId, std::string name);
  core::wire::WireEvent& add(uint32_t track, core::EventKind kind, int64_t start, int64_t end,
                             uint32_t name);
  void resetBatch();
  void publishOpen(int64_t now);  // snapshot of what is open, for openOps() (under flushMu_)
  void waitForNudge(uint32_t seen, std::chrono::milliseconds timeout);
  void publish();

  Hub& hub_;
  DrainConfig cfg_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> paused_{false};
  std::atomic<uint64_t> recorded_{0};
  std::mutex flushMu_;  // run() and flushNow() never process at the same time
  bool useTsc_ = false;  // records carry TSC: calibrate (under flushMu_)
  TscCalibration cal_;
  std::atomic<uint64_t> calibrations_{0};

  std::vector<ThreadRing*> rings_;
  uint64_t ringsVersion_ = UINT64_MAX;
  std::unordered_map<ThreadRing*, ThreadState> states_;
  std::unordered_map<uint64_t, Open> openById_;
  std::unordered_map<uint64_t, int64_t> earlyEnds_;  // ts_range_end seen before its begin
  std::unordered_map<int32_t, BucketState> buckets_;
  std::unordered_map<uint32_t, uint32_t> counterTracks_;
  // External sources' tracks by (kind, external id).
  struct ExternalKey {
    core::TrackKind kind;
    int64_t id;
    bool operator==(const ExternalKey&) const = default;
  };
  struct ExternalKeyHash {
    size_t operator()(const ExternalKey& k) const {
      return std::hash<int64_t>()(k.id) * 31 + static_cast<size_t>(k.kind);
    }
  };
  std::unordered_map<ExternalKey, uint32_t, ExternalKeyHash> externalTracks_;
  // Ring CPU tracks by thread id (gettid), newest thread of that id: CUPTI's runtime calls and
  // NVTX ranges of a thread land on the same track as its C API events.
  std::unordered_map<int64_t, uint32_t> cpuTrackByTid_;
  std::vector<profiler::ExternalEvent> external_;  // reused between passes
  uint32_t bucketTrack_ = UINT32_MAX;
  uint32_t nextTrack_ = 0;
  size_t stringsSent_ = 0;
  uint64_t nextSeq_ = 0;
  int64_t newestNs_ = 0;
  int64_t batchStartedNs_ = 0;
  core::wire::EventBatch batch_;
  // What is open, for Inspect: written by the drain under openMu_, copied by the server thread.
  struct OpenSnap {
    int64_t tid = 0;
    core::EventKind kind = core::EventKind::Range;
    uint32_t name = 0;
    int64_t ts = 0, step = -1, bucket = -1, bytes = -1, seq = -1;
  };
  static constexpr size_t kMaxOpenSnap = 512;
  mutable std::mutex openMu_;
  std::vector<OpenSnap> openSnap_;
  std::vector<OpenSnap> openScratch_;
  bool openDirty_ = false;
  int64_t openPublishedNs_ = 0;
  uint64_t bucketSeq_ = 0;
  // Names the drain gives events itself.
  uint32_t sStep_, sPhase_[3], sMb_[3], sBucket_, sBucketComm_, sBytesSent_, sBytesReceived_;
};

}  // namespace trainscope::agent
