#include "trainscope/profiler/cupti_translate.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace trainscope::profiler {

using core::Attr;
using core::AttrKey;
using core::EventKind;
using core::TrackKind;

namespace {
constexpr size_t kMaxOpenMarkers = 65536;  // NVTX starts without an end must not grow memory

const char* memcpyName(uint8_t copyKind) {
  switch (copyKind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "memcpy DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      return "memcpy HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return "memcpy PtoP";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA:
      return "memcpy array";
    default:
      return "memcpy";
  }
}

const char* syncName(CUpti_ActivitySynchronizationType t) {
  switch (t) {
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE:
      return "event synchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT:
      return "stream wait event";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE:
      return "stream synchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE:
      return "context synchronize";
    default:
      return "synchronize";
  }
}

int64_t ns(uint64_t t) {
  return static_cast<int64_t>(t);
}
}  // namespace

const char* keptRuntimeCallName(CUpti_CallbackId cbid) {
  switch (cbid) {
#define TS_KEEP(id, text)             \
  case CUPTI_RUNTIME_TRACE_CBID_##id: \
    return text;
    TS_KEEP(cudaLaunchKernel_v7000, "cudaLaunchKernel")
    TS_KEEP(cudaLaunchKernel_ptsz_v7000, "cudaLaunchKernel")
    TS_KEEP(cudaLaunchKernelExC_v11060, "cudaLaunchKernelExC")
    TS_KEEP(cudaLaunchKernelExC_ptsz_v11060, "cudaLaunchKernelExC")
    TS_KEEP(cudaLaunchCooperativeKernel_v9000, "cudaLaunchCooperativeKernel")
    TS_KEEP(cudaLaunchCooperativeKernel_ptsz_v9000, "cudaLaunchCooperativeKernel")
    TS_KEEP(cudaLaunchHostFunc_v10000, "cudaLaunchHostFunc")
    TS_KEEP(cudaLaunchHostFunc_ptsz_v10000, "cudaLaunchHostFunc")
    TS_KEEP(cudaGraphLaunch_v10000, "cudaGraphLaunch")
    TS_KEEP(cudaGraphLaunch_ptsz_v10000, "cudaGraphLaunch")
    TS_KEEP(cudaMemcpy_v3020, "cudaMemcpy")
    TS_KEEP(cudaMemcpy_ptds_v7000, "cudaMemcpy")
    TS_KEEP(cudaMemcpyAsync_v3020, "cudaMemcpyAsync")
    TS_KEEP(cudaMemcpyAsync_ptsz_v7000, "cudaMemcpyAsync")
    TS_KEEP(cudaMemcpyPeer_v4000, "cudaMemcpyPeer")
    TS_KEEP(cudaMemcpyPeerAsync_v4000, "cudaMemcpyPeerAsync")
    TS_KEEP(cudaMemcpy2D_v3020, "cudaMemcpy2D")
    TS_KEEP(cudaMemcpy2DAsync_v3020, "cudaMemcpy2DAsync")
    TS_KEEP(cudaMemset_v3020, "cudaMemset")
    TS_KEEP(cudaMemset_ptds_v7000, "cudaMemset")
    TS_KEEP(cudaMemsetAsync_v3020, "cudaMemsetAsync")
    TS_KEEP(cudaMemsetAsync_ptsz_v7000, "cudaMemsetAsync")
    TS_KEEP(cudaDeviceSynchronize_v3020, "cudaDeviceSynchronize")
    TS_KEEP(cudaThreadSynchronize_v3020, "cudaThreadSynchronize")
    TS_KEEP(cudaStreamSynchronize_v3020, "cudaStreamSynchronize")
    TS_KEEP(cudaStreamSynchronize_ptsz_v7000, "cudaStreamSynchronize")
    TS_KEEP(cudaEventSynchronize_v3020, "cudaEventSynchronize")
    TS_KEEP(cudaStreamWaitEvent_v3020, "cudaStreamWaitEvent")
    TS_KEEP(cudaStreamWaitEvent_ptsz_v7000, "cudaStreamWaitEvent")
#undef TS_KEEP
    default:
      return nullptr;
  }
}

const char* keptDriverCallName(CUpti_CallbackId cbid) {
  switch (cbid) {
#define TS_KEEP(id, text)            \
  case CUPTI_DRIVER_TRACE_CBID_##id: \
    return text;
    TS_KEEP(cuLaunchKernel, "cuLaunchKernel")
    TS_KEEP(cuLaunchKernel_ptsz, "cuLaunchKernel")
    TS_KEEP(cuLaunchKernelEx, "cuLaunchKernelEx")
    TS_KEEP(cuLaunchKernelEx_ptsz, "cuLaunchKernelEx")
    TS_KEEP(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel")
    TS_KEEP(cuLaunchCooperativeKernel_ptsz, "cuLaunchCooperativeKernel")
    TS_KEEP(cuGraphLaunch, "cuGraphLaunch")
    TS_KEEP(cuGraphLaunch_ptsz, "cuGraphLaunch")
#undef TS_KEEP
    default:
      return nullptr;
  }
}

uint32_t CuptiTranslator::cached(std::unordered_map<uint64_t, uint32_t>& cache, uint64_t key,
                                 const std::string& text) {
  auto [it, fresh] = cache.try_emplace(key, 0);
  if (fresh) it->second = sink_.intern(text);
  return it->second;
}

void CuptiTranslator::onStream(ExternalEvent& e, uint32_t device, uint32_t stream) {
  e.trackKind = TrackKind::CudaStream;
  e.trackId = (static_cast<int64_t>(device) << 32) | stream;
  e.trackName = cached(trackNames_, static_cast<uint64_t>(e.trackId),
                       "GPU " + std::to_string(device) + " stream " + std::to_string(stream));
  e.add(Attr::ofInt(AttrKey::Stream, stream));
  e.add(Attr::ofInt(AttrKey::Device, device));
}

void CuptiTranslator::onThread(ExternalEvent& e, uint32_t threadId) {
  e.trackKind = TrackKind::CpuThread;
  e.trackId = threadId;
  e.trackName =
      cached(trackNames_, (uint64_t{1} << 63) | threadId, "cuda (" + std::to_string(threadId) + ")");
}

void CuptiTranslator::correlate(ExternalEvent& e, uint32_t correlationId) {
  if (correlationId == 0) return;  // CUPTI leaves it 0 when there is no CPU-side call
  e.add(Attr::ofInt(AttrKey::CorrelationId, correlationId));
  e.add(Attr::ofInt(AttrKey::FlowId, cudaFlowId(correlationId)));
}

uint32_t CuptiTranslator::kernelName(const char* raw) {
  if (!raw) return sink_.intern("kernel");
  if (auto it = kernelNames_.find(raw); it != kernelNames_.end() && it->second.raw == raw)
    return it->second.id;
  if (kernelNames_.size() >= 65536) kernelNames_.clear();  // bounded; names come back on demand
  int status = -1;
  char* demangled =
      (raw[0] == '_' && raw[1] == 'Z') ? abi::__cxa_demangle(raw, nullptr, nullptr, &status) : nullptr;
  const uint32_t id = sink_.intern(status == 0 && demangled ? demangled : raw);
  std::free(demangled);
  kernelNames_[raw] = {raw, id};
  return id;
}

int CuptiTranslator::translate(const CUpti_Activity* record) {
  if (!record) return 0;
  ExternalEvent e;
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      e.kind = EventKind::Kernel;
      e.startNs = ns(k->start);
      e.endNs = ns(k->end);
      e.name = kernelName(k->name);
      onStream(e, k->deviceId, k->streamId);
      correlate(e, k->correlationId);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      e.kind = EventKind::Memcpy;
      e.startNs = ns(m->start);
      e.endNs = ns(m->end);
      e.name = cached(fixedNames_, m->copyKind, memcpyName(m->copyKind));
      onStream(e, m->deviceId, m->streamId);
      e.add(Attr::ofInt(AttrKey::Bytes, static_cast<int64_t>(m->bytes)));
      correlate(e, m->correlationId);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      e.kind = EventKind::Memset;
      e.startNs = ns(m->start);
      e.endNs = ns(m->end);
      e.name = cached(fixedNames_, 1000, "memset");
      onStream(e, m->deviceId, m->streamId);
      e.add(Attr::ofInt(AttrKey::Bytes, static_cast<int64_t>(m->bytes)));
      correlate(e, m->correlationId);
      break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
      const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(record);
      const bool driver = record->kind == CUPTI_ACTIVITY_KIND_DRIVER;
      const char* call = driver ? keptDriverCallName(a->cbid) : keptRuntimeCallName(a->cbid);
      if (!call) return 0;
      e.kind = EventKind::Range;
      e.startNs = ns(a->start);
      e.endNs = ns(a->end);
      e.name = cached(fixedNames_, (driver ? 1'000'000 : 2000) + uint64_t{a->cbid}, call);
      onThread(e, a->threadId);
      correlate(e, a->correlationId);
      break;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
      const auto* s = reinterpret_cast<const CUpti_ActivitySynchronization2*>(record);
      e.kind = EventKind::Range;
      e.startNs = ns(s->start);
      e.endNs = ns(s->end);
      e.name = cached(fixedNames_, 3000 + static_cast<uint64_t>(s->type), syncName(s->type));
      e.trackKind = TrackKind::CudaStream;
      e.trackId = (int64_t{1} << 62) | s->contextId;  // one sync track per context
      e.trackName = cached(trackNames_, static_cast<uint64_t>(e.trackId),
                           "GPU ctx " + std::to_string(s->contextId) + " sync");
      if (s->streamId != CUPTI_SYNCHRONIZATION_INVALID_VALUE)
        e.add(Attr::ofInt(AttrKey::Stream, s->streamId));
      correlate(e, s->correlationId);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MARKER: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMarker2*>(record);
      const uint32_t tid = m->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ? m->objectId.pt.threadId : 0;
      if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_START) {
        if (openMarkers_.size() >= kMaxOpenMarkers) {
          sink_.countDropped(1);
          return 0;
        }
        openMarkers_[m->id] = {ns(m->timestamp), sink_.intern(m->name ? m->name : "nvtx range"), tid};
        return 0;
      }
      if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_END) {
        auto it = openMarkers_.find(m->id);
        if (it == openMarkers_.end()) return 0;  // an end without its start: nothing to pair
        const OpenMarker o = it->second;
        openMarkers_.erase(it);
        e.kind = EventKind::Range;
        e.startNs = o.startNs;
        e.endNs = std::max(o.startNs, ns(m->timestamp));
        e.name = o.name;
        onThread(e, o.threadId);
        break;
      }
      e.kind = EventKind::Marker;  // instantaneous
      e.startNs = e.endNs = ns(m->timestamp);
      e.name = sink_.intern(m->name ? m->name : "nvtx marker");
      onThread(e, tid);
      break;
    }
    default:
      ++unknown_;
      return 0;
  }
  return sink_.push(e) ? 1 : 0;
}

}  // namespace trainscope::profiler
