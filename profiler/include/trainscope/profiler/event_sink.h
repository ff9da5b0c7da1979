// What an in-process event source (CUPTI, the NCCL profiler plugin) hands to the agent: complete
// events (start and end known) with their track, in fixed-size records so that pushing one
// never allocates. The agent implements EventSink (agents/src/external.h); tests implement it
// to collect what a source produced. Sources run on threads the job or a library owns (CUPTI's
// buffer thread, NCCL's proxy thread), so every call here must be cheap and must never block
// for long or throw.
#pragma once

#include <cstdint>
#include <string_view>

#include "trainscope/core/model/events.h"

namespace trainscope::profiler {

struct ExternalEvent {
  static constexpr int kMaxAttrs = 10;
  // The track: events with the same (trackKind, trackId) share one track; trackName (an
  // interned string) names it when it is new.
  core::TrackKind trackKind = core::TrackKind::CudaStream;
  int64_t trackId = 0;
  uint32_t trackName = 0;
  core::EventKind kind = core::EventKind::Kernel;
  int64_t startNs = 0;  // agent clock
  int64_t endNs = 0;
  uint32_t name = 0;  // interned string
  uint8_t attrCount = 0;
  core::Attr attrs[kMaxAttrs];

  // Appends an attribute; silently ignores it when the record is full (kMaxAttrs is sized for
  // the richest event a source produces, an NCCL collective).
  void add(core::Attr a) {
    if (attrCount < kMaxAttrs) attrs[attrCount++] = a;
  }
  const core::Attr* find(core::AttrKey k) const {
    for (int i = 0; i < attrCount; ++i)
      if (attrs[i].key == static_cast<uint32_t>(k)) return &attrs[i];
    return nullptr;
  }
};

class EventSink {
 public:
  virtual ~EventSink() = default;
  // Interns a string in the agent's table (locks; sources cache ids where they can).
  virtual uint32_t intern(std::string_view s) = 0;
  // Queues a complete event; false when it was dropped (agent off, queue full: counted).
  virtual bool push(const ExternalEvent& e) noexcept = 0;
  // Records the source lost (CUPTI's dropped-record count, a full handle pool): reported with
  // the agent's other drops.
  virtual void countDropped(uint64_t n) noexcept = 0;
  // The agent clock (CLOCK_MONOTONIC + shift, ns): every timestamp a source emits is on it.
  virtual int64_t nowNs() noexcept = 0;
  // A one-line diagnostic for the user ("trainscope-agent: ..." on stderr in the agent).
  virtual void log(const char* line) noexcept = 0;
};

// Flow ids for launch -> kernel links: the CUDA correlation id in its own id space (bit 62),
// so it never collides with flows other producers number from 0.
inline int64_t cudaFlowId(uint32_t correlationId) {
  return (int64_t{1} << 62) | correlationId;
}

}  // namespace trainscope::profiler
