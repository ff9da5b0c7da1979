#include "drain.h"

#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>

#include "string_table.h"

namespace trainscope::agent {

using core::Attr;
using core::AttrKey;
using core::EventKind;
using core::TrackKind;

Drain::Drain(Hub& hub, DrainConfig cfg) : hub_(hub), cfg_(cfg) {
  auto& s = StringTable::instance();
  sStep_ = s.intern("step");
  sPhase_[0] = s.intern("forward");
  sPhase_[1] = s.intern("backward");
  sPhase_[2] = s.intern("optimizer");
  sMb_[0] = s.intern("F");
  sMb_[1] = s.intern("B");
  sMb_[2] = s.intern("W");
  sBucket_ = s.intern("bucket");
  sBytesSent_ = s.intern("bytes_sent");
  sBytesReceived_ = s.intern("bytes_received");
  sBucketComm_ = s.intern("bucket allreduce");
}

Drain::~Drain() { stop(); }

void Drain::start() {
  stop_.store(false);
  {
    std::lock_guard lock(flushMu_);
    useTsc_ = g_clockTsc.load(std::memory_order_relaxed);
    cal_.reset();
    calibrations_.store(0, std::memory_order_relaxed);
    if (useTsc_) cal_.add(TscCalibration::sample());  // before any record can be written
  }
  // Block all signals in our thread so the job's signal handling stays the job's.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  thread_ = std::thread([this] { run(); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  pthread_setname_np(thread_.native_handle(), "ts-drain");
}

void Drain::stop() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  thread_.join();
  flushNow();
}

void Drain::run() {
  // Idle sleep adapts to the load: every wake-up of this thread preempts a rank, and ranks
  // coupled by collectives all wait for the preempted one, so a drain that wakes every 1 ms to
  // find a handful of records costs the job far more than the records do. While little arrives
  // per wake-up the sleep doubles up to kMaxIdleSleep; a busy wake-up halves it. A ring that
  // reaches half full wakes the drain at once (the producer's nudge on a futex), so the long
  // sleep does not trade memory or drops for fewer wake-ups.
  constexpr auto kMinIdleSleep = std::chrono::milliseconds(1);
  constexpr auto kMaxIdleSleep = std::chrono::milliseconds(25);
  constexpr size_t kBusyWake = 4096;  // records per wake-up that count as busy
  constexpr size_t kPassRecords = 1024;  // what pollOnce takes from one ring per pass
  auto idleSleep = kMinIdleSleep;
  size_t sinceSleep = 0;
  while (!stop_.load(std::memory_order_relaxed)) {
    const uint32_t nudges = g_drainNudges.load(std::memory_order_acquire);
    bool busy = false;
    try {
      std::lock_guard lock(flushMu_);
      calibrate(monotonicNs(), false);
      // TSC records wait in their rings for the second calibration pair (~1 ms after start).
      if (!paused_.load(std::memory_order_relaxed) && (!useTsc_ || cal_.ready())) {
        const size_t n = pollOnce();
        // Poll again at once only when a ring had more than one pass takes; otherwise what
        // trickles in meanwhile waits for the next wake-up instead of the thread spinning on a
        // few records at a time.
        busy = n >= kPassRecords;
        sinceSleep += n;
        if (n > 0) openDirty_ = true;
        // What is open changes with every record; snapshot it at most every 50 ms while records
        // flow, and at once when they stop (a hung rank's last state is the one that matters).
        if (openDirty_ && (n == 0 || nowNs() - openPublishedNs_ >= 50'000'000)) publishOpen(nowNs());
      }
      const int64_t now = nowNs();
      if (!batch_.events.empty() &&
          (batch_.events.size() >= cfg_.maxBatchEvents || now - batchStartedNs_ >= cfg_.maxBatchAgeNs))
        publish();
    } catch (...) {
      // Out of memory or a codec failure: lose this batch, keep the job running.
      resetBatch();
      std::fprintf(stderr, "trainscope-agent: drain error, batch dropped\n");
    }
    if (!busy) {
      idleSleep = sinceSleep >= kBusyWake ? std::max(kMinIdleSleep, idleSleep / 2)
                                          : std::min(idleSleep * 2, kMaxIdleSleep);
      sinceSleep = 0;
      waitForNudge(nudges, idleSleep);
    }
  }
}

void Drain::waitForNudge(uint32_t seen, std::chrono::milliseconds timeout) {
  // Returns at once when a producer nudged since `seen` was read (the futex compares first).
  const timespec ts{static_cast<time_t>(timeout.count() / 1000), static_cast<long>((timeout.count() % 1000) * 1000000)};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&g_drainNudges), FUTEX_WAIT_PRIVATE, seen, &ts, nullptr, 0);
}

void Drain::flushNow() {
  std::lock_guard lock(flushMu_);
  try {
    calibrate(monotonicNs(), true);
    while (pollOnce()) {
    }
    publish();
  } catch (...) {
    resetBatch();
  }
}

namespace {
// Begin records whose end never comes (a job that only pushes) must not grow memory forever.
constexpr size_t kMaxOpenPerThread = 4096;
constexpr size_t kMaxOpenById = 1u << 20;

template <typename T>
bool pushBounded(std::vector<T>& stack, const T& v) {
  if (stack.size() >= kMaxOpenPerThread) {
    Capture::instance().countDrop();
    return false;
  }
  stack.push_back(v);
  return true;
}
}  // namespace

void Drain::calibrate(int64_t nowMonoNs, bool force) {
  if (!useTsc_) return;
  if (cal_.points() > 0 && !(force && !cal_.ready())) {
    int64_t interval = cfg_.calibrationPeriodNs;
    if (cal_.points() < 2) {
      interval = 1'000'000;
    } else {
      // Warm-up: each segment twice as long as the one before, up to the period.
      interval = std::min(interval, std::max<int64_t>(1'000'000, 2 * (cal_.newest().ns - cal_.segmentStartNs())));
    }
    if (nowMonoNs - cal_.newest().ns < interval) return;
  } else if (cal_.points() == 1) {
    // Forced right after start (flushNow): a first segment much shorter than 1 ms would give a
    // slope too noisy to extrapolate with until the next pair, so let it reach 1 ms.
    const int64_t wait = 1'000'000 - (monotonicNs() - cal_.newest().ns);
    if (wait > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
  }
  cal_.add(TscCalibration::sample());
  calibrations_.fetch_add(1, std::memory_order_relaxed);
}

int64_t Drain::toAgentNs(const Record& r, ThreadState& st) {
  int64_t ns = r.ts;
  if (r.clock == kRecordClockTsc) {
    if (!cal_.ready()) {  // a TSC record without TSC mode (left over from an earlier start)
      useTsc_ = true;
      if (cal_.points() == 0) cal_.add(TscCalibration::sample());
      calibrate(monotonicNs(), true);
    }
    ns = cal_.ready() ? agentClockFromMonotonic(cal_.toNs(static_cast<uint64_t>(r.ts))) : nowNs();
  }
  // Segment switches and cores whose TSCs differ by a few cycles must not reorder a thread.
  if (ns < st.lastTs) ns = st.lastTs;
  st.lastTs = ns;
  return ns;
}

size_t Drain::pollOnce() {
  constexpr size_t kRecordsPerPass = 1024;  // per ring and pass: other rings get their turn
  Capture& cap = Capture::instance();
  cap.snapshot(rings_, ringsVersion_);
  size_t total = 0;
  for (ThreadRing* r : rings_) {
    ThreadState& st = states_[r];
    const bool closed = r->closed.load(std::memory_order_acquire);
    const size_t n = r->ring.consume(kRecordsPerPass, [&](const Record& rec) {
      Record c = rec;
      c.ts = toAgentNs(rec, st);
      handle(*r, st, c);
    });
    total += n;
    if (closed && n == 0 && r->ring.sizeApprox() == 0) {
      states_.erase(r);
      cap.release(r);  // changes the version: the next snapshot drops it
    }
    if (batch_.events.size() >= cfg_.maxBatchEvents) publish();
  }
  return total + pollExternal();
}

size_t Drain::pollExternal() {
  ExternalQueue::instance().take(external_);
  for (const profiler::ExternalEvent& x : external_) {
    uint32_t track = UINT32_MAX;
    if (x.trackKind == TrackKind::CpuThread)
      if (auto t = cpuTrackByTid_.find(x.trackId); t != cpuTrackByTid_.end()) track = t->second;
    if (track == UINT32_MAX) {
      auto [it, fresh] = externalTracks_.try_emplace(ExternalKey{x.trackKind, x.trackId}, 0);
      if (fresh) it->second = newTrack(x.trackKind, x.trackId, StringTable::instance().text(x.trackName));
      track = it->second;
    }
    auto& e = add(track, x.kind, x.startNs, std::max(x.startNs, x.endNs), x.name);
    e.attrs.assign(x.attrs, x.attrs + x.attrCount);
    if (batch_.events.size() >= cfg_.maxBatchEvents) publish();
  }
  return external_.size();
}

uint32_t Drain::newTrack(TrackKind kind, int64_t externalId, std::string name) {
  const uint32_t id = nextTrack_++;
  batch_.tracks.push_back({id, kind, externalId, std::move(name)});
  return id;
}

Drain::BucketState* Drain::bucketState(int32_t bucket) {
  auto it = buckets_.find(bucket);
  if (it != buckets_.end()) return &it->second;
  if (buckets_.size() >= kMaxBuckets) return nullptr;  // a job with more bucket ids: not traced
  return &buckets_[bucket];
}

void Drain::bucketPair(int32_t bucket, BucketState& q) {
  while (!q.begins.empty() && !q.ends.empty()) {
    const BucketBegin& b = q.begins.front();
    const BucketEnd& e = q.ends.front();
    if (e.ns < b.commNs) {  // an end whose begin was lost (a full ring): nothing to pair it with
      q.ends.pop_front();
      continue;
    }
    // A bucket's next collective begins only after its previous one ended (DDP and the reference
    // job both wait for every bucket before the next step), so a second begin that is not later
    // than this end means the front begin lost its end.
    if (q.begins.size() > 1 && q.begins[1].commNs <= e.ns) {
      q.begins.pop_front();
      continue;
    }
    bucketEmit(bucket, b, e);
    q.begins.pop_front();
    q.ends.pop_front();
  }
}

void Drain::bucketEmit(int32_t bucket, const BucketBegin& b, const BucketEnd& e) {
  auto& c = add(b.track, EventKind::Collective, b.commNs, e.ns, sBucketComm_);
  c.attrs.push_back(Attr::ofInt(AttrKey::Bucket, bucket));
  c.attrs.push_back(Attr::ofInt(AttrKey::Bytes, static_cast<int64_t>(b.bytes)));
  if (b.algorithm != 0) c.attrs.push_back(Attr::ofString(AttrKey::Algorithm, b.algorithm));
  if (e.counted) {  // the transport's counts (custom attributes, docs/TRAINER.md "Bytes")
    c.attrs.push_back(Attr::custom(sBytesSent_, core::AttrType::Int, static_cast<int64_t>(e.sent)));
    c.attrs.push_back(Attr::custom(sBytesReceived_, core::AttrType::Int, static_cast<int64_t>(e.received)));
  }
  // The bucket's life (ready -> reduced) on its own track: it is not communication time.
  if (bucketTrack_ == UINT32_MAX) bucketTrack_ = newTrack(TrackKind::Communicator, -1, "buckets");
  auto& k = add(bucketTrack_, EventKind::Bucket, b.readyNs >= 0 ? b.readyNs : b.commNs, e.ns, sBucket_);
  k.attrs.push_back(Attr::ofInt(AttrKey::Bucket, bucket));
  k.attrs.push_back(Attr::ofInt(AttrKey::Bytes, static_cast<int64_t>(b.bytes)));
}

uint32_t Drain::cpuTrack(ThreadRing& ring, ThreadState& st) {
  if (st.cpuTrack == UINT32_MAX) {
    std::string name = ring.threadName.empty() ? "thread" : ring.threadName;
    name += " (" + std::to_string(ring.tid) + ")";
    st.cpuTrack = newTrack(TrackKind::CpuThread, ring.tid, std::move(name));
    cpuTrackByTid_[ring.tid] = st.cpuTrack;
  }
  return st.cpuTrack;
}

uint32_t Drain::commTrack(ThreadRing& ring, ThreadState& st) {
  if (st.commTrack == UINT32_MAX)
    st.commTrack = newTrack(TrackKind::Communicator, ring.tid, "comm (" + std::to_string(ring.tid) + ")");
  return st.commTrack;
}

core::wire::WireEvent& Drain::add(uint32_t track, EventKind kind, int64_t start, int64_t end, uint32_t name) {
  if (batch_.events.empty()) {
    batch_.firstSeq = nextSeq_;
    batchStartedNs_ = nowNs();
  }
  ++nextSeq_;
  recorded_.fetch_add(1, std::memory_order_relaxed);
  if (end > newestNs_) newestNs_ = end;
  auto& e = batch_.events.emplace_back();
  e.track = track;
  e.kind = kind;
  e.startNs = start;
  e.endNs = end;
  e.name = name;
  return e;
}

void Drain::handle(ThreadRing& ring, ThreadState& st, const Record& r) {
  switch (r.type) {
    case RecordType::RangePush:
      pushBounded(st.ranges, Open{r.ts, r.name, 0, 0, 0, 0});
      break;
    case RecordType::RangePop:
      if (st.ranges.empty()) break;  // unbalanced pop: nothing to pair with
      add(cpuTrack(ring, st), EventKind::Range, st.ranges.back().ts, r.ts, st.ranges.back().name);
      st.ranges.pop_back();
      break;
    case RecordType::RangeBegin: {
      const uint32_t track = cpuTrack(ring, st);
      if (auto it = earlyEnds_.find(r.a); it != earlyEnds_.end()) {
        add(track, EventKind::Range, r.ts, std::max(r.ts, it->second), r.name);
        earlyEnds_.erase(it);
      } else {
        if (openById_.size() < kMaxOpenById)
          openById_[r.a] = {r.ts, r.name, 0, 0, 0, track};
        else
          Capture::instance().countDrop();
      }
      break;
    }
    case RecordType::RangeEnd:
      if (auto it = openById_.find(r.a); it != openById_.end()) {
        add(it->second.track, EventKind::Range, it->second.ts, std::max(it->second.ts, r.ts), it->second.name);
        openById_.erase(it);
      } else if (earlyEnds_.size() < 65536) {  // bounded: ids that never begin are forgotten
        earlyEnds_[r.a] = r.ts;
      }
      break;
    case RecordType::Marker:
      add(cpuTrack(ring, st), EventKind::Marker, r.ts, r.ts, r.name);
      break;
    case RecordType::Counter: {
      auto [it, fresh] = counterTracks_.try_emplace(r.name, 0);
      if (fresh) it->second = newTrack(TrackKind::Counter, r.name, StringTable::instance().text(r.name));
      add(it->second, EventKind::Counter, r.ts, r.ts, r.name)
          .attrs.push_back(Attr::ofDouble(AttrKey::Value, std::bit_cast<double>(r.a)));
      break;
    }
    case RecordType::StepBegin:
      pushBounded(st.steps, Open{r.ts, sStep_, 0, r.a, 0, 0});
      break;
    case RecordType::StepEnd:
      if (st.steps.empty()) break;
      add(cpuTrack(ring, st), EventKind::Step, st.steps.back().ts, r.ts, sStep_)
          .attrs.push_back(Attr::ofInt(AttrKey::Step, static_cast<int64_t>(st.steps.back().a)));
      st.steps.pop_back();
      break;
    case RecordType::PhaseBegin:
      pushBounded(st.phases, Open{r.ts, sPhase_[r.sub % 3], r.sub, 0, 0, 0});
      break;
    case RecordType::PhaseEnd:
      if (st.phases.empty()) break;
      add(cpuTrack(ring, st), EventKind::Phase, st.phases.back().ts, r.ts, st.phases.back().name);
      st.phases.pop_back();
      break;
    case RecordType::MbBegin:
      pushBounded(st.mbs, Open{r.ts, sMb_[(r.sub & 3) % 3], r.sub, r.a, r.b, 0, r.name});
      break;
    case RecordType::MbEnd: {
      if (st.mbs.empty()) break;
      const Open o = st.mbs.back();
      st.mbs.pop_back();
      static constexpr EventKind kinds[3] = {EventKind::MicroBatchF, EventKind::MicroBatchB,
                                             EventKind::MicroBatchW};
      auto& e = add(cpuTrack(ring, st), kinds[(o.sub & 3) % 3], o.ts, r.ts, o.name);
      const bool segment = o.sub & 4;  // ts_mb_begin_segment: packed fields (record.h)
      const int64_t mb = segment ? static_cast<int32_t>(pairLo(o.a)) : static_cast<int64_t>(o.a);
      const int64_t chunk = segment ? pairLo(o.b) & 0xffffu : static_cast<int32_t>(pairLo(o.b));
      e.attrs.push_back(Attr::ofInt(AttrKey::MicroBatch, mb));
      e.attrs.push_back(Attr::ofInt(AttrKey::Stage, pairHi(o.b)));
      e.attrs.push_back(Attr::ofInt(AttrKey::Chunk, chunk));
      if (segment) {
        e.attrs.push_back(Attr::ofInt(AttrKey::Segment, pairLo(o.b) >> 16));
        e.attrs.push_back(Attr::ofInt(AttrKey::SegmentOffset, pairHi(o.a)));
        e.attrs.push_back(Attr::ofInt(AttrKey::SegmentLength, static_cast<int32_t>(o.extra)));
      }
      break;
    }
    case RecordType::BucketReady: {
      const auto bucket = static_cast<int32_t>(r.b);
      BucketState* qp = bucketState(bucket);
      if (!qp) break;
      auto& q = *qp;
      q.readyNs = r.ts;
      q.readyBytes = r.a;
      break;
    }
    case RecordType::BucketCommBegin: {
      const auto bucket = static_cast<int32_t>(r.b);
      BucketState* qp = bucketState(bucket);
      if (!qp) break;
      auto& q = *qp;
      BucketBegin bb;
      bb.readyNs = q.readyNs;
      bb.commNs = r.ts;
      bb.bytes = r.a ? r.a : q.readyBytes;
      bb.algorithm = r.name;
      bb.track = commTrack(ring, st);
      bb.tid = ring.tid;
      bb.step = st.steps.empty() ? -1 : static_cast<int64_t>(st.steps.back().a);
      bb.seq = bucketSeq_++;
      q.readyNs = -1;
      q.readyBytes = 0;
      if (q.begins.size() >= kMaxOpenBucketOps) q.begins.pop_front();
      q.begins.push_back(bb);
      bucketPair(bucket, q);
      break;
    }
    case RecordType::BucketCommBytes: {
      const auto bucket = static_cast<int32_t>(r.name);
      BucketState* qp = bucketState(bucket);
      if (!qp) break;
      auto& q = *qp;
      q.pendingBytes.counted = true;
      q.pendingBytes.sent = r.a;
      q.pendingBytes.received = r.b;
      break;
    }
    case RecordType::BucketCommEnd: {
      const auto bucket = static_cast<int32_t>(r.b);
      BucketState* qp = bucketState(bucket);
      if (!qp) break;
      auto& q = *qp;
      BucketEnd e = q.pendingBytes;
      e.ns = r.ts;
      q.pendingBytes = BucketEnd{};
      if (q.ends.size() >= kMaxOpenBucketOps) q.ends.pop_front();
      q.ends.push_back(e);
      bucketPair(bucket, q);
      break;
    }
    case RecordType::CommBegin:
      pushBounded(st.comms, Open{r.ts, r.name, r.sub, r.a, r.b, 0});
      break;
    case RecordType::CommEnd: {
      if (st.comms.empty()) break;
      const Open o = st.comms.back();
      st.comms.pop_back();
      static constexpr EventKind kinds[3] = {EventKind::Collective, EventKind::P2PSend, EventKind::P2PRecv};
      auto& e = add(commTrack(ring, st), kinds[(o.sub & 3) % 3], o.ts, r.ts, o.name);
      e.attrs.push_back(Attr::ofInt(AttrKey::Bytes, static_cast<int64_t>(o.a)));
      if (pairHi(o.b) >= 0) e.attrs.push_back(Attr::ofInt(AttrKey::Peer, pairHi(o.b)));
      if (o.sub & 4)
        e.attrs.push_back(Attr::ofInt(AttrKey::Layer, static_cast<int32_t>(pairLo(o.b))));
      else if (pairLo(o.b) != 0)
        e.attrs.push_back(Attr::ofString(AttrKey::Algorithm, pairLo(o.b)));
      break;
    }
    case RecordType::KernelBegin:
      pushBounded(st.kernels, Open{r.ts, r.name, 0, r.a, 0, 0});
      break;
    case RecordType::KernelEnd: {
      if (st.kernels.empty()) break;
      const Open o = st.kernels.back();
      st.kernels.pop_back();
      const auto layer = static_cast<int64_t>(o.a);
      auto& e = add(cpuTrack(ring, st), EventKind::Kernel, o.ts, r.ts, o.name);
      if (layer >= 0) e.attrs.push_back(Attr::ofInt(AttrKey::Layer, layer));
      break;
    }
    case RecordType::KnobChange: {
      auto& e = add(cpuTrack(ring, st), EventKind::KnobChange, r.ts, r.ts, r.name);
      e.attrs.push_back(Attr::ofString(AttrKey::Knob, r.name));
      e.attrs.push_back(Attr::ofString(AttrKey::KnobValue, static_cast<uint32_t>(r.a)));
      e.attrs.push_back(Attr::ofInt(AttrKey::Step, static_cast<int64_t>(r.b)));
      break;
    }
  }
}

void Drain::publishOpen(int64_t now) {
  openDirty_ = false;
  openPublishedNs_ = now;
  std::vector<OpenSnap>& v = openScratch_;
  v.clear();
  auto push = [&v](const OpenSnap& o) {
    if (v.size() < kMaxOpenSnap) v.push_back(o);
  };
  for (const auto& [ring, st] : states_) {
    const int64_t step = st.steps.empty() ? -1 : static_cast<int64_t>(st.steps.back().a);
    for (const Open& o : st.steps) push({ring->tid, EventKind::Step, sStep_, o.ts, static_cast<int64_t>(o.a)});
    for (const Open& o : st.phases) push({ring->tid, EventKind::Phase, o.name, o.ts, step});
    for (const Open& o : st.ranges) push({ring->tid, EventKind::Range, o.name, o.ts, step});
    for (const Open& o : st.mbs) {
      static constexpr EventKind kinds[3] = {EventKind::MicroBatchF, EventKind::MicroBatchB, EventKind::MicroBatchW};
      push({ring->tid, kinds[(o.sub & 3) % 3], o.name, o.ts, step});
    }
    for (const Open& o : st.kernels) push({ring->tid, EventKind::Kernel, o.name, o.ts, step});
    for (const Open& o : st.comms) {
      static constexpr EventKind kinds[3] = {EventKind::Collective, EventKind::P2PSend, EventKind::P2PRecv};
      push({ring->tid, kinds[(o.sub & 3) % 3], o.name, o.ts, step, -1, static_cast<int64_t>(o.a)});
    }
  }
  for (const auto& [id, o] : openById_) push({0, EventKind::Range, o.name, o.ts, -1});
  for (const auto& [bucket, q] : buckets_) {
    // Begins still waiting for their end; paired ones left the queue.
    for (size_t i = q.ends.size(); i < q.begins.size(); ++i) {
      const BucketBegin& b = q.begins[i];
      push({b.tid, EventKind::Collective, sBucketComm_, b.commNs, b.step, bucket, static_cast<int64_t>(b.bytes),
            static_cast<int64_t>(b.seq)});
    }
  }
  std::sort(v.begin(), v.end(), [](const OpenSnap& a, const OpenSnap& b) { return a.ts < b.ts; });
  std::lock_guard lock(openMu_);
  openSnap_.swap(v);
}

std::vector<core::wire::OpenOp> Drain::openOps() const {
  std::vector<OpenSnap> snap;
  {
    std::lock_guard lock(openMu_);
    snap = openSnap_;
  }
  std::vector<core::wire::OpenOp> out;
  out.reserve(snap.size());
  const StringTable& strings = StringTable::instance();
  for (const OpenSnap& o : snap) {
    core::wire::OpenOp op;
    op.tid = o.tid;
    op.kind = o.kind;
    op.name = strings.text(o.name);
    if (op.name.size() > 256) op.name.resize(256);
    op.startNs = o.ts;
    op.step = o.step;
    op.bucket = o.bucket;
    op.bytes = o.bytes;
    op.seq = o.seq;
    out.push_back(std::move(op));
  }
  return out;
}

void Drain::resetBatch() {
  // Keeps the events vector's capacity: a fresh one per batch grows through reallocations into
  // newly mmap'ed, kernel-zeroed pages every time (measured: the drain's largest cost).
  batch_.events.clear();
  batch_.strings.clear();
  batch_.tracks.clear();
  batch_.firstSeq = 0;
  batch_.history = false;
  batch_.droppedTotal = 0;
  if (batch_.events.capacity() > 2 * cfg_.maxBatchEvents) std::vector<core::wire::WireEvent>().swap(batch_.events);
}

void Drain::publish() {
  stringsSent_ = StringTable::instance().copyFrom(stringsSent_, batch_.strings);
  if (batch_.events.empty() && batch_.strings.empty() && batch_.tracks.empty()) return;
  if (batch_.events.empty()) batch_.firstSeq = nextSeq_;
  batch_.droppedTotal = Capture::instance().dropped();
  hub_.publish(batch_, newestNs_, nextSeq_);
  resetBatch();
}

}  // namespace trainscope::agent
