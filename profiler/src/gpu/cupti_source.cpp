#include "trainscope/profiler/cupti_source.h"

#include <cupti.h>

#include <vector>

#include "trainscope/profiler/buffer_pool.h"
#include "trainscope/profiler/cupti_translate.h"

namespace trainscope::profiler {

namespace {
// CUPTI's callbacks take no context: the running source's pieces, set before registration.
std::atomic<EventSink*> g_sink{nullptr};
std::atomic<BufferPool*> g_pool{nullptr};

uint64_t CUPTIAPI agentTimestamp() {
  EventSink* s = g_sink.load(std::memory_order_acquire);
  return s ? static_cast<uint64_t>(s->nowNs()) : 0;
}

void CUPTIAPI onRequested(uint8_t** buffer, size_t* size, size_t* maxNumRecords) {
  CuptiSource::bufferRequested(buffer, size, maxNumRecords);
}
void CUPTIAPI onCompleted(CUcontext ctx, uint32_t streamId, uint8_t* buffer, size_t size, size_t validSize) {
  CuptiSource::bufferCompleted(ctx, streamId, buffer, size, validSize);
}
void CUPTIAPI onCallback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

std::string resultText(CUptiResult r) {
  const char* s = nullptr;
  if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s)
    return "CUPTI error " + std::to_string(static_cast<int>(r));
  return s;
}

struct Kind {
  CUpti_ActivityKind kind;
  const char* name;
};
constexpr Kind kKinds[] = {
    {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "CONCURRENT_KERNEL"},
    {CUPTI_ACTIVITY_KIND_MEMCPY, "MEMCPY"},
    {CUPTI_ACTIVITY_KIND_MEMSET, "MEMSET"},
    {CUPTI_ACTIVITY_KIND_RUNTIME, "RUNTIME"},
    {CUPTI_ACTIVITY_KIND_DRIVER, "DRIVER"},
    {CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, "SYNCHRONIZATION"},
    {CUPTI_ACTIVITY_KIND_MARKER, "MARKER"},
};

constexpr const char* kHeldByOther =
    "CUPTI is already used by another tool in this process (Nsight Systems, the PyTorch profiler/Kineto, "
    "DCGM, ...; one subscriber per process on this CUDA version): GPU activity tracing is off; CPU ranges, "
    "steps, knobs, NCCL and MPI events keep working. Set TRAINSCOPE_CUPTI=0 to leave CUPTI to that tool.";
}  // namespace

struct CuptiSource::Impl {
  Impl(EventSink& s, const CuptiConfig& c) : sink(s), pool(c.bufferBytes, c.maxBuffers), translator(s) {}
  EventSink& sink;
  BufferPool pool;
  std::mutex translateMu;  // CUPTI may complete buffers on several threads
  CuptiTranslator translator;
  CUpti_SubscriberHandle subscriber = nullptr;
  std::vector<CUpti_ActivityKind> enabled;
};

const char* cuptiStateName(CuptiState s) {
  switch (s) {
    case CuptiState::Off:
      return "off";
    case CuptiState::Running:
      return "running";
    case CuptiState::Unavailable:
      return "unavailable";
    case CuptiState::HeldByOther:
      return "held by another tool";
  }
  return "?";
}

CuptiSource& CuptiSource::instance() {
  static CuptiSource* s = new CuptiSource();  // leaked: CUPTI may call back during exit
  return *s;
}

void CuptiSource::setMessage(std::string m) {
  std::lock_guard lock(msgMu_);
  message_ = std::move(m);
}

std::string CuptiSource::message() const {
  std::lock_guard lock(msgMu_);
  return message_;
}

CuptiState CuptiSource::start(EventSink& sink, const CuptiConfig& cfg) noexcept {
  std::lock_guard lock(mu_);
  // Running: nothing to do. Unavailable (no driver/GPU): it will not appear later; one report.
  if (const CuptiState st = state_.load(); st == CuptiState::Running || st == CuptiState::Unavailable)
    return st;
  try {
    // The pool and translator stay alive after stop: CUPTI may hand back a buffer late.
    if (!impl_) impl_ = std::make_unique<Impl>(sink, cfg);
    Impl& im = *impl_;
    g_sink.store(&sink, std::memory_order_release);
    g_pool.store(&im.pool, std::memory_order_release);

    // Subscribing first tells us whether another tool holds CUPTI before we touch the activity
    // callbacks (which are process-wide: registering ours would steal that tool's buffers).
    CUptiResult r = cuptiSubscribe(&im.subscriber, reinterpret_cast<CUpti_CallbackFunc>(onCallback), nullptr);
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
      im.subscriber = nullptr;
      setMessage(kHeldByOther);
      sink.log(kHeldByOther);
      state_.store(CuptiState::HeldByOther);
      return CuptiState::HeldByOther;
    }
    std::string problems;
    if (r != CUPTI_SUCCESS) {
      im.subscriber = nullptr;
      problems += " cuptiSubscribe: " + resultText(r) + ";";
    }
    // gettid(), as the agent's thread tracks: runtime calls and NVTX ranges join their thread.
    if ((r = cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)) != CUPTI_SUCCESS)
      problems += " thread id type: " + resultText(r) + ";";
    if ((r = cuptiActivityRegisterTimestampCallback(agentTimestamp)) != CUPTI_SUCCESS)
      problems += " timestamp callback: " + resultText(r) + " (GPU times stay on CUPTI's clock);";
    if ((r = cuptiActivityRegisterCallbacks(onRequested, onCompleted)) != CUPTI_SUCCESS)
      problems += " buffer callbacks: " + resultText(r) + ";";
    im.enabled.clear();
    bool heldByOther = false;
    for (const Kind& k : kKinds) {
      if (k.kind == CUPTI_ACTIVITY_KIND_MARKER && !cfg.nvtx) continue;
      if (k.kind == CUPTI_ACTIVITY_KIND_DRIVER && !cfg.driverApi) continue;
      r = cuptiActivityEnable(k.kind);
      if (r == CUPTI_SUCCESS) {
        im.enabled.push_back(k.kind);
      } else {
        heldByOther |= r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
        problems += std::string(" enable ") + k.name + ": " + resultText(r) + ";";
      }
    }
    if (im.enabled.empty()) {
      const CuptiState st = heldByOther ? CuptiState::HeldByOther : CuptiState::Unavailable;
      std::string msg = heldByOther ? std::string(kHeldByOther)
                                    : "CUPTI activity tracing unavailable (no GPU or driver?):" + problems +
                                          " GPU activity tracing is off; the other sources keep working.";
      if (im.subscriber) cuptiUnsubscribe(im.subscriber);
      im.subscriber = nullptr;
      cuptiFinalize();  // leaves nothing behind in the job; errors here change nothing
      setMessage(msg);
      sink.log(msg.c_str());
      state_.store(st);
      return st;
    }
    cuptiActivityFlushPeriod(cfg.flushPeriodMs);
    std::string msg = "CUPTI activity tracing on (" + std::to_string(im.enabled.size()) + " kinds, " +
                      std::to_string(cfg.maxBuffers) + " x " + std::to_string(cfg.bufferBytes >> 10) +
                      " KiB buffers)";
    if (!problems.empty()) msg += "; partly:" + problems;
    setMessage(msg);
    sink.log(msg.c_str());
    state_.store(CuptiState::Running);
    return CuptiState::Running;
  } catch (...) {
    setMessage("CUPTI start failed (out of memory)");
    sink.log("CUPTI start failed (out of memory); GPU activity tracing is off");
    state_.store(CuptiState::Unavailable);
    return CuptiState::Unavailable;
  }
}

void CuptiSource::flush() noexcept {
  std::lock_guard lock(mu_);
  if (state_.load() == CuptiState::Running) cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

void CuptiSource::stop() noexcept {
  std::lock_guard lock(mu_);
  if (state_.load() != CuptiState::Running || !impl_) return;
  Impl& im = *impl_;
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  for (CUpti_ActivityKind k : im.enabled) cuptiActivityDisable(k);
  im.enabled.clear();
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  if (im.subscriber) cuptiUnsubscribe(im.subscriber);
  im.subscriber = nullptr;
  // Detaches CUPTI from the process: the job runs at full speed again after tracing.
  cuptiFinalize();
  state_.store(CuptiState::Off);
  setMessage("CUPTI activity tracing stopped (" + std::to_string(records_.load()) + " records, " +
             std::to_string(dropped_.load()) + " dropped by CUPTI)");
}

void CuptiSource::bufferRequested(uint8_t** buffer, size_t* size, size_t* maxNumRecords) {
  BufferPool* pool = g_pool.load(std::memory_order_acquire);
  uint8_t* b = pool ? pool->acquire() : nullptr;
  *buffer = b;
  *size = b ? pool->bufferBytes() : 0;  // no buffer: CUPTI drops records and counts them
  *maxNumRecords = 0;
}

void CuptiSource::bufferCompleted(void* ctx, uint32_t streamId, uint8_t* buffer, size_t, size_t validSize) {
  CuptiSource& self = instance();
  Impl* im = self.impl_.get();
  if (!im || !buffer) return;
  uint64_t n = 0;
  try {
    std::lock_guard lock(im->translateMu);
    CUpti_Activity* rec = nullptr;
    while (cuptiActivityGetNextRecord(buffer, validSize, &rec) == CUPTI_SUCCESS) {
      ++n;
      im->translator.translate(rec);
    }
  } catch (...) {
    im->sink.log("CUPTI buffer translation failed; the rest of this buffer is lost");
  }
  self.records_.fetch_add(n, std::memory_order_relaxed);
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(static_cast<CUcontext>(ctx), streamId, &dropped) == CUPTI_SUCCESS &&
      dropped > 0) {
    self.dropped_.fetch_add(dropped, std::memory_order_relaxed);
    im->sink.countDropped(dropped);
  }
  im->pool.release(buffer);
}

}  // namespace trainscope::profiler
