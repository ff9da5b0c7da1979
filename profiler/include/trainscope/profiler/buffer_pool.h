// A bounded pool of equal-sized byte buffers (CUPTI activity buffers). At most maxBuffers exist
// at once; when all are in use acquire() returns nullptr and counts a refusal (CUPTI then drops
// records and counts them itself). Released buffers are reused, never freed until destruction.
// Thread-safe: CUPTI requests and completes buffers on different threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace trainscope::profiler {

class BufferPool {
 public:
  BufferPool(size_t bufferBytes, size_t maxBuffers) : bytes_(bufferBytes), max_(maxBuffers) {}
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  uint8_t* acquire() noexcept;  // 8-byte aligned (CUPTI requires it), or nullptr
  void release(uint8_t* b) noexcept;
  size_t bufferBytes() const { return bytes_; }
  size_t allocated() const;  // buffers that exist (in use + free)
  size_t inUse() const;
  uint64_t refusals() const;

 private:
  size_t bytes_;
  size_t max_;
  mutable std::mutex mu_;
  std::vector<uint8_t*> all_;
  std::vector<uint8_t*> free_;
  uint64_t refusals_ = 0;
};

}  // namespace trainscope::profiler
