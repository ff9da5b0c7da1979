// What nsys names tell: NCCL kernel names (collective, algorithm, protocol), step ranges, memcpy
// kinds. Pure functions, tested through the importer (tests/tst_nsys_import.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace trainscope::core::nsys {

struct NcclKernel {
  std::string collective;  // AllReduce, ReduceScatter, AllGather, Broadcast, Reduce, SendRecv, Generic, ...
  std::string algorithm;   // RING, TREE, NVLS, COLLNET_DIRECT, ... ("" when the name does not say)
  std::string protocol;    // LL, LL128, SIMPLE ("")
};

// ncclKernel_AllReduce_RING_LL_Sum_float(...) (NCCL <= 2.18), ncclDevKernel_AllReduce_Sum_f32_RING_LL
// (2.19+); a leading "void " of a demangled name is allowed. nullopt: not an NCCL kernel.
std::optional<NcclKernel> parseNcclKernel(std::string_view name);

// ProfilerStep#N (PyTorch), step N / Step_N / step#N, iteration N: the step number.
std::optional<int64_t> parseStepName(std::string_view name);

// ENUM_CUDA_MEMCPY_OPER id -> "HtoD", "DtoH", ... ("Unknown" outside the documented 0..13).
std::string_view memcpyKindShort(int64_t copyKind);
// ENUM_CUDA_MEMCPY_OPER's symbol -> the same short form: CUDA_MEMCPY_KIND_HTOD -> "HtoD",
// CUDA_MEMCPY_KIND_UVM_DTOH -> "UVM DtoH", CUDA_MEMCPY_KIND_UNKNOWN -> "Unknown".
std::string memcpyKindFromEnum(std::string_view symbol);

}  // namespace trainscope::core::nsys
