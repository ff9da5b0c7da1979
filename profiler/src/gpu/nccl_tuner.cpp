// The NCCL tuner plugin (ABI v5 and v6). Why every rank of a communicator picks the same
// algorithm/protocol/channels -- a mismatch hangs NCCL:
//  1. The knobs change only through the agent's registry, which applies a change at the same
//     step boundary on every rank (the ranks agree on it at the previous step end).
//  2. The agent publishes all three values together, in one atomic word, from the knobs'
//     change callbacks, which run inside ts_step_begin of that step -- before the job issues
//     any collective of the step, after it issued all of the previous one.
//  3. getCollInfo loads that word once per call into the communicator's snapshot and decides
//     from the snapshot and NCCL's cost table only. Cost tables are identical on the ranks of
//     a communicator (NCCL's own algorithm choice already depends on that), so the same
//     snapshot gives the same answer everywhere; a choice NCCL cannot run (an ignored entry)
//     falls back to NCCL's default on every rank alike.
#include <algorithm>
#include <cstdio>
#include <new>
#include <string>

#include "trainscope/profiler/nccl_plugins.h"

namespace trainscope::profiler {

namespace {

std::atomic<uint64_t> g_word{0};  // packed NcclChoice; 0 = all automatic
std::atomic<EventSink*> g_sink{nullptr};

uint64_t pack(const NcclChoice& c) {
  const auto a = static_cast<uint64_t>(static_cast<uint8_t>(c.algorithm + 1));
  const auto p = static_cast<uint64_t>(static_cast<uint8_t>(c.protocol + 1));
  const auto ch = static_cast<uint64_t>(static_cast<uint16_t>(std::max(0, std::min(c.channels, 65535))));
  const auto st = static_cast<uint64_t>(static_cast<uint32_t>(c.step + 1));
  return (a << 56) | (p << 48) | (ch << 32) | st;
}

NcclChoice unpack(uint64_t w) {
  NcclChoice c;
  c.algorithm = static_cast<int>((w >> 56) & 0xff) - 1;
  c.protocol = static_cast<int>((w >> 48) & 0xff) - 1;
  c.channels = static_cast<int>((w >> 32) & 0xffff);
  c.step = static_cast<int64_t>(static_cast<uint32_t>(w)) - 1;
  return c;
}

struct TunerComm {
  uint64_t commId = 0;
  size_t nRanks = 0;
  uint64_t snapshot = 0;
};

bool usable(float** t, int a, int p) {
  return t[a][p] >= 0.0f;
}  // NCCL marks ignored entries -1

}  // namespace

const char* ncclAlgorithmName(int a) {
  static const char* const kNames[] = {"tree",      "ring", "collnet_direct", "collnet_chain", "nvls",
                                       "nvls_tree", "pat"};
  return a >= 0 && a < 7 ? kNames[a] : "auto";
}

const char* ncclProtocolName(int p) {
  static const char* const kNames[] = {"ll", "ll128", "simple"};
  return p >= 0 && p < 3 ? kNames[p] : "auto";
}

void NcclTuner::publish(const NcclChoice& c) {
  g_word.store(pack(c), std::memory_order_release);
}
NcclChoice NcclTuner::published() {
  return unpack(g_word.load(std::memory_order_acquire));
}
void NcclTuner::setSink(EventSink* sink) {
  g_sink.store(sink);
}

std::pair<int, int> NcclTuner::applyChoice(const NcclChoice& c, float** table, int numAlgo, int numProto,
                                           int* nChannels) {
  if (c.channels > 0 && nChannels) *nChannels = c.channels;
  if (!table || (c.algorithm < 0 && c.protocol < 0)) return {-1, -1};
  if (c.algorithm >= numAlgo || c.protocol >= numProto) return {-1, -1};
  int bestA = -1, bestP = -1;
  for (int a = 0; a < numAlgo; ++a) {
    if (c.algorithm >= 0 && a != c.algorithm) continue;
    for (int p = 0; p < numProto; ++p) {
      if (c.protocol >= 0 && p != c.protocol) continue;
      if (!usable(table, a, p)) continue;
      if (bestA < 0 || table[a][p] < table[bestA][bestP]) {
        bestA = a;
        bestP = p;
      }
    }
  }
  if (bestA < 0) return {-1, -1};  // NCCL cannot run it here: its own choice stands
  table[bestA][bestP] = 0.0f;      // cheapest of all: NCCL picks the minimum
  return {bestA, bestP};
}

nccl::Result NcclTuner::init(void** ctx, uint64_t commId, size_t nRanks, size_t, nccl::DebugLogger,
                             nccl::NvlDomainInfo_v5*, nccl::TunerConstants_v5*) {
  if (!ctx) return nccl::InvalidArgument;
  auto* c = new (std::nothrow) TunerComm();
  if (!c) return nccl::SystemError;
  c->commId = commId;
  c->nRanks = nRanks;
  c->snapshot = g_word.load(std::memory_order_acquire);
  *ctx = c;
  return nccl::Success;
}

nccl::Result NcclTuner::getCollInfo(void* context, nccl::Func, size_t, int, float** collCostTable,
                                    int numAlgo, int numProto, int, int* nChannels) {
  auto* c = static_cast<TunerComm*>(context);
  if (!c) return nccl::Success;
  const uint64_t w = g_word.load(std::memory_order_acquire);
  if (w != c->snapshot) {
    c->snapshot = w;
    if (EventSink* sink = g_sink.load()) {
      const NcclChoice n = unpack(w);
      char line[200];
      std::snprintf(
          line, sizeof line,
          "nccl tuner: communicator %016llx uses algorithm=%s protocol=%s channels=%d from step %lld",
          static_cast<unsigned long long>(c->commId), ncclAlgorithmName(n.algorithm),
          ncclProtocolName(n.protocol), n.channels, static_cast<long long>(n.step));
      sink->log(line);
    }
  }
  applyChoice(unpack(c->snapshot), collCostTable, numAlgo, numProto, nChannels);
  return nccl::Success;
}

nccl::Result NcclTuner::finalize(void* context) {
  delete static_cast<TunerComm*>(context);
  return nccl::Success;
}

}  // namespace trainscope::profiler
