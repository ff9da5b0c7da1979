#include "trainscope/profiler/buffer_pool.h"

#include <cstdlib>

namespace trainscope::profiler {

BufferPool::~BufferPool() {
  for (uint8_t* b : all_) std::free(b);
}

uint8_t* BufferPool::acquire() noexcept {
  std::lock_guard lock(mu_);
  if (!free_.empty()) {
    uint8_t* b = free_.back();
    free_.pop_back();
    return b;
  }
  if (all_.size() >= max_ || all_.size() == all_.max_size()) {
    ++refusals_;
    return nullptr;
  }
  // aligned_alloc wants a size that is a multiple of the alignment.
  auto* b = static_cast<uint8_t*>(std::aligned_alloc(8, (bytes_ + 7) & ~size_t{7}));
  if (!b) {
    ++refusals_;
    return nullptr;
  }
  try {
    all_.reserve(max_);
    free_.reserve(max_);
  } catch (...) {
    std::free(b);
    ++refusals_;
    return nullptr;
  }
  all_.push_back(b);  // capacity reserved: cannot throw
  return b;
}

void BufferPool::release(uint8_t* b) noexcept {
  if (!b) return;
  std::lock_guard lock(mu_);
  free_.push_back(b);  // capacity reserved for every buffer that exists
}

size_t BufferPool::allocated() const {
  std::lock_guard lock(mu_);
  return all_.size();
}

size_t BufferPool::inUse() const {
  std::lock_guard lock(mu_);
  return all_.size() - free_.size();
}

uint64_t BufferPool::refusals() const {
  std::lock_guard lock(mu_);
  return refusals_;
}

}  // namespace trainscope::profiler
