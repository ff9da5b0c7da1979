// Data-parallel gradient synchronisation like DDP/Bagua: gradients are grouped into buckets in
// reverse layer order (contiguous slices of the model's flat gradient buffer, so flattening is
// free); a bucket's reduction starts as soon as its last layer's weight gradient is ready, and
// progress() -- called between layer computations -- drives all buckets in flight, so their
// communication overlaps the rest of the backward pass. finish() waits for the rest (the caller
// traces that wait outside the backward phase).
//
// Traced through the agent: ts_bucket_ready, ts_bucket_comm_begin2 (bytes this rank puts on
// the wire for the bucket, algorithm), ts_bucket_comm_end when the reduction is seen complete.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "collectives.h"
#include "model.h"

namespace trainscope::train {

struct DpConfig {
  int64_t bucketBytes = 64 * 1024;
  Algorithm algorithm = Algorithm::Allreduce;
  Codec codec;
  bool operator==(const DpConfig& o) const {
    return bucketBytes == o.bucketBytes && algorithm == o.algorithm && codec.kind == o.codec.kind &&
           codec.topkRatio == o.codec.topkRatio;
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
  // bucket across steps and reset (zeroed, resized) whenever the buckets or the codec change.
  // Returns true when anything changed.
  bool configure(const Model& m, const DpConfig& c);
  // The model was rebuilt (a pipeline repartition): the next configure plans buckets afresh.
  void modelChanged() { configured_ = false; }
  void beginStep(Model& m, int64_t step);
  void layerReady(int layer);  // after the layer's W, in descending layer order
  void progress();
  void finish();  // blocks until every bucket is reduced
  const std::vector<BucketSpan>& buckets() const { return buckets_; }
  const std::vector<ErrorFeedback>& errorFeedback() const { return ef_; }
  uint64_t wireBytesThisStep() const { return wireBytes_; }
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
  uint64_t wireBytes_ = 0;
  uint32_t algoName_ = 0;
};

}  // namespace trainscope::train
