#include "capture.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>
#if TRAINSCOPE_HAVE_TSC
#include <cpuid.h>
#endif

namespace trainscope::agent {

namespace {
// 0: never registered, 1: registered, 2: no ring (over budget or thread exiting). Trivial TLS.
thread_local uint8_t t_state = 0;

// Marks the ring closed when its thread exits; the drain frees it once emptied.
struct RingOwner {
  ThreadRing* ring = nullptr;
  ~RingOwner() {
    if (ring) ring->closed.store(true, std::memory_order_release);
    t_ring = nullptr;
    t_state = 2;
  }
};
thread_local RingOwner t_owner;
}  // namespace

Capture& Capture::instance() {
  // Leaked on purpose: threads may record during static destruction.
  static Capture* c = new Capture();
  return *c;
}

void Capture::configure(size_t ringRecords, size_t ringBudgetBytes) {
  std::lock_guard lock(mu_);
  ringRecords_ = std::max<size_t>(ringRecords, 2);
  budgetBytes_ = ringBudgetBytes;
}

ThreadRing* Capture::registerCurrentThread() {
  if (t_state != 0) return t_ring;
  t_state = 2;  // until proven otherwise (also guards against re-entry)
  std::lock_guard lock(mu_);
  const size_t bytes = ringRecords_ * sizeof(Record);
  if (usedBytes_ + bytes > budgetBytes_) return nullptr;
  auto* r = new (std::nothrow) ThreadRing(ringRecords_);
  if (!r) return nullptr;
  r->tid = static_cast<int64_t>(syscall(SYS_gettid));
  char name[32] = {};
  if (pthread_getname_np(pthread_self(), name, sizeof name) == 0) r->threadName = name;
  r->index = nextIndex_++;
  usedBytes_ += r->ring.bytes();
  rings_.push_back(r);
  version_.fetch_add(1, std::memory_order_release);
  t_owner.ring = r;  // touching t_owner registers its destructor for this thread
  t_ring = r;
  t_state = 1;
  return r;
}

ThreadRing* registerOrCountDrop() {
  ThreadRing* r = Capture::instance().registerCurrentThread();
  if (!r) Capture::instance().countDrop();
  return r;
}

void nudgeDrain() {
  g_drainNudges.fetch_add(1, std::memory_order_release);
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&g_drainNudges), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

void pushRecordSlow(RecordType type, uint8_t sub, uint32_t name, uint64_t a, uint64_t b) {
  ThreadRing* r = t_ring;
  if (r == nullptr) {
    r = registerOrCountDrop();
    if (!r) return;
  }
  if (g_clockTsc.load(std::memory_order_relaxed))
    storeRecord(r, static_cast<int64_t>(readTsc()), kRecordClockTsc, type, sub, name, a, b);
  else
    storeRecord(r, nowNs(), kRecordClockNs, type, sub, name, a, b);
}

bool Capture::snapshot(std::vector<ThreadRing*>& out, uint64_t& version) {
  const uint64_t v = version_.load(std::memory_order_acquire);
  if (v == version) return false;
  std::lock_guard lock(mu_);
  out = rings_;
  version = version_.load(std::memory_order_relaxed);
  return true;
}

void Capture::release(ThreadRing* r) {
  {
    std::lock_guard lock(mu_);
    auto it = std::find(rings_.begin(), rings_.end(), r);
    if (it == rings_.end()) return;
    rings_.erase(it);
    usedBytes_ -= r->ring.bytes();
    dropped_.fetch_add(r->dropped.load(std::memory_order_relaxed), std::memory_order_relaxed);
    version_.fetch_add(1, std::memory_order_release);
  }
  delete r;
}

uint64_t Capture::bytesUsed() const {
  std::lock_guard lock(mu_);
  uint64_t used = 0;
  for (const ThreadRing* r : rings_) used += r->ring.sizeApprox() * sizeof(Record);
  return used;
}

uint64_t Capture::dropped() const {
  std::lock_guard lock(mu_);
  uint64_t n = dropped_.load(std::memory_order_relaxed);
  for (const ThreadRing* r : rings_) n += r->dropped.load(std::memory_order_relaxed);
  return n;
}

uint64_t Capture::bytesCap() const {
  std::lock_guard lock(mu_);
  return budgetBytes_;
}

}  // namespace trainscope::agent

namespace trainscope::agent {

bool tscIsInvariant() {
#if TRAINSCOPE_HAVE_TSC && defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0x80000000u, &eax, &ebx, &ecx, &edx) && eax >= 0x80000007u &&
      __get_cpuid(0x80000007u, &eax, &ebx, &ecx, &edx) && (edx & (1u << 8)))
    return true;
  // Hypervisors often hide the CPUID bit while the kernel has verified and flagged the TSC.
  FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (!f) return false;
  bool constant = false, nonstop = false;
  char line[8192];
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, "flags", 5) != 0) continue;
    for (char* tok = std::strtok(line, " \t\n"); tok; tok = std::strtok(nullptr, " \t\n")) {
      if (std::strcmp(tok, "constant_tsc") == 0) constant = true;
      if (std::strcmp(tok, "nonstop_tsc") == 0) nonstop = true;
    }
    break;  // the first CPU's flags
  }
  std::fclose(f);
  return constant && nonstop;
#else
  return false;
#endif
}

TscCalibration::Point TscCalibration::sample() {
  Point best;
  uint64_t bestWidth = UINT64_MAX;
  for (int i = 0; i < 7; ++i) {
#if TRAINSCOPE_HAVE_TSC
    _mm_lfence();
    const uint64_t t0 = __rdtsc();
    _mm_lfence();
    const int64_t ns = monotonicNs();
    _mm_lfence();
    const uint64_t t1 = __rdtsc();
    _mm_lfence();
#else
    const uint64_t t0 = 0, t1 = 0;
    const int64_t ns = monotonicNs();
#endif
    if (t1 - t0 < bestWidth) {
      bestWidth = t1 - t0;
      best = {t0 + (t1 - t0) / 2, ns};
    }
  }
  return best;
}

void TscCalibration::add(Point p) {
  if (n_ > 0) {
    const Point& last = pts_[n_ - 1].p;
    if (p.tsc <= last.tsc || p.ns <= last.ns) return;  // neither clock may stand still or go back
    const auto dtsc = static_cast<UInt128>(p.tsc - last.tsc);
    const auto dns = static_cast<UInt128>(p.ns - last.ns);
    const UInt128 mult = (dns << kFracBits) / dtsc;
    if (mult > static_cast<UInt128>(INT64_MAX)) return;  // a TSC slower than ~30 kHz: nonsense
    pts_[n_ - 1].mult = static_cast<int64_t>(mult);  // interpolation from last up to p
    if (n_ == kMaxPoints) {
      for (size_t i = 1; i < kMaxPoints; ++i) pts_[i - 1] = pts_[i];
      --n_;
    }
    pts_[n_] = {p, static_cast<int64_t>(mult)};  // extrapolation past p: the newest slope
  } else {
    pts_[0] = {p, 0};
  }
  ++n_;
}

}  // namespace trainscope::agent
