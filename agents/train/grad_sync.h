// Data-parallel gradient synchronisation like DDP/Bagua: gradients are grouped into buckets in
// reverse layer order (contiguous slices of the model's flat gradient buffer, so flattening is
// free); a bucket's reduction starts as soon as its last layer's weight gradient is ready, and
// progress() -- called between layer computations -- drives all buckets in flight, so their
// communication overlaps the rest of the backward pass. finish() waits for the rest (the caller
// traces that wait outside the backward phase).
//
// Traced through the agent: ts_bucket_ready, ts_bucket_comm_begin2 (the bucket's payload, 4 bytes
// per gradient value, and the algorithm), ts_bucket_comm_end2 when the reduction is seen complete
// with the bytes the transport counted for it (sent, received; none for MPI's own reductions).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "collectives.h"
#include "model.h"

namespace trainscope::train {

struct DpConfig {
  int64_t bucketBytes = 64 * 1024;
  Algorithm algorithm = Algorithm::Allreduce;
  Codec codec;
  // topk_ratio only matters under topk-ef: another codec with another ratio runs the same.
  bool operator==(const DpConfig& o) const {
    return bucketBytes == o.bucketBytes && algorithm == o.algorithm && codec.kind == o.codec.kind &&
           (codec.kind != Compression::TopkEf || codec.topkRatio == o.codec.topkRatio);
  }
};

struct BucketSpan {
  size_t offset = 0, count = 0;  // in the flat gradient buffer
  int lowestLayer = 0;           // the bucket is ready after this layer's weight gradient
};

// Buckets of at least bucketBytes (the last one may be smaller), whole layers each, last layer
// first. Layers without parameters join the bucket being filled.
std::vector<BucketSpan> planBuckets(const Model& m, int64_t bucketBytes);

class GradSync {
 public:
  GradSync(Communicator& world, int ranksPerNode, uint64_t seed);
  // At a step boundary. Re-buckets when bucket_bytes changed; error-feedback state is kept per
  // bucket across steps and reset (zeroed, resized) whenever the buckets, the algorithm, the
  // codec or -- under topk-ef only -- the top-k ratio change.
  // Returns true when anything changed.
  bool configure(const Model& m, const DpConfig& c);
  // The model was rebuilt (a pipeline repartition): the next configure plans buckets afresh.
  void modelChanged() { configured_ = false; }
  void beginStep(Model& m, int64_t step);
  void layerReady(int layer);  // after the layer's W, in descending layer order
  void progress();
  void finish();  // blocks until every bucket is reduced
  // What-if calibration (docs/TUNING.md): with nothing in flight, reduce a scratch buffer with
  // each centralized algorithm (allreduce, ring, recursive doubling; no codec) at 1 KiB and
  // 64 KiB, seven times each, every rank alike; each traced as a Collective "calibrate" with
  // its payload and algorithm and no Bucket attribute (not a gradient bucket of the step); the
  // codecs as they run and alone; and the rank's own work per reduction ("calibrate work"). The
  // scratch holds `grads` tiled (the job's last step's gradients) where any is non-zero, else 1.0;
  // the work pass polls twice after each `paceUs` of busy work (a step: twice after each GEMM).
  void calibrate(std::span<const float> grads = {}, double paceUs = 20);
  const std::vector<BucketSpan>& buckets() const { return buckets_; }
  const std::vector<ErrorFeedback>& errorFeedback() const { return ef_; }
  // This step's buckets, as the transport counted them (BucketOp::bytesSent/bytesReceived;
  // opaque MPI reductions count the buffer handed over): sent, received; payload = 4 bytes per
  // gradient value.
  uint64_t wireBytesThisStep() const { return wireBytes_; }
  uint64_t receivedBytesThisStep() const { return recvBytes_; }
  uint64_t payloadBytesThisStep() const { return payloadBytes_; }
  bool countedThisStep() const { return !opaque_; }  // no MPI reduction among the buckets
  // Since the start: counted bytes sent/received by the buckets' operations, and the buffers
  // handed to MPI's own reductions (opaque: their messages are not visible).
  struct Totals {
    uint64_t sent = 0, received = 0, handed = 0;
  };
  const Totals& totals() const { return totals_; }
  const DpConfig& config() const { return cfg_; }

 private:
  void start(size_t b);

  CommSet comms_;
  uint64_t seed_;
  DpConfig cfg_;
  bool configured_ = false;
  std::vector<BucketSpan> buckets_;
  std::vector<ErrorFeedback> ef_;
  std::vector<std::unique_ptr<BucketOp>> ops_;  // per bucket, this step
  std::vector<bool> ended_;
  size_t nextBucket_ = 0;
  float* grads_ = nullptr;
  float* params_ = nullptr;
  int64_t step_ = 0;
  uint64_t wireBytes_ = 0, recvBytes_ = 0, payloadBytes_ = 0;
  bool opaque_ = false;
  Totals totals_;
  uint32_t algoName_ = 0;
};

}  // namespace trainscope::train
