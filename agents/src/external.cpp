#include "external.h"

#include "capture.h"
#include "clock.h"
#include "log.h"
#include "string_table.h"

namespace trainscope::agent {

ExternalQueue& ExternalQueue::instance() {
  static ExternalQueue* q = new ExternalQueue();  // leaked: CUPTI/NCCL may push during exit
  return *q;
}

uint32_t ExternalQueue::intern(std::string_view s) {
  return StringTable::instance().intern(s);
}

bool ExternalQueue::push(const profiler::ExternalEvent& e) noexcept {
  if (!g_captureActive.load(std::memory_order_relaxed)) return false;
  if (device_.load(std::memory_order_relaxed) < 0 && e.kind == core::EventKind::Kernel)
    if (const core::Attr* d = e.find(core::AttrKey::Device)) device_.store(static_cast<int32_t>(d->asInt()));
  try {
    std::lock_guard lock(mu_);
    if (pending_.size() >= cap_) {
      Capture::instance().countDrop();
      return false;
    }
    pending_.push_back(e);
    return true;
  } catch (...) {
    Capture::instance().countDrop();
    return false;
  }
}

void ExternalQueue::countDropped(uint64_t n) noexcept {
  Capture::instance().countDrops(n);
}

int64_t ExternalQueue::nowNs() noexcept {
  return agent::nowNs();
}

void ExternalQueue::log(const char* line) noexcept {
  logLine("%s", line);
}

void ExternalQueue::take(std::vector<profiler::ExternalEvent>& out) {
  out.clear();
  std::lock_guard lock(mu_);
  pending_.swap(out);
}

}  // namespace trainscope::agent
