// libFuzzer target for the Nsight Systems SQLite importer (core/interop/nsys): the input is an
// `nsys export --type sqlite` file. It is written to a temporary file (tmpfs) and imported as
// `trainscope-cli import` does, strictly and with --partial, then summarised and analysed.
//
// Properties: a damaged or hostile export (unknown schema version, missing tables, wrong types,
// absurd timestamps, a truncated file) gives an error or data, never a crash, hang, leak or
// undefined behaviour (ASan/UBSan). Seeds: corpus/nsys (a small export with the schema of
// tests/data/nsys/schema_3_16_1.sql: a step, two launches, a GEMM and an NCCL kernel).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "trainscope/core/analysis/analysis.h"
#include "trainscope/core/interop/nsys/nsys_import.h"
#include "trainscope/core/session/summary.h"

using namespace trainscope::core;

namespace {
std::string g_path;

void removeFiles() {
  ::unlink(g_path.c_str());
  ::unlink((g_path + "-wal").c_str());
  ::unlink((g_path + "-shm").c_str());
  ::unlink((g_path + "-journal").c_str());
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* base = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  g_path = std::string(base) + "/fuzz_nsys." + std::to_string(::getpid()) + ".sqlite";
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  removeFiles();
  if (FILE* f = std::fopen(g_path.c_str(), "wb")) {
    const bool ok = std::fwrite(data, 1, size, f) == size;
    std::fclose(f);
    if (!ok) std::abort();
  } else {
    std::abort();
  }
  for (bool partial : {false, true}) {
    NsysImportOptions o;
    o.partial = partial;
    auto store = importNsysSqlite(g_path, o);
    if (!store) continue;
    (void)summaryToJson(summarizeStore(store.value()));
    (void)analyzeStore(store.value());
  }
  removeFiles();
  return 0;
}
