// HTA 0.5's temporal breakdown and communication/computation overlap (hta.h). Mirrors, step by
// step, hta/common/trace.py (_filter_irrelevant_gpu_kernels), hta/common/trace_parser.py
// (round_down_time_stamps) and hta/analyzers/{breakdown,communication}_analysis.py.
#include "trainscope/core/analysis/hta.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>

namespace trainscope::core {
namespace {

struct Row {
  int64_t ts = 0, end = 0;  // ns, or whole us (x1000) after HTA's rounding
  int64_t correlation = -1;
  StringId name = kEmptyString;
};

// merge_kernel_intervals: sorted by ts, a row starts a new group when its ts is later than every
// earlier row's end; each group becomes (min ts, max end).
std::vector<std::pair<int64_t, int64_t>> merge(std::vector<std::pair<int64_t, int64_t>> v) {
  std::sort(v.begin(), v.end());
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t cummax = INT64_MIN;
  for (const auto& [ts, end] : v) {
    if (out.empty() || ts > cummax)
      out.push_back({ts, end});
    else
      out.back().second = std::max(out.back().second, end);
    cummax = std::max(cummax, end);
  }
  return out;
}

int64_t runTime(const std::vector<std::pair<int64_t, int64_t>>& m) {
  int64_t s = 0;
  for (const auto& [a, b] : m) s += b - a;
  return s;
}

int64_t metaInt(const TraceStore& store, const std::string& key, int64_t fallback) {
  auto it = store.metadata().find(key);
  if (it == store.metadata().end()) return fallback;
  try {
    return std::stoll(it->second);
  } catch (...) {
    return fallback;
  }
}

// The double pandas parses from the file's "ts"/"dur" text: the correctly rounded value of
// ns / 1000 (our ns are the text's exact value), obtained the same way, through strtod.
double microsAsDouble(int64_t ns) {
  const uint64_t a = ns < 0 ? 0 - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s%llu.%03llu", ns < 0 ? "-" : "",
                static_cast<unsigned long long>(a / 1000), static_cast<unsigned long long>(a % 1000));
  return std::strtod(buf, nullptr);
}

}  // namespace

HtaKernelType htaKernelType(std::string_view n) {
  const bool ncclKernel = n.starts_with("nccl") && n.find("Kernel", 4) != std::string_view::npos;
  if (ncclKernel) return HtaKernelType::Communication;
  if (n.starts_with("Memcpy") || n.starts_with("Memset") || n.starts_with("dma"))
    return HtaKernelType::Memory;
  const bool notCompute = n.find("Memcpy") != std::string_view::npos || n.starts_with("Memset") ||
                          n.find("Sync") != std::string_view::npos;
  return notCompute ? HtaKernelType::Other : HtaKernelType::Computation;
}

HtaResult computeHta(const TraceStore& store) {
  HtaResult result;
  result.computed = true;
  // HTA's filter applies only when its symbol table (all ranks) has two or more names
  // containing "ProfilerStep".
  size_t stepNames = 0;
  for (StringId id = 0; id < store.strings().size(); ++id)
    if (store.str(id).find("ProfilerStep") != std::string_view::npos) ++stepNames;
  const StringId contextSync = store.strings().find("Context Sync").value_or(UINT32_MAX);
  const StringId eventSync = store.strings().find("Event Sync").value_or(UINT32_MAX);

  std::set<RankId> ranks;
  for (const auto& [r, info] : store.ranks()) ranks.insert(r);
  for (const TrackInfo& t : store.tracks()) ranks.insert(t.rank);
  for (RankId rank : ranks) {
    HtaRank out;
    out.rank = rank;
    // Time as HTA reads it: the file's own ts (our ns minus what import added), rounded inward
    // to whole microseconds when the file's ts column holds fractions (trace_parser.py).
    const std::string suffix = "." + std::to_string(rank);
    const int64_t base = metaInt(store, "import_time_shift_ns" + suffix, 0);
    const bool fractional = metaInt(store, "import_fractional_ts" + suffix, 0) != 0;
    std::vector<Row> gpu;
    std::vector<std::pair<int64_t, int64_t>> cpuCorr;  // (ts, correlation) of CPU rows
    std::vector<Row> cpuStreamRows;
    int64_t lastStepStart = INT64_MIN;
    bool anyStep = false;
    for (TrackId tid = 0; tid < store.trackCount(); ++tid) {
      if (store.track(tid).rank != rank) continue;
      const TrackEvents& ev = store.events(tid);
      for (size_t i = 0; i < ev.size(); ++i) {
        if (ev.end(i) < ev.start(i)) continue;
        const Attr* s = ev.findAttr(i, AttrKey::Stream);
        const Attr* c = ev.findAttr(i, AttrKey::CorrelationId);
        const int64_t stream = s && s->type == AttrType::Int ? s->asInt() : -1;
        const int64_t corr = c && c->type == AttrType::Int ? c->asInt() : -1;
        const StringId name = ev.name(i);
        int64_t ts = ev.start(i) - base, end = ev.end(i) - base;
        if (fractional) {
          // round_down_time_stamps, in its own double arithmetic: end = ts + dur, then
          // ceil(ts), floor(end). Epoch-microsecond doubles are only 0.25 us apart, so this is
          // not the same as rounding the exact values.
          const double tsD = microsAsDouble(ts), durD = microsAsDouble(end - ts);
          ts = static_cast<int64_t>(std::ceil(tsD)) * 1000;
          end = static_cast<int64_t>(std::floor(tsD + durD)) * 1000;
        }
        const bool isGpu = (stream >= 0 && corr >= 0) || name == contextSync || name == eventSync;
        if (isGpu) {
          if (stream != -1) gpu.push_back(Row{ts, end, corr, name});
          continue;
        }
        if (ev.kind(i) == EventKind::Marker || ev.kind(i) == EventKind::Counter) continue;  // no dur: dropped
        cpuCorr.push_back({ts, corr});
        // A CPU row (no correlation) that still names a stream, such as MTIA's dma events:
        // HTA's breakdown takes every remaining row with stream != -1, these included.
        if (stream != -1) cpuStreamRows.push_back(Row{ts, end, corr, name});
        if (store.str(name).find("ProfilerStep") != std::string_view::npos) {
          anyStep = true;
          lastStepStart = std::max(lastStepStart, ts);
        }
      }
    }
    if (stepNames > 1) {
      std::set<int64_t> launched;
      for (const auto& [ts, corr] : cpuCorr)
        if (anyStep && ts < lastStepStart) launched.insert(corr);
      std::erase_if(gpu, [&](const Row& r) { return !launched.count(r.correlation); });
      std::erase_if(cpuStreamRows, [&](const Row& r) { return !anyStep || r.ts >= lastStepStart; });
    }
    gpu.insert(gpu.end(), cpuStreamRows.begin(), cpuStreamRows.end());
    out.kernels = gpu.size();
    if (!gpu.empty()) {
      std::vector<std::pair<int64_t, int64_t>> all, comp, comm;
      for (const Row& r : gpu) {
        all.push_back({r.ts, r.end});
        const auto type = htaKernelType(store.str(r.name));
        if (type == HtaKernelType::Computation) comp.push_back({r.ts, r.end});
        if (type == HtaKernelType::Communication) comm.push_back({r.ts, r.end});
      }
      const auto mergedAll = merge(std::move(all));
      const int64_t kernelTime = mergedAll.back().second - mergedAll.front().first;
      const int64_t idle = kernelTime - runTime(mergedAll);
      const auto mergedComp = merge(std::move(comp));
      const auto mergedComm = merge(std::move(comm));
      const int64_t computeTime = runTime(mergedComp);
      out.kernelUs = kernelTime / 1000.0;
      out.idleUs = idle / 1000.0;
      out.computeUs = computeTime / 1000.0;
      out.nonComputeUs = (kernelTime - computeTime - idle) / 1000.0;
      // Overlap: time where both a merged communication and a merged computation interval run,
      // over the merged communication time; HTA rounds the percentage to 2 decimals.
      const int64_t commTime = runTime(mergedComm);
      if (commTime > 0) {
        int64_t both = 0;
        size_t j = 0;
        for (const auto& [a, b] : mergedComm) {
          while (j < mergedComp.size() && mergedComp[j].second <= a) ++j;
          for (size_t k = j; k < mergedComp.size() && mergedComp[k].first < b; ++k)
            both +=
                std::max<int64_t>(0, std::min(b, mergedComp[k].second) - std::max(a, mergedComp[k].first));
        }
        out.overlapPctg =
            std::round(100.0 * static_cast<double>(both) / static_cast<double>(commTime) * 100.0) / 100.0;
      }
    }
    result.perRank.push_back(out);
  }
  return result;
}

}  // namespace trainscope::core
