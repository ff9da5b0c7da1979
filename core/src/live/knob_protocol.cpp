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
#include <poll.h>

#include "trainscope/core/live/live_session.h"
#include "live/live_session_impl.h"

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
  const bool relay = !relayHost().empty();
  if (relay) {
    auto r = relayRanks(jobId);
    if (!r) return r.status();
    mine = std::move(r->entries);
  } else {
    for (auto& e : discovery::listEntries())
      if (e.jobId == jobId) mine.push_back(std::move(e));
  }
  if (mine.empty())
    return Status(ErrorCode::NotFound,
                  relay ? "the relay at " + relayHost() + " knows no rank of job \"" + jobId + "\" yet"
                        : "no running job \"" + jobId + "\" on this machine (see `trainscope-cli jobs`)");
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

// ---- knob calls: a state machine in the owner's poll loop -------------------------------------

std::string KnobCall::progress() const {
  std::lock_guard g(m_);
  return progress_;
}
bool KnobCall::done() const {
  std::lock_guard g(m_);
  return done_;
}
const KnobCall::Outcome& KnobCall::wait() const {
  std::unique_lock g(m_);
  cv_.wait(g, [this] { return done_; });
  return outcome_;
}
bool KnobCall::waitFor(int ms) const {
  std::unique_lock g(m_);
  return cv_.wait_for(g, std::chrono::milliseconds(ms), [this] { return done_; });
}
void KnobCall::setProgress(std::string p) {
  std::lock_guard g(m_);
  progress_ = std::move(p);
}
void KnobCall::complete(Outcome o) {
  std::function<void(const Outcome&)> cb;
  {
    std::lock_guard g(m_);
    if (done_) return;
    outcome_ = std::move(o);
    progress_ = outcome_.status.isOk() ? "done" : outcome_.status.message();
    done_ = true;
    cb = std::move(onDone_);
  }
  cv_.notify_all();
  if (cb) cb(outcome_);
}


namespace {
bool alreadyUsed(const wire::KnobAck& a) {
  return !a.accepted && a.reason.find("already used") != std::string::npos;
}
std::string changesText(const std::vector<std::pair<std::string, std::string>>& changes) {
  std::string s;
  for (const auto& [k, v] : changes) s += (s.empty() ? "" : " ") + k + "=" + v;
  return s;
}
}  // namespace

std::shared_ptr<KnobCall> LiveSession::submit(std::unique_ptr<KnobOp> op) {
  auto call = op->call;
  {
    std::unique_lock opLock(opMutex_);
    const bool streamingNow = thread_.joinable() && !finished_;
    if (streamingNow) {
      std::lock_guard g(cmdMutex_);
      if (!finished_) {
        commands_.push_back(std::move(op));
        return call;
      }
    }
    // Not streaming: this thread drives the same state machine over the (knob-only) connections.
    if (clients().empty()) connectKnown(false);
    knobQueue_.push_back(std::move(op));
    driveIdle(call);
  }
  return call;
}

std::shared_ptr<KnobCall> LiveSession::submitKnobList(bool allRanks, KnobDone onDone) {
  auto op = std::make_unique<KnobOp>();
  op->kind = allRanks ? KnobOp::Kind::ListAll : KnobOp::Kind::List;
  op->call = std::make_shared<KnobCall>();
  op->call->onDone_ = std::move(onDone);
  op->call->progress_ = "queued: knob list";
  return submit(std::move(op));
}

std::shared_ptr<KnobCall> LiveSession::submitSetKnobs(std::vector<std::pair<std::string, std::string>> changes,
                                                      int applyTimeoutMs, KnobDone onDone) {
  auto op = std::make_unique<KnobOp>();
  op->kind = KnobOp::Kind::Set;
  op->changes = std::move(changes);
  op->applyTimeoutMs = applyTimeoutMs;
  op->call = std::make_shared<KnobCall>();
  op->call->onDone_ = std::move(onDone);
  op->call->progress_ = "queued: " + changesText(op->changes);
  return submit(std::move(op));
}

Result<wire::KnobList> LiveSession::knobList() {
  const auto call = submitKnobList(false);
  const auto& o = call->wait();
  if (!o.status.isOk()) return o.status;
  if (o.lists.empty()) return Status(ErrorCode::NotFound, "no ranks connected");
  return o.lists.front();
}

Result<std::vector<wire::KnobList>> LiveSession::knobLists() {
  const auto call = submitKnobList(true);
  const auto& o = call->wait();
  if (!o.status.isOk()) return o.status;
  return o.lists;
}

Result<std::vector<LiveSession::Applied>> LiveSession::setKnobs(
    const std::vector<std::pair<std::string, std::string>>& changes, int applyTimeoutMs) {
  const auto call = submitSetKnobs(changes, applyTimeoutMs);
  const auto& o = call->wait();
  if (!o.status.isOk()) return o.status;
  return o.applied;
}

void LiveSession::driveIdle(const std::shared_ptr<KnobCall>& call) {
  while (!call->done()) {
    advanceKnobs();
    if (call->done()) break;
    std::vector<pollfd> fds;
    std::vector<Rank*> rs;
    for (auto& [rank, r] : ranks_)
      if (r->open()) {
        fds.push_back({r->client->fd(), POLLIN, 0});
        rs.push_back(r.get());
      }
    if (!fds.empty()) (void)::poll(fds.data(), fds.size(), 20);
    for (Rank* r : rs) pumpReplies(*r, 0);
  }
}

void LiveSession::takeKnobCommands() {
  std::lock_guard g(cmdMutex_);
  for (auto& op : commands_) knobQueue_.push_back(std::move(op));
  commands_.clear();
}

void LiveSession::pumpReplies(Rank& r, int timeoutMs) {
  if (!r.open()) return;
  auto n = r.client->takeReplies(timeoutMs, [&](wire::Message&& m) { onReply(r, std::move(m)); });
  if (!n) closeRank(r, n.status().message());
}

void LiveSession::onReply(Rank& r, wire::Message&& m) {
  KnobOp* op = knobQueue_.empty() || knobQueue_.front()->phase == KnobOp::Phase::Queued ? nullptr
                                                                                          : knobQueue_.front().get();
  if (auto* l = std::get_if<wire::KnobList>(&m)) {
    if (auto it = staleLists_.find(r.rank); it != staleLists_.end() && it->second > 0) {
      --it->second;  // owed to a call that ended before it came
      return;
    }
    if (op && op->listsWanted.erase(r.rank)) op->lists[r.rank] = std::move(*l);
  } else if (auto* a = std::get_if<wire::KnobAck>(&m)) {
    if (!op || op->kind != KnobOp::Kind::Set) return;  // another client's change, applied: not ours
    const KnobOp::Key key{r.rank, a->changeSeq};
    const bool first = !op->firstAck.count(key) && op->acksWanted.count(key);
    if (first) {
      op->acksWanted.erase(key);
      op->firstAck[key] = *a;
      if (a->applied) op->finalAck[key] = *a;
    } else if (a->applied || !a->accepted) {
      op->finalAck.emplace(key, *a);
    }
  } else if (auto* e = std::get_if<wire::ErrorMsg>(&m)) {
    if (op) {
      finishOp(Status(ErrorCode::InvalidArgument,
                      "rank " + std::to_string(r.rank) + ": the agent answered with an error: " + e->message));
    } else {
      closeRank(r, "the agent reported an error: " + e->message);
    }
  }
}

void LiveSession::finishOp(Status st) {
  if (knobQueue_.empty()) return;
  std::unique_ptr<KnobOp> op = std::move(knobQueue_.front());
  knobQueue_.pop_front();
  for (int32_t rank : op->listsWanted) ++staleLists_[rank];
  KnobCall::Outcome o;
  o.status = std::move(st);
  if (o.status.isOk()) {
    for (auto& [rank, l] : op->lists) o.lists.push_back(std::move(l));
    o.applied = std::move(op->out);
  }
  op->call->complete(std::move(o));
}

void LiveSession::advanceKnobs() {
  // Several calls may complete in one round (a list right after a set); each starts when the one
  // before it ends, so the ranks see one conversation at a time.
  for (int guard = 0; guard < 64 && !knobQueue_.empty(); ++guard) {
    KnobOp& op = *knobQueue_.front();
    const KnobOp* before = &op;
    if (op.phase == KnobOp::Phase::Queued)
      startOp(op);
    else
      stepOp(op);
    if (!knobQueue_.empty() && knobQueue_.front().get() == before) break;  // still waiting for answers
  }
}

void LiveSession::startOp(KnobOp& op) {
  op.ranks.clear();
  for (auto& [rank, r] : ranks_)
    if (r->open()) op.ranks.push_back(rank);
  if (op.ranks.empty()) {
    std::string why;
    for (const auto& [rank, r] : ranks_)
      if (!r->problem.empty()) why += (why.empty() ? "" : "; ") + r->problem;
    return finishOp(Status(ErrorCode::NotFound, why.empty() ? "no ranks connected" : why));
  }
  if (op.kind == KnobOp::Kind::Set && worldSize_ > 0 && static_cast<int>(op.ranks.size()) < worldSize_)
    return finishOp(Status(ErrorCode::NotFound, "only " + std::to_string(op.ranks.size()) + " of " +
                                                    std::to_string(worldSize_) +
                                                    " ranks are connected; a knob change must reach every rank"));
  if (op.kind == KnobOp::Kind::List) op.ranks.resize(1);
  op.phase = KnobOp::Phase::Lists;
  op.deadlineNs = monotonicNowNs() + static_cast<int64_t>(options_.client.timeoutMs) * 1'000'000;
  for (int32_t rank : op.ranks) {
    Rank& r = *ranks_.at(rank);
    if (Status s = r.client->sendKnobListRequest(); !s.isOk())
      return finishOp(Status(s.code(), "rank " + std::to_string(rank) + ": " + s.message()));
    op.listsWanted.insert(rank);
  }
  op.call->setProgress("asking " + std::to_string(op.ranks.size()) + " rank(s) for their knobs");
  stepOp(op);
}

void LiveSession::stepOp(KnobOp& op) {
  using Phase = KnobOp::Phase;
  const int64_t now = monotonicNowNs();
  auto rankText = [](const std::vector<int32_t>& rs) {
    std::string s = rs.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < rs.size(); ++i) s += (i ? ", " : "") + std::to_string(rs[i]);
    return s;
  };
  // A rank whose connection closed cannot answer: the call fails now (in Apply it is "gone").
  if (op.phase != Phase::Apply) {
    std::vector<int32_t> gone;
    for (int32_t rank : op.ranks) {
      const bool waiting = op.listsWanted.count(rank) ||
                           std::any_of(op.acksWanted.begin(), op.acksWanted.end(),
                                       [rank](const KnobOp::Key& k) { return k.first == rank; });
      if (waiting && !ranks_.at(rank)->open()) gone.push_back(rank);
    }
    if (!gone.empty())
      return finishOp(Status(ErrorCode::NotFound, rankText(gone) + ": connection closed before answering (" +
                                                      ranks_.at(gone.front())->problem + ")"));
    if (!op.listsWanted.empty() || !op.acksWanted.empty()) {
      if (now < op.deadlineNs) return;  // answers still to come
      std::vector<int32_t> silent(op.listsWanted.begin(), op.listsWanted.end());
      for (const auto& k : op.acksWanted)
        if (std::find(silent.begin(), silent.end(), k.first) == silent.end()) silent.push_back(k.first);
      std::sort(silent.begin(), silent.end());
      return finishOp(Status(ErrorCode::Io, rankText(silent) + " did not answer within " +
                                                std::to_string(options_.client.timeoutMs) + " ms"));
    }
  }
  auto restartDeadline = [&] {
    op.deadlineNs = monotonicNowNs() + static_cast<int64_t>(options_.client.timeoutMs) * 1'000'000;
  };
  auto sendSet = [&](int32_t rank, uint64_t seq, const std::string& name, const std::string& value) {
    Rank& r = *ranks_.at(rank);
    if (Status s = r.client->sendSetKnob(seq, name, value); !s.isOk()) {
      finishOp(Status(s.code(), "rank " + std::to_string(rank) + ": " + s.message()));
      return false;
    }
    op.acksWanted.insert({rank, seq});
    return true;
  };
  const int32_t authority = op.ranks.front();
  switch (op.phase) {
    case Phase::Queued:
      return;
    case Phase::Lists: {
      if (op.kind != KnobOp::Kind::Set) return finishOp(Status::ok());
      // Every rank's list: descriptors to validate against and the change sequence so far.
      uint64_t maxSeq = 0, minContiguous = UINT64_MAX;
      std::map<uint64_t, std::pair<std::string, std::string>> pendingChanges;
      for (const auto& [rank, l] : op.lists) {
        maxSeq = std::max(maxSeq, l.lastChangeSeq);
        minContiguous = std::min(minContiguous, l.contiguousSeq);
        for (const auto& p : l.pending) pendingChanges.emplace(p.changeSeq, std::make_pair(p.name, p.value));
      }
      op.knobs = op.lists.at(authority).knobs;
      for (const auto& change : op.changes) {
        const std::string& name = change.first;
        const std::string& value = change.second;
        const auto d = std::find_if(op.knobs.begin(), op.knobs.end(), [&](const auto& k) { return k.name == name; });
        if (d == op.knobs.end()) {
          std::string known;
          for (const auto& k : op.knobs) known += (known.empty() ? "" : ", ") + k.name;
          return finishOp(Status(ErrorCode::InvalidArgument,
                                 "unknown knob \"" + name + "\" (" +
                                     (known.empty() ? "this job registered no knobs" : "this job has: " + known) + ")"));
        }
        if (std::string why = validateKnobValue(*d, value); !why.empty())
          return finishOp(Status(ErrorCode::InvalidArgument, why));
      }
      // Gaps an earlier client left (it died between ranks): a rank that still holds the change
      // pending tells its content and the ranks that lack it get the same change; a number no
      // rank holds pending was refused or lost everywhere and gets an empty change that only
      // marks it received (docs/AGENT.md, "Consensus"). Duplicates are refused: harmless.
      constexpr uint64_t kMaxGap = 4096;
      if (maxSeq - std::min(minContiguous, maxSeq) > kMaxGap)
        return finishOp(Status(ErrorCode::InvalidArgument, "ranks disagree on " +
                                                               std::to_string(maxSeq - minContiguous) +
                                                               " knob changes; is this one job?"));
      for (uint64_t seq = minContiguous + 1; seq <= maxSeq; ++seq) {
        const auto it = pendingChanges.find(seq);
        for (const auto& [rank, l] : op.lists) {
          if (l.contiguousSeq >= seq) continue;
          if (!sendSet(rank, seq, it != pendingChanges.end() ? it->second.first : "",
                       it != pendingChanges.end() ? it->second.second : ""))
            return;
        }
      }
      op.next = maxSeq + 1;
      op.phase = Phase::Fill;
      restartDeadline();
      return stepOp(op);
    }
    case Phase::Fill: {
      op.firstAck.clear();
      op.finalAck.clear();
      // The authority numbers the changes first, highest number first, so that every rank's
      // contiguous sequence crosses the whole set at once (one step applies them all).
      op.got.assign(op.changes.size(), std::nullopt);
      for (size_t i = op.changes.size(); i-- > 0;)
        if (!sendSet(authority, op.next + i, op.changes[i].first, op.changes[i].second)) return;
      op.taken = op.next;
      op.phase = Phase::Authority;
      restartDeadline();
      op.call->setProgress("rank " + std::to_string(authority) + " numbers " + changesText(op.changes));
      return;
    }
    case Phase::Authority: {
      op.retry.clear();
      for (size_t i = 0; i < op.changes.size(); ++i) {
        const wire::KnobAck& a = op.firstAck.at({authority, op.taken + i});
        if (alreadyUsed(a)) op.retry.push_back(i);  // another client took it at the same moment
        else op.got[i] = a;
      }
      op.next = op.taken + op.changes.size();
      op.out.clear();
      for (size_t i = 0; i < op.changes.size(); ++i)
        op.out.push_back({op.changes[i].first, op.changes[i].second, op.taken + i, {}});
      if (op.retry.empty()) goto others;
      // The rest go one by one at the first numbers the authority has free.
      if (Status s = ranks_.at(authority)->client->sendKnobListRequest(); !s.isOk())
        return finishOp(Status(s.code(), "rank " + std::to_string(authority) + ": " + s.message()));
      op.lists.erase(authority);
      op.listsWanted.insert(authority);
      op.phase = Phase::AuthorityList;
      restartDeadline();
      return;
    }
    case Phase::AuthorityList: {
      op.next = std::max(op.next, op.lists.at(authority).lastChangeSeq + 1);
      op.retryPos = 0;
      op.retrySeq = op.next;
      const size_t i = op.retry[0];
      if (!sendSet(authority, op.retrySeq, op.changes[i].first, op.changes[i].second)) return;
      op.phase = Phase::AuthorityRetry;
      restartDeadline();
      return;
    }
    case Phase::AuthorityRetry: {
      const size_t i = op.retry[op.retryPos];
      const wire::KnobAck a = op.firstAck.at({authority, op.retrySeq});
      if (alreadyUsed(a) && op.retrySeq < op.next + 64) {
        op.firstAck.erase({authority, op.retrySeq});
        ++op.retrySeq;
      } else {
        op.got[i] = a;
        op.out[i].changeSeq = op.retrySeq;
        ++op.retryPos;
        ++op.retrySeq;
        op.next = op.retrySeq;
        if (op.retryPos == op.retry.size()) goto others;
      }
      {
        const size_t k = op.retry[op.retryPos];
        if (!sendSet(authority, op.retrySeq, op.changes[k].first, op.changes[k].second)) return;
      }
      restartDeadline();
      return;
    }
    others : {
      for (size_t i = 0; i < op.changes.size(); ++i)
        if (!op.got[i]->accepted)
          op.refusals += "\n  rank " + std::to_string(authority) + " refused " + op.changes[i].first + "=" +
                         op.changes[i].second + ": " +
                         (op.got[i]->reason.empty() ? "(no reason given)" : op.got[i]->reason);
      for (size_t r = 1; r < op.ranks.size(); ++r)
        for (size_t i = op.changes.size(); i-- > 0;) {
          // Refused by the authority: the others only mark the number received.
          const bool refused = !op.got[i]->accepted;
          if (!sendSet(op.ranks[r], op.out[i].changeSeq, refused ? "" : op.changes[i].first,
                       refused ? "" : op.changes[i].second))
            return;
        }
      op.phase = Phase::Others;
      restartDeadline();
      op.call->setProgress("sending " + changesText(op.changes) + " to " + std::to_string(op.ranks.size() - 1) +
                           " more rank(s)");
      return stepOp(op);
    }
    case Phase::Others: {
      for (size_t r = 1; r < op.ranks.size(); ++r)
        for (size_t i = 0; i < op.changes.size(); ++i) {
          if (!op.got[i]->accepted) continue;
          const KnobOp::Key key{op.ranks[r], op.out[i].changeSeq};
          wire::KnobAck& a = op.firstAck.at(key);
          if (alreadyUsed(a)) {  // filled in by another client from the authority's copy: ours
            a.accepted = true;
            a.reason.clear();
          } else if (!a.accepted) {
            op.refusals += "\n  rank " + std::to_string(op.ranks[r]) + " refused " + op.changes[i].first + "=" +
                           op.changes[i].second + ": " + (a.reason.empty() ? "(no reason given)" : a.reason);
          }
        }
      if (!op.refusals.empty()) return finishOp(Status(ErrorCode::InvalidArgument, "knob change refused:" + op.refusals));
      op.phase = Phase::Apply;
      op.deadlineNs = monotonicNowNs() + static_cast<int64_t>(op.applyTimeoutMs) * 1'000'000;
      return stepOp(op);
    }
    case Phase::Apply: {
      // Every rank applies every change at one step boundary; the agents send the applied
      // acknowledgement to every client, so it may already be here.
      const bool late = now >= op.deadlineNs;
      size_t appliedCount = 0, total = 0;
      for (size_t i = 0; i < op.changes.size(); ++i) {
        std::vector<std::pair<int32_t, int64_t>> applied;
        std::vector<int32_t> gone, waiting;
        for (int32_t rank : op.ranks) {
          ++total;
          auto it = op.finalAck.find({rank, op.out[i].changeSeq});
          if (it == op.finalAck.end()) {
            (ranks_.at(rank)->open() ? waiting : gone).push_back(rank);
            continue;
          }
          if (!it->second.accepted)
            return finishOp(Status(ErrorCode::InvalidArgument, "rank " + std::to_string(rank) + " refused " +
                                                                   op.changes[i].first + " when applying: " +
                                                                   it->second.reason));
          applied.emplace_back(rank, it->second.appliedStep);
          ++appliedCount;
        }
        if (gone.empty() && waiting.empty()) {
          op.out[i].stepPerRank = std::move(applied);
          continue;
        }
        if (late || (!gone.empty() && waiting.empty()))
          return finishOp(Status(gone.empty() ? ErrorCode::NotFound : ErrorCode::Io,
                                 describeUnapplied(op.changes[i].first + "=" + op.changes[i].second,
                                                   op.out[i].changeSeq, op.ranks.size(), applied, gone, waiting,
                                                   op.applyTimeoutMs)));
      }
      if (appliedCount == total) return finishOp(Status::ok());
      op.call->setProgress(std::to_string(appliedCount) + " of " + std::to_string(total) + " rank(s) applied " +
                           changesText(op.changes));
      return;
    }
  }
}

}  // namespace trainscope::core
