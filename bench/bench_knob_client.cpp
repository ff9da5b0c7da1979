// In-process side of the knob latency benchmark (bench/bench_knob_latency.py runs it against the
// same 4-rank testjob after the `trainscope-cli set` runs). JobSession's protocol spelled out on
// the AgentClients so that each phase can be timed and the job's step read at each point:
//   1. KnobList on every rank: lastChangeSeq, the step current at issue (max over ranks)
//   2. SetKnob to every rank and its accepted KnobAck; then KnobList again: the step current
//      once every rank has the change queued (an upper bound of the step in which the last rank
//      received it)
//   3. the applied KnobAck from every rank (the step it applied at; all must agree)
// Design: a change every rank received during step k is agreed at ts_step_end(k) and applied at
// ts_step_begin(k + 1), so `applied - step when all had it` must be <= 1.
//
//   bench_knob_client --job ID [--sets 10] [--gap-ms 500] [--knob test.scale] [--values 1.5,1]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "trainscope/core/live/live_session.h"

namespace core = trainscope::core;

namespace {
double ms(int64_t a, int64_t b) {
  return static_cast<double>(b - a) / 1e6;
}
}  // namespace

int main(int argc, char** argv) {
  std::string job, knob = "test.scale";
  std::vector<std::string> values{"1.5", "1"};
  int sets = 10, gapMs = 500;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--job") job = argv[i + 1];
    else if (a == "--sets") sets = std::atoi(argv[i + 1]);
    else if (a == "--gap-ms") gapMs = std::atoi(argv[i + 1]);
    else if (a == "--knob") knob = argv[i + 1];
    else if (a == "--values") {
      values.clear();
      std::string s = argv[i + 1];
      for (size_t b = 0;;) {
        const size_t e = s.find(',', b);
        values.push_back(s.substr(b, e - b));
        if (e == std::string::npos) break;
        b = e + 1;
      }
    }
  }
  if (job.empty()) {
    std::fprintf(stderr, "usage: bench_knob_client --job ID [--sets N] [--gap-ms X]\n");
    return 2;
  }
  const int64_t c0 = core::monotonicNowNs();
  auto entries = core::LiveSession::entriesOf(job, true);
  if (!entries) {
    std::fprintf(stderr, "%s\n", entries.status().message().c_str());
    return 1;
  }
  auto js = core::LiveSession::connect(entries.value(), core::AgentClient::Options{});
  if (!js) {
    std::fprintf(stderr, "%s\n", js.status().message().c_str());
    return 1;
  }
  auto ranks = js.value()->clients();
  std::printf("# connected to %zu ranks in %.1f ms (discovery + Hello/Welcome)\n", ranks.size(),
              ms(c0, core::monotonicNowNs()));
  std::printf("| set | issue step | step when all had it | applied step | applied - issue | applied - had | "
              "SetKnob accepted by all (ms) | applied acks from all (ms) |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::vector<double> total;
  std::vector<int64_t> dIssue, dHad;
  bool bad = false;
  for (int s = 0; s < sets; ++s) {
    const int64_t t0 = core::monotonicNowNs();
    uint64_t seq = 0;
    int64_t issueStep = -1, hadStep = -1;
    for (auto& c : ranks) {
      auto l = c->knobList();
      if (!l) return std::fprintf(stderr, "knobList: %s\n", l.status().message().c_str()), 1;
      seq = std::max(seq, l->lastChangeSeq);
      issueStep = std::max(issueStep, l->currentStep);
    }
    ++seq;
    const std::string value = values[static_cast<size_t>(s) % values.size()];
    for (auto& c : ranks) {
      auto a = c->setKnob(seq, knob, value);
      if (!a || !a->accepted)
        return std::fprintf(stderr, "SetKnob refused: %s\n", a ? a->reason.c_str() : a.status().message().c_str()), 1;
    }
    const int64_t t1 = core::monotonicNowNs();
    for (auto& c : ranks) {
      auto l = c->knobList();
      if (!l) return 1;
      hadStep = std::max(hadStep, l->currentStep);
    }
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (auto& c : ranks) {
      auto a = c->waitForApplied(seq, 10000);
      if (!a || !a->applied) return std::fprintf(stderr, "not applied: %s\n", a ? a->reason.c_str() : a.status().message().c_str()), 1;
      lo = std::min(lo, a->appliedStep);
      hi = std::max(hi, a->appliedStep);
    }
    const int64_t t2 = core::monotonicNowNs();
    bad |= lo != hi;
    total.push_back(ms(t0, t2));
    dIssue.push_back(lo - issueStep);
    dHad.push_back(lo - hadStep);
    std::printf("| %d | %lld | %lld | %lld%s | %lld | %lld | %.2f | %.2f |\n", s, static_cast<long long>(issueStep),
                static_cast<long long>(hadStep), static_cast<long long>(lo), lo == hi ? "" : " (ranks differ!)",
                static_cast<long long>(lo - issueStep), static_cast<long long>(lo - hadStep), ms(t0, t1), ms(t0, t2));
    std::fflush(stdout);
    // Drain the EventBatch-free queue: nothing subscribed, so only acks arrive.
    std::this_thread::sleep_for(std::chrono::milliseconds(gapMs));
  }
  auto med = [](auto v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("\nin-process set (KnobList .. all applied acks): median %.2f ms, max %.2f ms; applied - issue step: "
              "median %lld, max %lld; applied - step when all had it: median %lld, max %lld%s\n",
              med(total), *std::max_element(total.begin(), total.end()), static_cast<long long>(med(dIssue)),
              static_cast<long long>(*std::max_element(dIssue.begin(), dIssue.end())),
              static_cast<long long>(med(dHad)), static_cast<long long>(*std::max_element(dHad.begin(), dHad.end())),
              bad ? "; RANKS APPLIED AT DIFFERENT STEPS" : "");
  js.value().reset();
  return 0;
}
