// The Chrome trace importer's state. Events arrive one at a time from the SAX reader
// (chrome_import.cpp: onEvent) and wait as Pending records, because which rank a pid is and
// which track a tid is can only be decided once every process_name/thread_name and the
// top-level otherData have been seen -- they may come anywhere in the file. finish()
// (chrome_import_resolve.cpp) then settles ranks and tracks, binds flow events, and appends.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <variant>
#include <vector>

#include "interop/chrome/json_reader.h"
#include "trainscope/core/model/trace_store.h"

namespace trainscope::core::chrome {

using JsonId = std::variant<int64_t, std::string>;  // a pid or tid as written: number or string

struct ProcessState {
  JsonId key;
  std::optional<RankInfo> ours;  // from our own process_name args
  bool gpu = false;              // has a thread with GPU activity (Kineto's device "process")
  RankId rank = 0;
};

struct OwnTrack {
  TrackKind kind = TrackKind::CpuThread;
  int64_t externalId = 0;
  std::string name;
};

// What a PyTorch event is, beyond its kind, until the whole file is known: whether a host-side
// op is compute or communication depends on whether the trace has GPU kernels (finish():
// classifyPyTorch).
enum class HostRole : uint8_t {
  None,
  CpuOp,     // Kineto "cpu_op" (or any uncategorised op of the legacy profiler's output)
  HostComm,  // gloo:*, c10d::*, record_param_comms: communication on CPU-only traces
  HostNccl,  // nccl:* on the host: the launch of a GPU collective, not communication time
  PipeOp,    // torch.distributed.pipelining: "Forward i", "Backward i", "PP:<stage><F|B|I|W><mb>"
};

struct OpenSlice {  // a "B" waiting for its "E"
  int64_t start = 0;
  StringId name = kEmptyString;
  EventKind kind = EventKind::Range;
  HostRole role = HostRole::None;
  std::vector<Attr> attrs;
};

struct ThreadState {
  uint32_t process = 0;
  JsonId key;
  size_t firstSeen = 0;
  std::string name;
  std::optional<int64_t> sortIndex;
  std::optional<OwnTrack> ours;  // from our own thread_name args
  bool gpu = false;
  bool hasSlices = false;  // any event that is not a foreign counter sample
  std::vector<OpenSlice> open;
  TrackId track = kInvalidTrack;
};

struct Pending {  // an event waiting for its track
  uint32_t thread = 0;
  int64_t start = 0;
  int64_t end = 0;
  StringId name = kEmptyString;
  EventKind kind = EventKind::Range;
  bool counterSample = false;  // "C": goes to the rank's counter track unless the thread is ours
  HostRole role = HostRole::None;
  uint32_t attrBegin = 0;
  uint32_t attrCount = 0;
};

struct FlowStep {
  uint32_t thread = 0;
  int64_t ts = 0;
  uint32_t group = 0;
  bool enclosing = true;  // bind to the slice around ts; else to the next slice starting at/after ts
};

class Importer {
 public:
  explicit Importer(std::string_view source, bool partial = false) : source_(source), partial_(partial) {}

  Status onEvent(const RawEvent& raw);
  Result<TraceStore> finish(const ReadResult& read);

 private:
  Status bad(size_t index, const std::string& what);
  uint32_t process(const JsonId& pid);
  uint32_t thread(uint32_t process, const JsonId& tid);
  void metadataEvent(const JsonValue& ev, uint32_t thread);
  void counterEvent(const JsonValue& ev, uint32_t thread, int64_t ts, StringId name);
  void addPending(uint32_t thread, int64_t start, int64_t end, StringId name, EventKind kind,
                  const std::vector<Attr>& attrs, bool counterSample = false, HostRole role = HostRole::None);
  void classifyPyTorch();
  void assignBuckets();
  void pipelineOps(const std::set<uint32_t>& mainThreads);
  void commBytes(Pending& p);

  Status shiftTimes(int64_t base);
  void resolveRanks(const Json& top);
  void resolveTracks();
  void bindFlows();
  void appendEvents();
  void setMetadata(const Json& top, bool ours);

  std::string_view source_;
  TraceStore store_;
  std::vector<ProcessState> processes_;
  std::map<JsonId, uint32_t> processIndex_;
  std::vector<ThreadState> threads_;
  std::map<std::pair<uint32_t, JsonId>, uint32_t> threadIndex_;
  std::vector<Pending> pending_;
  std::vector<Attr> attrs_;  // attributes of all pending events, back to back
  std::vector<Attr> scratch_;
  std::string catScratch_, nameScratch_;  // "cat" and "name" that are not strings, as JSON text
  std::vector<FlowStep> flowSteps_;
  std::map<std::tuple<std::string, std::string, std::string>, uint32_t> flowGroups_;  // (cat, name, id)
  std::unordered_map<uint32_t, int64_t> addedFlowId_;  // pending index -> FlowId from flow events
  std::map<RankId, TrackId> counterTracks_;
  uint64_t skipped_ = 0;
  bool partial_ = false;      // events that break the format are skipped, not fatal
  uint64_t invalid_ = 0;      // such events skipped (partial_ only)
  std::string firstInvalid_;  // the first one's message
  bool sawCpuOps_ = false;
  bool pyTorchGpu_ = false;    // the PyTorch trace has GPU activity
  bool fractionalTs_ = false;  // a "ts" with a fraction, or an event without "ts" (HTA then rounds)
  int64_t timeShift_ = 0;  // ns added to every ts (baseTimeNanoseconds, our origin)      // any event that is
                           // a PyTorch host op (cpu_op or legacy)

 public:
  // --partial: a read that stopped early (truncated JSON) still keeps the events before it.
  void noteTruncated(const std::string& why) {
    ++invalid_;
    if (firstInvalid_.empty()) firstInvalid_ = why;
  }
};

}  // namespace trainscope::core::chrome
