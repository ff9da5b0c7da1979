// HolisticTraceAnalysis 0.5's per-rank GPU numbers, computed from a TraceStore exactly as HTA
// computes them (docs/ANALYSIS.md, "hta"), so that `analyze --json` can be checked against HTA
// and HTA users can compare like with like:
//  - get_temporal_breakdown: idle_time(us), compute_time(us), non_compute_time(us), kernel_time(us)
//  - get_comm_comp_overlap: comp_comm_overlap_pctg
// HTA's rules, not ours: its kernel classes come from the kernel's name only, its span runs from
// the first to the last kept kernel, and only kernels launched before the last ProfilerStep
// starts are kept.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "trainscope/core/model/trace_store.h"

namespace trainscope::core {

struct HtaRank {
  RankId rank = 0;
  uint64_t kernels = 0;          // GPU rows kept (HTA's filter)
  std::optional<double> idleUs;  // nullopt: no GPU kernels on this rank
  std::optional<double> computeUs;
  std::optional<double> nonComputeUs;
  std::optional<double> kernelUs;
  std::optional<double> overlapPctg;  // nullopt also when there is no communication kernel
};

struct HtaResult {
  bool computed = false;
  std::vector<HtaRank> perRank;  // rank order
};

// Kernel classes as HTA names them (hta/utils/utils.py): COMMUNICATION (^nccl.*Kernel),
// MEMORY (^Memcpy|^Memset|^dma), COMPUTATION (none of ^nccl.*Kernel, .*Memcpy, ^Memset, .*Sync),
// OTHER.
enum class HtaKernelType { Communication, Memory, Computation, Other };
HtaKernelType htaKernelType(std::string_view name);

HtaResult computeHta(const TraceStore& store);

}  // namespace trainscope::core
