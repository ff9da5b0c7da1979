// CUDA/NCCL backend. Compute: cuBLAS on a compute stream (one handle per stream); the model keeps
// its tensors in host memory, so every GEMM copies its operands in and the result out (the
// layers' element-wise parts stay on the CPU; cuda_kernels.h has their device versions).
// Communication: NCCL, one stream per communicator (NCCL serializes a stream: two communicators
// whose collectives start in different orders on different ranks must not share one), host
// buffers staged through stream-ordered device buffers. Every operation first waits on the
// compute stream's last event (cudaStreamWaitEvent), so a bucket's allreduce starts after its last
// gradient kernel; completion is a CUDA event that Request::test() polls (cudaEventQuery).
// isend/irecv are NCCL point-to-point calls, deferred and issued as one group at the next test()
// or collective: MPI semantics (post a send and a receive, then wait) without the deadlock a
// lone blocking ncclSend would cause.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "backend.h"

namespace trainscope::train {
namespace {

[[noreturn]] void fatal(const char* what, const char* detail) {
  std::fprintf(stderr, "trainscope-train: cuda backend: %s failed: %s\n", what, detail);
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::abort();
}
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fatal(what, cudaGetErrorString(e));
}
void check(ncclResult_t e, const char* what) {
  if (e != ncclSuccess) fatal(what, ncclGetErrorString(e));
}
void check(cublasStatus_t e, const char* what) {
  if (e != CUBLAS_STATUS_SUCCESS) fatal(what, cublasGetStatusString(e));
}

// The compute stream and the event recorded after its last kernel.
struct ComputeStream {
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;
  ComputeStream() {
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~ComputeStream() {
    cudaEventDestroy(done);
    cudaStreamDestroy(stream);
  }
  ComputeStream(const ComputeStream&) = delete;
  ComputeStream& operator=(const ComputeStream&) = delete;
};

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(p_); }
  float* get(size_t floats) {
    if (floats > cap_) {
      cudaFree(p_);
      p_ = nullptr;
      check(cudaMalloc(&p_, floats * sizeof(float)), "cudaMalloc");
      cap_ = floats;
    }
    return static_cast<float*>(p_);
  }

 private:
  void* p_ = nullptr;
  size_t cap_ = 0;
};

class CudaCompute final : public Compute {
 public:
  explicit CudaCompute(std::shared_ptr<ComputeStream> cs) : cs_(std::move(cs)) {
    check(cublasCreate(&h_), "cublasCreate");
    check(cublasSetStream(h_, cs_->stream), "cublasSetStream");
  }
  ~CudaCompute() override { cublasDestroy(h_); }
  void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
            int ldb, float beta, float* c, int ldc) override {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {  // C = beta C (0 when beta is 0, as BLAS); A and B may be empty
      for (int r = 0; r < m; ++r) {
        float* cr = c + static_cast<size_t>(r) * static_cast<size_t>(ldc);
        for (int j = 0; j < n; ++j) cr[j] = beta == 0.0f ? 0.0f : beta * cr[j];
      }
      return;
    }
    const auto span = [](int rows, int cols, int ld) {
      return rows > 0 ? static_cast<size_t>(rows - 1) * static_cast<size_t>(ld) + static_cast<size_t>(cols) : 0;
    };
    const size_t na = ta ? span(k, m, lda) : span(m, k, lda), nb = tb ? span(n, k, ldb) : span(k, n, ldb),
                 nc = span(m, n, ldc);
    float *da = a_.get(na), *db = b_.get(nb), *dc = c_.get(nc);
    cudaStream_t s = cs_->stream;
    check(cudaMemcpyAsync(da, a, na * 4, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
    check(cudaMemcpyAsync(db, b, nb * 4, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
    if (beta != 0.0f) check(cudaMemcpyAsync(dc, c, nc * 4, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
    check(cublasSgemm(h_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, db, ldb,
                      da, lda, &beta, dc, ldc),
          "cublasSgemm");
    check(cudaMemcpyAsync(c, dc, nc * 4, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
    check(cudaEventRecord(cs_->done, s), "cudaEventRecord");
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");  // the layers read C on the host next
  }

 private:
  std::shared_ptr<ComputeStream> cs_;
  cublasHandle_t h_ = nullptr;
  DeviceBuffer a_, b_, c_;
};

class NcclCommunicator;

// One operation's device buffer and completion event; the result is copied to host when done.
class NcclRequest final : public Request {
 public:
  NcclRequest(NcclCommunicator& owner, size_t bytes);
  ~NcclRequest() override;
  NcclRequest(const NcclRequest&) = delete;
  NcclRequest& operator=(const NcclRequest&) = delete;
  uint8_t* dev() { return dev_; }
  void copyBackTo(void* host, size_t offset, size_t bytes) {
    host_ = host;
    hostOffset_ = offset;
    hostBytes_ = bytes;
  }
  void recorded() { recorded_ = true; }
  // What it moves, added to sink when it completes (NCCL has no receive status: a receive's
  // size must match the send's exactly, so the posted size is the real one).
  NcclRequest* counts(Traffic* sink, uint64_t sent, uint64_t received, int peer, bool opaque) {
    sink_ = sink;
    sent_ = sent;
    received_ = received;
    peer_ = peer;
    opaque_ = opaque;
    return this;
  }
  bool test() override;

 private:
  NcclCommunicator& owner_;
  uint8_t* dev_ = nullptr;
  cudaEvent_t ev_ = nullptr;
  void* host_ = nullptr;
  size_t hostOffset_ = 0, hostBytes_ = 0;
  bool recorded_ = false, done_ = false;
  friend class NcclCommunicator;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t c, std::shared_ptr<ComputeStream> cs) : comm_(c), cs_(std::move(cs)) {
    check(ncclCommUserRank(comm_, &rank_), "ncclCommUserRank");
    check(ncclCommCount(comm_, &size_), "ncclCommCount");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~NcclCommunicator() override {
    flush();
    cudaStreamSynchronize(stream_);
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  cudaStream_t stream() const { return stream_; }

  RequestPtr isend(const void* data, size_t bytes, int peer, int /*tag*/) override {
    auto r = start(bytes);
    r->counts(&traffic_, bytes, 0, peer, false);
    check(cudaMemcpyAsync(r->dev(), data, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
    pending_.push_back({true, r.get(), bytes, peer});
    return r;
  }
  RequestPtr irecv(void* data, size_t bytes, int peer, int /*tag*/) override {
    auto r = start(bytes);
    r->counts(&traffic_, 0, bytes, peer, false);
    r->copyBackTo(data, 0, bytes);
    pending_.push_back({false, r.get(), bytes, peer});
    return r;
  }
  RequestPtr iallreduceSum(float* data, size_t n) override {
    auto r = stageIn(data, 4 * n, 4 * n);
    r->counts(&traffic_, 4 * n, 4 * n, -1, true);  // NCCL picks the messages: handed over, opaque
    check(ncclAllReduce(r->dev(), r->dev(), n, ncclFloat, ncclSum, comm_, stream_), "ncclAllReduce");
    return finish(std::move(r), data, 0, 4 * n);
  }
  RequestPtr ireduceSum(float* data, size_t n, int root) override {
    auto r = stageIn(data, 4 * n, 4 * n);
    r->counts(&traffic_, 4 * n, rank_ == root ? 4 * n : 0, -1, true);
    check(ncclReduce(r->dev(), r->dev(), n, ncclFloat, ncclSum, root, comm_, stream_), "ncclReduce");
    return finish(std::move(r), rank_ == root ? data : nullptr, 0, 4 * n);
  }
  RequestPtr ibcast(void* data, size_t bytes, int root) override {
    auto r = stageIn(data, bytes, bytes);
    r->counts(&traffic_, rank_ == root ? bytes : 0, rank_ == root ? 0 : bytes, -1, true);
    check(ncclBroadcast(r->dev(), r->dev(), bytes, ncclUint8, root, comm_, stream_), "ncclBroadcast");
    return finish(std::move(r), rank_ == root ? nullptr : data, 0, bytes);
  }
  RequestPtr ialltoall(const void* send, void* recv, size_t bytesPerRank) override {
    const size_t all = bytesPerRank * static_cast<size_t>(size_);
    auto r = stageIn(send, all, 2 * all);
    const uint64_t others = bytesPerRank * static_cast<uint64_t>(size_ - 1);
    r->counts(&traffic_, others, others, -1, false);
    check(ncclGroupStart(), "ncclGroupStart");
    for (int p = 0; p < size_; ++p) {
      const size_t off = bytesPerRank * static_cast<size_t>(p);
      check(ncclSend(r->dev() + off, bytesPerRank, ncclUint8, p, comm_, stream_), "ncclSend");
      check(ncclRecv(r->dev() + all + off, bytesPerRank, ncclUint8, p, comm_, stream_), "ncclRecv");
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
    return finish(std::move(r), recv, all, all);
  }
  RequestPtr iallgather(const void* send, void* recv, size_t bytesPerRank) override {
    const size_t all = bytesPerRank * static_cast<size_t>(size_);
    auto r = stageIn(send, bytesPerRank, bytesPerRank + all);
    const uint64_t others = bytesPerRank * static_cast<uint64_t>(size_ - 1);
    r->counts(&traffic_, others, others, -1, false);
    check(ncclAllGather(r->dev(), r->dev() + bytesPerRank, bytesPerRank, ncclUint8, comm_, stream_),
          "ncclAllGather");
    return finish(std::move(r), recv, bytesPerRank, all);
  }
  // Reduce-scatter (not in the Communicator interface yet: the trainer's ring builds its own).
  RequestPtr ireduceScatterSum(const float* send, float* recv, size_t perRank) {
    const size_t all = perRank * static_cast<size_t>(size_);
    auto r = stageIn(send, 4 * all, 4 * (all + perRank));
    check(ncclReduceScatter(r->dev(), r->dev() + 4 * all, perRank, ncclFloat, ncclSum, comm_, stream_),
          "ncclReduceScatter");
    return finish(std::move(r), recv, 4 * all, 4 * perRank);
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    flush();
    ncclComm_t c = nullptr;
    check(ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &c, nullptr), "ncclCommSplit");
    if (!c) return nullptr;
    return std::make_unique<NcclCommunicator>(c, cs_);
  }
  std::unique_ptr<Communicator> dup() override { return split(0, rank_); }
  double allreduceMaxDouble(double v) override {
    auto r = stageIn(&v, sizeof v, sizeof v);
    check(ncclAllReduce(r->dev(), r->dev(), 1, ncclDouble, ncclMax, comm_, stream_), "ncclAllReduce");
    auto done = finish(std::move(r), &v, 0, sizeof v);
    waitFor(*done);
    return v;
  }

  // Issues the deferred point-to-point calls as one group.
  void flush() {
    if (pending_.empty()) return;
    check(ncclGroupStart(), "ncclGroupStart");
    for (const P2p& p : pending_) {
      if (p.send)
        check(ncclSend(p.req->dev(), p.bytes, ncclUint8, p.peer, comm_, stream_), "ncclSend");
      else
        check(ncclRecv(p.req->dev(), p.bytes, ncclUint8, p.peer, comm_, stream_), "ncclRecv");
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
    for (const P2p& p : pending_) {
      check(cudaEventRecord(p.req->ev_, stream_), "cudaEventRecord");
      p.req->recorded();
    }
    pending_.clear();
  }

 private:
  struct P2p {
    bool send;
    NcclRequest* req;
    size_t bytes;
    int peer;
  };
  std::unique_ptr<NcclRequest> start(size_t devBytes) {
    check(cudaStreamWaitEvent(stream_, cs_->done, 0), "cudaStreamWaitEvent");
    return std::make_unique<NcclRequest>(*this, devBytes);
  }
  std::unique_ptr<NcclRequest> stageIn(const void* host, size_t bytes, size_t devBytes) {
    flush();  // keep the issue order: earlier point-to-point calls first
    auto r = start(devBytes);
    if (bytes) check(cudaMemcpyAsync(r->dev(), host, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
    return r;
  }
  RequestPtr finish(std::unique_ptr<NcclRequest> r, void* host, size_t offset, size_t bytes) {
    if (host) r->copyBackTo(host, offset, bytes);
    check(cudaEventRecord(r->ev_, stream_), "cudaEventRecord");
    r->recorded();
    return r;
  }

  ncclComm_t comm_;
  std::shared_ptr<ComputeStream> cs_;
  cudaStream_t stream_ = nullptr;
  int rank_ = 0, size_ = 1;
  std::vector<P2p> pending_;
};

NcclRequest::NcclRequest(NcclCommunicator& owner, size_t bytes) : owner_(owner) {
  check(cudaEventCreateWithFlags(&ev_, cudaEventDisableTiming), "cudaEventCreate");
  if (bytes) check(cudaMallocAsync(reinterpret_cast<void**>(&dev_), bytes, owner_.stream()), "cudaMallocAsync");
}
NcclRequest::~NcclRequest() {
  if (!done_) waitFor(*this);  // never leave an operation dangling
  cudaEventDestroy(ev_);
}
bool NcclRequest::test() {
  if (done_) return true;
  if (!recorded_) owner_.flush();
  const cudaError_t e = cudaEventQuery(ev_);
  if (e == cudaErrorNotReady) return false;
  check(e, "cudaEventQuery");
  if (host_ && hostBytes_)
    check(cudaMemcpy(host_, dev_ + hostOffset_, hostBytes_, cudaMemcpyDeviceToHost), "cudaMemcpy");
  if (dev_) check(cudaFreeAsync(dev_, owner_.stream()), "cudaFreeAsync");
  done_ = true;
  completed();
  return true;
}

int localRank() {
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int r = 0;
  MPI_Comm_rank(node, &r);
  MPI_Comm_free(&node);
  return r;
}

}  // namespace

bool cudaBackendAvailable(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count <= 0) {
    if (why)
      *why = std::string("no CUDA device (cudaGetDeviceCount: ") +
             (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") + "); use --backend cpu";
    return false;
  }
  return true;
}

std::unique_ptr<Compute> makeCudaCompute() {
  return std::make_unique<CudaCompute>(std::make_shared<ComputeStream>());
}

std::unique_ptr<Backend> makeCudaBackend(std::string* why) {
  // Every rank must have a device before NCCL starts, or the others would wait in its init.
  int ok = cudaBackendAvailable(why) ? 1 : 0, all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all) {
    if (ok && why) *why = "no CUDA device on some rank; use --backend cpu";
    return nullptr;
  }
  int count = 0, rank = 0, world = 1;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  check(cudaSetDevice(localRank() % count), "cudaSetDevice");
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  ncclUniqueId id{};
  if (rank == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm = nullptr;
  check(ncclCommInitRank(&comm, world, id, rank), "ncclCommInitRank");
  auto cs = std::make_shared<ComputeStream>();
  auto b = std::make_unique<Backend>();
  b->compute = std::make_unique<CudaCompute>(cs);
  b->world = std::make_unique<NcclCommunicator>(comm, cs);
  b->name = "cuda";
  return b;
}

}  // namespace trainscope::train
