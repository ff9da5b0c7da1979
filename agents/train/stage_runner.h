// core::StageRunner for trainscope-train: runs the F/B/W ops of one pipeline stage's model
// chunks on the CPU and moves activations and gradients with non-blocking MPI point-to-point
// (Communicator::isend/irecv on the pipeline's communicator, tags from core::messageTag). The
// schedule list (core::runStage) drives it. Gradients accumulate in the stage model over all
// micro-batches; a layer is handed to GradSync (data-parallel replicas) once its last
// micro-batch's W is done, so replica allreduces overlap the rest of the pipeline.
//
// seq1f1b on the transformer: a (micro-batch, segment) piece is every sample of the micro-batch
// at the segment's positions (segBounds); each layer is told the span (Layer::setSpan), so
// attention reads the keys/values of the micro-batch's earlier segments. Without segBounds
// (the MLP), segments are slices of the micro-batch's samples.
//
// Traced: every F/B/W as ts_mb_begin/end (micro-batch, stage, chunk) with one Kernel per layer
// inside; sends/receives as P2P events (peer = world rank, bytes); the wait for a receive is
// the P2PRecv interval, outside every compute event.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "data_loader.h"
#include "grad_sync.h"
#include "model.h"
#include "task.h"
#include "trainscope/agent.h"
#include "trainscope/core/sched/pipeline_executor.h"

namespace trainscope::train {

struct StageSetup {
  Model* model = nullptr;  // this stage's chunks, chunk 0's layers first
  DataLoader* data = nullptr;  // the task's batches (first and last virtual stages)
  GradSync* sync = nullptr;
  Communicator* pipe = nullptr;  // rank = stage
  const core::Schedule* schedule = nullptr;
  int stage = 0;
  std::vector<int> chunkStart;  // local index of each chunk's first layer; v + 1 entries
  std::vector<uint32_t> nameF, nameB, nameW;  // per local layer
  int64_t firstSample = 0;  // the replica's first sample of this step
  int replicaBatch = 1;     // samples of the replica in this step
  int rowsPerSample = 1;    // = the sequence length for the transformer
  std::vector<int> segBounds;  // seq1f1b, transformer: k + 1 positions; empty: segments cut samples
  int width = 1;            // columns of every activation between stages
  int worldRankOfStage0 = 0;  // world rank of this pipeline's stage 0 (stages are consecutive)
};

class StageRunner final : public core::StageRunner {
 public:
  explicit StageRunner(StageSetup setup);
  core::Status forward(const core::PipeOp& op) override;
  core::Status backward(const core::PipeOp& op) override;
  core::Status weight(const core::PipeOp& op) override;
  core::Status send(const core::PipeOp& op) override;
  core::Status postRecv(const core::PipeOp& op) override;
  core::Status waitRecv(const core::PipeOp& op) override;
  core::Status finishSends() override;
  double loss() const { return loss_; }  // the replica's mean loss (last stage; 0 elsewhere)
  // Whether this stage reads training data (it holds the first or the last virtual stage), and
  // the (first sample, count) of every piece of a step whose replica batch starts at first.
  bool needsData() const;
  std::vector<std::pair<int64_t, int>> dataPieces(int64_t first) const;

 private:
  struct Piece {
    std::vector<Mat> act, grad;  // per chunk boundary: act[0] = input, grad[n] = output gradient
  };
  // The samples [first, first + count) of a piece, at positions [offset, offset + length).
  struct Span {
    int64_t first = 0;
    int count = 0, offset = 0, length = 1;
    int rows() const { return count * length; }
  };
  Piece& piece(const core::PipeOp& op);
  int slotOf(const core::PipeOp& op) const;
  Span spanOf(const core::PipeOp& op) const;
  Batch inputOf(const core::PipeOp& op, const Span& sp);
  void mbBegin(ts_mb_op kind, const core::PipeOp& op) const;
  bool isFirstVirtual(const core::PipeOp& op) const;
  bool isLastVirtual(const core::PipeOp& op) const;
  void backwardLayers(const core::PipeOp& op, bool input, bool weight);
  void weightDone(int layer);
  Mat& payload(const core::PipeOp& op);
  void progress();

  StageSetup s_;
  int p_, m_, v_, k_;
  std::vector<Piece> pieces_;  // [chunk * m * k + slot]
  std::unordered_map<int, Batch> whole_;  // sequence segments: their micro-batch's samples
  std::unordered_map<int64_t, RequestPtr> recvs_;
  std::vector<RequestPtr> sends_;
  std::vector<int> wDone_;
  int nextReady_ = 0;
  double loss_ = 0;
  uint32_t nameSend_ = 0, nameRecv_ = 0;
};

}  // namespace trainscope::train
