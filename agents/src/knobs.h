// The knob registry and the change protocol. Values live in one atomic word per knob, so a
// read from the job is one load. A change (SetKnob) is validated and queued on the server
// thread; at ts_step_end every rank agrees (allreduce-MIN through the job's callback) on the
// highest change sequence that all ranks have received, and ts_step_begin of the next step
// applies exactly those changes -- the same set at the same step on every rank.
//
// Consensus on content, not only on numbers: two clients can pick the same sequence number at
// once and reach the ranks in different orders, so each rank keeps a digest of what it holds
// under every number. Before applying a newly agreed range the ranks compare digests (two more
// allreduce-MINs, of d and of -d: equal only when min == max); a mismatch makes every rank refuse
// the whole range. A number far ahead of what a rank has (kMaxAhead) is refused and not counted,
// so one stray message cannot open a gap no client may fill.
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
  double min = 0, max = 0;            // the range as KnobList carries it
  int64_t intMin = 0, intMax = 0;     // Int: the declared range exactly (doubles round above 2^53)
  std::vector<std::string> choices;
  uint64_t defaultBits = 0;
  unsigned flags = 0;
  std::atomic<uint64_t> bits{0};  // int64 / double bits / 0-1 / enum index
  std::vector<std::pair<ts_knob_callback, void*>> callbacks;  // guarded by the registry lock
  ts_knob_check_fn check = nullptr;  // guarded by the registry lock (ts_knob_set_check)
  void* checkCtx = nullptr;
};

namespace trainscope::agent {

// What a job may declare (agent.h, ts_knob_*): a KnobList reply holds every knob and must stay far
// below the 16 MiB frame limit (256 x (4 KiB + 64 x 128 B) < 3 MiB).
inline constexpr size_t kMaxKnobs = 256;
inline constexpr size_t kMaxKnobName = 128;
inline constexpr size_t kMaxKnobDescription = 4096;
inline constexpr size_t kMaxKnobChoices = 64;
inline constexpr size_t kMaxKnobChoice = 128;

class KnobRegistry {
 public:
  static KnobRegistry& instance();

  // Returns the existing knob of that name if it has the same type; null (why: the reason) when
  // it has another type, or when the registry holds kMaxKnobs already.
  ts_knob* add(std::unique_ptr<ts_knob> k, std::string* why = nullptr);
  bool onChange(ts_knob* k, ts_knob_callback cb, void* ctx);
  bool setCheck(ts_knob* k, ts_knob_check_fn fn, void* ctx);

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
  // How far ahead of the contiguous sequence a change may be and still count.
  static constexpr uint64_t kMaxAhead = 256;
  // At most this many numbers beyond the last agreed one: gap fills, refusals and pending changes
  // from all clients together, so that a client cannot push one rank further ahead of the
  // others than a client may fill (LiveSession fills up to 4096; issue 40: 5,000 gap fills to
  // one rank wedged `set` for good). A change beyond it waits (the server holds that client's
  // requests) until the next agreement makes room, and is refused if none comes.
  static constexpr uint64_t kMaxUnagreed = 1024;
  bool beyondWindow(uint64_t seq) const { return seq > agreed_.load() + kMaxUnagreed; }
  // Whether a SetKnob under seq should wait for an agreement: it would count (new, not too far
  // ahead of the contiguous sequence) but lies beyond the window. Others are answered at once.
  bool mustWait(uint64_t seq) const {
    const uint64_t c = contiguous_.load();
    return seq > c && seq <= c + kMaxAhead && beyondWindow(seq);
  }
  uint64_t agreedSeq() const { return agreed_.load(); }
  // Ranges refused for a digest mismatch so far (tests).
  uint64_t digestMismatches() const { return mismatches_.load(); }
  uint64_t contiguousSeq() const { return contiguous_.load(); }
  void resetChangesForTest();

 private:
  struct Pending {
    ts_knob* knob;
    uint64_t bits;
    std::string text;
  };
  ts_knob* findLocked(const std::string& name) const;
  void markReceivedLocked(uint64_t seq, uint64_t contentHash);
  int64_t digestLocked(uint64_t from, uint64_t to) const;  // (from, to]

  mutable std::mutex mu_;
  std::deque<std::unique_ptr<ts_knob>> knobs_;
  std::set<uint64_t> receivedAhead_;    // received seqs above contiguous_
  std::map<uint64_t, Pending> queued_;  // accepted, waiting for agreement
  std::atomic<uint64_t> contiguous_{0};
  std::atomic<uint64_t> agreed_{0};
  std::map<uint64_t, uint64_t> content_;           // received seq -> hash of what it holds, until agreed
  std::vector<core::wire::KnobAck> refusals_;      // digest mismatches, acked at the next step begin
  std::atomic<uint64_t> mismatches_{0};
  uint64_t applied_ = 0;  // job thread only
};

}  // namespace trainscope::agent
