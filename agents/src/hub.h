// Where finished EventBatches go: the flight recorder (recent history as encoded frames,
// bounded in bytes and seconds) and the subscribed clients' output queues. One lock orders
// "append to history" against "new subscriber copies history", so a late client gets history
// then live batches with no gap and no duplicate.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "trainscope/core/wire/protocol.h"

namespace trainscope::agent {

using Frame = std::shared_ptr<const std::vector<uint8_t>>;

// A client's bounded output queue. Live frames are refused when it is over its cap (the client
// stopped reading): the job never waits and memory stays bounded.
class OutQueue {
 public:
  // Live frames stop at capBytes or at capFrames frames, whichever comes first: live data alone
  // never takes a client over its budget in the server (agents/src/server.cpp).
  static constexpr size_t kCapFrames = 1024;
  explicit OutQueue(size_t capBytes) : cap_(capBytes) {}
  bool pushLive(Frame f);
  void pushForce(Frame f);
  // Server thread: the bytes to write next (empty when none).
  std::pair<const uint8_t*, size_t> front();
  void consumed(size_t n);
  size_t bytes() const;
  size_t frames() const;  // frames queued (a count budget beside the bytes: many small replies)
  bool needTables = false;  // guarded by the Hub's lock: a dropped batch may have held new ids

 private:
  mutable std::mutex mu_;
  std::deque<Frame> frames_;
  size_t frontOffset_ = 0;
  size_t bytes_ = 0;
  size_t cap_;
};

struct HubConfig {
  int32_t rank = 0;
  size_t flightBytes = 16u << 20;
  int64_t flightNs = 30'000'000'000LL;
};

class Hub {
 public:
  explicit Hub(HubConfig cfg) : cfg_(cfg) {}
  // Under the lock: the drain may be publishing (and waking) while the server starts or stops.
  void setWake(std::function<void()> wake) {
    std::lock_guard lock(mu_);
    wake_ = std::move(wake);
  }

  // Drain thread: a batch whose events carry seqs [firstSeq, firstSeq + events.size()), and
  // whose strings/tracks are the ones new since the previous batch.
  void publish(core::wire::EventBatch& batch, int64_t newestNs, uint64_t nextSeq);

  // Server thread: start/stop streaming to a client.
  void subscribe(const std::shared_ptr<OutQueue>& q, bool history);
  void unsubscribe(const std::shared_ptr<OutQueue>& q);

  uint64_t flightEvents() const;
  uint64_t flightBytes() const;
  uint64_t batchesDroppedForSlowClients() const;

 private:
  struct Chunk {
    Frame frame;
    Frame history;  // the same batch marked history=true, made at the first replay and shared
    uint64_t firstSeq = 0;
    uint64_t events = 0;
    int64_t newestNs = 0;
  };
  Frame tablesFrame(bool history, uint64_t firstSeq, uint64_t dropped) const;  // under mu_
  void evict(int64_t nowNs);

  HubConfig cfg_;
  std::function<void()> wake_;
  mutable std::mutex mu_;
  std::vector<std::pair<uint32_t, std::string>> strings_;  // everything published so far
  std::vector<core::wire::WireTrack> tracks_;
  std::deque<Chunk> chunks_;
  uint64_t chunkBytes_ = 0;
  uint64_t chunkEvents_ = 0;
  uint64_t nextSeq_ = 0;
  uint64_t droppedTotal_ = 0;
  uint64_t slowDrops_ = 0;
  std::vector<std::shared_ptr<OutQueue>> subs_;
};

}  // namespace trainscope::agent
