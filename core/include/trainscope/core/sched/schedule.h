// Pipeline schedules as data. For p stages, m micro-batches, v virtual stages (model chunks per
// stage) and k sequence segments, a generator returns per stage the ordered list of operations
// that stage executes in one training step: F (forward), B (backward: input gradient, plus the
// weight gradient unless the schedule splits it off), W (weight gradient, split schedules only),
// and the Send/Recv of activations and gradients between stages. The same lists drive the
// simulator (schedule_sim.h), `trainscope-cli schedule`, and the trainer's pipeline executor.
//
// Names are the `pp.schedule` knob values: gpipe, 1f1b, interleaved-1f1b, zb-h1, seq1f1b (the
// reference trainer's), and interleaved-zb, zbv (PyTorch's ScheduleInterleavedZeroBubble and
// ScheduleZBVZeroBubble, generated in the order PyTorch's schedule objects run, so `analyze` can
// simulate recordings of PyTorch pipelines; the trainer does not run them).
// docs/SCHEDULES.md draws each schedule for a small example and states every convention.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "trainscope/core/base/status.h"

namespace trainscope::core {

enum class ScheduleKind : uint8_t { GPipe, OneFOneB, Interleaved1F1B, ZbH1, Seq1F1B, InterleavedZb, Zbv };
// The reference trainer's schedules (its pp.schedule knob: the index is the enum value).
inline constexpr ScheduleKind kAllSchedules[] = {ScheduleKind::GPipe, ScheduleKind::OneFOneB,
                                                 ScheduleKind::Interleaved1F1B, ScheduleKind::ZbH1,
                                                 ScheduleKind::Seq1F1B};
// PyTorch's zero-bubble schedules with more than one stage per rank, known to the generator,
// the simulator and the analysis (recordings of `trainscope.attach_pipeline`).
inline constexpr ScheduleKind kTorchSchedules[] = {ScheduleKind::InterleavedZb, ScheduleKind::Zbv};

// "gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "seq1f1b", "interleaved-zb", "zbv".
std::string_view scheduleName(ScheduleKind kind);
// The inverse of scheduleName (all seven); the error lists the valid names.
Result<ScheduleKind> parseSchedule(std::string_view name);
// "gpipe, 1f1b, interleaved-1f1b, zb-h1, seq1f1b, interleaved-zb, zbv"
std::string scheduleNameList();
// Whether B is the input gradient only and W a separate op (zb-h1, interleaved-zb, zbv).
bool splitsBackward(ScheduleKind kind);

struct ScheduleParams {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  int stages = 1;         // p: pipeline stages (ranks of one pipeline)
  int microBatches = 1;   // m
  int virtualStages = 1;  // v: model chunks per stage; interleaved-1f1b, interleaved-zb; zbv: 2
  int segments = 1;       // k: sequence segments per micro-batch; > 1 only for seq1f1b
};

// Limits that keep a schedule's op lists (16 bytes per op, about 3 ops per unit) small enough
// to build, simulate and print: p * m * v * k units in all.
inline constexpr int kMaxStages = 1024;
inline constexpr int64_t kMaxScheduleUnits = int64_t{1} << 22;

// Rules (each refusal says which one):
//  - p, m, v, k >= 1; p * m * v * k within the limits above.
//  - v > 1 only with interleaved-1f1b, which needs v >= 2 (v = 1 is plain 1f1b), p >= 2, and
//    m % p == 0 (Megatron-LM's rule: micro-batches enter in groups of p per chunk), and with
//    interleaved-zb (v >= 1), which needs m % max(1, m / p) == 0 (PyTorch's rule: rounds of
//    m / rounds micro-batches). zbv needs v = 2 (its V: stages r and 2p-1-r on rank r).
//  - k > 1 only with seq1f1b (k = 1 makes seq1f1b identical to 1f1b).
Status validateSchedule(const ScheduleParams& params);

// Whether a model of `layers` layers can be cut for the schedule: at least one layer per
// virtual stage (p * v), and for interleaved-1f1b equal chunks, layers % (p * v) == 0
// (Megatron-LM's rule). The trainer checks this before switching `pp.*` knobs.
Status validateLayerSplit(const ScheduleParams& params, int layers);

enum class OpKind : uint8_t { Forward, Backward, Weight, Send, Recv };
enum class Payload : uint8_t { None, Activation, Gradient };

struct PipeOp {
  OpKind kind = OpKind::Forward;
  Payload payload = Payload::None;  // Send/Recv: activation (forward) or gradient (backward)
  int32_t microBatch = 0;
  int16_t chunk = 0;    // model chunk on this stage; virtual stage: see virtualStage() below
  int16_t segment = 0;  // sequence segment (seq1f1b)
  int32_t peer = -1;    // Send/Recv: the other stage

  bool isCompute() const {
    return kind == OpKind::Forward || kind == OpKind::Backward || kind == OpKind::Weight;
  }
  bool operator==(const PipeOp&) const = default;
};

// One step of one pipeline. Within a stage, ops run one after another in list order.
// Conventions:
//  - Send never blocks (MPI_Isend); Recv is the point where the stage needs the data and waits
//    for it (an executor may post the receive earlier). Every Send has exactly one matching Recv
//    (same payload, micro-batch, chunk, segment; peers pointing at each other).
//  - A Recv sits right before the compute op that consumes the data, a Send right after the op
//    that produced it.
//  - splitBackward = false: B computes the input and the weight gradients (no W ops);
//    splitBackward = true (zb-h1, interleaved-zb, zbv): B computes the input gradient only and
//    W, later, the weight gradient.
//  - Under zbv, virtual stages p-1 and p are both on stage p-1: that hand-off is a Send/Recv
//    pair from the stage to itself (free with zero latency and cost).
struct Schedule {
  ScheduleParams params;
  bool splitBackward = false;
  std::vector<std::vector<PipeOp>> stages;  // [stage] -> ops in execution order
};

Result<Schedule> generateSchedule(const ScheduleParams& params);

// Static checks on any schedule (generated or hand-written): peers in range, every Send matched
// by one Recv, each (micro-batch, chunk, segment) has exactly one F and one B (and one W when
// split) on the stage that owns it, and within a stage F precedes B precedes W, segment j's F
// follows segment j-1's F and segment j's B follows segment j+1's B. The error names the op.
Status checkSchedule(const Schedule& schedule);

// Virtual stage (position in the model's chain of chunks) of a chunk on a stage, in the loop
// placement (Megatron-LM; PyTorch's interleaved schedules): chunk c of stage s is c * p + s.
inline int virtualStage(int stage, int chunk, int stages) {
  return chunk * stages + stage;
}
// The same for any schedule: zbv places the model in a V, chunk 0 of stage s is virtual stage s,
// chunk 1 is 2p-1-s (PyTorch's "v" stage-to-rank mapping).
inline int virtualStage(const ScheduleParams& sp, int stage, int chunk) {
  if (sp.kind == ScheduleKind::Zbv && chunk == 1) return 2 * sp.stages - 1 - stage;
  return virtualStage(stage, chunk, sp.stages);
}
// The inverse: the stage and chunk that hold virtual stage u.
struct StageChunk {
  int stage = 0;
  int chunk = 0;
};
inline StageChunk stageOfVirtual(const ScheduleParams& sp, int u) {
  if (sp.kind == ScheduleKind::Zbv && u >= sp.stages) return {2 * sp.stages - 1 - u, 1};
  return {u % sp.stages, u / sp.stages};
}

// "F3", "B3", "W3"; with chunks "F3c1", with segments "F3s2"; comm ops
// "send-act F3 ->2", "recv-grad B3 <-2".
std::string opLabel(const PipeOp& op);
// Space-separated labels of a stage's ops (compute ops only unless withComm).
std::string formatStageOps(const std::vector<PipeOp>& ops, bool withComm);

// Per-op durations for the simulator and the theory below, as the time one micro-batch takes
// on one stage for all of its layers; chunks and segments split it evenly (a chunk's F takes
// forward / v, a segment's F forward / k). A Send costs the sender sendCost of stage time and
// arrives sendLatency after it ends.
struct OpDurations {
  double forward = 1.0;
  double backward = 1.0;  // input gradient (B)
  double weight = 1.0;    // weight gradient (W); folded into B when the schedule does not split
  double sendLatency = 0.0;
  double sendCost = 0.0;
};

// The schedule's bubble fraction by the papers' formulas, in the convention of design.md's
// `pipeline.bubble_fraction_theory`: per stage, idle time / step time, where the step time is
// the time from the step's start until the last stage finishes its last op. Assumes balanced
// stages, zero communication time and, for interleaved and seq1f1b, evenly split chunks and
// segments. With t = forward + backward + weight (one micro-batch, one stage):
//  - gpipe, 1f1b:       (p-1) / (m + p-1)              bubble time (p-1) t, step (m+p-1) t
//  - interleaved-1f1b:  (p-1) / (v m + p-1)            bubble time (p-1) t / v
//  - seq1f1b:           (p-1) / (k m + p-1)            bubble time (p-1) t / k
//  - zb-h1:             bubble time (p-1)(F+B) - (min(m,p)-1) min(F,W), step m t + bubble.
//                       For m >= p and W <= F this is the paper's (p-1)(F+B-W) (Qi et al.
//                       2023); with F = B = W: (p-1) / (3m + p-1), a third of 1f1b's bubble
//                       time. W > F: a deferred W only fills F-sized gaps. (Derived for our
//                       generator and checked against the simulator over a grid of p, m, F, B, W.)
//  - interleaved-zb, zbv: PyTorch's generators are heuristics without a closed form for every
//                       (p, m, F, B, W); the value is the schedule simulated on balanced stages
//                       with these F, B, W and no communication time (what the formulas above
//                       also assume). docs/SCHEDULES.md gives the closed forms where they exist.
// gpipe and 1f1b count B and W together (the papers' "backward"): the formula holds for any
// forward/backward ratio. An invalid ScheduleParams gives its validation error.
Result<double> theoreticalBubbleFraction(const ScheduleParams& params, const OpDurations& durations = {});
// The same by schedule name (a `pp.schedule` value), for analysis code reading knob values.
Result<double> theoreticalBubbleFraction(std::string_view schedule, int stages, int microBatches,
                                         int virtualStages = 1, int segments = 1,
                                         const OpDurations& durations = {});

}  // namespace trainscope::core
