// A Communicator for tests that runs p ranks as threads of one process and records every
// message: point-to-point sends (source, destination, size, tag, order) and every collective
// call (kind, communicator size, bytes handed over). The same gradient-sync code as in the job
// runs on it unchanged (CommSet, makeBucketOp), so the tests can check what each algorithm
// really sends against hand-computed tables. Sends are eager (copied into the receiver's
// mailbox at once; MPI may buffer them too); a receive matches (communicator, source, tag) in
// order, as MPI does. A "machine" of nodeSize consecutive ranks stands in for
// MPI_COMM_TYPE_SHARED, so hierarchical's topology comes from splitShared() as in the job.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "backend.h"

namespace recording {

using trainscope::train::Communicator;
using trainscope::train::Request;
using trainscope::train::RequestPtr;
using trainscope::train::Traffic;

struct Entry {
  std::string op;  // send, allreduce, reduce, bcast, alltoall, allgather
  int src = -1;    // world rank of the caller (sender)
  int dst = -1;    // world rank of the receiver (send only)
  size_t bytes = 0;
  int tag = -1;
  int commSize = 0;
  uint64_t order = 0;
};

class Fabric {
 public:
  explicit Fabric(int nodeSize = 1, int tagUb = 32767) : nodeSize_(nodeSize), tagUb_(tagUb) {}
  int nodeSize() const { return nodeSize_; }
  int tagUb() const { return tagUb_; }
  std::vector<Entry> log() {
    std::lock_guard l(mu_);
    return log_;
  }
  void clearLog() {
    std::lock_guard l(mu_);
    log_.clear();
  }

  // ---- used by Comm ----
  struct Slot {
    int arrived = 0;
    std::vector<std::vector<uint8_t>> in;  // per comm rank
    std::map<int, int> commOfColor;        // split: color -> new comm id
  };
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::tuple<int, int, int, int>, std::deque<std::vector<uint8_t>>> box_;  // comm, src, dst, tag
  std::map<std::pair<int, int>, Slot> slots_;                                        // comm, seq
  std::vector<Entry> log_;
  uint64_t order_ = 0;
  int nextComm_ = 1;
  const int nodeSize_, tagUb_;

  void record(Entry e) {  // under mu_
    e.order = order_++;
    log_.push_back(std::move(e));
  }
};

class Comm;

class FabricRequest final : public Request {
 public:
  FabricRequest(Traffic* sink, std::function<bool()> poll, int peer, bool opaque) : poll_(std::move(poll)) {
    sink_ = sink;
    peer_ = peer;
    opaque_ = opaque;
  }
  bool test() override {
    if (done_) return true;
    done_ = poll_();
    if (done_) completed();
    return done_;
  }
  void setPoll(std::function<bool()> poll) { poll_ = std::move(poll); }
  void setCounts(uint64_t sent, uint64_t received) {
    sent_ = sent;
    received_ = received;
  }

 private:
  std::function<bool()> poll_;
  bool done_ = false;
};

class Comm final : public Communicator {
 public:
  // members[i]: the world rank of this communicator's rank i.
  Comm(Fabric& f, int id, int rank, std::vector<int> members)
      : f_(f), id_(id), rank_(rank), members_(std::move(members)) {}
  static std::unique_ptr<Comm> world(Fabric& f, int rank, int size) {
    std::vector<int> m(static_cast<size_t>(size));
    for (int i = 0; i < size; ++i) m[static_cast<size_t>(i)] = i;
    return std::make_unique<Comm>(f, 0, rank, m);
  }
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  int tagUpperBound() const override { return f_.tagUb(); }

  RequestPtr isend(const void* data, size_t bytes, int peer, int tag) override {
    {
      std::lock_guard l(f_.mu_);
      const auto* p = static_cast<const uint8_t*>(data);
      f_.box_[{id_, rank_, peer, tag}].emplace_back(p, p + bytes);
      f_.record({"send", world(rank_), world(peer), bytes, tag, size(), 0});
      f_.cv_.notify_all();
    }
    auto r = std::make_unique<FabricRequest>(&traffic_, [] { return true; }, peer, false);
    r->setCounts(bytes, 0);
    return r;
  }
  RequestPtr irecv(void* data, size_t bytes, int peer, int tag) override {
    auto r = std::make_unique<FabricRequest>(&traffic_, nullptr, peer, false);
    FabricRequest* raw = r.get();
    raw->setPoll([this, data, bytes, peer, tag, raw] {
                         std::lock_guard l(f_.mu_);
                         auto it = f_.box_.find({id_, peer, rank_, tag});
                         if (it == f_.box_.end() || it->second.empty()) return false;
                         std::vector<uint8_t> m = std::move(it->second.front());
                         it->second.pop_front();
                         if (m.size() > bytes) throw std::runtime_error("message larger than the receive buffer");
                         std::memcpy(data, m.data(), m.size());
                         raw->setCounts(0, m.size());
                         return true;
                       });
    return r;
  }
  RequestPtr iallreduceSum(float* data, size_t n) override {
    return collective("allreduce", data, 4 * n, [this, data, n](const std::vector<std::vector<uint8_t>>& in) {
      sumInto(data, n, in);
    }, true, 4 * n, 4 * n);
  }
  RequestPtr ireduceSum(float* data, size_t n, int root) override {
    return collective("reduce", data, 4 * n, [this, data, n, root](const std::vector<std::vector<uint8_t>>& in) {
      if (rank_ == root) sumInto(data, n, in);
    }, true, 4 * n, rank_ == root ? 4 * n : 0);
  }
  RequestPtr ibcast(void* data, size_t bytes, int root) override {
    return collective("bcast", data, bytes, [this, data, bytes, root](const std::vector<std::vector<uint8_t>>& in) {
      if (rank_ != root) std::memcpy(data, in[static_cast<size_t>(root)].data(), bytes);
    }, true, rank_ == root ? bytes : 0, rank_ == root ? 0 : bytes);
  }
  RequestPtr ialltoall(const void* send, void* recv, size_t b) override {
    const uint64_t others = b * static_cast<uint64_t>(size() - 1);
    return collective("alltoall", send, b * static_cast<size_t>(size()),
                      [this, recv, b](const std::vector<std::vector<uint8_t>>& in) {
                        for (int j = 0; j < size(); ++j)
                          std::memcpy(static_cast<uint8_t*>(recv) + b * static_cast<size_t>(j),
                                      in[static_cast<size_t>(j)].data() + b * static_cast<size_t>(rank_), b);
                      },
                      false, others, others);
  }
  RequestPtr iallgather(const void* send, void* recv, size_t b) override {
    const uint64_t others = b * static_cast<uint64_t>(size() - 1);
    return collective("allgather", send, b, [this, recv, b](const std::vector<std::vector<uint8_t>>& in) {
      for (int j = 0; j < size(); ++j)
        std::memcpy(static_cast<uint8_t*>(recv) + b * static_cast<size_t>(j), in[static_cast<size_t>(j)].data(), b);
    }, false, others, others);
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    const int seq = seq_++;
    std::unique_lock l(f_.mu_);
    Fabric::Slot& s = f_.slots_[{id_, seq}];
    if (s.in.empty()) s.in.resize(members_.size());
    int ck[2] = {color, key};
    s.in[static_cast<size_t>(rank_)].assign(reinterpret_cast<uint8_t*>(ck), reinterpret_cast<uint8_t*>(ck) + 8);
    ++s.arrived;
    f_.cv_.notify_all();
    f_.cv_.wait(l, [&] { return s.arrived == size(); });
    if (color < 0) return nullptr;
    std::vector<std::tuple<int, int, int>> mine;  // key, rank, world
    for (int j = 0; j < size(); ++j) {
      int v[2];
      std::memcpy(v, s.in[static_cast<size_t>(j)].data(), 8);
      if (v[0] == color) mine.emplace_back(v[1], j, world(j));
    }
    std::sort(mine.begin(), mine.end());
    if (!s.commOfColor.count(color)) s.commOfColor[color] = f_.nextComm_++;
    std::vector<int> members;
    int myRank = 0;
    for (const auto& [k, j, w] : mine) {
      if (j == rank_) myRank = static_cast<int>(members.size());
      members.push_back(w);
    }
    return std::make_unique<Comm>(f_, s.commOfColor[color], myRank, members);
  }
  std::unique_ptr<Communicator> dup() override { return split(0, rank_); }
  std::unique_ptr<Communicator> splitShared() override { return split(world(rank_) / f_.nodeSize(), rank_); }
  double allreduceMaxDouble(double v) override {
    double out = v;
    auto r = collective("allreduce-max", &v, 8, [&out](const std::vector<std::vector<uint8_t>>& in) {
      for (const auto& b : in) {
        double x;
        std::memcpy(&x, b.data(), 8);
        out = std::max(out, x);
      }
    }, true, 8, 8);
    while (!r->test()) std::this_thread::yield();
    return out;
  }

 private:
  int world(int commRank) const { return members_[static_cast<size_t>(commRank)]; }
  static void sumInto(float* data, size_t n, const std::vector<std::vector<uint8_t>>& in) {
    std::vector<float> acc(n, 0.0f);
    for (const auto& b : in)  // rank order: the same sum on every rank
      for (size_t i = 0; i < n; ++i) {
        float x;
        std::memcpy(&x, b.data() + 4 * i, 4);
        acc[i] += x;
      }
    std::memcpy(data, acc.data(), 4 * n);
  }
  // Deposits this rank's input; completes once every rank of the communicator has.
  RequestPtr collective(const char* op, const void* data, size_t bytes,
                        std::function<void(const std::vector<std::vector<uint8_t>>&)> finish, bool opaque,
                        uint64_t sent, uint64_t received) {
    const int seq = seq_++;
    {
      std::lock_guard l(f_.mu_);
      Fabric::Slot& s = f_.slots_[{id_, seq}];
      if (s.in.empty()) s.in.resize(members_.size());
      const auto* p = static_cast<const uint8_t*>(data);
      s.in[static_cast<size_t>(rank_)].assign(p, p + bytes);
      ++s.arrived;
      f_.record({op, world(rank_), -1, bytes, -1, size(), 0});
    }
    auto r = std::make_unique<FabricRequest>(&traffic_,
                                             [this, seq, finish] {
                                               std::vector<std::vector<uint8_t>> in;
                                               {
                                                 std::lock_guard l(f_.mu_);
                                                 Fabric::Slot& s = f_.slots_[{id_, seq}];
                                                 if (s.arrived < size()) return false;
                                                 in = s.in;
                                               }
                                               finish(in);
                                               return true;
                                             },
                                             -1, opaque);
    r->setCounts(sent, received);
    return r;
  }

  Fabric& f_;
  int id_, rank_;
  std::vector<int> members_;
  int seq_ = 0;  // collective calls on this communicator (the same order on every rank)
};

// Runs body(rank, worldComm) on p threads and joins them.
template <typename Body>
void runRanks(Fabric& f, int p, Body body) {
  std::vector<std::thread> ts;
  for (int r = 0; r < p; ++r)
    ts.emplace_back([&f, r, p, &body] {
      auto w = Comm::world(f, r, p);
      body(r, *w);
    });
  for (auto& t : ts) t.join();
}

}  // namespace recording
