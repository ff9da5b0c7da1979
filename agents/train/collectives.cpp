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
  const std::string base = a == Algorithm::Decentralized ? "decentralized+" : "scatter-reduce+";
  return base + kCompressionNames[static_cast<int>(c)];
}

CommSet CommSet::make(Communicator& world, int ranksPerNode) {
  CommSet s;
  s.world = &world;
  for (int i = 0; i < 3; ++i) s.stage.push_back(world.dup());
  s.ranksPerNode = std::clamp(ranksPerNode, 1, world.size());
  const int node = world.rank() / s.ranksPerNode;
  s.nodeReduce = world.split(node, world.rank());
  s.nodeBcast = s.nodeReduce->dup();
  s.leaders = world.split(world.rank() % s.ranksPerNode == 0 ? 0 : -1, world.rank());
  return s;
}

bool BucketOp::progress(int limit) {
  for (;;) {
    if (posted_) {
      for (auto& r : pending_)
        if (!r->test()) return false;
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

int tagOf(int bucket, int step) {
  return (bucket % 2048) * 1024 + step % 1024;
}

// Reduce-scatter then allgather around the ring, each a sequence of p-1 neighbour exchanges.
std::unique_ptr<BucketOp> ring(Communicator& c, const OpParams& p) {
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
                     [=, &c](std::vector<RequestPtr>& q) {
                       q.push_back(c.isend(p.data + sb, 4 * (se - sb), right, tagOf(p.bucket, s)));
                       q.push_back(c.irecv(tmp->data(), 4 * (re - rb), left, tagOf(p.bucket, s)));
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
                     [=, &c](std::vector<RequestPtr>& q) {
                       q.push_back(c.isend(p.data + sb, 4 * (se - sb), right, tagOf(p.bucket, P + s)));
                       q.push_back(c.irecv(p.data + rb, 4 * (re - rb), left, tagOf(p.bucket, P + s)));
                     },
                     nullptr});
  }
  steps.push_back(
      {false, [](std::vector<RequestPtr>&) {}, [=] { scale(p.data, p.n, 1.0f / static_cast<float>(P)); }});
  return std::make_unique<BucketOp>(std::move(steps), wire);
}

// Recursive doubling; with a non-power-of-two size the first 2*rem ranks pair up first (the
// even one hands its vector to the odd one and gets the result back at the end).
std::unique_ptr<BucketOp> recursiveDoubling(Communicator& c, const OpParams& p) {
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
                       [=, &c](std::vector<RequestPtr>& q) {
                         q.push_back(c.isend(p.data, bytes, r + 1, tagOf(p.bucket, 0)));
                       },
                       nullptr});
      steps.push_back({false,
                       [=, &c](std::vector<RequestPtr>& q) {
                         q.push_back(c.irecv(p.data, bytes, r + 1, tagOf(p.bucket, 999)));
                       },
                       nullptr});
      vrank = -1;
    } else {
      steps.push_back({false,
                       [=, &c](std::vector<RequestPtr>& q) {
                         q.push_back(c.irecv(tmp->data(), bytes, r - 1, tagOf(p.bucket, 0)));
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
                       [=, &c](std::vector<RequestPtr>& q) {
                         q.push_back(c.isend(p.data, bytes, peer, tagOf(p.bucket, round)));
                         q.push_back(c.irecv(tmp->data(), bytes, peer, tagOf(p.bucket, round)));
                       },
                       add});
    }
    if (r < 2 * rem) {
      wire += bytes;
      steps.push_back({false,
                       [=, &c](std::vector<RequestPtr>& q) {
                         q.push_back(c.isend(p.data, bytes, r - 1, tagOf(p.bucket, 999)));
                       },
                       nullptr});
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
                     if (leaders) q.push_back(leaders->iallreduceSum(p.data, p.n));
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
std::unique_ptr<BucketOp> decentralized(Communicator& c, const OpParams& p) {
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
                   [=, &c](std::vector<RequestPtr>& q) {
                     std::vector<float> diff(p.n);
                     for (size_t i = 0; i < p.n; ++i) diff[i] = p.params[i] - st->self[i];
                     p.codec.encode(diff.data(), p.n, p.seed, out->data());
                     p.codec.decodeAdd(out->data(), p.n, st->self.data());
                     for (size_t k = 0; k < peers.size(); ++k) {
                       q.push_back(c.isend(out->data(), pay, peers[k], tagOf(p.bucket, 0)));
                       q.push_back(c.irecv(in->data() + k * pay, pay, peers[k], tagOf(p.bucket, 0)));
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
  if (p.algorithm == Algorithm::Decentralized) return decentralized(w, p);
  if (p.codec.kind != Compression::None) return scatterReduceCompressed(cs, p);
  const int P = w.size();
  switch (p.algorithm) {
    case Algorithm::Ring:
      if (P > 1) return ring(w, p);
      break;
    case Algorithm::RecursiveDoubling:
      if (P > 1) return recursiveDoubling(w, p);
      break;
    case Algorithm::Hierarchical:
      return hierarchical(cs, p);
    default:
      break;
  }
  Communicator& c = *cs.stage[0];
  std::vector<Step> steps;
  steps.push_back({true, [=, &c](std::vector<RequestPtr>& q) { q.push_back(c.iallreduceSum(p.data, p.n)); },
                   [=] { scale(p.data, p.n, 1.0f / static_cast<float>(P)); }});
  const uint64_t wire = 2 * 4 * p.n * static_cast<uint64_t>(P - 1) / static_cast<uint64_t>(P);
  return std::make_unique<BucketOp>(std::move(steps), wire);
}

}  // namespace trainscope::train
