// NCCL profiler and tuner plugins: the functions behind the exported tables (the agent library
// defines ncclProfiler_v5/_v6 and ncclTunerPlugin_v5/_v6 from them, agents/src/gpu_exports.cpp).
// Every function returns Success and never disturbs the job, except init, which may refuse.
//
// Profiler: NCCL events become agent events on one Communicator track per communicator
// (external id = communicator hash): Group -> Range "nccl group"; Coll -> Collective named
// after the function (AllReduce, ...) with Bytes (count x datatype size), Datatype, Algorithm,
// Protocol, Channels, Seq, CommHash; P2p -> P2PSend / P2PRecv with Peer, Bytes, Datatype,
// Channels, CommHash; the v5 API events (GroupApi, CollApi, P2pApi, KernelLaunch) -> Range
// "nccl<Func>"; ProxyOp / ProxyStep / KernelCh -> Range on a per-channel track "nccl <hash>
// ch <c>". Timestamps are the agent clock at startEvent / stopEvent; a Coll/P2p ends when the
// last of its kernel channels has (NCCL's own stop only means "enqueued"). The activation mask
// is the agent's nccl.profile_mask knob: written into NCCL's mask at init and whenever it changes.
//
// Tuner: see NcclTuner below and docs/GPU.md ("Tuner and rank agreement").
#pragma once

#include <atomic>
#include <cstdint>

#include "trainscope/profiler/event_sink.h"
#include "trainscope/profiler/nccl_abi.h"

namespace trainscope::profiler {

namespace nccl = ::trainscope::nccl_abi;

// Group, Coll, P2p and kernel channels (which give collectives their real end, see the .cpp).
inline constexpr int kDefaultNcclProfileMask =
    nccl::ProfileGroup | nccl::ProfileColl | nccl::ProfileP2p | nccl::ProfileKernelCh;

// Bytes per element of an NCCL datatype name ("ncclFloat32", "ncclBfloat16", ...); 0 if unknown.
int ncclDatatypeSize(const char* datatype);

class NcclProfiler {
 public:
  // The sink every communicator's events go to (the agent's, or a test's). Before NCCL's init.
  static void setSink(EventSink* sink);
  // The live activation mask: stored, and written into NCCL's mask for every communicator.
  static void setMask(int mask);
  static int mask();
  static uint64_t droppedHandles();  // events lost because all handles were in use
  static uint64_t handlesInUse();

  static nccl::Result init(void** context, uint64_t commId, int* eActivationMask, const char* commName,
                           int nNodes, int nranks, int rank, nccl::DebugLogger logfn);
  static nccl::Result startEventV5(void* context, void** eHandle, nccl::ProfilerEventDescr_v5* d);
  static nccl::Result startEventV6(void* context, void** eHandle, nccl::ProfilerEventDescr_v6* d);
  static nccl::Result stopEvent(void* eHandle);
  static nccl::Result recordEventState(void* eHandle, nccl::ProfilerEventState state,
                                       nccl::ProfilerEventStateArgs_v5* args);
  static nccl::Result finalize(void* context);
};

// What the tuner makes NCCL use. -1 / 0 mean "NCCL decides". All three travel in one atomic word,
// so a collective never sees the algorithm of one change with the protocol of another.
struct NcclChoice {
  int algorithm =
      -1;  // NCCL_ALGO_* (0 tree, 1 ring, 2 collnet_direct, 3 collnet_chain, 4 nvls, 5 nvls_tree, 6 pat)
  int protocol = -1;  // NCCL_PROTO_* (0 ll, 1 ll128, 2 simple)
  int channels = 0;   // > 0: number of channels
  int64_t step = -1;  // the step at which it took effect (for messages)
  bool operator==(const NcclChoice&) const = default;
};

class NcclTuner {
 public:
  // The agent publishes the knobs' values here at the step where every rank applies them.
  static void publish(const NcclChoice& c);
  static NcclChoice published();
  static void setSink(EventSink* sink);  // for log lines (may be null)

  // Pure: makes the cost table choose c (the chosen entry becomes 0.0, the cheapest of all);
  // algorithm-only / protocol-only choices pick the cheapest valid partner; entries NCCL marks
  // ignored (-1) are never chosen; a choice with no valid entry leaves the table alone.
  // Returns the (algorithm, protocol) made cheapest, or {-1, -1} when untouched.
  static std::pair<int, int> applyChoice(const NcclChoice& c, float** table, int numAlgo, int numProto,
                                         int* nChannels);

  static nccl::Result init(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                           nccl::DebugLogger logFunction, nccl::NvlDomainInfo_v5* nvlDomainInfo,
                           nccl::TunerConstants_v5* constants);
  static nccl::Result getCollInfo(void* context, nccl::Func collType, size_t nBytes, int numPipeOps,
                                  float** collCostTable, int numAlgo, int numProto, int regBuff,
                                  int* nChannels);
  static nccl::Result finalize(void* context);
};

const char* ncclAlgorithmName(int algo);  // "tree", "ring", ...; "auto" for -1
const char* ncclProtocolName(int proto);  // "ll", "ll128", "simple"; "auto" for -1

}  // namespace trainscope::profiler
