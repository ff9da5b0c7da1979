#include "stage_runner.h"

#include <string>
#include <thread>
#include <utility>

#include "trace_scope.h"
#include "trainscope/agent.h"

namespace trainscope::train {
namespace {

using core::OpKind;
using core::Payload;
using core::PipeOp;
using core::Status;

struct MbScope {
  MbScope(ts_mb_op kind, const PipeOp& op, int stage) { ts_mb_begin(kind, op.microBatch, stage, op.chunk); }
  ~MbScope() { ts_mb_end(); }
  MbScope(const MbScope&) = delete;
  MbScope& operator=(const MbScope&) = delete;
};

}  // namespace

StageRunner::StageRunner(StageSetup setup)
    : s_(std::move(setup)),
      p_(s_.schedule->params.stages),
      m_(s_.schedule->params.microBatches),
      v_(s_.schedule->params.virtualStages),
      k_(s_.schedule->params.segments) {
  const int v = static_cast<int>(s_.chunkStart.size()) - 1;
  pieces_.resize(static_cast<size_t>(v) * static_cast<size_t>(m_ * k_));
  wDone_.assign(static_cast<size_t>(s_.model->layerCount()), 0);
  nextReady_ = s_.model->layerCount() - 1;
  nameSend_ = ts_name("pp send");
  nameRecv_ = ts_name("pp recv");
}

int StageRunner::slotOf(const PipeOp& op) const {
  return op.microBatch * k_ + op.segment;
}

StageRunner::Piece& StageRunner::piece(const PipeOp& op) {
  Piece& pc = pieces_[static_cast<size_t>(op.chunk) * static_cast<size_t>(m_ * k_) + static_cast<size_t>(slotOf(op))];
  const auto n = static_cast<size_t>(s_.chunkStart[static_cast<size_t>(op.chunk) + 1] -
                                     s_.chunkStart[static_cast<size_t>(op.chunk)]);
  if (pc.act.size() != n + 1) {
    pc.act.resize(n + 1);
    pc.grad.resize(n + 1);
  }
  return pc;
}

// Micro-batch j covers the replica's samples [j b, (j+1) b), b = batch / m; its segment i (seq1f1b)
// the i-th of k near-equal row slices (rows are independent in these models: see TRAINER.md).
void StageRunner::pieceSamples(const PipeOp& op, int64_t* first, int* count) const {
  const int b = s_.replicaBatch / m_;
  const int lo = b * op.segment / k_, hi = b * (op.segment + 1) / k_;
  *first = s_.firstSample + int64_t{b} * op.microBatch + lo;
  *count = hi - lo;
}

bool StageRunner::needsData() const {
  return s_.stage == 0 || s_.stage == p_ - 1;  // virtual stage 0 is chunk 0 of stage 0; the last, stage p-1's
}

std::vector<std::pair<int64_t, int>> StageRunner::dataPieces(int64_t first) const {
  std::vector<std::pair<int64_t, int>> out;
  PipeOp op;
  for (op.microBatch = 0; op.microBatch < m_; ++op.microBatch)
    for (op.segment = 0; op.segment < k_; ++op.segment) {
      int64_t f = 0;
      int c = 0;
      pieceSamples(op, &f, &c);
      out.emplace_back(f - s_.firstSample + first, c);
    }
  return out;
}

bool StageRunner::isFirstVirtual(const PipeOp& op) const {
  return core::virtualStage(s_.stage, op.chunk, p_) == 0;
}
bool StageRunner::isLastVirtual(const PipeOp& op) const {
  return core::virtualStage(s_.stage, op.chunk, p_) == p_ * v_ - 1;
}

void StageRunner::progress() {
  s_.sync->progress();
  for (RequestPtr& r : sends_) r->test();
}

Status StageRunner::forward(const PipeOp& op) {
  Piece& pc = piece(op);
  int64_t first = 0;
  int count = 0;
  pieceSamples(op, &first, &count);
  Batch b;
  if (isFirstVirtual(op) || isLastVirtual(op)) b = s_.data->take(first, count);
  if (isFirstVirtual(op)) pc.act[0] = std::move(b.x);
  {
    MbScope mb(TS_MB_F, op, s_.stage);
    const int lo = s_.chunkStart[static_cast<size_t>(op.chunk)];
    for (size_t i = 0; i + 1 < pc.act.size(); ++i) {
      const int l = lo + static_cast<int>(i);
      KernelScope k(s_.nameF[static_cast<size_t>(l)], l);
      s_.model->layer(l).forward(slotOf(op), pc.act[i], pc.act[i + 1]);
    }
    if (isLastVirtual(op)) {  // the loss of this piece, weighted as in the whole replica batch
      Mat& d = pc.grad.back();
      const double l = softmaxCrossEntropy(pc.act.back(), b.labels, &d, nullptr);
      const double w = static_cast<double>(count) / static_cast<double>(s_.replicaBatch);
      for (float& x : d.v) x *= static_cast<float>(w);
      loss_ += l * w;
    }
  }
  progress();
  return Status::ok();
}

void StageRunner::weightDone(int layer) {
  ++wDone_[static_cast<size_t>(layer)];
  while (nextReady_ >= 0 && wDone_[static_cast<size_t>(nextReady_)] == m_ * k_) s_.sync->layerReady(nextReady_--);
}

void StageRunner::backwardLayers(const PipeOp& op, bool input, bool weight) {
  Piece& pc = piece(op);
  const int lo = s_.chunkStart[static_cast<size_t>(op.chunk)];
  const int slot = slotOf(op);
  for (size_t i = pc.act.size() - 1; i-- > 0;) {
    const int l = lo + static_cast<int>(i);
    Layer& layer = s_.model->layer(l);
    if (input && !(i == 0 && isFirstVirtual(op))) {  // the model's input needs no gradient
      KernelScope k(s_.nameB[static_cast<size_t>(l)], l);
      layer.backwardInput(slot, pc.grad[i + 1], pc.grad[i]);
    }
    if (weight) {
      {
        KernelScope k(s_.nameW[static_cast<size_t>(l)], l);
        layer.backwardWeight(slot, pc.grad[i + 1]);
      }
      layer.release(slot);
      weightDone(l);
    }
  }
}

Status StageRunner::backward(const PipeOp& op) {
  {
    MbScope mb(TS_MB_B, op, s_.stage);
    backwardLayers(op, true, !s_.schedule->splitBackward);
  }
  progress();
  return Status::ok();
}

Status StageRunner::weight(const PipeOp& op) {
  {
    MbScope mb(TS_MB_W, op, s_.stage);
    backwardLayers(op, false, true);
  }
  progress();
  return Status::ok();
}

Mat& StageRunner::payload(const PipeOp& op) {
  Piece& pc = piece(op);
  const bool act = op.payload == Payload::Activation;
  if (op.kind == OpKind::Send) return act ? pc.act.back() : pc.grad.front();
  return act ? pc.act.front() : pc.grad.back();
}

Status StageRunner::send(const PipeOp& op) {
  const Mat& x = payload(op);
  const size_t bytes = x.size() * sizeof(float);
  const auto tag = static_cast<int>(core::messageTag(s_.schedule->params, s_.stage, op));
  ts_comm_begin(TS_COMM_SEND, nameSend_, bytes, s_.worldRankOfStage0 + op.peer, 0);
  sends_.push_back(s_.pipe->isend(x.data(), bytes, op.peer, tag));
  ts_comm_end();
  return Status::ok();
}

Status StageRunner::postRecv(const PipeOp& op) {
  int64_t first = 0;
  int count = 0;
  pieceSamples(op, &first, &count);
  Mat& x = payload(op);
  x.resize(count * s_.rowsPerSample, s_.width);
  const int64_t tag = core::messageTag(s_.schedule->params, s_.stage, op);
  recvs_[tag] = s_.pipe->irecv(x.data(), x.size() * sizeof(float), op.peer, static_cast<int>(tag));
  return Status::ok();
}

Status StageRunner::waitRecv(const PipeOp& op) {
  const int64_t tag = core::messageTag(s_.schedule->params, s_.stage, op);
  auto it = recvs_.find(tag);
  if (it == recvs_.end()) return {core::ErrorCode::InvalidArgument, "receive was not posted"};
  ts_comm_begin(TS_COMM_RECV, nameRecv_, payload(op).size() * sizeof(float), s_.worldRankOfStage0 + op.peer, 0);
  Backoff backoff;
  while (!it->second->test()) {
    progress();
    backoff.pause();  // oversubscribed ranks: let the sender's rank compute
  }
  ts_comm_end();
  recvs_.erase(it);
  return Status::ok();
}

Status StageRunner::finishSends() {
  for (RequestPtr& r : sends_) {
    Backoff backoff;
    while (!r->test()) {
      s_.sync->progress();
      backoff.pause();
    }
  }
  sends_.clear();
  if (nextReady_ >= 0)
    return {core::ErrorCode::InvalidArgument,
            "layer " + std::to_string(nextReady_) + " did not get all its weight gradients"};
  return Status::ok();
}

}  // namespace trainscope::train
