// A single-producer / single-consumer ring of Records. The producer is the owning thread (one
// per ring, no lock, no RMW); the consumer is the drain thread. When full, the producer drops
// the record and the caller counts it: the job is never slowed down by a slow drain.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "record.h"

namespace trainscope::agent {

class SpscRing {
 public:
  // capacity is rounded up to a power of two (at least 2).
  explicit SpscRing(size_t capacity) {
    size_t c = 2;
    while (c < capacity) c <<= 1;
    cap_ = c;
    mask_ = c - 1;
    nudgeMask_ = std::min<size_t>(4096, c / 4 > 0 ? c / 4 : 1) - 1;
    cells_ = std::make_unique<Record[]>(c);
  }
  SpscRing(const SpscRing&) = delete;
  SpscRing& operator=(const SpscRing&) = delete;

  size_t capacity() const { return cap_; }
  size_t bytes() const { return cap_ * sizeof(Record); }

  // Producer side. kPushFull (0, falsy) when full: the record is not stored. kPushNudge when
  // stored and the ring is at least half full: the caller wakes the consumer early. The fill
  // level is looked at only every nudgeStride records (one read of the consumer's index), so
  // the common path stays one compare, one store and the head store.
  enum PushResult : int { kPushFull = 0, kPushStored = 1, kPushNudge = 2 };
  PushResult push(const Record& r) {
    const uint64_t head = head_.load(std::memory_order_relaxed);
    if (head - cachedTail_ >= cap_) {
      cachedTail_ = tail_.load(std::memory_order_acquire);
      if (head - cachedTail_ >= cap_) return kPushFull;
    }
    cells_[head & mask_] = r;
    head_.store(head + 1, std::memory_order_release);
    if (__builtin_expect((head & nudgeMask_) == 0, 0)) {
      cachedTail_ = tail_.load(std::memory_order_acquire);
      if (head + 1 - cachedTail_ >= cap_ / 2) return kPushNudge;
    }
    return kPushStored;
  }

  // Consumer side: calls fn(const Record&) for up to max records; returns how many.
  template <typename Fn>
  size_t consume(size_t max, Fn&& fn) {
    const uint64_t tail = tail_.load(std::memory_order_relaxed);
    const uint64_t head = head_.load(std::memory_order_acquire);
    uint64_t n = head - tail;
    if (n > max) n = max;
    for (uint64_t i = 0; i < n; ++i) fn(cells_[(tail + i) & mask_]);
    tail_.store(tail + n, std::memory_order_release);
    return static_cast<size_t>(n);
  }

  size_t sizeApprox() const {
    return static_cast<size_t>(head_.load(std::memory_order_acquire) -
                               tail_.load(std::memory_order_acquire));
  }

 private:
  // Producer and consumer indices on separate cache lines: no false sharing between the job's
  // thread and the drain thread.
  alignas(64) std::atomic<uint64_t> head_{0};
  uint64_t cachedTail_ = 0;  // producer's last view of tail_
  alignas(64) std::atomic<uint64_t> tail_{0};
  alignas(64) size_t cap_ = 0;
  size_t mask_ = 0;
  size_t nudgeMask_ = 0;
  std::unique_ptr<Record[]> cells_;
};

}  // namespace trainscope::agent
