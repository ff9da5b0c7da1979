// LiveSession's knob-change protocol across every rank of a job, and discovery of a job's ranks.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>

#include <thread>

#include "trainscope/core/live/live_session.h"

namespace trainscope::core {
namespace {

std::string fmtDouble(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

bool rangeIsSet(const wire::KnobDescriptor& d) {
  return d.min <= d.max && !(d.min == 0 && d.max == 0);
}

std::string rankList(const std::vector<int32_t>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

// Why a change that every rank accepted did not apply everywhere (setKnobsNow, step 3).
std::string describeUnapplied(const std::string& change, uint64_t seq, size_t ranks,
                              const std::vector<std::pair<int32_t, int64_t>>& applied,
                              const std::vector<int32_t>& gone, const std::vector<int32_t>& waiting,
                              int timeoutMs) {
  std::string s = change + " (knob change " + std::to_string(seq) + ") was accepted by all " +
                  std::to_string(ranks) + " ranks but not applied on every rank: ";
  if (applied.empty()) {
    s += "no rank applied it";
  } else {
    std::map<int64_t, std::vector<int32_t>> byStep;
    for (const auto& [rank, step] : applied) byStep[step].push_back(rank);
    std::string parts;
    for (const auto& [step, rs] : byStep)
      parts += (parts.empty() ? "" : "; ") + rankList(rs) + " applied it at step " + std::to_string(step);
    s += parts;
  }
  if (!gone.empty())
    s += "; " + rankList(gone) + " went away before applying it (connection closed: the rank or its job ended)";
  if (!waiting.empty())
    s += "; " + rankList(waiting) + " had not applied it after " + fmtDouble(timeoutMs / 1000.0) + " s";
  if (!waiting.empty() && applied.empty())
    s += ". It stays pending: it applies on every rank at one step once all ranks reach that step's agreement "
         "(a stopped or slow rank holds it back), unless the job ends first";
  else if (applied.empty())
    s += ". Ranks apply a change only at a step all of them agree on, so no rank applied it without the others";
  return s;
}

std::string validateKnobValue(const wire::KnobDescriptor& d, const std::string& value) {
  using wire::KnobType;
  switch (d.type) {
    case KnobType::Int: {
      long long v = 0;
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (ec != std::errc() || p != value.data() + value.size() || value.empty())
        return d.name + " takes an integer, not \"" + value + "\"";
      if (rangeIsSet(d) && (static_cast<double>(v) < d.min || static_cast<double>(v) > d.max))
        return d.name + " = " + value + " is out of range [" + fmtDouble(d.min) + ", " + fmtDouble(d.max) +
               "]";
      return {};
    }
    case KnobType::Float: {
      char* end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      if (value.empty() || end != value.c_str() + value.size() || !std::isfinite(v))
        return d.name + " takes a number, not \"" + value + "\"";
      if (rangeIsSet(d) && (v < d.min || v > d.max))
        return d.name + " = " + value + " is out of range [" + fmtDouble(d.min) + ", " + fmtDouble(d.max) +
               "]";
      return {};
    }
    case KnobType::Bool:
      for (const char* ok : {"true", "false", "1", "0", "on", "off"})
        if (value == ok) return {};
      return d.name + " takes true or false, not \"" + value + "\"";
    case KnobType::Enum: {
      if (std::find(d.choices.begin(), d.choices.end(), value) != d.choices.end()) return {};
      std::string all;
      for (const auto& c : d.choices) all += (all.empty() ? "" : ", ") + c;
      return d.name + " takes one of {" + all + "}, not \"" + value + "\"";
    }
  }
  return d.name + " has an unknown type";
}

Result<std::vector<discovery::Entry>> LiveSession::entriesOf(const std::string& jobId, bool requireAllRanks) {
  std::vector<discovery::Entry> mine;
  for (auto& e : discovery::listEntries())
    if (e.jobId == jobId) mine.push_back(std::move(e));
  if (mine.empty())
    return Status(ErrorCode::NotFound,
                  "no running job \"" + jobId + "\" on this machine (see `trainscope-cli jobs`)");
  if (requireAllRanks) {
    const int32_t world = mine.front().worldSize;
    std::set<int32_t> seen;
    for (const auto& e : mine) seen.insert(e.rank);
    std::string missing;
    for (int32_t r = 0; r < world; ++r)
      if (!seen.count(r)) missing += (missing.empty() ? "" : ",") + std::to_string(r);
    if (!missing.empty())
      return Status(ErrorCode::NotFound, "job \"" + jobId + "\": ranks " + missing + " of " +
                                             std::to_string(world) + " are not (yet) discoverable");
  }
  return mine;
}

Result<std::vector<discovery::Entry>> LiveSession::waitForEntries(const std::string& jobId, int waitMs) {
  const int64_t deadline = monotonicNowNs() + static_cast<int64_t>(waitMs) * 1'000'000;
  for (;;) {
    auto e = entriesOf(jobId, false);
    if (e.isOk() || monotonicNowNs() >= deadline) return e;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

Status LiveSession::fillSequenceGaps(const std::vector<AgentClient*>& cs, const std::vector<wire::KnobList>& lists,
                                     uint64_t maxSeq) {
  // A client that died between ranks (or lost a connection) leaves some ranks without a change
  // sequence number the others have. Ranks apply a change only once every rank has every
  // number up to it, so the gap would hold back every later change. Fill it: a rank that still
  // holds the change pending tells us its content, and the ranks that lack it get the same
  // change (whichever copy arrives first, it is the same change); a number no rank holds
  // pending was refused or never arrived anywhere, and gets an empty change that only marks it
  // received. Copies to ranks that already have a number are refused as duplicates: harmless.
  uint64_t minContiguous = maxSeq;
  std::map<uint64_t, std::pair<std::string, std::string>> pending;
  for (const auto& l : lists) {
    minContiguous = std::min(minContiguous, l.contiguousSeq);
    for (const auto& p : l.pending) pending.emplace(p.changeSeq, std::make_pair(p.name, p.value));
  }
  constexpr uint64_t kMaxGap = 4096;
  if (maxSeq - minContiguous > kMaxGap)
    return Status(ErrorCode::InvalidArgument, "ranks disagree on " + std::to_string(maxSeq - minContiguous) +
                                                  " knob changes; is this one job?");
  for (uint64_t seq = minContiguous + 1; seq <= maxSeq; ++seq) {
    const auto it = pending.find(seq);
    for (size_t r = 0; r < cs.size(); ++r) {
      if (lists[r].contiguousSeq >= seq) continue;
      auto ack = it != pending.end() ? cs[r]->setKnob(seq, it->second.first, it->second.second)
                                     : cs[r]->setKnob(seq, "", "");
      if (!ack)
        return Status(ack.status().code(), "rank " + std::to_string(cs[r]->job().rank) +
                                               ": filling knob change " + std::to_string(seq) + ": " +
                                               ack.status().message());
    }
  }
  return Status();
}

Result<std::vector<LiveSession::Applied>> LiveSession::setKnobsNow(
    const std::vector<std::pair<std::string, std::string>>& changes, int applyTimeoutMs) {
  const std::vector<AgentClient*> cs = clients();
  if (cs.empty()) return Status(ErrorCode::InvalidArgument, "no ranks connected");
  if (worldSize_ > 0 && static_cast<int>(cs.size()) < worldSize_)
    return Status(ErrorCode::NotFound, "only " + std::to_string(cs.size()) + " of " +
                                              std::to_string(worldSize_) +
                                              " ranks are connected; a knob change must reach every rank");
  // 1. What every rank has: descriptors for validation, and the change sequence so far.
  uint64_t maxSeq = 0;
  std::vector<wire::KnobDescriptor> knobs;
  std::vector<wire::KnobList> lists;
  for (AgentClient* c : cs) {
    auto list = c->knobList();
    if (!list)
      return Status(list.status().code(),
                    "rank " + std::to_string(c->job().rank) + ": " + list.status().message());
    maxSeq = std::max(maxSeq, list->lastChangeSeq);
    if (knobs.empty()) knobs = list->knobs;
    lists.push_back(std::move(list).value());
  }
  if (Status s = fillSequenceGaps(cs, lists, maxSeq); !s.isOk()) return s;
  for (const auto& change : changes) {
    const std::string& name = change.first;
    const std::string& value = change.second;
    const auto d = std::find_if(knobs.begin(), knobs.end(), [&name](const auto& k) { return k.name == name; });
    if (d == knobs.end()) {
      std::string known;
      for (const auto& k : knobs) known += (known.empty() ? "" : ", ") + k.name;
      return Status(ErrorCode::InvalidArgument,
                    "unknown knob \"" + name + "\" (" +
                        (known.empty() ? "this job registered no knobs" : "this job has: " + known) + ")");
    }
    if (std::string why = validateKnobValue(*d, value); !why.empty())
      return Status(ErrorCode::InvalidArgument, why);
  }
  // 2. The lowest rank is the job's sequence authority: a change takes its number there first.
  // A number another client took a moment ago ("already used") is skipped, so two clients never
  // send different changes under one number; then the other ranks get the change under the
  // number the authority gave it. A rank that already holds that number got it from another
  // client's gap filling, which copies the authority's pending change -- ours. Should ranks
  // still hold different contents, they find out when they compare digests before applying,
  // and every rank refuses (AGENT.md, "Consensus").
  std::vector<Applied> out;
  std::vector<std::vector<wire::KnobAck>> acks(changes.size());
  std::string refusals;
  uint64_t next = maxSeq + 1;
  auto alreadyUsed = [](const wire::KnobAck& a) { return !a.accepted && a.reason.find("already used") != std::string::npos; };
  // One set of several changes applies at one step: every rank gets them highest number first
  // (the authority, which hands out the numbers, before the others), so that a rank's contiguous
  // sequence -- what it offers to the step agreement -- crosses the whole set at once. Ranks read
  // that value at different moments (each at its own step end, then the allreduce), so sending
  // them in order, even the authority first, could still split a set: one rank offered the
  // middle of it before the rest arrived (tst_agent_mpi aSetOfSeveralKnobsAppliesAtOneStep).
  // Only when another client takes one of the numbers at the same moment does the rest go one by
  // one (each change still applies on every rank at one step; the set may then take two).
  AgentClient* authority = cs.front();
  auto atAuthority = [&](const Status& st) {
    return Status(st.code(), "rank " + std::to_string(authority->job().rank) + ": " + st.message());
  };
  std::vector<std::optional<wire::KnobAck>> got(changes.size());
  bool clash = false;
  for (size_t i = changes.size(); i-- > 0 && !clash;) {
    auto a = authority->setKnob(next + i, changes[i].first, changes[i].second);
    if (!a) return atAuthority(a.status());
    if (alreadyUsed(a.value())) clash = true;  // another client at once: the rest one by one
    else got[i] = a.value();
  }
  // The numbers this client took hold its changes; after a clash the others go one by one, each
  // at the first number the authority has free above everything it had by then.
  const uint64_t taken = next;
  next += changes.size();
  if (clash) {
    auto list = authority->knobList();
    if (!list) return atAuthority(list.status());
    next = std::max(next, list->lastChangeSeq + 1);
  }
  for (size_t i = 0; i < changes.size(); ++i) {
    uint64_t seq = taken + i;
    if (!got[i]) {
      Result<wire::KnobAck> a = Status(ErrorCode::InvalidArgument, "no attempt");
      for (seq = next; seq < next + 64; ++seq) {
        a = authority->setKnob(seq, changes[i].first, changes[i].second);
        if (!a || !alreadyUsed(a.value())) break;
      }
      if (!a) return atAuthority(a.status());
      got[i] = a.value();
      next = seq + 1;
    }
    out.push_back({changes[i].first, changes[i].second, seq, {}});
    acks[i].push_back(*got[i]);
    if (!got[i]->accepted)
      refusals += "\n  rank " + std::to_string(authority->job().rank) + " refused " + changes[i].first + "=" +
                  changes[i].second + ": " + (got[i]->reason.empty() ? "(no reason given)" : got[i]->reason);
  }
  for (size_t r = 1; r < cs.size(); ++r) {
    AgentClient* c = cs[r];
    for (size_t i = changes.size(); i-- > 0;) {
      const uint64_t seq = out[i].changeSeq;
      if (!acks[i].front().accepted) {
        // Refused by the authority: this rank only marks the number received, so that it holds
        // back no later change.
        (void)c->setKnob(seq, "", "");
        acks[i].push_back(acks[i].front());
        continue;
      }
      auto ack = c->setKnob(seq, changes[i].first, changes[i].second);
      if (!ack)
        return Status(ack.status().code(),
                      "rank " + std::to_string(c->job().rank) + ": " + ack.status().message());
      wire::KnobAck a = ack.value();
      if (alreadyUsed(a)) {  // filled in by another client from the authority's copy: ours
        a.accepted = true;
        a.reason.clear();
      } else if (!a.accepted) {
        refusals += "\n  rank " + std::to_string(c->job().rank) + " refused " + changes[i].first + "=" +
                    changes[i].second + ": " + (a.reason.empty() ? "(no reason given)" : a.reason);
      }
      acks[i].push_back(a);
    }
  }
  if (!refusals.empty()) return Status(ErrorCode::InvalidArgument, "knob change refused:" + refusals);
  // 3. Wait until every rank applied every change (all at the same step boundary, by design).
  // When some rank does not, say for every rank what is known: applied (at which step), gone
  // (its connection closed: the rank or the job ended), or still pending at the deadline.
  const int64_t deadline = monotonicNowNs() + static_cast<int64_t>(applyTimeoutMs) * 1'000'000;
  for (size_t i = 0; i < changes.size(); ++i) {
    std::vector<std::pair<int32_t, int64_t>> applied;
    std::vector<int32_t> gone, waiting;
    for (size_t r = 0; r < cs.size(); ++r) {
      const int32_t rank = cs[r]->job().rank;
      wire::KnobAck ack = acks[i][r];
      if (!ack.applied) {
        // After a first failure the others are only asked for what has already arrived.
        const int left = (gone.empty() && waiting.empty())
                             ? static_cast<int>(std::max<int64_t>(0, (deadline - monotonicNowNs()) / 1'000'000))
                             : 50;
        auto done = cs[r]->waitForApplied(out[i].changeSeq, left);
        if (!done) {
          (cs[r]->closed() ? gone : waiting).push_back(rank);
          continue;
        }
        ack = done.value();
        if (!ack.accepted)
          return Status(ErrorCode::InvalidArgument,
                        "rank " + std::to_string(rank) + " refused " + changes[i].first + " when applying: " + ack.reason);
      }
      applied.emplace_back(rank, ack.appliedStep);
    }
    if (gone.empty() && waiting.empty()) {
      out[i].stepPerRank = std::move(applied);
      continue;
    }
    return Status(gone.empty() ? ErrorCode::Io : ErrorCode::NotFound,
                  describeUnapplied(changes[i].first + "=" + changes[i].second, out[i].changeSeq, cs.size(),
                                    applied, gone, waiting, applyTimeoutMs));
  }
  return out;
}

}  // namespace trainscope::core
