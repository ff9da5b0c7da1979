// Analyzer internals: what one (rank, step) window contributes, kept per step so that results
// can be re-aggregated cheaply as a live session grows.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "trainscope/core/analysis/analysis.h"

namespace trainscope::core {

// One event of a window, classified once.
struct WinEvent {
  EventKind kind = EventKind::Range;
  int64_t start = 0, end = 0;
  StringId name = kEmptyString;
  EventRef ref;
  int64_t microBatch = -1, chunk = 0, stage = -1, bucket = -1, layer = -1, peer = -1;
  int64_t flow = -1, seq = -1, commHash = 0;
  double bytes = 0;
  // A gradient bucket's transport counts (custom attributes bytes_sent / bytes_received that
  // trainscope-train attaches); negative when the event has none (not counted, or not a bucket).
  double bytesSent = -1, bytesReceived = -1;
  bool neighbour = false;  // a decentralized bucket: neighbour exchange, not an allreduce
  bool compute = false, comm = false, discoExchange = false;
  // A layer's kernel that a what-if calibration ran (name "calibrate ..."; trainscope-train
  // times the layers alone at a change): compute of the step, but not the layer's work.
  bool calibration = false;
  // An NCCL all-reduce or reduce-scatter kernel (HTA's name rule, see NameClass): gradient
  // communication of a window whose collectives carry no Bucket attribute.
  bool gradKernel = false;
};

// What an event's name says, per string id (NameClass bits), computed once per string.
enum NameClass : uint8_t {
  kNameCalibrate = 1,   // "calibrate ..." (trainscope-train's what-if calibration)
  kNameNcclKernel = 2,  // HTA's communication kernel: matches ^nccl.*Kernel
  kNameGradKernel = 4,  // ... of an all-reduce or reduce-scatter (a gradient reduction)
};
// Extends classes to every id of the table (the ids it already has keep their bits).
void classifyNames(const StringTable& strings, std::vector<uint8_t>& classes);

// Everything of one rank inside one step window (events clipped by the window's intervals).
struct WindowEvents {
  Interval window;
  std::vector<WinEvent> events;  // compute, communication, bucket and knob-free events
  IntervalList compute, comm;
};

struct BucketRecord {
  int64_t bucket = 0;
  int64_t readyRel = -1;  // Bucket event start - window start, -1 when absent
  int64_t commStartRel = 0, commEndRel = 0;
  int64_t comm = 0, hidden = 0;
  double bytes = 0;
  IntervalList intervals;  // the bucket's communication (union), session clock
  std::vector<EventRef> refs;
};

struct OpRecord {
  EventKind kind = EventKind::MicroBatchF;
  int64_t microBatch = 0, chunk = 0;
  int64_t dur = 0;
};

struct LayerRecord {
  int64_t layer = 0;
  int64_t comp = 0, comm = 0, overlap = 0;  // overlap: |comm ∩ comp|
  double bytes = 0;
  std::vector<EventRef> refs;
};

struct RankStepRecord {
  RankId rank = 0;
  int64_t step = 0;
  Interval window;
  int64_t computeOnly = 0, overlapped = 0, exposed = 0, idle = 0;
  int64_t outside = 0;  // activity between the previous window of this rank and this one
  int64_t gradComm = 0, gradHidden = 0;
  std::vector<BucketRecord> buckets;
  // Pipeline
  int stage = -1;
  int64_t bubble = 0, warmup = 0, steady = 0, cooldown = 0;
  std::map<RankId, int64_t> waits;
  // Hand-offs this rank waited for: per point-to-point receive that started before the matching
  // send (paired per peer in order), send start -> receive end.
  int64_t handoff = 0;
  int handoffs = 0;
  std::vector<OpRecord> ops;
  int chunks = 0;        // distinct chunks on this rank in this step
  int microBatches = 0;  // distinct micro-batch ids of F ops
  int fOps = 0;
  bool wOps = false;
  bool gpipeOrder = true;  // first B starts after the last F ends
  std::vector<EventRef> opRefs;
  std::vector<LayerRecord> layers;
  std::vector<Overlay> overlays;
};

struct BwKey {
  std::string type;
  int64_t commHash = 0;
  int64_t sizeClass = 0;
  auto operator<=>(const BwKey&) const = default;
};
struct BwAcc {
  uint64_t count = 0;
  double bytes = 0;  // payload (the Bytes attribute)
  int64_t time = 0;
  uint64_t counted = 0;  // operations with transport counts
  double sent = 0, received = 0;
  int64_t countedTime = 0;
};

struct KnobEvent {
  int64_t step = 0;
  int64_t timeNs = 0;
  std::string knob, value;
};

class AnalyzerState {
 public:
  // Per rank: step number -> window (from Step events), rebuilt on each update.
  std::map<RankId, std::map<int64_t, Interval>> windows;
  int incompleteSteps = 0;
  std::set<int64_t> done;                   // analysed step numbers
  std::map<RankId, int64_t> lastWindowEnd;  // for outside_steps accounting
  std::vector<RankStepRecord> records;      // in analysis order
  std::map<int64_t, CriticalPathStep> critical;
  std::map<BwKey, BwAcc> bandwidth;
  std::map<int64_t, std::set<RankId>> commRanks;  // comm hash -> ranks seen
  std::vector<KnobEvent> knobs;
  std::set<std::tuple<int64_t, std::string, std::string>> knobSeen;
  // (rank, time) -> (step or -1, value) of `accuracy` counters
  std::map<std::pair<RankId, int64_t>, std::pair<int64_t, double>> accuracySamples;
  // disco_bench_* counters: rank -> counter name -> time -> value
  std::map<RankId, std::map<std::string, std::map<int64_t, double>>> discoBench;
  std::set<std::pair<RankId, int64_t>> incompleteSeen;
  int64_t scanFrom = INT64_MIN / 4;  // steps, knobs and counters are scanned from here on
  std::map<RankId, std::vector<TrackId>> tracksByRank;
  std::set<RankId> allRanks;
  std::map<std::string, std::string> metadata;
  std::map<RankId, int64_t> newestByRank;  // start of each rank's newest event
  std::map<RankId, int64_t> outsideTail;
  DpExample dpExample;  // activity after the last window (finish only)

  void refreshLayout(const TraceStore& store);
  void scanInstants(const TraceStore& store, int64_t from);
  int analyse(const TraceStore& store, bool all, int64_t budgetNs);
  bool stoppedEarly = false;  // the last analyse() ran out of its budget
  void analyseStep(const TraceStore& store, int64_t step);
  // Hand-off waits of this step's records (records[first..]) from the ranks' p2p events.
  void recordHandoffs(const std::map<RankId, WindowEvents>& perRank, size_t first);
  void rememberDpExample(const RankStepRecord& rec, const WindowEvents& we);
  HtaResult hta;  // set by Analyzer::finish
  // Per string id its NameClass bits, extended when the store's string table has grown (a live
  // session interns names as they arrive).
  std::vector<uint8_t> nameClass;
};

// analysis_window.cpp
// names[id]: the NameClass bits of string id (classifyNames).
WindowEvents collectWindow(const TraceStore& store, const std::vector<TrackId>& tracks, Interval w,
                           const std::vector<StringId>& phaseNames, StringId discoName,
                           const std::vector<uint8_t>& names);
RankStepRecord recordWindow(const WindowEvents& we, RankId rank, int64_t step);
// Union of compute and communication of a rank inside [t0, t1).
int64_t activityIn(const TraceStore& store, const std::vector<TrackId>& tracks, Interval w,
                   const std::vector<StringId>& phaseNames);
// analysis_pipeline.cpp
void recordPipeline(const WindowEvents& we, RankStepRecord& rec);
void aggregatePipeline(const AnalyzerState& s, AnalysisResult& out);
// analysis_critical.cpp
CriticalPathStep criticalPath(const TraceStore& store, int64_t step,
                              const std::map<RankId, WindowEvents>& perRank);
// analysis_aggregate.cpp
AnalysisResult aggregate(const AnalyzerState& s, const TraceStore& store);
// Knob value in force at a step ("" when never set): the latest KnobChange with Step <= step,
// else the session metadata "knob.<name>"; *source says which ("knob" or "metadata").
std::string knobAt(const AnalyzerState& s, const std::string& knob, int64_t step,
                   const char** source = nullptr);

}  // namespace trainscope::core
