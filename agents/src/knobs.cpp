#include "knobs.h"

#include <bit>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "capture.h"
#include "string_table.h"

namespace trainscope::agent {

using core::wire::KnobType;

KnobRegistry& KnobRegistry::instance() {
  static KnobRegistry* r = new KnobRegistry();  // leaked: knobs outlive static destruction
  return *r;
}

ts_knob* KnobRegistry::findLocked(const std::string& name) const {
  for (const auto& k : knobs_)
    if (k->name == name) return k.get();
  return nullptr;
}

ts_knob* KnobRegistry::add(std::unique_ptr<ts_knob> k, std::string* why) {
  std::lock_guard lock(mu_);
  if (ts_knob* existing = findLocked(k->name)) {
    // The same name with another type would read the other's bits (an int read as a double:
    // 2.5e-323): refused.
    if (existing->type != k->type || existing->choices != k->choices) {
      if (why) *why = k->name + ": already declared with another type or other choices";
      return nullptr;
    }
    return existing;
  }
  if (knobs_.size() >= kMaxKnobs) {
    if (why) *why = k->name + ": more than " + std::to_string(kMaxKnobs) + " knobs";
    return nullptr;
  }
  k->bits.store(k->defaultBits);
  knobs_.push_back(std::move(k));
  return knobs_.back().get();
}

bool KnobRegistry::onChange(ts_knob* k, ts_knob_callback cb, void* ctx) {
  if (!k || !cb) return false;
  std::lock_guard lock(mu_);
  k->callbacks.emplace_back(cb, ctx);
  return true;
}

bool KnobRegistry::setCheck(ts_knob* k, ts_knob_check_fn fn, void* ctx) {
  if (!k) return false;
  std::lock_guard lock(mu_);
  k->check = fn;
  k->checkCtx = ctx;
  return true;
}

std::optional<uint64_t> KnobRegistry::parse(const ts_knob& k, const std::string& text, std::string& reason) {
  const char* b = text.data();
  const char* e = b + text.size();
  switch (k.type) {
    case KnobType::Int: {
      int64_t v = 0;
      auto [p, ec] = std::from_chars(b, e, v);
      if (ec != std::errc() || p != e || text.empty()) {
        reason = k.name + ": '" + text + "' is not an integer";
        return std::nullopt;
      }
      // Compared as integers: near INT64_MAX the double range rounds up to 2^63, which would
      // both accept values above the maximum and overflow when converted back (found by fuzz_knobs).
      if (v < k.intMin || v > k.intMax) {
        reason = k.name + ": " + text + " is out of range [" + std::to_string(k.intMin) + ", " +
                 std::to_string(k.intMax) + "]";
        return std::nullopt;
      }
      return std::bit_cast<uint64_t>(v);
    }
    case KnobType::Float: {
      double v = 0;
      auto [p, ec] = std::from_chars(b, e, v);
      if (ec != std::errc() || p != e || text.empty() || !std::isfinite(v)) {
        reason = k.name + ": '" + text + "' is not a number";
        return std::nullopt;
      }
      if (v < k.min || v > k.max) {
        reason = k.name + ": " + text + " is out of range [" + format(k, std::bit_cast<uint64_t>(k.min)) + ", " +
                 format(k, std::bit_cast<uint64_t>(k.max)) + "]";
        return std::nullopt;
      }
      return std::bit_cast<uint64_t>(v);
    }
    case KnobType::Bool:
      if (text == "true" || text == "1" || text == "on" || text == "yes") return 1;
      if (text == "false" || text == "0" || text == "off" || text == "no") return 0;
      reason = k.name + ": '" + text + "' is not a boolean (true/false)";
      return std::nullopt;
    case KnobType::Enum: {
      for (size_t i = 0; i < k.choices.size(); ++i)
        if (k.choices[i] == text) return i;
      reason = k.name + ": '" + text + "' is not one of";
      for (const auto& c : k.choices) reason += " " + c;
      return std::nullopt;
    }
  }
  reason = "unknown knob type";
  return std::nullopt;
}

std::string KnobRegistry::format(const ts_knob& k, uint64_t bits) {
  switch (k.type) {
    case KnobType::Int: return std::to_string(std::bit_cast<int64_t>(bits));
    case KnobType::Float: {
      char buf[64];
      auto [p, ec] = std::to_chars(buf, buf + sizeof buf, std::bit_cast<double>(bits));
      return ec == std::errc() ? std::string(buf, p) : std::string("nan");
    }
    case KnobType::Bool: return bits ? "true" : "false";
    case KnobType::Enum: return bits < k.choices.size() ? k.choices[bits] : std::string();
  }
  return {};
}

core::wire::KnobList KnobRegistry::list(int64_t currentStep) const {
  core::wire::KnobList out;
  std::lock_guard lock(mu_);
  out.lastChangeSeq = receivedAhead_.empty() ? contiguous_.load() : *receivedAhead_.rbegin();
  out.contiguousSeq = contiguous_.load();
  for (const auto& [seq, p] : queued_) out.pending.push_back({seq, p.knob->name, p.text});
  out.currentStep = currentStep;
  for (const auto& k : knobs_) {
    core::wire::KnobDescriptor d;
    d.name = k->name;
    d.type = k->type;
    d.min = k->min;
    d.max = k->max;
    d.choices = k->choices;
    d.defaultValue = format(*k, k->defaultBits);
    d.currentValue = format(*k, k->bits.load());
    d.description = k->description;
    d.changesMath = (k->flags & TS_KNOB_CHANGES_MATH) != 0;
    out.knobs.push_back(std::move(d));
  }
  return out;
}

namespace {

// FNV-1a, 64 bits: the same on every rank for the same bytes.
uint64_t fnv(uint64_t h, std::string_view bytes) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}
constexpr uint64_t kFnvBasis = 14695981039346656037ull;

uint64_t contentHash(const char* what, const std::string& name, const std::string& value) {
  uint64_t h = fnv(kFnvBasis, what);
  h = fnv(h, std::string_view("\0", 1));
  h = fnv(h, name);
  h = fnv(h, std::string_view("\0", 1));
  return fnv(h, value);
}

}  // namespace

void KnobRegistry::markReceivedLocked(uint64_t seq, uint64_t hash) {
  content_[seq] = hash;
  receivedAhead_.insert(seq);
  uint64_t c = contiguous_.load();
  while (!receivedAhead_.empty() && *receivedAhead_.begin() == c + 1) {
    receivedAhead_.erase(receivedAhead_.begin());
    ++c;
  }
  contiguous_.store(c);
}

core::wire::KnobAck KnobRegistry::receive(const core::wire::SetKnob& s, int32_t worldSize, bool haveAgree) {
  core::wire::KnobAck ack;
  ack.changeSeq = s.changeSeq;
  std::lock_guard lock(mu_);
  if (s.changeSeq == 0 || s.changeSeq <= contiguous_.load() || receivedAhead_.count(s.changeSeq)) {
    ack.reason = "change sequence " + std::to_string(s.changeSeq) + " was already used (last is " +
                 std::to_string(contiguous_.load()) + ")";
    return ack;  // a duplicate must not count twice
  }
  if (s.changeSeq > contiguous_.load() + kMaxAhead) {
    ack.reason = "change sequence " + std::to_string(s.changeSeq) + " is too far ahead (this rank has " +
                 std::to_string(contiguous_.load()) + "; at most " + std::to_string(kMaxAhead) + " ahead)";
    return ack;  // not counted: a stray number must not open a gap
  }
  if (beyondWindow(s.changeSeq)) {
    ack.reason = "change sequence " + std::to_string(s.changeSeq) + " is too far ahead of the last agreed change (" +
                 std::to_string(agreed_.load()) + "; at most " + std::to_string(kMaxUnagreed) +
                 " may wait for agreement)";
    return ack;  // not counted, like a number too far ahead
  }
  // Refused or not, the sequence moves on; what the number holds enters the digest.
  if (s.name.empty()) {
    markReceivedLocked(s.changeSeq, contentHash("none", "", ""));
    ack.reason = "gap filled: change sequence " + std::to_string(s.changeSeq) + " changes nothing";
    return ack;
  }
  auto refuse = [&](std::string reason) {
    markReceivedLocked(s.changeSeq, contentHash("none", "", ""));  // like a gap: nothing to apply
    ack.reason = std::move(reason);
    return ack;
  };
  ts_knob* k = findLocked(s.name);
  if (!k) return refuse("unknown knob '" + s.name.substr(0, 128) + "'");
  if (worldSize > 1 && !haveAgree)
    return refuse("world size is " + std::to_string(worldSize) +
                  " and the job registered no agreement function (ts_set_agree_fn), so ranks "
                  "cannot apply a change at the same step");
  std::string reason;
  auto bits = parse(*k, s.value, reason);
  if (!bits) return refuse(reason);
  const std::string text = format(*k, *bits);
  if (k->check) {  // the job's own rule: a combination it cannot run is refused with its reason
    char why[512] = {0};
    if (k->check(k, text.c_str(), why, sizeof why, k->checkCtx) != 0) {
      why[sizeof why - 1] = 0;
      return refuse(why[0] ? std::string(why) : k->name + "=" + text + " refused by the job");
    }
  }
  markReceivedLocked(s.changeSeq, contentHash("set", k->name, text));
  queued_[s.changeSeq] = {k, *bits, text};
  ack.accepted = true;
  return ack;
}

int64_t KnobRegistry::digestLocked(uint64_t from, uint64_t to) const {
  uint64_t h = kFnvBasis;
  for (auto it = content_.upper_bound(from); it != content_.end() && it->first <= to; ++it) {
    char buf[40];
    const int n = std::snprintf(buf, sizeof buf, "%llu:%llu;", static_cast<unsigned long long>(it->first),
                                static_cast<unsigned long long>(it->second));
    h = fnv(h, std::string_view(buf, static_cast<size_t>(n)));
  }
  return static_cast<int64_t>(h >> 2);  // positive, so that -d is too
}

void KnobRegistry::agreeAtStepEnd(ts_agree_fn agree, void* ctx) {
  const auto local = static_cast<int64_t>(contiguous_.load());
  const int64_t global = agree ? agree(local, ctx) : local;
  const uint64_t prev = agreed_.load();
  if (global <= 0 || static_cast<uint64_t>(global) <= prev) return;
  // Every rank holds every number up to `global` (agreed_ and global are the same on all ranks,
  // so all take this branch together and the collectives below match up). Do they hold the same
  // changes under those numbers?
  if (agree) {
    int64_t d = 0;
    {
      std::lock_guard lock(mu_);
      d = digestLocked(prev, static_cast<uint64_t>(global));
    }
    const int64_t lo = agree(d, ctx);
    const int64_t hi = -agree(-d, ctx);
    if (lo != hi) {
      std::lock_guard lock(mu_);
      ++mismatches_;
      for (auto it = queued_.upper_bound(prev); it != queued_.end() && it->first <= static_cast<uint64_t>(global);) {
        core::wire::KnobAck a;
        a.changeSeq = it->first;
        a.reason = "ranks received different changes under sequence " + std::to_string(it->first) +
                   " (two clients at once?); refused on every rank";
        refusals_.push_back(std::move(a));
        it = queued_.erase(it);
      }
    }
  }
  {
    std::lock_guard lock(mu_);
    content_.erase(content_.begin(), content_.upper_bound(static_cast<uint64_t>(global)));
  }
  agreed_.store(static_cast<uint64_t>(global));
}

void KnobRegistry::applyAtStepBegin(int64_t step, const std::function<void(const core::wire::KnobAck&)>& sink) {
  const uint64_t agreed = agreed_.load();
  if (agreed <= applied_) return;
  std::vector<std::pair<ts_knob*, std::pair<ts_knob_callback, void*>>> calls;
  std::vector<core::wire::KnobAck> acks;
  {
    std::lock_guard lock(mu_);
    acks.swap(refusals_);
    auto& strings = StringTable::instance();
    while (!queued_.empty() && queued_.begin()->first <= agreed) {
      auto [seq, p] = *queued_.begin();
      queued_.erase(queued_.begin());
      p.knob->bits.store(p.bits, std::memory_order_release);
      pushRecord(RecordType::KnobChange, 0, strings.intern(p.knob->name), strings.intern(p.text),
           static_cast<uint64_t>(step));
      for (auto& cb : p.knob->callbacks) calls.push_back({p.knob, cb});
      core::wire::KnobAck a;
      a.changeSeq = seq;
      a.accepted = true;
      a.applied = true;
      a.appliedStep = step;
      acks.push_back(std::move(a));
    }
  }
  applied_ = agreed;
  // Outside the lock: a callback may read knobs or register new ones.
  for (auto& [k, cb] : calls) cb.first(k, cb.second);
  if (sink)
    for (const auto& a : acks) sink(a);
}

bool KnobRegistry::restore(ts_knob* k, const std::string& text, int64_t step) {
  std::vector<std::pair<ts_knob_callback, void*>> calls;
  {
    std::lock_guard lock(mu_);
    std::string reason;
    const auto bits = parse(*k, text, reason);
    if (!bits) return false;
    k->bits.store(*bits, std::memory_order_release);
    auto& strings = StringTable::instance();
    pushRecord(RecordType::KnobChange, 0, strings.intern(k->name), strings.intern(format(*k, *bits)),
               static_cast<uint64_t>(step));
    calls = k->callbacks;
  }
  for (auto& [cb, ctx] : calls) cb(k, ctx);
  return true;
}

uint64_t KnobRegistry::lastReceivedSeq() const {
  std::lock_guard lock(mu_);
  return receivedAhead_.empty() ? contiguous_.load() : *receivedAhead_.rbegin();
}

void KnobRegistry::resetChangesForTest() {
  std::lock_guard lock(mu_);
  receivedAhead_.clear();
  queued_.clear();
  content_.clear();
  refusals_.clear();
  contiguous_.store(0);
  agreed_.store(0);
  applied_ = 0;
}

}  // namespace trainscope::agent
