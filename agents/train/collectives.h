// Gradient reduction algorithms for one flattened bucket, as non-blocking state machines: an op
// is a list of steps; each step posts non-blocking sends/receives/collectives and, once they are
// all complete, finishes (a local reduction). progress() never blocks, so the trainer calls it
// between layer computations and the reduction really overlaps the backward pass.
// When an op is done, data holds the average of the ranks' gradient buckets -- except for
// `decentralized` (D-PSGD, as Bagua does it): there the gradients stay local and the op
// averages the bucket's *parameters* with the ring neighbours (rank-1, rank+1) instead.
#pragma once

#include <climits>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend.h"
#include "compress.h"

namespace trainscope::train {

enum class Algorithm { Allreduce = 0, Ring, RecursiveDoubling, Hierarchical, Decentralized };
inline constexpr const char* kAlgorithmNames[] = {"allreduce", "ring", "recursive-doubling", "hierarchical",
                                                  "decentralized"};
std::optional<Algorithm> parseAlgorithm(const std::string& s);

// Communicators the ops use. Non-blocking collectives must be started in the same order on
// every rank of a communicator; buckets start in the same order everywhere, but a bucket's
// second stage may come before or after the next bucket's first stage depending on timing.
// So every collective stage index gets its own communicator, and op k+1 never starts stage s
// before op k has (GradSync enforces this with collectiveLimit).
struct CommSet {
  Communicator* world = nullptr;                                 // point-to-point (tags keep buckets apart)
  std::vector<std::unique_ptr<Communicator>> stage;              // stage[s]: collective stage s
  std::unique_ptr<Communicator> nodeReduce, nodeBcast, leaders;  // hierarchical (leaders: null
                                                                 // on non-leaders)
  int ranksPerNode = 1;  // hierarchical: ranks per node (0 in make(): the machine's, from MPI)
  int tagUb = 32767;     // the world's MPI_TAG_UB: every tag stays within [0, tagUb]
  // ranksPerNode > 0 simulates nodes of that many consecutive ranks (an override for one
  // machine); 0 takes the nodes from the machine (Communicator::splitShared, MPI_COMM_TYPE_SHARED).
  static CommSet make(Communicator& world, int ranksPerNode);
  // The tag of a bucket's step-th message: bucket-major, p2p steps per bucket at most
  // 2 * size + 2, wrapped into [0, tagUb] (buckets that far apart are never in flight together).
  int tag(int bucket, int step) const;
};

// Compression state of one bucket, kept across steps and reset when buckets, codec or
// algorithm change (every rank does that at the same step, so the copies stay consistent).
struct ErrorFeedback {
  std::vector<float> worker;  // error feedback over the whole bucket (Bagua's worker side)
  std::vector<float> server;  // error feedback over this rank's merged chunk (server side)
  // decentralized: the models as the neighbours know them (CHOCO-SGD style): each rank sends
  // encode(x - self), everybody adds the decoded difference to its copy; without compression
  // the copies are exact and the step is plain neighbour averaging.
  std::vector<float> self, left, right;
};

class BucketOp {
 public:
  struct Step {
    bool collective = false;  // counts as a collective stage (ordering across buckets)
    std::function<void(std::vector<RequestPtr>&)> post;
    std::function<void()> finish;
  };
  // wireBytes: what the algorithm is expected to send (its formula; the tests compare the
  // counted bytes with it).
  explicit BucketOp(std::vector<Step> steps, uint64_t wireBytes)
      : steps_(std::move(steps)), wire_(wireBytes) {}
  // Advances as far as it can without waiting. A collective stage with index >= limit is not
  // started yet (the previous bucket has not started it). Returns true when done.
  bool progress(int limit);
  bool done() const { return next_ >= steps_.size() && pending_.empty(); }
  // Collective stages started so far (INT_MAX when done): the limit for the next bucket.
  int collectiveStarted() const { return done() ? INT_MAX : collStarted_; }
  uint64_t wireBytes() const { return wire_; }
  // Counted as the op's requests completed (Request::bytesSent/bytesReceived): point-to-point
  // and all-to-all/allgather bytes exactly; a reduction or broadcast handed to the library
  // (allreduce, hierarchical) counts the buffer handed over and sets opaque().
  uint64_t bytesSent() const { return sent_; }
  uint64_t bytesReceived() const { return received_; }
  bool opaque() const { return opaque_; }

 private:
  std::vector<Step> steps_;
  std::vector<RequestPtr> pending_;
  size_t next_ = 0;  // next step to post
  bool posted_ = false;
  int collStarted_ = 0;
  uint64_t wire_;
  uint64_t sent_ = 0, received_ = 0;
  bool opaque_ = false;
};

struct OpParams {
  Algorithm algorithm = Algorithm::Allreduce;
  Codec codec;
  float* data = nullptr;    // the bucket's gradients
  float* params = nullptr;  // the bucket's parameters (decentralized)
  size_t n = 0;
  int bucket = 0;
  uint64_t seed = 0;            // stochastic rounding (differs per rank, step, bucket)
  uint64_t sharedSeed = 0;      // the same on every rank (step, bucket): ranks that encode the
                                // same values must round them alike (compressed recursive doubling)
  ErrorFeedback* ef = nullptr;  // sized by GradSync for the codec
};

std::unique_ptr<BucketOp> makeBucketOp(CommSet& comms, const OpParams& p);
// The name traced as the bucket collective's Algorithm ("ring", "ring+int8",
// "scatter-reduce+int8", ...): what runs.
std::string opName(Algorithm a, Compression c);
// Why algorithm a cannot run with codec c (empty: it can). Hierarchical reduces inside MPI
// (MPI_Ireduce / MPI_Iallreduce / MPI_Ibcast), which sum floats and cannot carry a codec's payload.
std::string unsupportedCombination(Algorithm a, Compression c);
// Sizes of the error-feedback vectors for a bucket of n values on this rank.
size_t serverChunkSize(size_t n, int rank, int size);

}  // namespace trainscope::train
