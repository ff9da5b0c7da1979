// Stand-in when the build has no CUDA backend (-DTRAINSCOPE_GPU=OFF or no CUDA toolkit/NCCL).
#include "backend.h"

namespace trainscope::train {

namespace {
constexpr const char* kNotBuilt =
    "this trainscope-train was built without the cuda backend (configured with -DTRAINSCOPE_GPU=OFF or "
    "without the CUDA toolkit and NCCL); use --backend cpu";
}

bool cudaBackendAvailable(std::string* why) {
  if (why) *why = kNotBuilt;
  return false;
}

std::unique_ptr<Backend> makeCudaBackend(std::string* why) {
  if (why) *why = kNotBuilt;
  return nullptr;
}

std::unique_ptr<Compute> makeCudaCompute() {
  return nullptr;
}

}  // namespace trainscope::train
