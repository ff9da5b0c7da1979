// The knob registry and the change protocol. Values live in one atomic word per knob, so a
// read from the job is one load. A change (SetKnob) is validated and queued on the server
// thread; at ts_step_end every rank agrees (allreduce-MIN through the job's callback) on the
// highest change sequence that all ranks have received, and ts_step_begin of the next step
// applies exactly those changes -- the same set at the same step on every rank.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "trainscope/agent.h"
#include "trainscope/core/wire/protocol.h"

// The C API's opaque ts_knob_t points at one of these.
struct ts_knob {
  std::string name;
  std::string description;
  trainscope::core::wire::KnobType type = trainscope::core::wire::KnobType::Int;
  double min = 0, max = 0;
  std::vector<std::string> choices;
  uint64_t defaultBits = 0;
  unsigned flags = 0;
  std::atomic<uint64_t> bits{0};  // int64 / double bits / 0-1 / enum index
  std::vector<std::pair<ts_knob_callback, void*>> callbacks;  // guarded by the registry lock
};

namespace trainscope::agent {

class KnobRegistry {
 public:
  static KnobRegistry& instance();

  ts_knob* add(std::unique_ptr<ts_knob> k);  // returns the existing knob of that name, if any
  bool onChange(ts_knob* k, ts_knob_callback cb, void* ctx);

  // Parses text for k; the bits, or nullopt and a reason.
  static std::optional<uint64_t> parse(const ts_knob& k, const std::string& text, std::string& reason);
  static std::string format(const ts_knob& k, uint64_t bits);

  core::wire::KnobList list(int64_t currentStep) const;

  // Server thread. worldSize/haveAgree decide whether changes can be agreed at all.
  core::wire::KnobAck receive(const core::wire::SetKnob& s, int32_t worldSize, bool haveAgree);

  // Job thread, inside ts_step_end: runs the agreement (agree may be null for world size 1).
  void agreeAtStepEnd(ts_agree_fn agree, void* ctx);
  // Job thread, inside ts_step_begin: applies agreed changes; acks go to sink.
  void applyAtStepBegin(int64_t step, const std::function<void(const core::wire::KnobAck&)>& sink);

  // Job thread: the job sets k back to text at step (ts_knob_restore). False if text is invalid.
  bool restore(ts_knob* k, const std::string& text, int64_t step);

  uint64_t lastReceivedSeq() const;
  uint64_t contiguousSeq() const { return contiguous_.load(); }
  void resetChangesForTest();

 private:
  struct Pending {
    ts_knob* knob;
    uint64_t bits;
    std::string text;
  };
  ts_knob* findLocked(const std::string& name) const;
  void markReceivedLocked(uint64_t seq);

  mutable std::mutex mu_;
  std::deque<std::unique_ptr<ts_knob>> knobs_;
  std::set<uint64_t> receivedAhead_;    // received seqs above contiguous_
  std::map<uint64_t, Pending> queued_;  // accepted, waiting for agreement
  std::atomic<uint64_t> contiguous_{0};
  std::atomic<uint64_t> agreed_{0};
  uint64_t applied_ = 0;  // job thread only
};

}  // namespace trainscope::agent
