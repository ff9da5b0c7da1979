// Analysis: turns a trace into the numbers of the `analyze --json` contract (docs/ANALYSIS.md,
// ../shared/design.md "Metric definitions"). What counts as compute, communication, a step, a
// bucket, a stage or a DISCO layer is docs/TRACE_CONVENTIONS.md.
//
// Works on a whole store (analyzeStore) and incrementally: an Analyzer analyses each step once,
// when every rank has started a later step (or at finish()), and result() aggregates what it has.
// All times in results are milliseconds unless the name ends in Ns (session clock, ns).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trainscope/core/analysis/hta.h"
#include "trainscope/core/analysis/intervals.h"
#include "trainscope/core/model/trace_store.h"

namespace trainscope::core {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// An event of the analysed store (index into store.events(track)). Valid while the store is
// not appended to (live sessions: until the next flush).
struct EventRef {
  TrackId track = kInvalidTrack;
  uint32_t index = 0;
  bool operator==(const EventRef&) const = default;
};

// Time ranges the timeline draws on top of events: bubbles per stage, exposed communication
// per rank, the critical path.
enum class OverlayKind : uint8_t { Bubble, ExposedComm, CriticalPath };
struct Overlay {
  OverlayKind kind = OverlayKind::Bubble;
  RankId rank = 0;
  int stage = -1;  // bubbles
  int64_t step = 0;
  int64_t startNs = 0;
  int64_t endNs = 0;
  std::string label;  // "warm-up, waiting for rank 1"
};

struct StepStat {
  int64_t step = 0;
  int ranks = 0;        // ranks with this step's window
  double timeMs = 0;    // mean over those ranks of the window length
  double spanMs = 0;    // max end - min start over ranks
  int64_t startNs = 0;  // min start over ranks
};

struct StepsResult {
  int count = 0;
  double meanMs = kNaN;
  double p50Ms = kNaN;
  int incomplete = 0;  // step events without a positive length (missing end)
  std::vector<StepStat> perStep;
};

struct BreakdownStep {
  int64_t step = 0;
  int64_t startNs = 0, endNs = 0;
  double stepMs = 0, computeMs = 0, overlappedCommMs = 0, exposedCommMs = 0, idleMs = 0;
};

// Per rank, means per step. computeMs + overlappedCommMs + exposedCommMs + idleMs == stepMs.
struct RankBreakdown {
  RankId rank = 0;
  int steps = 0;
  double stepMs = kNaN, computeMs = kNaN, overlappedCommMs = kNaN, exposedCommMs = kNaN, idleMs = kNaN;
  double computeTotalMs = kNaN;  // computeMs + overlappedCommMs
  double outsideStepsMs = 0;     // activity outside every step window, total (not per step)
  std::vector<BreakdownStep> perStep;
};

struct BubbleWait {
  RankId peer = -1;  // -1: not waiting for a peer's data (end of step, no matching receive)
  double ms = 0;     // mean per step
};

struct MicroBatchTiming {
  int64_t microBatch = 0;
  int64_t chunk = 0;
  double fMs = kNaN, bMs = kNaN, wMs = kNaN;  // mean duration of the op
};

struct StageStep {
  int64_t step = 0;
  RankId rank = 0;
  double bubbleMs = kNaN, bubbleFraction = kNaN, bubbleFractionTheory = kNaN;
  double bubbleFractionSimulated = kNaN;
};

struct StageResult {
  int stage = 0;
  std::vector<RankId> ranks;
  int samples = 0;  // (rank, step) windows
  double stepMs = kNaN;
  double bubbleMs = kNaN;  // mean per step
  double bubbleFraction = kNaN;
  double bubbleFractionTheory = kNaN;
  // The schedule simulated with this step's measured mean F/B/W durations per stage and chunk
  // and zero communication time, mean over steps: the bubble the schedule leaves with these
  // stage times (imbalance included). Measured minus this is what hand-offs, jitter and
  // per-step overheads cost.
  double bubbleFractionSimulated = kNaN;
  double warmupMs = 0, steadyMs = 0, cooldownMs = 0;  // mean per step, sums to bubbleMs
  std::vector<BubbleWait> waits;                      // mean per step, by peer
  // Hand-offs this stage waited for (a receive posted before the matching send started, paired
  // per peer in order): per step, the sum of send start -> receive end, mean over steps; their
  // count per step; and the mean per hand-off in microseconds. What the message itself costs on
  // top of the schedule -- the part of measured - simulated that communication explains.
  double handoffMs = kNaN, handoffsPerStep = kNaN, handoffLatencyUs = kNaN;
  double fMs = kNaN, bMs = kNaN, wMs = kNaN;          // mean op durations
  std::vector<MicroBatchTiming> microBatches;
  std::vector<StageStep> perStep;  // each (rank, step) window of the stage
};

struct PipelineResult {
  bool present = false;
  std::string schedule;        // in force at the last analysed step
  std::string scheduleSource;  // "knob", "metadata" or "inferred"
  int stages = 0, microbatches = 0, virtualStages = 1;
  double bubbleFraction = kNaN;           // mean over stages
  double bubbleFractionTheory = kNaN;     // mean over steps of the formula in force
  double bubbleFractionSimulated = kNaN;  // mean over stages of StageResult's
  std::vector<StageResult> perStage;
};

struct BucketResult {
  int64_t bucket = 0;
  int samples = 0;                              // (rank, step) pairs with this bucket's communication
  double bytes = kNaN;                          // per step
  double readyMs = kNaN;                        // Bucket event start - step start, mean
  double commStartMs = kNaN, commEndMs = kNaN;  // relative to the step start, mean
  double commMs = kNaN, hiddenMs = kNaN, exposedMs = kNaN;  // per step, mean
  double overlapRatio = kNaN;  // per rank |comm ∩ compute| / |comm|, mean over ranks
};

struct DpRank {
  RankId rank = 0;
  double overlapRatio = kNaN;
  double commMs = kNaN, exposedCommMs = kNaN;  // per step
};

// One (rank, step) window drawn as it was, for the bucket-overlap chart: compute and each
// bucket's communication, in ms relative to the step start (the last window with buckets).
struct DpExample {
  RankId rank = -1;
  int64_t step = 0;
  double stepMs = 0;
  std::vector<std::pair<double, double>> compute;
  std::map<int64_t, std::vector<std::pair<double, double>>> buckets;
  std::map<int64_t, double> ready;
};

struct DpStep {
  int64_t step = 0;
  double commMs = 0, exposedCommMs = 0;  // gradient communication, mean over ranks
};

struct DataParallelResult {
  bool present = false;
  DpExample example;
  std::vector<DpStep> perStep;
  double overlapRatio = kNaN;   // mean over ranks
  double exposedCommMs = kNaN;  // per step, mean over ranks
  std::vector<DpRank> perRank;
  std::vector<BucketResult> buckets;
};

// One collective type and message-size class (powers of two). nccl-tests conventions: bytes is
// the payload (the buffer the operation reduces or moves, the Bytes attribute; for a gradient
// bucket 4 bytes per value), algbw = payload / time; busbw = algbw * factor(type, n), the factor
// applied once. bytesSent/bytesReceived: what the transport counted per operation (the
// bytes_sent / bytes_received attributes), NaN unless every operation of the class has them;
// wireGBps = bytes sent / time.
struct BandwidthClass {
  std::string collective;      // allreduce, allgather, reducescatter, broadcast, reduce, alltoall, sendrecv
  int64_t sizeClassBytes = 0;  // lower bound 2^k of [2^k, 2^(k+1))
  int ranks = 0;               // n used for busbw
  uint64_t count = 0;
  double bytes = 0;      // mean per operation
  double timeMs = 0;     // mean per operation
  double algbwGBps = 0;  // sum bytes / sum time
  double busbwGBps = 0;
  double payloadBytes = 0;                        // == bytes (the key says which it is)
  double bytesSent = kNaN, bytesReceived = kNaN;  // mean per operation, counted
  double wireGBps = kNaN;
};

struct StragglerStep {
  int64_t step = 0;
  double skewMs = 0;      // max - min over ranks of compute time in the step
  RankId straggler = -1;  // the rank with the most compute: the one the others wait for
  double waitMs = 0;      // mean over the other ranks of (straggler's compute - theirs)
};

struct StragglerResult {
  double meanSkewMs = kNaN;
  RankId slowestRank = -1;  // straggler most often
  std::map<RankId, int> stragglerCounts;
  std::vector<StragglerStep> perStep;
};

struct DiscoPoint {
  double sparsity = 0;
  int samples = 0;  // (rank, step) pairs
  double lCommMs = kNaN, lCompMs = kNaN, bytes = kNaN;
  double accuracy = kNaN;  // mean `accuracy` counter over these steps
  double lOverlapMs = kNaN;  // |exchanges ∩ kernels| per step: the exchange time hidden under compute
};

struct DiscoLayer {
  int64_t layer = 0;
  int nodes = 0;                                        // N: ranks exchanging this layer's features
  double sparsity = 0;                                  // in force at the last analysed step
  double lCommMs = kNaN, lCompMs = kNaN, bytes = kNaN;  // at that sparsity, per step
  double lOverlapMs = kNaN;                             // |exchanges ∩ kernels| at that sparsity, per step
  double bandwidthGBps = kNaN;                          // B = bytes / l_comm
  double commDenseMs = kNaN;                            // F_s / B   = l_comm / (1 - S)
  double compDenseMs = kNaN;                            // C_c/(N C) = l_comp / (1 - (N-1)/N S)
  double ratioA = kNaN;                                 // A = commDense / compDense
  double equilibriumSparsity = kNaN;                    // (A N - N) / (A N - N + 1), 0 when A < 1
  bool commBound = false;                               // A >= 1
  std::vector<DiscoPoint> bySparsity;
};

// One row of trainscope-train's DISCO inference benchmark (--disco-bench), read from its
// disco_bench_* counters (TRACE_CONVENTIONS.md): whole-model latency per inference.
struct DiscoInferencePoint {
  double sparsity = 0;
  bool independent = false;  // sparsity 1 trained from scratch
  double bytes = kNaN, latencyPipelinedMs = kNaN, latencyWaitMs = kNaN, accuracy = kNaN;
};

struct CriticalSegment {
  RankId rank = 0;
  EventKind kind = EventKind::Range;
  std::string name;
  int64_t startNs = 0, endNs = 0;
  EventRef ref;
};

struct CriticalPathStep {
  int64_t step = 0;
  double lengthMs = 0;  // from the earliest rank's step start to the last event's end
  double computeMs = 0, commMs = 0, waitMs = 0;  // sum to lengthMs
  std::map<RankId, double> perRankMs;            // busy time on the path per rank
  std::vector<CriticalSegment> segments;         // in time order
};

struct KnobChangeEntry {
  int64_t step = 0;
  int64_t timeNs = 0;
  std::map<std::string, std::string> values;
};

struct AnalysisResult {
  std::vector<RankId> ranks;
  StepsResult steps;
  std::vector<RankBreakdown> breakdown;  // one per rank, rank order
  PipelineResult pipeline;
  DataParallelResult dataParallel;
  std::vector<BandwidthClass> collectives;
  StragglerResult stragglers;
  std::vector<DiscoLayer> disco;
  std::vector<DiscoInferencePoint> discoInference;  // in the order measured
  std::vector<CriticalPathStep> criticalPath;
  std::vector<KnobChangeEntry> knobChanges;
  HtaResult hta;  // computed by Analyzer::finish (whole trace); empty before it
  std::vector<Overlay> overlays;
  // Metric key ("data_parallel.buckets[2]", "pipeline.per_stage[1]", "disco.layers[0]") -> the
  // events it was computed from, for "click a metric, select its events".
  std::map<std::string, std::vector<EventRef>> sources;
};

class AnalyzerState;

class Analyzer {
 public:
  Analyzer();
  ~Analyzer();
  Analyzer(const Analyzer&) = delete;
  Analyzer& operator=(const Analyzer&) = delete;

  // Analyses the steps that every rank has finished (a later step has started) and that were
  // not analysed yet. Call after appending events (live sessions). Returns steps analysed now.
  // With a budget, it stops after the step that used it up (caughtUp() is then false): a caller
  // under a shared lock releases it between calls so that the store's owner can publish.
  int update(const TraceStore& store, int64_t budgetNs = INT64_MAX);
  bool caughtUp() const;
  // Analyses every remaining step (end of a session).
  int finish(const TraceStore& store);
  // Aggregates everything analysed so far. Cheap: O(analysed steps x ranks).
  AnalysisResult result(const TraceStore& store) const;
  int analysedSteps() const;

  // Live retention (TraceStore::evictBefore): events that start before this time are no longer
  // needed -- every step window that starts earlier is analysed, and instants (steps, knob
  // changes, counters) are scanned up to it. INT64_MIN before the first update().
  int64_t safeEvictBeforeNs() const;
  // The store dropped dropped[t] events from the front of track t (those starting before
  // cutoffNs): the per-step state of analysed steps that ended before the cutoff on every rank
  // goes too (records, critical path, windows; accuracy and DISCO samples before it), so the
  // result then covers the steps still in memory and the analyser's memory is bounded like the
  // store's. Cumulative tables (bandwidth classes, knob changes) stay. The kept events' indices
  // (metric sources) are re-based and overlays that end before the cutoff go.
  void evicted(const std::vector<size_t>& dropped, int64_t cutoffNs);
  // Keeps the per-step state of steps fromStep .. toStep only (records, critical paths, windows):
  // result() then aggregates that window of steps (the what-if's model of one setting in a
  // recording that ran several). Cumulative tables (bandwidth classes, knob changes) stay.
  void keepSteps(int64_t fromStep, int64_t toStep);

 private:
  std::unique_ptr<AnalyzerState> s_;
};

// Whole-store analysis: Analyzer::finish + result.
AnalysisResult analyzeStore(const TraceStore& store);
// The same over the steps fromStep .. toStep only (Analyzer::keepSteps).
AnalysisResult analyzeStore(const TraceStore& store, int64_t fromStep, int64_t toStep);

// The `analyze --json` document (contract keys, docs/ANALYSIS.md).
std::string analysisToJson(const AnalysisResult& result, int indent = 2);

// Theory: the bubble fraction of total time for a schedule (gpipe, 1f1b, interleaved-1f1b,
// zb-h1, seq1f1b) with p stages, m micro-batches (for seq1f1b: m x segments), v virtual stages,
// and for zb-h1 the F, B, W op times (all equal when not known). NaN for an unknown schedule.
double bubbleFractionTheory(const std::string& schedule, int p, int m, int v, double tf = 1, double tb = 1,
                            double tw = 1);

// NCCL's bus-bandwidth factor for a collective type over n ranks.
double busBandwidthFactor(const std::string& collective, int n);
// "ncclAllReduce", "allreduce", "nccl:all_reduce" -> "allreduce"; P2P -> "sendrecv".
std::string collectiveType(EventKind kind, std::string_view name);

// DISCO equilibrium sparsity (background.md 1): (A N - N) / (A N - N + 1), 0 when A < 1.
double discoEquilibriumSparsity(double a, int n);

}  // namespace trainscope::core
