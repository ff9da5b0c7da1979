#include "hub.h"

#include <algorithm>

namespace trainscope::agent {

namespace wire = core::wire;

bool OutQueue::pushLive(Frame f) {
  std::lock_guard lock(mu_);
  if (bytes_ + f->size() > cap_ || frames_.size() >= kCapFrames) return false;
  bytes_ += f->size();
  frames_.push_back(std::move(f));
  return true;
}

void OutQueue::pushForce(Frame f) {
  std::lock_guard lock(mu_);
  bytes_ += f->size();
  frames_.push_back(std::move(f));
}

std::pair<const uint8_t*, size_t> OutQueue::front() {
  std::lock_guard lock(mu_);
  if (frames_.empty()) return {nullptr, 0};
  const auto& f = *frames_.front();
  return {f.data() + frontOffset_, f.size() - frontOffset_};
}

void OutQueue::consumed(size_t n) {
  std::lock_guard lock(mu_);
  if (frames_.empty()) return;
  frontOffset_ += n;
  bytes_ -= n;
  if (frontOffset_ >= frames_.front()->size()) {
    frames_.pop_front();
    frontOffset_ = 0;
  }
}

size_t OutQueue::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

size_t OutQueue::frames() const {
  std::lock_guard lock(mu_);
  return frames_.size();
}

namespace {
Frame encodeFrame(const wire::EventBatch& b) {
  auto out = std::make_shared<std::vector<uint8_t>>();
  wire::encode(wire::Message{b}, *out);
  return out;
}
// A stored chunk re-encoded with history=true (it was encoded once, as a live batch).
Frame asHistory(const Frame& live) {
  wire::FrameDecoder dec;
  dec.feed(*live);
  auto m = dec.next();
  if (!m || !m.value() || !std::holds_alternative<wire::EventBatch>(*m.value())) return live;
  auto& b = std::get<wire::EventBatch>(*m.value());
  b.history = true;
  return encodeFrame(b);
}
}  // namespace

Frame Hub::tablesFrame(bool history, uint64_t firstSeq, uint64_t dropped) const {
  wire::EventBatch b;
  b.rank = cfg_.rank;
  b.firstSeq = firstSeq;
  b.history = history;
  b.droppedTotal = dropped;
  b.strings = strings_;
  b.tracks = tracks_;
  return encodeFrame(b);
}

void Hub::publish(wire::EventBatch& batch, int64_t newestNs, uint64_t nextSeq) {
  batch.rank = cfg_.rank;
  // Encoded (and compressed) once, outside the lock: the same bytes go to the flight recorder
  // and to every live client. Stored chunks therefore say history=false; subscribe() re-marks
  // them when it replays them, which costs only at attach time instead of on every batch.
  batch.history = false;
  const bool content = !batch.events.empty() || !batch.strings.empty() || !batch.tracks.empty();
  const Frame live = encodeFrame(batch);  // empty batches still carry droppedTotal to clients
  std::lock_guard lock(mu_);
  strings_.insert(strings_.end(), batch.strings.begin(), batch.strings.end());
  tracks_.insert(tracks_.end(), batch.tracks.begin(), batch.tracks.end());
  nextSeq_ = nextSeq;
  droppedTotal_ = batch.droppedTotal;
  if (content) {
    Chunk c{live, nullptr, batch.firstSeq, batch.events.size(), newestNs};
    chunkBytes_ += c.frame->size();
    chunkEvents_ += c.events;
    chunks_.push_back(std::move(c));
    evict(newestNs);
  }
  if (subs_.empty()) return;
  Frame tables;
  for (auto& q : subs_) {
    if (q->needTables) {
      if (!tables) tables = tablesFrame(false, batch.firstSeq, batch.droppedTotal);
      if (!q->pushLive(tables)) {
        ++slowDrops_;
        continue;
      }
      q->needTables = false;
    }
    if (!q->pushLive(live)) {
      ++slowDrops_;
      q->needTables = true;  // the dropped batch may have introduced strings or tracks
    }
  }
  if (wake_) wake_();
}

void Hub::evict(int64_t nowNs) {
  // Keep at least the newest chunk so a late client always sees something recent.
  while (chunks_.size() > 1 &&
         (chunkBytes_ > cfg_.flightBytes || chunks_.front().newestNs < nowNs - cfg_.flightNs)) {
    chunkBytes_ -= chunks_.front().frame->size();  // its history copy, if any, goes with it
    chunkEvents_ -= chunks_.front().events;
    chunks_.pop_front();
  }
}

void Hub::subscribe(const std::shared_ptr<OutQueue>& q, bool history) {
  std::lock_guard lock(mu_);
  if (std::find(subs_.begin(), subs_.end(), q) != subs_.end()) return;
  // The full tables first: evicted chunks took the first mention of older ids with them.
  const uint64_t first = history && !chunks_.empty() ? chunks_.front().firstSeq : nextSeq_;
  q->pushForce(tablesFrame(history, first, droppedTotal_));
  // Replayed frames are shared, not copied: each chunk is re-marked once, at its first replay, and
  // every later subscriber (or the same client subscribing again) queues the same bytes. The
  // recorder's memory is then at most twice its budget, whatever clients do.
  if (history)
    for (Chunk& c : chunks_) {
      if (!c.history) c.history = asHistory(c.frame);
      q->pushForce(c.history);
    }
  q->needTables = false;
  subs_.push_back(q);
  if (wake_) wake_();
}

void Hub::unsubscribe(const std::shared_ptr<OutQueue>& q) {
  std::lock_guard lock(mu_);
  subs_.erase(std::remove(subs_.begin(), subs_.end(), q), subs_.end());
}

uint64_t Hub::flightEvents() const {
  std::lock_guard lock(mu_);
  return chunkEvents_;
}
uint64_t Hub::flightBytes() const {
  std::lock_guard lock(mu_);
  return chunkBytes_;
}
uint64_t Hub::batchesDroppedForSlowClients() const {
  std::lock_guard lock(mu_);
  return slowDrops_;
}

}  // namespace trainscope::agent
