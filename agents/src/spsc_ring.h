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
    nudgeStride_ = std::min<size_t>(4096, c / 4 > 0 ? c / 4 : 1);
    limit_ = c / 2;
    cells_ = std::make_unique<Record[]>(c);
  }
  SpscRing(const SpscRing&) = delete;
  SpscRing& operator=(const SpscRing&) = delete;

  size_t capacity() const { return cap_; }
  size_t bytes() const { return cap_ * sizeof(Record); }

  // Producer side. kPushFull (0, falsy) when full: the record is not stored. kPushNudge when
  // stored into a ring that is at least half full: the caller wakes the consumer early. The
  // common path is one compare against a producer-local limit (the half-full point, or the full
  // point), the record store and the head store; only at the limit is the consumer's index read
  // (then again every nudge stride while the ring stays at least half full).
  enum PushResult : int { kPushFull = 0, kPushStored = 1, kPushNudge = 2 };
  PushResult push(const Record& r) {
    const uint64_t head = head_.load(std::memory_order_relaxed);
    PushResult result = kPushStored;
    if (__builtin_expect(head >= limit_, 0)) {
      const uint64_t tail = tail_.load(std::memory_order_acquire);
      const uint64_t used = head - tail;
      if (used >= cap_) {
        limit_ = head;  // look again on the next push
        return kPushFull;
      }
      if (used >= cap_ / 2) {
        result = kPushNudge;
        limit_ = std::min(tail + cap_, head + 1 + nudgeStride_);
      } else {
        limit_ = tail + cap_ / 2;
      }
    }
    cells_[head & mask_] = r;
    head_.store(head + 1, std::memory_order_release);
    return result;
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
  uint64_t limit_ = 0;  // producer-only: below this head no look at tail_ is needed
  alignas(64) std::atomic<uint64_t> tail_{0};
  alignas(64) size_t cap_ = 0;
  size_t mask_ = 0;
  size_t nudgeStride_ = 0;
  std::unique_ptr<Record[]> cells_;
};

}  // namespace trainscope::agent
