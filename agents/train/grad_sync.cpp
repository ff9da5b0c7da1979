#include "grad_sync.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "tensor.h"
#include "trainscope/agent.h"

namespace trainscope::train {

std::vector<BucketSpan> planBuckets(const Model& m, int64_t bucketBytes) {
  std::vector<BucketSpan> out;
  BucketSpan cur;
  bool open = false;
  for (int l = m.layerCount() - 1; l >= 0; --l) {
    if (!open) {
      cur = BucketSpan{m.offsetOf(l), 0, l};
      open = true;
    }
    cur.count += m.countOf(l);
    cur.lowestLayer = l;
    if (static_cast<int64_t>(4 * cur.count) >= bucketBytes) {
      out.push_back(cur);
      open = false;
    }
  }
  if (open) out.push_back(cur);
  return out;
}

GradSync::GradSync(Communicator& world, int ranksPerNode, uint64_t seed)
    : comms_(CommSet::make(world, ranksPerNode)), seed_(seed) {}

bool GradSync::configure(const Model& m, const DpConfig& c) {
  if (configured_ && c == cfg_) return false;
  const bool rebucket = !configured_ || c.bucketBytes != cfg_.bucketBytes;
  const bool newCodec = !configured_ || c.codec.kind != cfg_.codec.kind || c.algorithm != cfg_.algorithm ||
                        (c.codec.kind == Compression::TopkEf && c.codec.topkRatio != cfg_.codec.topkRatio);
  cfg_ = c;
  configured_ = true;
  if (rebucket) buckets_ = planBuckets(m, c.bucketBytes);
  if (rebucket || newCodec) {  // old residuals belong to other buckets or another codec
    ef_.assign(buckets_.size(), {});
    const int P = comms_.world->size(), r = comms_.world->rank();
    for (size_t b = 0; b < buckets_.size(); ++b) {
      ef_[b].worker.assign(buckets_[b].count, 0.0f);
      ef_[b].server.assign(serverChunkSize(buckets_[b].count, r, P), 0.0f);
      if (c.algorithm == Algorithm::Decentralized)  // copies start at zero on every rank alike
        for (auto* v : {&ef_[b].self, &ef_[b].left, &ef_[b].right}) v->assign(buckets_[b].count, 0.0f);
    }
  }
  algoName_ = ts_name(opName(c.algorithm, c.codec.kind).c_str());
  return true;
}

void GradSync::beginStep(Model& m, int64_t step) {
  grads_ = m.grads().data();
  params_ = m.params().data();
  step_ = step;
  ops_.clear();
  ops_.resize(buckets_.size());
  ended_.assign(buckets_.size(), false);
  nextBucket_ = 0;
  wireBytes_ = recvBytes_ = payloadBytes_ = 0;
  opaque_ = false;
}

void GradSync::start(size_t b) {
  const BucketSpan& s = buckets_[b];
  const auto bucket = static_cast<int32_t>(b);
  ts_bucket_ready(bucket, 4 * s.count);
  OpParams p;
  p.algorithm = cfg_.algorithm;
  p.codec = cfg_.codec;
  p.data = grads_ + s.offset;
  p.params = params_ + s.offset;
  p.n = s.count;
  p.bucket = bucket;
  p.seed = hashOf(seed_, static_cast<uint64_t>(step_), b, static_cast<uint64_t>(comms_.world->rank()));
  p.sharedSeed = hashOf(seed_ ^ 0x5eed, static_cast<uint64_t>(step_), b);
  p.ef = &ef_[b];
  ops_[b] = makeBucketOp(comms_, p);
  payloadBytes_ += 4 * s.count;
  ts_bucket_comm_begin2(bucket, 4 * s.count, algoName_);
}

void GradSync::layerReady(int layer) {
  while (nextBucket_ < buckets_.size() && buckets_[nextBucket_].lowestLayer >= layer) start(nextBucket_++);
  progress();
}

void GradSync::progress() {
  int limit = INT_MAX;
  for (size_t b = 0; b < nextBucket_; ++b) {
    if (!ended_[b] && ops_[b]->progress(limit)) {
      ended_[b] = true;
      const BucketOp& op = *ops_[b];
      wireBytes_ += op.bytesSent();
      recvBytes_ += op.bytesReceived();
      opaque_ |= op.opaque();
      (op.opaque() ? totals_.handed : totals_.sent) += op.bytesSent();
      if (!op.opaque()) totals_.received += op.bytesReceived();
      ts_bucket_comm_end2(static_cast<int32_t>(b), op.bytesSent(), op.bytesReceived(), op.opaque() ? 0 : 1);
    }
    limit = ops_[b]->collectiveStarted();
  }
}

void GradSync::calibrate(std::span<const float> grads, double paceUs) {
  if (comms_.world->size() < 2) return;
  const uint32_t name = ts_name("calibrate");
  std::vector<float> scratch(262144, 1.0f);  // up to 1 MiB: where the time per byte shows
  // Filled with the job's own gradients (the last step's, tiled) where it has any: a codec's work
  // depends on the values (top-k's selection on constant data took 2.0-3.0 ns a value at 1 KiB-1
  // MiB, on random data 2.7-8.0). Constant before Nov 25, and still at the first step.
  if (std::any_of(grads.begin(), grads.end(), [](float x) { return x != 0.0f; }))
    for (size_t i = 0; i < scratch.size(); ++i) scratch[i] = grads[i % grads.size()];
  ErrorFeedback ef;
  // One reduction of n floats as it runs with the codec, traced as a 'calibrate' collective,
  // polled with a fresh backoff as finish() polls a step's reductions. (Until Nov 24 15:35 UTC
  // one backoff served the whole calibration, so from 200 us after its first reduction every
  // poll slept 20 us: a reduction done in one poll (MPI's allreduce at 1 KiB, 1 us) and one that
  // needs several (ring, 75 us) came out 75x apart, and what-if predicted allreduce 23-25 % fast.)
  auto scratchOp = [&](Algorithm a, Compression c, size_t n, int rep) {
    OpParams p;
    p.algorithm = a;
    p.codec.kind = c;
    p.codec.topkRatio = cfg_.codec.topkRatio;
    p.data = scratch.data();
    p.params = scratch.data();
    p.n = n;
    p.bucket = rep;
    p.ef = &ef;
    return p;
  };
  auto reduceOnce = [&](Algorithm a, Compression c, uint32_t algoName, size_t n, int rep) {
    ts_comm_begin(TS_COMM_COLLECTIVE, name, 4 * n, -1, algoName);
    auto op = makeBucketOp(comms_, scratchOp(a, c, n, rep));
    Backoff backoff;
    while (!op->progress(INT_MAX)) backoff.pause();
    ts_comm_end();
  };
  for (Algorithm a : {Algorithm::Allreduce, Algorithm::Ring, Algorithm::RecursiveDoubling}) {
    const uint32_t algoName = ts_name(opName(a, Compression::None).c_str());
    for (size_t n : {size_t{256}, size_t{16384}, size_t{262144}})
      for (int rep = 0; rep < 7; ++rep) reduceOnce(a, Compression::None, algoName, n, rep);
  }
  // The rank's own work per reduction as a step runs it (what-if moves the backward's cost per
  // bucket by its difference, docs/TUNING.md): started, then polled once after each stretch of
  // kPaceUs of busy work, as layerReady() polls between layers; the time inside the start and
  // the polls, summed, is the counter "calibrate work" (ms), recorded right after the reduction's
  // Collective "calibrate work" (Algorithm, Bytes; its span includes the busy work). Latency is
  // not this: a reduction that needs several polls waits for its peer between them, which a
  // step hides behind the next layers (Nov 24: MPI's allreduce was ~2 us per small bucket slower
  // than ring alone and ~4 us faster in the step).
  const uint32_t workName = ts_name("calibrate work");
  // The pace: a step polls after each of a layer's two GEMMs (B, then W) twice (the GEMM's own
  // progress, then the explicit one after B and layerReady() after W), so half the layer's
  // backward as the trainer timed it, twice per stretch (until Nov 25 once per fixed 20 us,
  // where the 48-layer job's layers took ~10: MPI's allreduce at 1-16 KiB buckets came out 3-9 %
  // slow against ring, BENCHMARKS.md "Two visits per cell").
  const auto kPaceUs = static_cast<int64_t>(std::llround(std::clamp(paceUs, 1.0, 1000.0)));
  auto spin = [](int64_t us) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
    while (std::chrono::steady_clock::now() < until) {
    }
  };
  auto workOnce = [&](Algorithm a, Compression c, uint32_t algoName, size_t n, int rep) {
    ts_comm_begin(TS_COMM_COLLECTIVE, workName, 4 * n, -1, algoName);
    auto t0 = std::chrono::steady_clock::now();
    auto op = makeBucketOp(comms_, scratchOp(a, c, n, rep));
    bool done = op->progress(INT_MAX);
    auto work = std::chrono::steady_clock::now() - t0;
    for (int polls = 0; !done && polls < 100000; ++polls) {
      spin(kPaceUs);
      t0 = std::chrono::steady_clock::now();
      done = op->progress(INT_MAX) || op->progress(INT_MAX);  // a step polls twice after each GEMM
      work += std::chrono::steady_clock::now() - t0;
    }
    if (!done) {  // not seen: a reduction stuck for 2 s; finish it as the step would
      Backoff backoff;
      while (!op->progress(INT_MAX)) backoff.pause();
    }
    ts_comm_end();
    ts_counter(workName, std::chrono::duration<double, std::milli>(work).count());
  };
  for (Algorithm a : {Algorithm::Allreduce, Algorithm::Ring, Algorithm::RecursiveDoubling}) {
    const uint32_t algoName = ts_name(opName(a, Compression::None).c_str());
    for (size_t n : {size_t{256}, size_t{16384}, size_t{262144}})
      for (int rep = 0; rep < 7; ++rep) workOnce(a, Compression::None, algoName, n, rep);
  }
  // The compressed reductions as they run (encode, exchange, decode: what-if's codec cost comes
  // from these), at 1 and 64 KiB, 3 times each, then 3 times paced as the work pass above; top-k
  // at the ratio in force (bench/calibration_cost.py).
  const int P = comms_.world->size(), r = comms_.world->rank();
  for (Compression c : {Compression::Fp16, Compression::Int8, Compression::OneBitEf, Compression::TopkEf})
    for (Algorithm a : {Algorithm::Allreduce, Algorithm::Ring, Algorithm::RecursiveDoubling}) {
      const uint32_t algoName = ts_name(opName(a, c).c_str());
      for (size_t n : {size_t{256}, size_t{16384}}) {
        ef.worker.assign(n, 0.0f);
        ef.server.assign(serverChunkSize(n, r, P), 0.0f);
        for (int rep = 0; rep < 3; ++rep) reduceOnce(a, c, algoName, n, rep);
        // And the rank's own work on it, paced as above (since Nov 25: the latency difference
        // put fp16 13-17 % slow on the 48-layer job, its wall time counting the peer's encodes).
        for (int rep = 0; rep < 3; ++rep) workOnce(a, c, algoName, n, rep);
      }
    }
  // Each codec's CPU work alone, at 1, 4, 16 and 64 KiB 3 times and at 1 MiB once: encode (with
  // error feedback) and decode-add n floats, what a bucket of n floats costs a rank's own thread
  // on 2 ranks with any algorithm (ring: half encoded and decoded per phase; recursive doubling:
  // one round), traced as 'calibrate codec'. What-if reads from it how far a codec's work bends
  // away from the line through the two sizes its reductions are calibrated at (top-k's sort
  // grows faster than n).
  const uint32_t codecName = ts_name("calibrate codec");
  std::vector<float> v, err, acc;
  std::vector<uint8_t> payload;
  for (Compression c : {Compression::Fp16, Compression::Int8, Compression::OneBitEf, Compression::TopkEf}) {
    Codec codec;
    codec.kind = c;
    codec.topkRatio = cfg_.codec.topkRatio;
    const uint32_t algoName = ts_name(kCompressionNames[static_cast<int>(c)]);
    for (size_t n : {size_t{256}, size_t{1024}, size_t{4096}, size_t{16384}, scratch.size()}) {
      payload.assign(codec.payloadBytes(n), 0);
      for (int rep = 0; rep < (n > 16384 ? 1 : 3); ++rep) {
        v.assign(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(n));
        err.assign(n, 0.0f);
        acc.assign(n, 0.0f);
        ts_comm_begin(TS_COMM_COLLECTIVE, codecName, 4 * n, -1, algoName);
        codec.encodeWithFeedback(v.data(), err.data(), n, static_cast<uint64_t>(rep), payload.data());
        codec.decodeAdd(payload.data(), n, acc.data());
        ts_comm_end();
      }
    }
  }
}

void GradSync::finish() {
  while (nextBucket_ < buckets_.size()) start(nextBucket_++);  // layers never reported: start anyway
  Backoff backoff;
  for (;;) {
    progress();
    bool all = true;
    for (size_t b = 0; b < buckets_.size() && all; ++b) all = ended_[b];
    if (all) return;
    backoff.pause();  // ranks may share cores: let a computing one run
  }
}

}  // namespace trainscope::train
