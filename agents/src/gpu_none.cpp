// Built with TRAINSCOPE_GPU=OFF: no CUPTI, no NCCL plugins, nothing to start or stop.
#include "gpu.h"

namespace trainscope::agent {

void gpuAfterStart() noexcept {}
void gpuBeforeStop() noexcept {}

}  // namespace trainscope::agent
