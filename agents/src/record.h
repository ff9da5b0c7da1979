// The capture path's unit: one fixed-size 32-byte record per API call, written by the calling
// thread into its own ring and decoded by the drain thread. Fixed size keeps the hot path to a
// clock (TSC) read plus one store (no allocation, no branching on payload size).
#pragma once

#include <cstdint>

namespace trainscope::agent {

enum class RecordType : uint8_t {
  RangePush = 1,     // name
  RangePop,          //
  RangeBegin,        // name, a = range id
  RangeEnd,          // a = range id
  Marker,            // name
  Counter,           // name, a = double bits
  StepBegin,         // a = step
  StepEnd,           // a = step
  PhaseBegin,        // sub = ts_phase
  PhaseEnd,          // sub = ts_phase
  MbBegin,           // sub = op, a = micro-batch, b = stage << 32 | chunk; sub | 4: a segment,
                     //   a = offset << 32 | micro-batch, b = stage << 32 | segment << 16 | chunk, name = length
  MbEnd,             //
  BucketReady,       // a = bytes, b = bucket
  BucketCommBegin,   // a = bytes, b = bucket, name = algorithm (0: none)
  BucketCommEnd,     // b = bucket
  CommBegin,         // sub = kind, name, a = bytes, b = peer << 32 | algorithm name
  CommEnd,           //
  KnobChange,        // name = knob name, a = value string id, b = step
  KernelBegin,       // name, a = layer (int32, < 0: none)
  KernelEnd,         //
  BucketCommBytes,   // name = bucket, a = bytes sent, b = bytes received (counted by the job)
};

struct Record {
  int64_t ts = 0;      // agent clock in ns, or raw TSC when clock == kRecordClockTsc (capture.h)
  RecordType type = RecordType::Marker;
  uint8_t sub = 0;
  uint16_t clock = 0;  // which clock ts is on; the drain converts TSC to the agent clock
  uint32_t name = 0;   // agent-local string id
  uint64_t a = 0;
  uint64_t b = 0;
};
static_assert(sizeof(Record) == 32, "records are fixed 32-byte cells; keep them that size");

inline uint64_t packPair(int32_t hi, uint32_t lo) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(hi)) << 32) | lo;
}
inline int32_t pairHi(uint64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v >> 32)); }
inline uint32_t pairLo(uint64_t v) { return static_cast<uint32_t>(v); }

}  // namespace trainscope::agent
