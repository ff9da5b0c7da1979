// The seven generators (schedule.h). Each first decides the order of compute ops per stage;
// withComm() then inserts the Recv before and the Send after each op that crosses stages, so
// all schedules share one communication convention.
#include <algorithm>

#include "trainscope/core/sched/schedule.h"

namespace trainscope::core {
namespace {

using Order = std::vector<PipeOp>;  // compute ops only

PipeOp compute(OpKind kind, int mb, int chunk = 0, int segment = 0) {
  PipeOp op;
  op.kind = kind;
  op.microBatch = mb;
  op.chunk = static_cast<int16_t>(chunk);
  op.segment = static_cast<int16_t>(segment);
  return op;
}

// GPipe (Huang et al. 2019): all forwards, then all backwards, the last micro-batch first as
// in the paper's figure (its activations are the freshest; the last stage starts at once).
Order gpipe(int m) {
  Order o;
  for (int i = 0; i < m; ++i) o.push_back(compute(OpKind::Forward, i));
  for (int i = m - 1; i >= 0; --i) o.push_back(compute(OpKind::Backward, i));
  return o;
}

// 1F1B over a sequence of "units" (PipeDream-Flush / Megatron's non-interleaved schedule):
// warm-up forwards, then one forward and one backward alternately, then the remaining
// backwards. fwd(i) and bwd(i) name the i-th forward and backward unit.
template <typename Fwd, typename Bwd>
Order oneFOneB(int units, int warmup, Fwd fwd, Bwd bwd) {
  warmup = std::min(warmup, units);
  Order o;
  for (int i = 0; i < warmup; ++i) o.push_back(fwd(i));
  for (int i = 0; i < units - warmup; ++i) {
    o.push_back(fwd(warmup + i));
    o.push_back(bwd(i));
  }
  for (int i = units - warmup; i < units; ++i) o.push_back(bwd(i));
  return o;
}

Order plain1F1B(int p, int m, int s) {
  auto f = [](int i) { return compute(OpKind::Forward, i); };
  auto b = [](int i) { return compute(OpKind::Backward, i); };
  return oneFOneB(m, p - s - 1, f, b);
}

// Megatron-LM's interleaved 1F1B (Narayanan et al. 2021): micro-batches enter in groups of p;
// the k-th forward runs chunk (k / p) % v of micro-batch (k / (p v)) p + k % p, the k-th
// backward the same micro-batch's chunk v-1-(k / p) % v. Warm-up 2 (p-s-1) + (v-1) p.
Order interleaved(int p, int m, int v, int s) {
  auto mb = [p, v](int k) { return (k / (p * v)) * p + k % p; };
  auto f = [&](int k) { return compute(OpKind::Forward, mb(k), (k / p) % v); };
  auto b = [&](int k) { return compute(OpKind::Backward, mb(k), v - 1 - (k / p) % v); };
  return oneFOneB(m * v, 2 * (p - s - 1) + (v - 1) * p, f, b);
}

// Seq1F1B (Sun et al. 2024): 1F1B over (micro-batch, segment) units. Forwards go through a
// micro-batch's segments in order (segment j reads the keys/values of segments < j); backwards
// in reverse (segment j's gradient flows into the keys/values of earlier segments), so the last
// stage must run all k forwards of micro-batch 0 before its first backward: warm-up
// (p-s-1) + (k-1) units.
Order seq1F1B(int p, int m, int k, int s) {
  auto f = [k](int u) { return compute(OpKind::Forward, u / k, 0, u % k); };
  auto b = [k](int u) { return compute(OpKind::Backward, u / k, 0, k - 1 - u % k); };
  return oneFOneB(m * k, p - s - 1 + k - 1, f, b);
}

// ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism"): 1F1B's warm-up (so 1F1B's peak
// memory), B split from W. Stage s runs its first s steady-state backwards without their W,
// which lets the input gradient reach earlier stages sooner; the deferred W's fill the
// cool-down bubbles at the end. W's run in micro-batch order.
Order zbH1(int p, int m, int s) {
  Order o;
  int f = 0, b = 0, w = 0;
  const int warmup = std::min(p - s - 1, m);
  for (; f < warmup; ++f) o.push_back(compute(OpKind::Forward, f));
  for (int i = 0; i < s && f < m; ++i) {  // F B, W deferred
    o.push_back(compute(OpKind::Forward, f++));
    o.push_back(compute(OpKind::Backward, b++));
  }
  while (f < m) {  // steady state: F B W
    o.push_back(compute(OpKind::Forward, f++));
    o.push_back(compute(OpKind::Backward, b++));
    o.push_back(compute(OpKind::Weight, w++));
  }
  while (b < m) {  // cool-down: B W
    o.push_back(compute(OpKind::Backward, b++));
    o.push_back(compute(OpKind::Weight, w++));
  }
  while (w < m) o.push_back(compute(OpKind::Weight, w++));
  return o;
}

// PyTorch's ScheduleInterleavedZeroBubble (ZB1P; torch/distributed/pipelining/schedules.py,
// `_calculate_single_rank_operations` with `enable_zero_bubble`), in the order its schedule
// object runs on each rank (PyTorch pads with idle slots; only the order matters here). Loop
// placement: chunk c of stage s is virtual stage c p + s. Micro-batches go in rounds of
// r = m / max(1, m / p); the k-th forward runs chunk (k / r) mod v, the k-th backward (counted
// from the end of the warm-up) chunk v-1-(k / r) mod v; each chunk's micro-batches in order.
// Warm-up (v-1) r + (p-1-s) forwards (1F1B's hop factor 1, where interleaved-1f1b has 2), then
// F and B alternately, then the remaining B's. As in zb-h1 stage s defers the W of its first s
// backwards: from the (s+1)-th backward on, each B is followed by the oldest pending W; the
// rest of the W's close the step.
Order interleavedZb(int p, int m, int v, int s) {
  const int rounds = std::max(1, m / p);
  const int perRound = m / rounds;
  const int total = m * v;
  const int warmup = std::min((v - 1) * perRound + (p - 1 - s), total);
  auto fChunk = [&](int k) { return (k / perRound) % v; };
  auto bChunk = [&](int k) { return v - 1 - ((k - warmup) / perRound) % v; };
  std::vector<int> fNext(static_cast<size_t>(v), 0), bNext(fNext), wNext(fNext);
  auto next = [](std::vector<int>& counter, int chunk) { return counter[static_cast<size_t>(chunk)]++; };
  std::vector<int> backwards;  // chunk of each B so far, in order
  size_t weights = 0;
  Order o;
  auto backward = [&](int k) {
    const int c = bChunk(k);
    o.push_back(compute(OpKind::Backward, next(bNext, c), c));
    backwards.push_back(c);
    if (k - warmup >= s) {
      const int wc = backwards[weights++];
      o.push_back(compute(OpKind::Weight, next(wNext, wc), wc));
    }
  };
  for (int k = 0; k < total + warmup; ++k) {
    if (k < total) {
      const int c = fChunk(k);
      o.push_back(compute(OpKind::Forward, next(fNext, c), c));
    }
    if (k >= warmup) backward(k);
  }
  while (weights < backwards.size()) {
    const int wc = backwards[weights++];
    o.push_back(compute(OpKind::Weight, next(wNext, wc), wc));
  }
  return o;
}

// PyTorch's ScheduleZBVZeroBubble (Qi et al. 2023, section 6; the same file), in the order its
// schedule object runs. V placement: chunk 0 of stage s is virtual stage s, chunk 1 is 2p-1-s.
// Built for n = max(2p-1, m) micro-batches, then the ops of micro-batches >= m are dropped, as
// PyTorch does. Per stage s: 2(p-s)-1 forwards of chunk 0; s times F1 F0; p-s times F1 B1 W1;
// then while chunk 1 lags chunk 0 or chunk 0 has forwards left: [F0] B0 W0 F1 B1 W1; then s
// times B0 B1 (their W's deferred), p-s times B0 W0, and the remaining W1's, then W0's.
Order zbv(int p, int m, int s) {
  const int n = std::max(2 * p - 1, m);
  int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  Order o;
  auto op = [&](OpKind kind, int mb, int chunk) {
    if (mb < m) o.push_back(compute(kind, mb, chunk));
  };
  for (int i = 0; i < 2 * (p - s) - 1; ++i) op(OpKind::Forward, f0++, 0);
  for (int i = 0; i < s; ++i) {
    op(OpKind::Forward, f1++, 1);
    op(OpKind::Forward, f0++, 0);
  }
  for (int i = 0; i < p - s; ++i) {
    op(OpKind::Forward, f1++, 1);
    op(OpKind::Backward, b1, 1);
    op(OpKind::Weight, b1++, 1);
  }
  while (f1 < f0 || f0 < n) {
    if (f0 < n) op(OpKind::Forward, f0++, 0);
    op(OpKind::Backward, b0, 0);
    op(OpKind::Weight, b0++, 0);
    op(OpKind::Forward, f1++, 1);
    op(OpKind::Backward, b1, 1);
    op(OpKind::Weight, b1++, 1);
  }
  int w0 = b0, w1 = b1;
  for (int i = 0; i < s; ++i) {
    op(OpKind::Backward, b0++, 0);
    op(OpKind::Backward, b1++, 1);
  }
  for (int i = 0; i < p - s; ++i) {
    op(OpKind::Backward, b0++, 0);
    op(OpKind::Weight, w0++, 0);
  }
  while (w1 < b1) op(OpKind::Weight, w1++, 1);
  while (w0 < b0) op(OpKind::Weight, w0++, 0);
  return o;
}

// Inserts Recv/Send around each compute op whose input comes from, or output goes to, another
// virtual stage (virtualStage(sp, stage, chunk); under zbv the hand-off between virtual stages
// p-1 and p is a pair from stage p-1 to itself).
std::vector<PipeOp> withComm(const Order& order, int stage, const ScheduleParams& sp) {
  const int last = sp.stages * sp.virtualStages - 1;
  std::vector<PipeOp> ops;
  ops.reserve(order.size() * 3);
  auto comm = [&](OpKind kind, Payload payload, const PipeOp& c, int peerVirtual) {
    PipeOp op = c;
    op.kind = kind;
    op.payload = payload;
    op.peer = stageOfVirtual(sp, peerVirtual).stage;
    ops.push_back(op);
  };
  for (const PipeOp& c : order) {
    const int u = virtualStage(sp, stage, c.chunk);
    if (c.kind == OpKind::Forward) {
      if (u > 0) comm(OpKind::Recv, Payload::Activation, c, u - 1);
      ops.push_back(c);
      if (u < last) comm(OpKind::Send, Payload::Activation, c, u + 1);
    } else if (c.kind == OpKind::Backward) {
      if (u < last) comm(OpKind::Recv, Payload::Gradient, c, u + 1);
      ops.push_back(c);
      if (u > 0) comm(OpKind::Send, Payload::Gradient, c, u - 1);
    } else {
      ops.push_back(c);
    }
  }
  return ops;
}

}  // namespace

Result<Schedule> generateSchedule(const ScheduleParams& sp) {
  if (Status s = validateSchedule(sp); !s) return s;
  Schedule sched;
  sched.params = sp;
  sched.splitBackward = splitsBackward(sp.kind);
  const int p = sp.stages, m = sp.microBatches;
  for (int s = 0; s < p; ++s) {
    Order order;
    switch (sp.kind) {
      case ScheduleKind::GPipe:
        order = gpipe(m);
        break;
      case ScheduleKind::OneFOneB:
        order = plain1F1B(p, m, s);
        break;
      case ScheduleKind::Interleaved1F1B:
        order = interleaved(p, m, sp.virtualStages, s);
        break;
      case ScheduleKind::ZbH1:
        order = zbH1(p, m, s);
        break;
      case ScheduleKind::Seq1F1B:
        order = seq1F1B(p, m, sp.segments, s);
        break;
      case ScheduleKind::InterleavedZb:
        order = interleavedZb(p, m, sp.virtualStages, s);
        break;
      case ScheduleKind::Zbv:
        order = zbv(p, m, s);
        break;
    }
    sched.stages.push_back(withComm(order, s, sp));
  }
  return sched;
}

}  // namespace trainscope::core
