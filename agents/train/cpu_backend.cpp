// CPU backend: OpenBLAS GEMMs on one thread (ranks share the cores; BLAS threads would fight
// them) and MPI non-blocking calls on a duplicate of MPI_COMM_WORLD (the agent's knob agreement
// uses MPI_COMM_WORLD; a separate communicator keeps the two from ever matching each other).
#include <cblas.h>
#include <sys/prctl.h>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <mpi.h>

#include "backend.h"

namespace trainscope::train {
namespace {

// Counts itself into its communicator's Traffic when it completes: a send its size, a receive
// the size its status reports, a collective what was handed over (set by the communicator).
class MpiRequest final : public Request {
 public:
  MpiRequest(Traffic* sink, uint64_t sent, uint64_t received, int peer, bool opaque, bool isRecv = false)
      : isRecv_(isRecv) {
    sink_ = sink;
    sent_ = sent;
    received_ = received;
    peer_ = peer;
    opaque_ = opaque;
  }
  MPI_Request* handle() { return &req_; }
  bool test() override {
    if (done_) return true;
    int flag = 0;
    MPI_Status st;
    MPI_Test(&req_, &flag, &st);
    done_ = flag != 0;
    if (done_) finished(st);
    return done_;
  }
  ~MpiRequest() override {
    if (done_) return;
    MPI_Status st;
    MPI_Wait(&req_, &st);  // never leave a request dangling
    sink_ = nullptr;       // the communicator may be going away: nothing counted after it
  }

 private:
  void finished(const MPI_Status& st) {
    if (isRecv_) {
      int count = 0;
      MPI_Get_count(&st, MPI_BYTE, &count);
      received_ = count == MPI_UNDEFINED ? 0 : static_cast<uint64_t>(count);
    }
    completed();
  }
  MPI_Request req_ = MPI_REQUEST_NULL;
  bool done_ = false;
  bool isRecv_ = false;
};

class CpuCompute final : public Compute {
 public:
  CpuCompute() { openblas_set_num_threads(1); }
  void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
            int ldb, float beta, float* c, int ldc) override {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha,
                a, lda, b, ldb, beta, c, ldc);
  }
};

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm c) : comm_(c) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    int* ub = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &flag);
    if (flag && ub) tagUb_ = *ub;
  }
  ~MpiCommunicator() override { MPI_Comm_free(&comm_); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  RequestPtr isend(const void* data, size_t bytes, int peer, int tag) override {
    auto r = std::make_unique<MpiRequest>(&traffic_, bytes, 0, peer, false);
    MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_, r->handle());
    return r;
  }
  RequestPtr irecv(void* data, size_t bytes, int peer, int tag) override {
    auto r = std::make_unique<MpiRequest>(&traffic_, 0, 0, peer, false, true);
    MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_, r->handle());
    return r;
  }
  RequestPtr iallreduceSum(float* data, size_t n) override {
    auto r = std::make_unique<MpiRequest>(&traffic_, 4 * n, 4 * n, -1, true);
    MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm_, r->handle());
    return r;
  }
  RequestPtr ireduceSum(float* data, size_t n, int root) override {
    auto r = std::make_unique<MpiRequest>(&traffic_, 4 * n, rank_ == root ? 4 * n : 0, -1, true);
    if (rank_ == root)
      MPI_Ireduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, root, comm_, r->handle());
    else
      MPI_Ireduce(data, nullptr, static_cast<int>(n), MPI_FLOAT, MPI_SUM, root, comm_, r->handle());
    return r;
  }
  RequestPtr ibcast(void* data, size_t bytes, int root) override {
    auto r = std::make_unique<MpiRequest>(&traffic_, rank_ == root ? bytes : 0, rank_ == root ? 0 : bytes, -1, true);
    MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_, r->handle());
    return r;
  }
  RequestPtr ialltoall(const void* send, void* recv, size_t bytesPerRank) override {
    const uint64_t others = bytesPerRank * static_cast<uint64_t>(size_ - 1);
    auto r = std::make_unique<MpiRequest>(&traffic_, others, others, -1, false);
    MPI_Ialltoall(send, static_cast<int>(bytesPerRank), MPI_BYTE, recv, static_cast<int>(bytesPerRank),
                  MPI_BYTE, comm_, r->handle());
    return r;
  }
  RequestPtr iallgather(const void* send, void* recv, size_t bytesPerRank) override {
    const uint64_t others = bytesPerRank * static_cast<uint64_t>(size_ - 1);
    auto r = std::make_unique<MpiRequest>(&traffic_, others, others, -1, false);  // its block, to each other rank
    MPI_Iallgather(send, static_cast<int>(bytesPerRank), MPI_BYTE, recv, static_cast<int>(bytesPerRank),
                   MPI_BYTE, comm_, r->handle());
    return r;
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm c = MPI_COMM_NULL;
    MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &c);
    if (c == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiCommunicator>(c);
  }
  std::unique_ptr<Communicator> dup() override {
    MPI_Comm c = MPI_COMM_NULL;
    MPI_Comm_dup(comm_, &c);
    return std::make_unique<MpiCommunicator>(c);
  }
  std::unique_ptr<Communicator> splitShared() override {
    MPI_Comm c = MPI_COMM_NULL;
    MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &c);
    return std::make_unique<MpiCommunicator>(c);
  }
  int tagUpperBound() const override { return tagUb_; }
  double allreduceMaxDouble(double v) override {
    double out = v;
    MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, comm_);
    return out;
  }

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  int tagUb_ = 32767;  // MPI guarantees at least this much
};

}  // namespace

std::unique_ptr<Compute> makeCpuCompute() {
  return std::make_unique<CpuCompute>();
}

void Backoff::pause() {
  const int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  if (startNs_ < 0) startNs_ = now;
  const int64_t waited = now - startNs_;
  if (waited < 20'000) return;
  if (waited < 200'000 || !sharedCores()) {
    std::this_thread::yield();
    return;
  }
  // The kernel's default timer slack (50 us) would double every sleep: 1 us for this thread.
  static thread_local const bool slack = prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL) == 0;
  (void)slack;
  std::this_thread::sleep_for(std::chrono::microseconds(kSleepUs));
}

bool Backoff::sharedCores() {
  static const bool shared = [] {
    int local = 1;
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
      if (const char* v = std::getenv(name)) local = std::max(local, std::atoi(v));
    return local >= static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }();
  return shared;
}

void waitFor(Request& r) {
  Backoff b;
  while (!r.test()) b.pause();
}

std::unique_ptr<Backend> makeBackend(const std::string& kind, std::string* why) {
  if (kind == "cuda") return makeCudaBackend(why);
  if (kind != "cpu") {
    if (why) *why = "unknown backend '" + kind + "' (cpu|cuda)";
    return nullptr;
  }
  auto b = std::make_unique<Backend>();
  b->compute = makeCpuCompute();
  MPI_Comm c = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &c);
  b->world = std::make_unique<MpiCommunicator>(c);
  b->name = "cpu";
  return b;
}

}  // namespace trainscope::train
