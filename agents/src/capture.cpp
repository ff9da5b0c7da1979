#include "capture.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <new>

namespace trainscope::agent {

thread_local ThreadRing* t_ring = nullptr;

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
