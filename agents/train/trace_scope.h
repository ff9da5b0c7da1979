// A layer's compute as a Kernel event (attribute Layer) on this thread's CPU track.
#pragma once

#include <cstdint>

#include "trainscope/agent.h"

namespace trainscope::train {

struct KernelScope {
  KernelScope(uint32_t name, int layer) { ts_kernel_begin(name, layer); }
  ~KernelScope() { ts_kernel_end(); }
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;
};

}  // namespace trainscope::train
