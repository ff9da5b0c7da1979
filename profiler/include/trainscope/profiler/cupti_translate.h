// CUPTI activity record -> Trainscope events. Pure: it reads the record struct and pushes to an
// EventSink, and never calls CUPTI, so tests feed it real CUpti_Activity* structs filled in by
// hand (no GPU, no driver). Only built with TRAINSCOPE_GPU (needs cupti.h).
//
// clang-format off
//   record                              event         track                       attributes
//   CONCURRENT_KERNEL (Kernel10)        Kernel        CudaStream "GPU d stream s" Stream Device CorrelationId FlowId
//                                       (name demangled: "void gemm<float>(float*, int)")
//   MEMCPY (Memcpy6)                    Memcpy        CudaStream                  + Bytes
//   MEMSET (Memset4)                    Memset        CudaStream                  + Bytes
//   RUNTIME (API), launches and syncs   Range         CpuThread tid "cuda (tid)"  CorrelationId FlowId
//   DRIVER (API), kernel/graph launches Range         CpuThread tid "cuda (tid)"  CorrelationId FlowId
//                                       (cuBLAS, cuDNN, Triton and NCCL launch through the driver)
//   SYNCHRONIZATION (Synchronization2)  Range         CudaStream "GPU ctx c sync" CorrelationId FlowId Stream
//   MARKER (Marker2, NVTX)              Range, Marker CpuThread tid "cuda (tid)"  --
// clang-format on
// Thread ids are gettid() (CuptiSource sets CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM), so the agent
// puts runtime calls and NVTX ranges on the thread's own track when it has one.
//
// A kernel and the runtime call that launched it carry the same FlowId (cudaFlowId(correlation
// id)): the timeline draws the launch -> kernel flow. Other runtime calls are filtered out.
#pragma once

#include <cupti.h>

#include <cstdint>
#include <string>
#include <unordered_map>

#include "trainscope/profiler/event_sink.h"

namespace trainscope::profiler {

// The runtime API calls we keep (kernel/graph launches, copies and memsets, synchronization)
// and their names; nullptr for every other callback id.
const char* keptRuntimeCallName(CUpti_CallbackId cbid);
// The driver API calls we keep (kernel and graph launches: libraries such as cuBLAS launch with
// cuLaunchKernel, so their kernels have no runtime record); nullptr for every other id.
const char* keptDriverCallName(CUpti_CallbackId cbid);

class CuptiTranslator {
 public:
  explicit CuptiTranslator(EventSink& sink) : sink_(sink) {}
  // Events pushed for this record: 0 when it is filtered out, unknown, or the start of a pair
  // (an NVTX range start waits for its end).
  int translate(const CUpti_Activity* record);
  uint64_t unknownRecords() const { return unknown_; }

 private:
  struct OpenMarker {
    int64_t startNs = 0;
    uint32_t name = 0;
    uint32_t threadId = 0;
  };
  uint32_t cached(std::unordered_map<uint64_t, uint32_t>& cache, uint64_t key, const std::string& text);
  uint32_t kernelName(const char* raw);  // demangled, interned, cached by CUPTI's name pointer
  void onStream(ExternalEvent& e, uint32_t device, uint32_t stream);
  void onThread(ExternalEvent& e, uint32_t threadId);
  static void correlate(ExternalEvent& e, uint32_t correlationId);

  EventSink& sink_;
  std::unordered_map<uint64_t, uint32_t> trackNames_;     // track key -> interned name
  std::unordered_map<uint64_t, uint32_t> fixedNames_;     // small fixed set (memcpy kinds, API names)
  std::unordered_map<uint32_t, OpenMarker> openMarkers_;  // NVTX start/end pairs by id (bounded)
  struct KernelName {
    std::string raw;  // checked on every hit: a pointer may be reused after a module unloads
    uint32_t id = 0;
  };
  std::unordered_map<const char*, KernelName> kernelNames_;  // bounded (cleared when full)
  uint64_t unknown_ = 0;
};

}  // namespace trainscope::profiler
