// The pipeline executor core: runs one stage's op list (schedule.h) by calling a StageRunner
// for every op. The trainer implements StageRunner with its model chunks and MPI (or NCCL)
// point-to-point; tests implement it over threads. The executor owns the order, posts
// receives ahead so data can arrive while the stage computes, and turns a runner's error into
// one message naming the stage and op.
#pragma once

#include <cstdint>

#include "trainscope/core/model/events.h"
#include "trainscope/core/sched/schedule.h"

namespace trainscope::core {

class StageRunner {
 public:
  virtual ~StageRunner() = default;
  virtual Status forward(const PipeOp& op) = 0;
  // B: the input gradient; when the schedule does not split the backward (every schedule but
  // zb-h1) also the weight gradient.
  virtual Status backward(const PipeOp& op) = 0;
  virtual Status weight(const PipeOp& op) = 0;  // W (zb-h1 only)
  // Starts sending the op's payload to op.peer; must not wait for the receiver (MPI_Isend).
  virtual Status send(const PipeOp& op) = 0;
  // Starts receiving the op's payload from op.peer (MPI_Irecv); called before waitRecv, up to
  // ExecutorOptions::recvLookahead Recv ops ahead of the stage's position.
  virtual Status postRecv(const PipeOp& op) = 0;
  // Blocks until the data of a posted receive is there.
  virtual Status waitRecv(const PipeOp& op) = 0;
  // End of the step: every started send has completed (its buffer may be reused).
  virtual Status finishSends() = 0;
};

struct ExecutorOptions {
  int recvLookahead = 2;  // receives posted ahead of the one the stage waits on (>= 1)
};

// Runs stage `stage` of `schedule` to the end of the step. The schedule must pass
// checkSchedule (generated schedules do). Errors: "stage 1 op 5 (F3): <runner's message>".
Status runStage(const Schedule& schedule, int stage, StageRunner& runner,
                const ExecutorOptions& options = {});

// A message tag that the sender and the receiver of one Send/Recv pair compute alike and that
// differs between all messages of a step: payload, micro-batch, receiving virtual stage,
// segment. Below 2 * m * p * v * k; MPI guarantees tags up to 32767 (MPI_TAG_UB, usually far
// more): check against the communicator's MPI_TAG_UB.
int64_t messageTag(const ScheduleParams& params, int stage, const PipeOp& op);

// The event kind an op is traced as (docs/TRACE_CONVENTIONS.md): F, B, W -> MicroBatchF/B/W,
// Send -> P2PSend, Recv -> P2PRecv; attributes MicroBatch, Stage, Chunk (and Peer, Bytes).
EventKind traceEventKind(OpKind kind);

}  // namespace trainscope::core
