// The GPU sources' place in the runtime's life: CUPTI starts with the agent when asked
// (TRAINSCOPE_CUPTI=1) or when CUDA initializes in an injected process (InitializeInjection),
// and is flushed and finalized before the agent stops. Without GPU support both are no-ops
// (gpu_none.cpp).
#pragma once

namespace trainscope::agent {

void gpuAfterStart() noexcept;  // end of Runtime::start
void gpuBeforeStop() noexcept;  // start of Runtime::stop, while capture is still on

}  // namespace trainscope::agent
