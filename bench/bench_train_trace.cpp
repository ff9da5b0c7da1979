// Measures a recorded trainscope-train session (.tsdb) the way docs/BENCHMARKS.md reports it,
// following the metric definitions of ../shared/design.md: per rank, inside step windows only,
//   overlap ratio = |comm ∩ compute| / |comm|  (comm = union of bucket collectives, compute =
//                   union of Kernel events and forward/backward/optimizer phases),
//   exposed comm  = |comm \ compute| per step,
//   wire bytes    = sum of the bucket collectives' Bytes per step,
//   step time     = mean step window.
// Prints one JSON object (means over ranks, and per rank). Steps before --from-step are skipped.
//
//   bench_train_trace FILE.tsdb [--from-step N]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "trainscope/core/session/tsdb.h"

using namespace trainscope::core;

namespace {

using Iv = std::pair<int64_t, int64_t>;

std::vector<Iv> unionOf(std::vector<Iv> v) {
  std::sort(v.begin(), v.end());
  std::vector<Iv> out;
  for (const auto& x : v) {
    if (!out.empty() && x.first <= out.back().second)
      out.back().second = std::max(out.back().second, x.second);
    else
      out.push_back(x);
  }
  return out;
}

int64_t length(const std::vector<Iv>& v) {
  int64_t n = 0;
  for (const auto& x : v) n += x.second - x.first;
  return n;
}

int64_t intersection(const std::vector<Iv>& a, const std::vector<Iv>& b) {
  int64_t n = 0;
  size_t j = 0;
  for (const auto& x : a) {
    while (j < b.size() && b[j].second <= x.first) ++j;
    for (size_t k = j; k < b.size() && b[k].first < x.second; ++k)
      n += std::max<int64_t>(0, std::min(x.second, b[k].second) - std::max(x.first, b[k].first));
  }
  return n;
}

std::vector<Iv> clip(const std::vector<Iv>& v, const std::vector<Iv>& windows) {
  std::vector<Iv> out;
  for (const auto& x : v)
    for (const auto& w : windows) {
      const int64_t a = std::max(x.first, w.first), b = std::min(x.second, w.second);
      if (a < b) out.emplace_back(a, b);
    }
  return out;
}

struct Rank {
  std::vector<Iv> steps, comm, compute;
  int64_t bytes = 0;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_train_trace FILE.tsdb [--from-step N]\n");
    return 2;
  }
  int64_t fromStep = 0;
  for (int i = 2; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--from-step") == 0) fromStep = std::atoll(argv[i + 1]);
  auto session = loadSession(argv[1]);
  if (!session) {
    std::fprintf(stderr, "bench_train_trace: %s\n", session.status().toString().c_str());
    return 1;
  }
  TraceStore& s = session.value();
  std::map<RankId, Rank> ranks;
  std::map<RankId, int64_t> firstStepStart;
  for (TrackId t = 0; t < s.trackCount(); ++t) {
    const TrackEvents& ev = s.events(t);
    for (size_t i = 0; i < ev.size(); ++i)
      if (ev.kind(i) == EventKind::Step) {
        const Attr* a = ev.findAttr(i, AttrKey::Step);
        if (a && a->asInt() >= fromStep) ranks[s.track(t).rank].steps.emplace_back(ev.start(i), ev.end(i));
      }
  }
  for (TrackId t = 0; t < s.trackCount(); ++t) {
    const TrackEvents& ev = s.events(t);
    Rank& r = ranks[s.track(t).rank];
    for (size_t i = 0; i < ev.size(); ++i) {
      const Iv iv{ev.start(i), ev.end(i)};
      const EventKind k = ev.kind(i);
      if (k == EventKind::Collective && ev.findAttr(i, AttrKey::Bucket)) {
        r.comm.push_back(iv);
        for (const auto& w : r.steps)
          if (iv.first >= w.first && iv.first <= w.second) r.bytes += ev.findAttr(i, AttrKey::Bytes)->asInt();
      } else if (k == EventKind::Kernel) {
        r.compute.push_back(iv);
      } else if (k == EventKind::Phase) {
        const std::string_view n = s.str(ev.name(i));
        if (n == "forward" || n == "backward" || n == "optimizer") r.compute.push_back(iv);
      }
    }
  }
  double sumOverlap = 0, sumExposed = 0, sumBytes = 0, sumStep = 0;
  int n = 0;
  std::string per;
  for (auto& [id, r] : ranks) {
    if (r.steps.empty()) continue;
    const auto windows = unionOf(r.steps);
    const auto comm = unionOf(clip(r.comm, windows));
    const auto compute = unionOf(clip(r.compute, windows));
    const double steps = static_cast<double>(r.steps.size());
    const int64_t c = length(comm), both = intersection(comm, compute);
    const double overlap = c > 0 ? static_cast<double>(both) / static_cast<double>(c) : 0.0;
    const double exposedMs = static_cast<double>(c - both) / 1e6 / steps;
    const double bytes = static_cast<double>(r.bytes) / steps;
    const double stepMs = static_cast<double>(length(windows)) / 1e6 / steps;
    sumOverlap += overlap, sumExposed += exposedMs, sumBytes += bytes, sumStep += stepMs;
    ++n;
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "%s{\"rank\": %d, \"steps\": %zu, \"overlap_ratio\": %.4f, \"exposed_comm_ms\": %.4f, "
                  "\"wire_bytes_per_step\": %.1f, \"step_time_ms\": %.4f}",
                  per.empty() ? "" : ", ", static_cast<int>(id), r.steps.size(), overlap, exposedMs, bytes,
                  stepMs);
    per += buf;
  }
  if (n == 0) {
    std::fprintf(stderr, "bench_train_trace: no step windows in %s\n", argv[1]);
    return 1;
  }
  std::printf(
      "{\"overlap_ratio\": %.4f, \"exposed_comm_ms\": %.4f, \"wire_bytes_per_step\": %.1f, "
      "\"step_time_ms\": %.4f, \"per_rank\": [%s]}\n",
      sumOverlap / n, sumExposed / n, sumBytes / n, sumStep / n, per.c_str());
  return 0;
}
