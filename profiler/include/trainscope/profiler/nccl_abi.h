// The NCCL plugin ABIs we implement, declared here from NVIDIA/nccl's headers
// (ext-profiler/example/nccl/profiler_v5.h, src/include/plugin/nccl_profiler.h,
// src/include/plugin/tuner/tuner_v5.h and _v6.h, ext-tuner/example/nccl/common.h): NCCL finds a
// plugin by dlsym of the table's symbol name (ncclProfiler_v5, ncclTunerPlugin_v5, ...) and
// calls through the function pointers, so only the layout and the values matter. Declared in
// our own namespace so that a translation unit may include nccl.h too.
//
// NCCL 2.28 loads profiler v5 and tuner v5; 2.30 adds profiler v6 (CE events; same coll/p2p
// layout) and tuner v6 (v5 plus an optional getChunkSize).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace trainscope::nccl_abi {

enum Result : int {  // ncclResult_t
  Success = 0,
  UnhandledCudaError = 1,
  SystemError = 2,
  InternalError = 3,
  InvalidArgument = 4,
  InvalidUsage = 5,
  RemoteError = 6,
};

typedef enum {
  LogNone = 0,
  LogVersion = 1,
  LogWarn = 2,
  LogInfo = 3,
  LogAbort = 4,
  LogTrace = 5
} DebugLogLevel;
typedef void (*DebugLogger)(DebugLogLevel level, unsigned long flags, const char* file, int line,
                            const char* fmt, ...);

// ---- profiler --------------------------------------------------------------------------------

enum : uint64_t {  // event types (ncclProfile*), also the bits of the activation mask
  ProfileGroup = 1 << 0,
  ProfileColl = 1 << 1,
  ProfileP2p = 1 << 2,
  ProfileProxyOp = 1 << 3,
  ProfileProxyStep = 1 << 4,
  ProfileProxyCtrl = 1 << 5,
  ProfileKernelCh = 1 << 6,
  ProfileNetPlugin = 1 << 7,
  ProfileGroupApi = 1 << 8,
  ProfileCollApi = 1 << 9,
  ProfileP2pApi = 1 << 10,
  ProfileKernelLaunch = 1 << 11,
  ProfileCeColl = 1 << 12,   // v6
  ProfileCeSync = 1 << 13,   // v6
  ProfileCeBatch = 1 << 14,  // v6
};

typedef enum {  // ncclProfilerEventState_t (v4 and later values)
  ProxyOpInProgress_v4 = 19,
  ProxyStepSendGPUWait = 8,
  ProxyStepSendPeerWait_v4 = 20,
  ProxyStepSendWait = 9,
  ProxyStepRecvWait = 10,
  ProxyStepRecvFlushWait = 11,
  ProxyStepRecvGPUWait = 12,
  ProxyCtrlIdle = 13,
  ProxyCtrlActive = 14,
  ProxyCtrlSleep = 15,
  ProxyCtrlWakeup = 16,
  ProxyCtrlAppend = 17,
  ProxyCtrlAppendEnd = 18,
  NetPluginUpdate = 21,
  KernelChStop = 22,
  GroupStartApiStop = 23,
  GroupEndApiStart = 24,
} ProfilerEventState;

struct ProfilerEventDescr_v5 {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    struct {
      int graphCaptured;
      int groupDepth;
    } groupApi;
    struct {
      const char* func;
      size_t count;
      const char* datatype;
      int root;
      void* stream;
      bool graphCaptured;
    } collApi;
    struct {
      const char* func;
      size_t count;
      const char* datatype;
      void* stream;
      bool graphCaptured;
    } p2pApi;
    struct {
      void* stream;
    } kernelLaunch;
    struct {
      uint64_t seqNumber;
      const char* func;
      void const* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t nChannels;
      uint8_t nWarps;
      const char* algo;
      const char* proto;
      void* parentGroup;
    } coll;
    struct {
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
      uint8_t nChannels;
      void* parentGroup;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
    struct {
      uint8_t channelId;
      uint64_t pTimer;
    } kernelCh;
    struct {
      int64_t id;
      void* data;
    } netPlugin;
  };
};

// v6: the same header and the same members at the same offsets for everything v5 has (groupApi's
// graphCaptured became a bool; groupDepth stays at offset 4), plus kernelStep and CE events.
// The union is larger; we only ever read through a pointer NCCL gives us.
struct ProfilerEventDescr_v6 {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    struct {
      bool graphCaptured;
      int groupDepth;
    } groupApi;
    decltype(ProfilerEventDescr_v5::collApi) collApi;
    decltype(ProfilerEventDescr_v5::p2pApi) p2pApi;
    decltype(ProfilerEventDescr_v5::kernelLaunch) kernelLaunch;
    decltype(ProfilerEventDescr_v5::coll) coll;
    decltype(ProfilerEventDescr_v5::p2p) p2p;
    decltype(ProfilerEventDescr_v5::proxyOp) proxyOp;
    decltype(ProfilerEventDescr_v5::proxyStep) proxyStep;
    decltype(ProfilerEventDescr_v5::kernelCh) kernelCh;
    struct {
      uint8_t channelId;
      uint8_t isSend;
      uint8_t peer;
      uint32_t step;
      uint32_t size;
      uint64_t startTs;
      uint64_t readyTs;
    } kernelStep;
    decltype(ProfilerEventDescr_v5::netPlugin) netPlugin;
    struct {
      uint64_t seqNumber;
      const char* func;
      void const* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      const char* syncStrategy;
      bool intraBatchSync;
      uint32_t batchSize;
      uint32_t numBatches;
      uint32_t ceSeqNum;
      void* stream;
    } ceColl;
    struct {
      bool isComplete;
      int nRanks;
    } ceCollSync;
    struct {
      int numOps;
      size_t totalBytes;
      bool useIntraSync;
    } ceCollBatch;
  };
};

union ProfilerEventStateArgs_v5 {
  struct {
    size_t transSize;
  } proxyStep;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
  struct {
    void* data;
  } netPlugin;
  struct {
    uint64_t pTimer;
  } kernelCh;
};
using ProfilerEventStateArgs_v6 = ProfilerEventStateArgs_v5;

template <typename Descr>
struct ProfilerTable {
  const char* name;
  Result (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                 int nranks, int rank, DebugLogger logfn);
  Result (*startEvent)(void* context, void** eHandle, Descr* eDescr);
  Result (*stopEvent)(void* eHandle);
  Result (*recordEventState)(void* eHandle, ProfilerEventState eState, ProfilerEventStateArgs_v5* eStateArgs);
  Result (*finalize)(void* context);
};
using Profiler_v5 = ProfilerTable<ProfilerEventDescr_v5>;  // ncclProfiler_v5_t
using Profiler_v6 = ProfilerTable<ProfilerEventDescr_v6>;  // ncclProfiler_v6_t

// ---- tuner -----------------------------------------------------------------------------------

typedef enum {  // ncclFunc_t
  FuncBroadcast = 0,
  FuncReduce = 1,
  FuncAllGather = 2,
  FuncReduceScatter = 3,
  FuncAllReduce = 4,
  FuncSendRecv = 5,
  FuncSend = 6,
  FuncRecv = 7,
} Func;

constexpr int kNumAlgorithms = 7;  // NCCL_NUM_ALGORITHMS_V5
constexpr int kNumProtocols = 3;   // NCCL_NUM_PROTOCOLS_V5
// NCCL_ALGO_*: TREE 0, RING 1, COLLNET_DIRECT 2, COLLNET_CHAIN 3, NVLS 4, NVLS_TREE 5, PAT 6.
// NCCL_PROTO_*: LL 0, LL128 1, SIMPLE 2. Cost table entries NCCL ignores are -1.0.
constexpr float kAlgoProtoIgnore = -1.0f;

struct NvlDomainInfo_v5 {
  int nNvlDomains;
  int minRanksPerNvlDomain;
  int maxRanksPerNvlDomain;
};

struct TunerConstants_v5 {
  double baseLatencies[kNumAlgorithms][kNumProtocols];
  double hwLatencies[3][kNumAlgorithms][kNumProtocols];
  double llMaxBws[4][3];
  double perChMaxRingLL128Bws[4][3];
  double perChMaxTreeLL128Bws[4][3];
  double perChMaxTreeBws[4][3];
  double perChMaxNVLSTreeBws[4][3];
};

struct Tuner_v5 {  // ncclTuner_v5_t
  const char* name;
  Result (*init)(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes, DebugLogger logFunction,
                 NvlDomainInfo_v5* nvlDomainInfo, TunerConstants_v5* constants);
  Result (*getCollInfo)(void* context, Func collType, size_t nBytes, int numPipeOps, float** collCostTable,
                        int numAlgo, int numProto, int regBuff, int* nChannels);
  Result (*finalize)(void* context);
};

struct Tuner_v6 {  // ncclTuner_v6_t: v5 plus an optional chunk-size hook (NULL: NCCL's own)
  const char* name;
  Result (*init)(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes, DebugLogger logFunction,
                 NvlDomainInfo_v5* nvlDomainInfo, TunerConstants_v5* constants);
  Result (*getCollInfo)(void* context, Func collType, size_t nBytes, int numPipeOps, float** collCostTable,
                        int numAlgo, int numProto, int regBuff, int* nChannels);
  Result (*finalize)(void* context);
  Result (*getChunkSize)(void* context, Func collType, size_t nBytes, int algo, int proto, int nChannels,
                         size_t* chunkSize);
};

}  // namespace trainscope::nccl_abi
