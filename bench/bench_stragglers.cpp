// Straggler attribution at 1,024 simulated ranks (issue #36, item 6; docs/BENCHMARKS.md,
// "Straggler attribution").
//
// A data-parallel job of R ranks is simulated step by step: forward compute, then B gradient
// buckets whose allreduce each rank enters when the bucket is ready and every rank leaves once
// the last rank entered (plus the transfer), then the optimizer. Every rank-step has host jitter,
// compute jitter and rare OS-noise spikes below the report threshold. K stragglers are injected
// at random (rank, step): extra compute (a Kernel "inject straggler") or extra host time (a Range
// "inject slow data loader"), uniformly 5-20 ms. findStragglers (the code behind `doctor` and
// `analyze`) must name each injected (rank, step) and report nothing else; a clean run of the
// same length must report nothing.
//
//   build/bin/bench_stragglers [--ranks 1024] [--steps 300] [--inject 100] [--seed 1] [--json]
//
// This is a model of a job, not a job: it checks the attribution's logic and cost at a rank
// count no real process set reaches here. The real-job figure (trainscope-train, MPI) comes from
// bench/straggler_accuracy.py.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "trainscope/core/analysis/stragglers.h"
#include "trainscope/core/model/trace_store.h"

using namespace trainscope::core;

namespace {

struct Opts {
  int ranks = 1024, steps = 300, inject = 100, buckets = 4;
  unsigned seed = 1;
  bool json = false;
};

struct Injected {
  int rank;
  int64_t step;
  bool compute;
  double ms;
};

TraceStore simulate(const Opts& o, const std::vector<Injected>& inj, std::mt19937_64& rng) {
  TraceStore s;
  std::vector<TrackId> cpu(o.ranks), gpu(o.ranks), comm(o.ranks);
  for (int r = 0; r < o.ranks; ++r) {
    RankInfo info;
    info.rank = r;
    info.host = "node" + std::to_string(r / 8);
    s.setRank(info);
    cpu[r] = s.addTrack({r, TrackKind::CpuThread, "main", 1});
    gpu[r] = s.addTrack({r, TrackKind::CudaStream, "stream 7", 7});
    comm[r] = s.addTrack({r, TrackKind::Communicator, "comm", 2});
  }
  const StringId nStep = s.intern("step"), nFwd = s.intern("forward"), nBwd = s.intern("backward"),
                 nAr = s.intern("bucket allreduce"), nOpt = s.intern("optimizer"),
                 nStrag = s.intern("inject straggler"), nLoader = s.intern("inject slow data loader"),
                 nData = s.intern("data loader");
  std::map<std::pair<int, int64_t>, const Injected*> at;
  for (const Injected& i : inj) at[{i.rank, i.step}] = &i;
  std::normal_distribution<double> jit(0, 1);
  std::uniform_real_distribution<double> u(0, 1);
  auto ns = [](double ms) { return static_cast<int64_t>(ms * 1e6); };
  const double fwdMs = 8, bucketMs = 3, arMs = 1.0, optMs = 1, dataMs = 0.5;
  int64_t t = 1'000'000'000;
  std::vector<int64_t> cursor(o.ranks), enter(o.ranks);
  for (int64_t step = 0; step < o.steps; ++step) {
    // Step start: after the previous step's optimizer, with host jitter (and rare OS noise).
    std::vector<int64_t> start(o.ranks);
    for (int r = 0; r < o.ranks; ++r) {
      double host = std::max(0.0, 0.2 + 0.05 * jit(rng));
      if (u(rng) < 0.002) host += 0.5 + u(rng);  // a descheduled moment, below the threshold
      start[r] = t + ns(host);
      int64_t c = start[r];
      s.append(cpu[r], {c, c + ns(dataMs), nData, EventKind::Range});
      c += ns(dataMs);
      if (auto it = at.find({r, step}); it != at.end()) {
        const Injected& i = *it->second;
        if (i.compute)
          s.append(gpu[r], {c, c + ns(i.ms), nStrag, EventKind::Kernel});
        else
          s.append(cpu[r], {c, c + ns(i.ms), nLoader, EventKind::Range});
        c += ns(i.ms);
      }
      const int64_t f = ns(fwdMs * (1 + 0.01 * jit(rng)));
      s.append(gpu[r], {c, c + f, nFwd, EventKind::Kernel});
      cursor[r] = c + f;
    }
    // Backward in buckets; bucket b's allreduce: everyone leaves after the last one entered.
    std::vector<int64_t> leave(o.ranks);
    for (int b = 0; b < o.buckets; ++b) {
      int64_t last = 0;
      for (int r = 0; r < o.ranks; ++r) {
        const int64_t k = ns(bucketMs * (1 + 0.01 * jit(rng)));
        s.append(gpu[r], {cursor[r], cursor[r] + k, nBwd, EventKind::Kernel});
        cursor[r] += k;
        enter[r] = cursor[r];
        last = std::max(last, enter[r]);
      }
      for (int r = 0; r < o.ranks; ++r) {
        const int64_t end = last + ns(arMs * (1 + 0.02 * std::abs(jit(rng))));
        const Attr a[] = {Attr::ofInt(AttrKey::Bucket, b), Attr::ofInt(AttrKey::Bytes, 25 << 20)};
        s.append(comm[r], {enter[r], end, nAr, EventKind::Collective}, a);
        leave[r] = end;
      }
    }
    int64_t next = 0;
    for (int r = 0; r < o.ranks; ++r) {
      const int64_t c = std::max(leave[r], cursor[r]);
      s.append(gpu[r], {c, c + ns(optMs), nOpt, EventKind::Kernel});
      const Attr sa[] = {Attr::ofInt(AttrKey::Step, step)};
      s.append(cpu[r], {start[r], c + ns(optMs), nStep, EventKind::Step}, sa);
      next = std::max(next, c + ns(optMs));
    }
    t = next;
  }
  s.flush();
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (a == "--ranks") o.ranks = val();
    else if (a == "--steps") o.steps = val();
    else if (a == "--inject") o.inject = val();
    else if (a == "--seed") o.seed = static_cast<unsigned>(val());
    else if (a == "--json") o.json = true;
    else {
      std::fprintf(stderr, "usage: bench_stragglers [--ranks N] [--steps N] [--inject N] [--seed N] [--json]\n");
      return 2;
    }
  }
  std::mt19937_64 rng(o.seed);
  // K injections at distinct random steps (one per step: a step has one culprit to name).
  std::vector<Injected> inj;
  std::set<int64_t> used;
  std::uniform_int_distribution<int> rr(0, o.ranks - 1);
  std::uniform_int_distribution<int64_t> ss(1, o.steps - 2);
  std::uniform_real_distribution<double> ms(5, 20);
  while (static_cast<int>(inj.size()) < o.inject && static_cast<int>(used.size()) < o.steps - 2) {
    const int64_t step = ss(rng);
    if (!used.insert(step).second) continue;
    inj.push_back({rr(rng), step, inj.size() % 2 == 0, ms(rng)});
  }
  const TraceStore withInj = simulate(o, inj, rng);
  const auto t0 = std::chrono::steady_clock::now();
  const StragglerReport rep = findStragglers(withInj);
  const double analyseS = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::map<int64_t, const LateArrival*> named;
  for (const LateArrival& la : rep.perStep) named[la.step] = &la;
  int right = 0, rightCause = 0, wrongRank = 0;
  for (const Injected& i : inj) {
    auto it = named.find(i.step);
    if (it == named.end()) continue;
    if (it->second->rank == i.rank) {
      ++right;
      rightCause += it->second->cause == (i.compute ? "compute" : "host");
      if (std::getenv("BENCH_DEBUG"))
        std::fprintf(stderr, "step %lld rank %d %s %.1f ms -> %s (%s) late %.2f\n", static_cast<long long>(i.step),
                     i.rank, i.compute ? "compute" : "host", i.ms, it->second->cause.c_str(), it->second->what.c_str(),
                     it->second->lateMs);
    } else {
      ++wrongRank;
    }
  }
  int falseReports = 0;
  for (const LateArrival& la : rep.perStep)
    if (!used.count(la.step)) ++falseReports;

  const TraceStore clean = simulate(o, {}, rng);
  const StragglerReport cleanRep = findStragglers(clean);

  const double acc = inj.empty() ? 0 : 100.0 * right / static_cast<double>(inj.size());
  if (o.json) {
    std::printf(
        "{\"ranks\": %d, \"steps\": %d, \"events\": %zu, \"injected\": %zu, \"named_right\": %d, "
        "\"accuracy_pct\": %.1f, \"cause_right\": %d, \"wrong_rank\": %d, \"false_reports\": %d, "
        "\"clean_false_reports\": %zu, \"analyse_s\": %.3f, \"threshold_ms\": %.3f}\n",
        o.ranks, o.steps, withInj.eventCount(), inj.size(), right, acc, rightCause, wrongRank, falseReports,
        cleanRep.perStep.size(), analyseS, rep.thresholdMs);
  } else {
    std::printf("%d ranks x %d steps (%zu events): %zu stragglers injected (5-20 ms, half compute, half host)\n",
                o.ranks, o.steps, withInj.eventCount(), inj.size());
    std::printf("  named with the right rank and step: %d (%.1f %%), right cause: %d, wrong rank: %d\n", right, acc,
                rightCause, wrongRank);
    std::printf("  reports at steps without an injection: %d; on a clean run: %zu\n", falseReports,
                cleanRep.perStep.size());
    std::printf("  findStragglers: %.3f s (threshold %.3f ms, median step %.3f ms)\n", analyseS, rep.thresholdMs,
                rep.medianStepMs);
  }
  return 0;
}
