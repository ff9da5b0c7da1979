// Hang reports from every rank's Inspect answer (hang.h).
#include "trainscope/core/live/hang.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

namespace trainscope::core {
namespace {

bool isCollective(EventKind k) {
  return k == EventKind::Collective || k == EventKind::P2PSend || k == EventKind::P2PRecv;
}

std::string opName(const wire::OpenOp& o) {
  std::string s = o.name.empty() ? std::string("collective") : o.name;
  if (o.bucket >= 0) s += " [bucket " + std::to_string(o.bucket) + "]";
  return s;
}

// The same operation on two ranks: same name and bucket, and the same sequence number where the
// agent numbers them (bucket collectives), else the same step.
bool sameOp(const wire::OpenOp& a, const wire::OpenOp& b) {
  if (a.kind != b.kind || a.name != b.name || a.bucket != b.bucket) return false;
  if (a.seq >= 0 && b.seq >= 0) return a.seq == b.seq;
  return a.step == b.step;
}

double ageS(const wire::Inspect& in, const wire::OpenOp& o) {
  return static_cast<double>(in.agentNs - o.startNs) / 1e9;
}

std::string fmtAge(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

const char* kindName(EventKind k) {
  switch (k) {
    case EventKind::Step: return "step";
    case EventKind::Phase: return "phase";
    case EventKind::Range: return "range";
    case EventKind::Kernel: return "kernel";
    case EventKind::Collective: return "collective";
    case EventKind::P2PSend: return "send";
    case EventKind::P2PRecv: return "recv";
    case EventKind::MicroBatchF: return "forward";
    case EventKind::MicroBatchB: return "backward";
    case EventKind::MicroBatchW: return "weight-grad";
    default: return "op";
  }
}

// Per thread: "tid 1234 (name): S, in clock_nanosleep [hrtimer_nanosleep]" then its open
// operations, outermost first ("  step 7 > range 'inject hang' (12.3 s)").
std::vector<std::string> stacksOf(const wire::Inspect& in) {
  std::vector<std::string> out;
  std::set<int64_t> listed;
  auto opsOf = [&in](int64_t tid) {
    std::string chain;
    for (const wire::OpenOp& o : in.open) {
      if (o.tid != tid) continue;
      if (!chain.empty()) chain += " > ";
      chain += kindName(o.kind);
      if (o.kind == EventKind::Step) chain += " " + std::to_string(o.step);
      else chain += " '" + opName(o) + "'";
      chain += " (" + fmtAge(ageS(in, o)) + ")";
    }
    return chain;
  };
  for (const wire::ThreadInfo& t : in.threads) {
    std::string line = "thread " + std::to_string(t.tid) + " (" + t.name + "): " + (t.state.empty() ? "?" : t.state);
    if (!t.syscall.empty()) line += ", in " + t.syscall;
    if (!t.wchan.empty()) line += " [" + t.wchan + "]";
    const std::string chain = opsOf(t.tid);
    if (!chain.empty()) line += "; open: " + chain;
    out.push_back(std::move(line));
    listed.insert(t.tid);
  }
  // Operations of threads that are gone (or whose thread the agent did not list).
  for (const wire::OpenOp& o : in.open)
    if (!listed.count(o.tid)) {
      listed.insert(o.tid);
      out.push_back("thread " + std::to_string(o.tid) + " (not listed): open: " + opsOf(o.tid));
    }
  return out;
}

int64_t stepOf(const wire::Inspect& in) {
  int64_t step = in.currentStep;
  for (const wire::OpenOp& o : in.open)
    if (o.kind == EventKind::Step) step = std::max(step, o.step);
  return step;
}

}  // namespace

std::optional<HangReport> findHang(const std::vector<RankInspection>& ranks, double hangAfterS,
                                   const std::map<RankId, std::vector<std::string>>& lastEvents) {
  // The oldest collective open for at least hangAfterS on any rank.
  const wire::OpenOp* hung = nullptr;
  const RankInspection* hungOn = nullptr;
  double hungAge = 0;
  for (const RankInspection& r : ranks) {
    if (!r.answered) continue;
    for (const wire::OpenOp& o : r.inspect.open) {
      if (!isCollective(o.kind)) continue;
      const double age = ageS(r.inspect, o);
      if (age >= hangAfterS && age > hungAge) {
        hung = &o;
        hungOn = &r;
        hungAge = age;
      }
    }
  }
  HangReport rep;
  std::vector<bool> entered(ranks.size(), false);
  if (hung) {
    rep.op = opName(*hung);
    rep.group = hung->bucket >= 0 ? "dp buckets" : hung->name;
    rep.seq = hung->seq;
    rep.bytes = hung->bytes;
    rep.step = hung->step;
    rep.waitedS = hungAge;
    (void)hungOn;
    for (size_t i = 0; i < ranks.size(); ++i) {
      const RankInspection& r = ranks[i];
      if (!r.answered) continue;
      entered[i] = std::any_of(r.inspect.open.begin(), r.inspect.open.end(),
                               [hung](const wire::OpenOp& o) { return sameOp(o, *hung); });
    }
  } else {
    // No collective open long enough: stuck elsewhere only if every rank that answered has had
    // its step open that long (a job between steps, or just slow, is not hung).
    bool any = false;
    double youngest = INFINITY;
    for (const RankInspection& r : ranks) {
      if (!r.answered) continue;
      double stepAge = -1;
      for (const wire::OpenOp& o : r.inspect.open)
        if (o.kind == EventKind::Step) stepAge = std::max(stepAge, ageS(r.inspect, o));
      if (stepAge < 0) return std::nullopt;
      youngest = std::min(youngest, stepAge);
      any = true;
    }
    if (!any || youngest < hangAfterS) return std::nullopt;
    rep.op = "none";
    rep.group = "";
    rep.waitedS = youngest;
    int64_t step = INT64_MAX;
    for (const RankInspection& r : ranks)
      if (r.answered) step = std::min(step, stepOf(r.inspect));
    rep.step = step == INT64_MAX ? -1 : step;
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankInspection& r = ranks[i];
    if (!r.answered) rep.silentRanks.push_back(r.rank);
    else if (entered[i]) rep.waitingRanks.push_back(r.rank);
    else if (hung) rep.missingRanks.push_back(r.rank);
  }
  const bool showAll = rep.missingRanks.empty();
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankInspection& r = ranks[i];
    if (!r.answered || (!showAll && entered[i])) continue;
    HangRank h;
    h.rank = r.rank;
    h.entered = entered[i];
    h.step = stepOf(r.inspect);
    if (auto it = lastEvents.find(r.rank); it != lastEvents.end()) h.lastEvents = it->second;
    h.stacks = stacksOf(r.inspect);
    rep.ranks.push_back(std::move(h));
  }
  return rep;
}

std::string hangReportJson(const std::optional<HangReport>& report, int indent) {
  using J = nlohmann::ordered_json;
  if (!report) return "null";
  const HangReport& r = *report;
  J j;
  j["group"] = r.group;
  j["seq"] = r.seq;
  j["op"] = r.op;
  j["bytes"] = r.bytes;
  j["step"] = r.step;
  j["waited_s"] = std::round(r.waitedS * 10) / 10;
  j["waiting_ranks"] = r.waitingRanks;
  j["missing_ranks"] = r.missingRanks;
  j["silent_ranks"] = r.silentRanks;
  J list = J::array();
  for (const HangRank& h : r.ranks)
    list.push_back({{"rank", h.rank},
                    {"entered", h.entered},
                    {"step", h.step},
                    {"last_events", h.lastEvents},
                    {"stacks", h.stacks}});
  j["ranks"] = std::move(list);
  return j.dump(indent, ' ', false, J::error_handler_t::replace);
}

}  // namespace trainscope::core
