// CUPTI activity tracing inside the training process: kernels (CONCURRENT_KERNEL), copies,
// memsets, runtime launch/sync calls, synchronization and NVTX markers, translated by
// CuptiTranslator into the agent's events. Buffers come from a bounded BufferPool; GPU and CPU
// records are stamped on the agent's clock through cuptiActivityRegisterTimestampCallback;
// CUPTI's dropped-record counts are reported to the sink. stop() flushes and calls
// cuptiFinalize so that a job is not left slower once tracing ends.
//
// Never throws, never aborts. Failure modes are reported (sink log + state) and the other
// sources keep working: another CUPTI subscriber in the process (Nsight Systems, the PyTorch
// profiler / Kineto, DCGM) -> HeldByOther; no driver or no GPU (cuptiActivityEnable returns
// CUPTI_ERROR_UNKNOWN here) -> Unavailable.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "trainscope/profiler/event_sink.h"

namespace trainscope::profiler {

struct CuptiConfig {
  size_t bufferBytes = size_t{4} << 20;  // one activity buffer
  size_t maxBuffers = 8;                 // pool bound: 32 MiB by default
  uint32_t flushPeriodMs = 100;          // CUPTI delivers buffers at least this often
  bool nvtx = true;                      // CUPTI_ACTIVITY_KIND_MARKER
  bool driverApi = true;                 // CUPTI_ACTIVITY_KIND_DRIVER (library kernels' launches)
};

enum class CuptiState { Off, Running, Unavailable, HeldByOther };
const char* cuptiStateName(CuptiState s);

class CuptiSource {
 public:
  static CuptiSource& instance();

  // Subscribes, registers the clock and buffer callbacks, enables the activity kinds. Returns
  // the state reached; a second call while running changes nothing.
  CuptiState start(EventSink& sink, const CuptiConfig& cfg) noexcept;
  // Delivers every completed and pending buffer now (forced flush).
  void flush() noexcept;
  // flush, disable the kinds, unsubscribe, cuptiFinalize.
  void stop() noexcept;

  CuptiState state() const { return state_.load(); }
  std::string message() const;  // why the state is what it is (for logs and tests)
  uint64_t recordsSeen() const { return records_.load(); }
  uint64_t recordsDropped() const { return dropped_.load(); }  // CUPTI's own counts

  // CUPTI callbacks (static: CUPTI passes no context).
  static void bufferRequested(uint8_t** buffer, size_t* size, size_t* maxNumRecords);
  static void bufferCompleted(void* ctx, uint32_t streamId, uint8_t* buffer, size_t size, size_t validSize);

 private:
  CuptiSource() = default;
  struct Impl;
  std::mutex mu_;  // start/stop/flush
  std::unique_ptr<Impl> impl_;
  std::atomic<CuptiState> state_{CuptiState::Off};
  std::atomic<uint64_t> records_{0}, dropped_{0};
  mutable std::mutex msgMu_;
  std::string message_;
  void setMessage(std::string m);
};

}  // namespace trainscope::profiler
