#include "knobs.h"

#include <bit>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>

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

ts_knob* KnobRegistry::add(std::unique_ptr<ts_knob> k) {
  std::lock_guard lock(mu_);
  if (ts_knob* existing = findLocked(k->name)) return existing;
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
      if (static_cast<double>(v) < k.min || static_cast<double>(v) > k.max) {
        reason = k.name + ": " + text + " is out of range [" + format(k, std::bit_cast<uint64_t>(static_cast<int64_t>(k.min))) +
                 ", " + format(k, std::bit_cast<uint64_t>(static_cast<int64_t>(k.max))) + "]";
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

void KnobRegistry::markReceivedLocked(uint64_t seq) {
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
  markReceivedLocked(s.changeSeq);  // refused or not, the sequence moves on
  if (s.name.empty()) {
    ack.reason = "gap filled: change sequence " + std::to_string(s.changeSeq) + " changes nothing";
    return ack;
  }
  ts_knob* k = findLocked(s.name);
  if (!k) {
    ack.reason = "unknown knob '" + s.name + "'";
    return ack;
  }
  if (worldSize > 1 && !haveAgree) {
    ack.reason = "world size is " + std::to_string(worldSize) +
                 " and the job registered no agreement function (ts_set_agree_fn), so ranks "
                 "cannot apply a change at the same step";
    return ack;
  }
  auto bits = parse(*k, s.value, ack.reason);
  if (!bits) return ack;
  queued_[s.changeSeq] = {k, *bits, format(*k, *bits)};
  ack.accepted = true;
  return ack;
}

void KnobRegistry::agreeAtStepEnd(ts_agree_fn agree, void* ctx) {
  const auto local = static_cast<int64_t>(contiguous_.load());
  const int64_t global = agree ? agree(local, ctx) : local;
  if (global > 0 && static_cast<uint64_t>(global) > agreed_.load()) agreed_.store(static_cast<uint64_t>(global));
}

void KnobRegistry::applyAtStepBegin(int64_t step, const std::function<void(const core::wire::KnobAck&)>& sink) {
  const uint64_t agreed = agreed_.load();
  if (agreed <= applied_) return;
  std::vector<std::pair<ts_knob*, std::pair<ts_knob_callback, void*>>> calls;
  std::vector<core::wire::KnobAck> acks;
  {
    std::lock_guard lock(mu_);
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
  contiguous_.store(0);
  agreed_.store(0);
  applied_ = 0;
}

}  // namespace trainscope::agent
