// libFuzzer target for the Nsight Systems SQLite importer (core/interop/nsys): the input is an
// `nsys export --type sqlite` file. It is written to a temporary file (tmpfs) and imported as
// `trainscope-cli import` does, strictly and with --partial, then summarised and analysed.
//
// Properties: a damaged or hostile export (unknown schema version, missing tables, wrong types,
// absurd timestamps, a truncated file) gives an error or data, never a crash, hang, leak or
// undefined behaviour (ASan/UBSan). Seeds: corpus/nsys (a small export with the schema of
// tests/data/nsys/schema_3_16_1.sql: a step, two launches, a GEMM and an NCCL kernel).
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_temp_file.h"
#include "trainscope/core/analysis/analysis.h"
#include "trainscope/core/interop/nsys/nsys_import.h"
#include "trainscope/core/session/summary.h"

using namespace trainscope::core;

namespace {
const fuzz::TempInput* g_input = nullptr;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_input = new fuzz::TempInput("fuzz_nsys", ".sqlite");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  g_input->write(data, size);
  const std::string& path = g_input->path();
  for (bool partial : {false, true}) {
    NsysImportOptions o;
    o.partial = partial;
    auto store = importNsysSqlite(path, o);
    if (!store) continue;
    (void)summaryToJson(summarizeStore(store.value()));
    (void)analyzeStore(store.value());
  }
  g_input->remove();
  return 0;
}
