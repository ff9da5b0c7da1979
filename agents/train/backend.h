// The trainer's backend: compute (GEMMs) and communication (point-to-point and the few
// non-blocking collectives the data-parallel algorithms are built from). The CPU backend is
// OpenBLAS + MPI; the CUDA backend (cuda_backend.cpp) is cuBLAS + NCCL.
// Model code only sees Compute; gradient synchronisation only sees Communicator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace trainscope::train {

class Compute {
 public:
  virtual ~Compute() = default;
  // Row-major C = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T; op(A) is m x k, op(B) k x n.
  virtual void gemm(bool transA, bool transB, int m, int n, int k, float alpha, const float* a, int lda,
                    const float* b, int ldb, float beta, float* c, int ldc) = 0;
};

struct Traffic;

// A pending non-blocking operation. test() drives progress (MPI progresses inside its calls).
class Request {
 public:
  virtual ~Request() = default;
  virtual bool test() = 0;  // true once complete (and from then on)
  // What the completed operation moved, counted by the communicator (valid once test() is
  // true): a send's size, a receive's real size (MPI_Get_count of its status, not the buffer's
  // size), and for an all-to-all or allgather the bytes this rank hands to the library for the
  // other ranks and gets from them (its own block excluded). opaque(): a reduction (allreduce,
  // reduce) or broadcast whose messages the library chooses itself: bytesSent() is the buffer
  // handed over, what the library's algorithm then sends is not visible here (docs/TRAINER.md,
  // "Bytes").
  uint64_t bytesSent() const { return sent_; }
  uint64_t bytesReceived() const { return received_; }
  int peer() const { return peer_; }  // point-to-point peer; -1 for a collective
  bool opaque() const { return opaque_; }

 protected:
  inline void completed();  // adds this request's counts to its communicator's Traffic, once
  uint64_t sent_ = 0, received_ = 0;
  int peer_ = -1;
  bool opaque_ = false;
  Traffic* sink_ = nullptr;
};
using RequestPtr = std::unique_ptr<Request>;

// A communicator's counts of completed requests: totals, per peer (point-to-point), and what
// opaque collectives were handed.
struct Traffic {
  uint64_t sent = 0, received = 0;  // point-to-point and counted collectives
  uint64_t opaqueHanded = 0;        // reductions/broadcasts: bytes handed to the library
  uint64_t messages = 0;            // completed requests (opaque ones included)
  std::vector<std::pair<uint64_t, uint64_t>> perPeer;  // [peer] -> (sent, received)
  void add(const Request& r) {
    ++messages;
    if (r.opaque()) {
      opaqueHanded += r.bytesSent();
      return;
    }
    sent += r.bytesSent();
    received += r.bytesReceived();
    if (r.peer() >= 0) {
      if (perPeer.size() <= static_cast<size_t>(r.peer())) perPeer.resize(static_cast<size_t>(r.peer()) + 1);
      perPeer[static_cast<size_t>(r.peer())].first += r.bytesSent();
      perPeer[static_cast<size_t>(r.peer())].second += r.bytesReceived();
    }
  }
};

inline void Request::completed() {
  if (sink_) sink_->add(*this);
  sink_ = nullptr;
}

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual RequestPtr isend(const void* data, size_t bytes, int peer, int tag) = 0;
  virtual RequestPtr irecv(void* data, size_t bytes, int peer, int tag) = 0;
  virtual RequestPtr iallreduceSum(float* data, size_t n) = 0;         // in place
  virtual RequestPtr ireduceSum(float* data, size_t n, int root) = 0;  // in place at root
  virtual RequestPtr ibcast(void* data, size_t bytes, int root) = 0;
  // Every rank sends bytesPerRank bytes to every rank (send/recv hold size() blocks).
  virtual RequestPtr ialltoall(const void* send, void* recv, size_t bytesPerRank) = 0;
  virtual RequestPtr iallgather(const void* send, void* recv, size_t bytesPerRank) = 0;
  // A new communicator over the ranks with the same color (color < 0: none, returns null).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  virtual std::unique_ptr<Communicator> dup() = 0;
  virtual double allreduceMaxDouble(double v) = 0;  // blocking; setup and checks only
  // The ranks that share this rank's machine (MPI_Comm_split_type MPI_COMM_TYPE_SHARED); the
  // default makes every rank a node of its own.
  virtual std::unique_ptr<Communicator> splitShared() { return split(rank(), 0); }
  // The largest message tag the transport guarantees (MPI_TAG_UB; at least 32767).
  virtual int tagUpperBound() const { return 32767; }

  // Every request of this communicator that completed so far (Request::completed).
  const Traffic& traffic() const { return traffic_; }

 protected:
  Traffic traffic_;
};

struct Backend {
  std::unique_ptr<Compute> compute;
  std::unique_ptr<Communicator> world;  // the training's own communicator (not MPI_COMM_WORLD)
  std::string name;
};

// "cpu" (OpenBLAS single-threaded + MPI) or "cuda" (cuBLAS + NCCL); after MPI_Init, on every
// rank. Null and why set when it cannot be made.
std::unique_ptr<Backend> makeBackend(const std::string& kind, std::string* why);
// The cuda backend (cuda_backend.cpp, or cuda_none.cpp in a build without it). Available = built
// and a device present; checked before MPI_Init so that `--backend cuda` without a GPU or driver
// fails at once with "no CUDA device".
bool cudaBackendAvailable(std::string* why);
std::unique_ptr<Backend> makeCudaBackend(std::string* why);
// cuBLAS on its own compute stream, on the current device (no MPI, no NCCL): for checks. Null
// in a build without the cuda backend.
std::unique_ptr<Compute> makeCudaCompute();

// OpenBLAS on one thread (no MPI needed): the CPU backend's compute, also for unit tests.
std::unique_ptr<Compute> makeCpuCompute();

// How a rank polls while it waits for a message: spin for the first 20 us (a hand-off that is
// about to arrive costs no more than that), then yield until 200 us, then -- only where ranks
// share cores -- sleep 20 us at a time (timer slack 1 us). Ranks on shared cores (this machine: 2 cores, 2-4 ranks)
// thus give the core to the rank whose compute they are waiting for instead of stretching it;
// with a core per rank they keep yielding and see a message as soon as it lands.
class Backoff {
 public:
  void pause();
  // Whether waits may sleep; by default when the node's ranks (OMPI_COMM_WORLD_LOCAL_SIZE or
  // MPI_LOCALNRANKS) are at least its hardware threads.
  static bool sharedCores();
  static constexpr int kSleepUs = 20;

 private:
  int64_t startNs_ = -1;
};

// Blocking helper (polls with a Backoff).
void waitFor(Request& r);

}  // namespace trainscope::train
