#include "collectives.h"

#include <algorithm>
#include <cstring>

#include "tensor.h"

namespace trainscope::train {

std::optional<Algorithm> parseAlgorithm(const std::string& s) {
  for (int i = 0; i < 5; ++i)
    if (s == kAlgorithmNames[i]) return static_cast<Algorithm>(i);
  return std::nullopt;
}

std::string opName(Algorithm a, Compression c) {
  if (c == Compression::None) return kAlgorithmNames[static_cast<int>(a)];
  // allreduce with a codec: MPI cannot reduce encoded payloads, so the centralized compressed
  // allreduce is Bagua's scatter-reduce (alltoall + allgather of payloads).
  const std::string base = a == Algorithm::Allreduce ? "scatter-reduce" : kAlgorithmNames[static_cast<int>(a)];
  return base + "+" + kCompressionNames[static_cast<int>(c)];
}

std::string unsupportedCombination(Algorithm a, Compression c) {
  if (c == Compression::None || a != Algorithm::Hierarchical) return {};
  return std::string("dp.algorithm=hierarchical cannot run with dp.compression=") +
         kCompressionNames[static_cast<int>(c)] +
         ": it reduces inside MPI (MPI_Ireduce, MPI_Iallreduce, MPI_Ibcast), which sums floats and cannot "
         "carry an encoded payload; use allreduce (compressed scatter-reduce), ring, recursive-doubling or "
         "decentralized with a codec, or set dp.compression=none first";
}

CommSet CommSet::make(Communicator& world, int ranksPerNode) {
  CommSet s;
  s.world = &world;
  // The transport's MPI_TAG_UB (MPI guarantees 32767), at least one bucket's tags.
  s.tagUb = std::max(2 * world.size() + 1, world.tagUpperBound());
  for (int i = 0; i < 3; ++i) s.stage.push_back(world.dup());
  if (ranksPerNode > 0) {  // simulated nodes: consecutive ranks
    s.ranksPerNode = std::clamp(ranksPerNode, 1, world.size());
    s.nodeReduce = world.split(world.rank() / s.ranksPerNode, world.rank());
  } else {  // the machine's nodes
    s.nodeReduce = world.splitShared();
    s.ranksPerNode = s.nodeReduce->size();
  }
  s.nodeBcast = s.nodeReduce->dup();
  s.leaders = world.split(s.nodeReduce->rank() == 0 ? 0 : -1, world.rank());
  return s;
}

int CommSet::tag(int bucket, int step) const {
  const int64_t span = 2 * int64_t{world->size()} + 2;
  return static_cast<int>((int64_t{bucket} * span + step) % (int64_t{tagUb} + 1));
}

bool BucketOp::progress(int limit) {
  for (;;) {
    if (posted_) {
      for (auto& r : pending_)
        if (!r->test()) return false;
      for (auto& r : pending_) {
        sent_ += r->bytesSent();
        received_ += r->bytesReceived();
        opaque_ |= r->opaque();
      }
      pending_.clear();
      posted_ = false;
      if (steps_[next_].finish) steps_[next_].finish();
      ++next_;
    }
    if (next_ >= steps_.size()) return true;
    if (steps_[next_].collective && collStarted_ >= limit) return false;
    if (steps_[next_].collective) ++collStarted_;
    steps_[next_].post(pending_);
    posted_ = true;
  }
}

size_t serverChunkSize(size_t n, int rank, int size) {
  const auto p = static_cast<size_t>(size), r = static_cast<size_t>(rank);
  return n * (r + 1) / p - n * r / p;
}

namespace {

using Step = BucketOp::Step;

size_t chunkBegin(size_t n, int j, int p) {
  return n * static_cast<size_t>(j) / static_cast<size_t>(p);
}

void scale(float* d, size_t n, float f) {
  for (size_t i = 0; i < n; ++i) d[i] *= f;
}


// Reduce-scatter then allgather around the ring, each a sequence of p-1 neighbour exchanges.
std::unique_ptr<BucketOp> ring(CommSet& cs, const OpParams& p) {
  Communicator& c = *cs.world;
  const int P = c.size(), r = c.rank(), right = (r + 1) % P, left = (r - 1 + P) % P;
  auto tmp = std::make_shared<std::vector<float>>(p.n / static_cast<size_t>(P) + 1);
  std::vector<Step> steps;
  uint64_t wire = 0;
  auto range = [n = p.n, P](int j) {
    j = ((j % P) + P) % P;
    return std::pair{chunkBegin(n, j, P), chunkBegin(n, j + 1, P)};
  };
  for (int s = 0; s < P - 1; ++s) {  // reduce-scatter
    const auto [sb, se] = range(r - s);
    const auto [rb, re] = range(r - s - 1);
    wire += 4 * (se - sb);
    steps.push_back({false,
                     [=, &c, &cs](std::vector<RequestPtr>& q) {
                       q.push_back(c.isend(p.data + sb, 4 * (se - sb), right, cs.tag(p.bucket, s)));
                       q.push_back(c.irecv(tmp->data(), 4 * (re - rb), left, cs.tag(p.bucket, s)));
                     },
                     [=] {
                       for (size_t i = rb; i < re; ++i) p.data[i] += (*tmp)[i - rb];
                     }});
  }
  for (int s = 0; s < P - 1; ++s) {  // allgather: rank r starts with chunk r+1 complete
    const auto [sb, se] = range(r + 1 - s);
    const auto [rb, re] = range(r - s);
    wire += 4 * (se - sb);
    steps.push_back({false,
                     [=, &c, &cs](std::vector<RequestPtr>& q) {
                       q.push_back(c.isend(p.data + sb, 4 * (se - sb), right, cs.tag(p.bucket, P + s)));
                       q.push_back(c.irecv(p.data + rb, 4 * (re - rb), left, cs.tag(p.bucket, P + s)));
                     },
                     nullptr});
  }
  steps.push_back(
      {false, [](std::vector<RequestPtr>&) {}, [=] { scale(p.data, p.n, 1.0f / static_cast<float>(P)); }});
  return std::make_unique<BucketOp>(std::move(steps), wire);
}

// Recursive doubling; with a non-power-of-two size the first 2*rem ranks pair up first (the
// even one hands its vector to the odd one and gets the result back at the end).
std::unique_ptr<BucketOp> recursiveDoubling(CommSet& cs, const OpParams& p) {
  Communicator& c = *cs.world;
  const int last = 2 * c.size() + 1;  // the fold's hand-back: the bucket's last tag
  const int P = c.size(), r = c.rank();
  int p2 = 1;
  while (p2 * 2 <= P) p2 *= 2;
  const int rem = P - p2;
  const size_t bytes = 4 * p.n;
  auto tmp = std::make_shared<std::vector<float>>(p.n);
  auto add = [=] {
    for (size_t i = 0; i < p.n; ++i) p.data[i] += (*tmp)[i];
  };
  std::vector<Step> steps;
  uint64_t wire = 0;
  int vrank = r - rem;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      wire += bytes;
      steps.push_back({false,
                       [=, &c, &cs](std::vector<RequestPtr>& q) {
                         q.push_back(c.isend(p.data, bytes, r + 1, cs.tag(p.bucket, 0)));
                       },
                       nullptr});
      steps.push_back({false,
                       [=, &c, &cs](std::vector<RequestPtr>& q) {
                         q.push_back(c.irecv(p.data, bytes, r + 1, cs.tag(p.bucket, last)));
                       },
                       nullptr});
      vrank = -1;
    } else {
      steps.push_back({false,
                       [=, &c, &cs](std::vector<RequestPtr>& q) {
                         q.push_back(c.irecv(tmp->data(), bytes, r - 1, cs.tag(p.bucket, 0)));
                       },
                       add});
      vrank = r / 2;
    }
  }
  if (vrank >= 0) {
    for (int mask = 1, round = 1; mask < p2; mask <<= 1, ++round) {
      const int pv = vrank ^ mask;
      const int peer = pv < rem ? pv * 2 + 1 : pv + rem;
      wire += bytes;
      steps.push_back({false,
                       [=, &c, &cs](std::vector<RequestPtr>& q) {
                         q.push_back(c.isend(p.data, bytes, peer, cs.tag(p.bucket, round)));
                         q.push_back(c.irecv(tmp->data(), bytes, peer, cs.tag(p.bucket, round)));
                       },
                       add});
    }
    if (r < 2 * rem) {
      wire += bytes;
      steps.push_back({false,
                       [=, &c, &cs](std::vector<RequestPtr>& q) {
                         q.push_back(c.isend(p.data, bytes, r - 1, cs.tag(p.bucket, last)));
                       },
                       nullptr});
    }
  }
  steps.push_back(
      {false, [](std::vector<RequestPtr>&) {}, [=] { scale(p.data, p.n, 1.0f / static_cast<float>(P)); }});
  return std::make_unique<BucketOp>(std::move(steps), wire);
}

// Ring with a codec. Reduce-scatter: at step s rank r encodes its partial sum of chunk r-s-1
// (worker error feedback over the bucket: every chunk but its own is encoded once per step) and
// sends it to the right; the left neighbour's payload is decoded and added to chunk r-s-2. After
// p-1 steps rank r holds chunk r summed over all ranks; it averages it and encodes it once
// (server error feedback over its chunk). Allgather: the payloads travel round the ring
// unchanged (p-1 steps), and every rank decodes the same bytes, so the replicas stay equal.
// Payload sizes follow from the chunk lengths, so sender and receiver agree without a header.
std::unique_ptr<BucketOp> ringCompressed(CommSet& cs, const OpParams& p) {
  Communicator& c = *cs.world;
  const int P = c.size(), r = c.rank(), right = (r + 1) % P, left = (r - 1 + P) % P;
  auto mod = [P](int j) { return ((j % P) + P) % P; };
  auto begin = [n = p.n, P, mod](int j) { return chunkBegin(n, mod(j), P); };
  auto len = [n = p.n, P, mod](int j) { return chunkBegin(n, mod(j) + 1, P) - chunkBegin(n, mod(j), P); };
  struct State {
    std::vector<uint8_t> out, in;
    std::vector<std::vector<uint8_t>> slot;  // allgather: chunk j's final payload
    std::vector<float> v;
  };
  auto st = std::make_shared<State>();
  st->slot.resize(static_cast<size_t>(P));
  for (int j = 0; j < P; ++j) st->slot[static_cast<size_t>(j)].resize(p.codec.payloadBytes(len(j)));
  std::vector<Step> steps;
  uint64_t wire = 0;
  for (int s = 0; s < P - 1; ++s) {
    const int js = mod(r - s - 1), jr = mod(r - s - 2);
    wire += p.codec.payloadBytes(len(js));
    steps.push_back({false,
                     [=, &c, &cs](std::vector<RequestPtr>& q) {
                       const size_t b = begin(js), l = len(js);
                       st->v.assign(p.data + b, p.data + b + l);
                       st->out.assign(p.codec.payloadBytes(l), 0);
                       st->in.assign(p.codec.payloadBytes(len(jr)), 0);
                       p.codec.encodeWithFeedback(st->v.data(), p.ef->worker.data() + b, l, hashOf(p.seed, s),
                                                  st->out.data());
                       q.push_back(c.isend(st->out.data(), st->out.size(), right, cs.tag(p.bucket, s)));
                       q.push_back(c.irecv(st->in.data(), st->in.size(), left, cs.tag(p.bucket, s)));
                     },
                     [=] { p.codec.decodeAdd(st->in.data(), len(jr), p.data + begin(jr)); }});
  }
  for (int s = 0; s < P - 1; ++s) {  // rank r starts with its own chunk's payload
    const int js = mod(r - s), jr = mod(r - s - 1);
    wire += p.codec.payloadBytes(len(js));
    steps.push_back({false,
                     [=, &c, &cs](std::vector<RequestPtr>& q) {
                       if (s == 0) {
                         const size_t b = begin(r), l = len(r);
                         st->v.assign(p.data + b, p.data + b + l);
                         scale(st->v.data(), l, 1.0f / static_cast<float>(P));
                         p.codec.encodeWithFeedback(st->v.data(), p.ef->server.data(), l, hashOf(p.seed, 0x5e),
                                                    st->slot[static_cast<size_t>(r)].data());
                       }
                       auto& out = st->slot[static_cast<size_t>(js)];
                       auto& in = st->slot[static_cast<size_t>(jr)];
                       q.push_back(c.isend(out.data(), out.size(), right, cs.tag(p.bucket, P + s)));
                       q.push_back(c.irecv(in.data(), in.size(), left, cs.tag(p.bucket, P + s)));
                     },
                     nullptr});
  }
  steps.push_back({false, [](std::vector<RequestPtr>&) {},
                   [=] {
                     std::fill(p.data, p.data + p.n, 0.0f);
                     for (int j = 0; j < P; ++j)
                       p.codec.decodeAdd(st->slot[static_cast<size_t>(j)].data(), len(j), p.data + begin(j));
                   }});
  return std::make_unique<BucketOp>(std::move(steps), wire);
}

// Recursive doubling with a codec: in every exchange both partners encode what they hold (the
// first exchange with worker error feedback), swap payloads, and both set their vector to
// decode(lower rank's) + decode(higher rank's) -- the same bytes in the same order, so partners
// hold equal values; ranks that hold equal values encode them with the same seed (sharedSeed,
// round, group), so later partners agree too. The fold for p not a power of two: the even rank
// hands its encoded vector to the odd one and gets the encoded result back; every other rank
// decodes the same encoding of the result (no message), so all end equal.
std::unique_ptr<BucketOp> recursiveDoublingCompressed(CommSet& cs, const OpParams& p) {
  Communicator& c = *cs.world;
  const int last = 2 * c.size() + 1;
  const int P = c.size(), r = c.rank();
  int p2 = 1;
  while (p2 * 2 <= P) p2 *= 2;
  const int rem = P - p2;
  const size_t pay = p.codec.payloadBytes(p.n);
  struct State {
    std::vector<uint8_t> mine, theirs;
    std::vector<float> v;
    bool feedbackUsed = false;
  };
  auto st = std::make_shared<State>();
  st->mine.assign(pay, 0);
  st->theirs.assign(pay, 0);
  // Encodes data into mine: with worker error feedback the first time (this rank's own values).
  auto encode = [=](uint64_t seed) {
    st->v.assign(p.data, p.data + p.n);
    if (!st->feedbackUsed) {
      st->feedbackUsed = true;
      p.codec.encodeWithFeedback(st->v.data(), p.ef->worker.data(), p.n, seed, st->mine.data());
    } else {
      p.codec.encode(st->v.data(), p.n, seed, st->mine.data());
    }
  };
  std::vector<Step> steps;
  uint64_t wire = 0;
  int vrank = r - rem;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      wire += pay;
      steps.push_back({false,
                       [=, &c, &cs](std::vector<RequestPtr>& q) {
                         encode(hashOf(p.seed, 0));
                         q.push_back(c.isend(st->mine.data(), pay, r + 1, cs.tag(p.bucket, 0)));
                       },
                       nullptr});
      steps.push_back({false,
                       [=, &c, &cs](std::vector<RequestPtr>& q) {
                         q.push_back(c.irecv(st->theirs.data(), pay, r + 1, cs.tag(p.bucket, last)));
                       },
                       [=] {
                         std::fill(p.data, p.data + p.n, 0.0f);
                         p.codec.decodeAdd(st->theirs.data(), p.n, p.data);
                       }});
      vrank = -1;
    } else {
      steps.push_back({false,
                       [=, &c, &cs](std::vector<RequestPtr>& q) {
                         q.push_back(c.irecv(st->theirs.data(), pay, r - 1, cs.tag(p.bucket, 0)));
                       },
                       [=] { p.codec.decodeAdd(st->theirs.data(), p.n, p.data); }});
      vrank = r / 2;
    }
  }
  if (vrank >= 0) {
    for (int mask = 1, round = 1; mask < p2; mask <<= 1, ++round) {
      const int pv = vrank ^ mask;
      const int peer = pv < rem ? pv * 2 + 1 : pv + rem;
      const bool lower = vrank < pv;
      // Ranks with the same vrank / mask hold the same values before this round.
      const uint64_t seed = mask == 1 ? hashOf(p.seed, round)
                                      : hashOf(p.sharedSeed, static_cast<uint64_t>(round),
                                               static_cast<uint64_t>(vrank / mask));
      wire += pay;
      steps.push_back({false,
                       [=, &c, &cs](std::vector<RequestPtr>& q) {
                         encode(seed);
                         q.push_back(c.isend(st->mine.data(), pay, peer, cs.tag(p.bucket, round)));
                         q.push_back(c.irecv(st->theirs.data(), pay, peer, cs.tag(p.bucket, round)));
                       },
                       [=] {
                         std::fill(p.data, p.data + p.n, 0.0f);
                         p.codec.decodeAdd((lower ? st->mine : st->theirs).data(), p.n, p.data);
                         p.codec.decodeAdd((lower ? st->theirs : st->mine).data(), p.n, p.data);
                       }});
    }
    if (rem > 0) {
      // The folded even ranks get the result encoded; so that every rank holds the same values,
      // every rank replaces its result by decode(encode(result)) with the same seed (the same
      // bytes everywhere), and the odd ranks of the fold send those bytes to their partner.
      if (r < 2 * rem) wire += pay;
      steps.push_back({false,
                       [=, &c, &cs](std::vector<RequestPtr>& q) {
                         st->v.assign(p.data, p.data + p.n);
                         p.codec.encode(st->v.data(), p.n, hashOf(p.sharedSeed, 0xf01d), st->mine.data());
                         if (r < 2 * rem) q.push_back(c.isend(st->mine.data(), pay, r - 1, cs.tag(p.bucket, last)));
                       },
                       [=] {
                         std::fill(p.data, p.data + p.n, 0.0f);
                         p.codec.decodeAdd(st->mine.data(), p.n, p.data);
                       }});
    }
  }
  steps.push_back(
      {false, [](std::vector<RequestPtr>&) {}, [=] { scale(p.data, p.n, 1.0f / static_cast<float>(P)); }});
  return std::make_unique<BucketOp>(std::move(steps), wire);
}

// Reduce inside the node to its leader, allreduce among leaders, broadcast inside the node.
std::unique_ptr<BucketOp> hierarchical(CommSet& cs, const OpParams& p) {
  Communicator& node = *cs.nodeReduce;
  Communicator& bcast = *cs.nodeBcast;
  Communicator* leaders = cs.leaders.get();
  const float inv = 1.0f / static_cast<float>(cs.world->size());
  const uint64_t bytes = 4 * p.n;
  uint64_t wire = node.rank() == 0 ? 0 : bytes;
  if (leaders && leaders->size() > 1)
    wire += 2 * bytes * static_cast<uint64_t>(leaders->size() - 1) / static_cast<uint64_t>(leaders->size());
  if (node.rank() == 0) wire += bytes * static_cast<uint64_t>(node.size() - 1);
  std::vector<Step> steps;
  steps.push_back({true,
                   [=, &node](std::vector<RequestPtr>& q) { q.push_back(node.ireduceSum(p.data, p.n, 0)); },
                   nullptr});
  steps.push_back({true,
                   [=](std::vector<RequestPtr>& q) {
                     if (leaders && leaders->size() > 1) q.push_back(leaders->iallreduceSum(p.data, p.n));  // one node: nothing to do
                   },
                   nullptr});
  steps.push_back({true,
                   [=, &bcast](std::vector<RequestPtr>& q) { q.push_back(bcast.ibcast(p.data, bytes, 0)); },
                   [=] { scale(p.data, p.n, inv); }});
  return std::make_unique<BucketOp>(std::move(steps), wire);
}

// CHOCO's consensus step: 1 (plain averaging) unless the compressor is so lossy that the copies
// lag far behind the models -- top-k keeps only a fraction of the difference each step, and a
// full step then overshoots and diverges (measured: ratio 0.1 with step 1 blows up).
float consensusStep(const Codec& c) {
  return c.kind == Compression::TopkEf ? static_cast<float>(std::min(1.0, 2.0 * c.topkRatio)) : 1.0f;
}

// Decentralized (D-PSGD): average the bucket's parameters with the ring neighbours, weights
// 1/3 each (1/2 with two ranks). Low precision: exchange encode(x - self) and keep copies of the
// neighbours' models, x += sum_j w (copy_j - self).
std::unique_ptr<BucketOp> decentralized(CommSet& cs, const OpParams& p) {
  Communicator& c = *cs.world;
  const int P = c.size(), r = c.rank();
  std::vector<int> peers;
  if (P > 1) peers.push_back((r - 1 + P) % P);
  if (P > 2) peers.push_back((r + 1) % P);
  const size_t pay = p.codec.payloadBytes(p.n);
  auto out = std::make_shared<std::vector<uint8_t>>(pay);
  auto in = std::make_shared<std::vector<uint8_t>>(pay * peers.size());
  ErrorFeedback* st = p.ef;
  std::vector<Step> steps;
  steps.push_back({false,
                   [=, &c, &cs](std::vector<RequestPtr>& q) {
                     std::vector<float> diff(p.n);
                     for (size_t i = 0; i < p.n; ++i) diff[i] = p.params[i] - st->self[i];
                     p.codec.encode(diff.data(), p.n, p.seed, out->data());
                     p.codec.decodeAdd(out->data(), p.n, st->self.data());
                     for (size_t k = 0; k < peers.size(); ++k) {
                       q.push_back(c.isend(out->data(), pay, peers[k], cs.tag(p.bucket, 0)));
                       q.push_back(c.irecv(in->data() + k * pay, pay, peers[k], cs.tag(p.bucket, 0)));
                     }
                   },
                   [=] {
                     std::vector<float>* copies[2] = {&st->left, &st->right};
                     const float w = consensusStep(p.codec) / static_cast<float>(peers.size() + 1);
                     for (size_t k = 0; k < peers.size(); ++k) {
                       std::vector<float>& cp = *copies[k];
                       p.codec.decodeAdd(in->data() + k * pay, p.n, cp.data());
                       for (size_t i = 0; i < p.n; ++i) p.params[i] += w * (cp[i] - st->self[i]);
                     }
                   }});
  return std::make_unique<BucketOp>(std::move(steps), pay * peers.size());
}

// Bagua's centralized low precision: compress -> scatter-reduce (alltoall of compressed chunks,
// each rank averages its chunk) -> compress the merged chunk -> allgather. Both compressions
// keep error feedback (worker side over the bucket, server side over the merged chunk).
std::unique_ptr<BucketOp> scatterReduceCompressed(CommSet& cs, const OpParams& p) {
  Communicator& a2a = *cs.stage[0];
  Communicator& ag = *cs.stage[1];
  const int P = a2a.size(), r = a2a.rank();
  size_t maxLen = 0;
  for (int j = 0; j < P; ++j) maxLen = std::max(maxLen, chunkBegin(p.n, j + 1, P) - chunkBegin(p.n, j, P));
  const size_t pay = p.codec.payloadBytes(maxLen);  // every chunk padded to the largest payload
  struct State {
    std::vector<uint8_t> send, recv, mine, all;
    std::vector<float> merged;
  };
  auto st = std::make_shared<State>();
  const size_t myBegin = chunkBegin(p.n, r, P), myLen = chunkBegin(p.n, r + 1, P) - myBegin;
  std::vector<Step> steps;
  steps.push_back(
      {true,
       [=, &a2a](std::vector<RequestPtr>& q) {
         st->send.assign(pay * static_cast<size_t>(P), 0);
         st->recv.assign(pay * static_cast<size_t>(P), 0);
         std::vector<float> v(p.data, p.data + p.n);
         for (int j = 0; j < P; ++j) {
           const size_t b = chunkBegin(p.n, j, P), e = chunkBegin(p.n, j + 1, P);
           p.codec.encodeWithFeedback(v.data() + b, p.ef->worker.data() + b, e - b, hashOf(p.seed, j),
                                      st->send.data() + pay * static_cast<size_t>(j));
         }
         q.push_back(a2a.ialltoall(st->send.data(), st->recv.data(), pay));
       },
       [=] {
         st->merged.assign(myLen, 0.0f);
         for (int j = 0; j < P; ++j)
           p.codec.decodeAdd(st->recv.data() + pay * static_cast<size_t>(j), myLen, st->merged.data());
         scale(st->merged.data(), myLen, 1.0f / static_cast<float>(P));
       }});
  steps.push_back({true,
                   [=, &ag](std::vector<RequestPtr>& q) {
                     st->mine.assign(pay, 0);
                     st->all.assign(pay * static_cast<size_t>(P), 0);
                     p.codec.encodeWithFeedback(st->merged.data(), p.ef->server.data(), myLen,
                                                hashOf(p.seed, 0x5e), st->mine.data());
                     q.push_back(ag.iallgather(st->mine.data(), st->all.data(), pay));
                   },
                   [=] {
                     std::fill(p.data, p.data + p.n, 0.0f);
                     for (int j = 0; j < P; ++j) {
                       const size_t b = chunkBegin(p.n, j, P), e = chunkBegin(p.n, j + 1, P);
                       p.codec.decodeAdd(st->all.data() + pay * static_cast<size_t>(j), e - b, p.data + b);
                     }
                   }});
  return std::make_unique<BucketOp>(std::move(steps), 2 * pay * static_cast<uint64_t>(P - 1));
}

}  // namespace

std::unique_ptr<BucketOp> makeBucketOp(CommSet& cs, const OpParams& p) {
  Communicator& w = *cs.world;
  if (p.algorithm == Algorithm::Decentralized) return decentralized(cs, p);
  const int P = w.size();
  const bool coded = p.codec.kind != Compression::None;
  switch (p.algorithm) {
    case Algorithm::Ring:
      if (P > 1) return coded ? ringCompressed(cs, p) : ring(cs, p);
      break;
    case Algorithm::RecursiveDoubling:
      if (P > 1) return coded ? recursiveDoublingCompressed(cs, p) : recursiveDoubling(cs, p);
      break;
    case Algorithm::Hierarchical:
      return hierarchical(cs, p);
    default:
      break;
  }
  // allreduce with a codec (hierarchical with one is refused before it gets here), or one rank
  if (coded) return scatterReduceCompressed(cs, p);
  Communicator& c = *cs.stage[0];
  std::vector<Step> steps;
  steps.push_back({true, [=, &c](std::vector<RequestPtr>& q) { q.push_back(c.iallreduceSum(p.data, p.n)); },
                   [=] { scale(p.data, p.n, 1.0f / static_cast<float>(P)); }});
  const uint64_t wire = 2 * 4 * p.n * static_cast<uint64_t>(P - 1) / static_cast<uint64_t>(P);
  return std::make_unique<BucketOp>(std::move(steps), wire);
}

}  // namespace trainscope::train
