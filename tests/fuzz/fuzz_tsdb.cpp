// libFuzzer target for the .tsdb reader: the input is a session file (SQLite). It is written
// to a temporary file (tmpfs) and read as `trainscope-cli info` and `analyze` read it: open and
// validate, summary, then every event (loadSession's path) and one time range per rank.
//
// Properties: a damaged or hostile file gives an error or data, never a crash, hang, leak or
// undefined behaviour (ASan/UBSan). SQLite itself is Debian's and not instrumented: coverage
// guides the fuzzer through our reader only.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "trainscope/core/model/trace_store.h"
#include "trainscope/core/session/summary.h"
#include "trainscope/core/session/tsdb.h"

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
  g_path = std::string(base) + "/fuzz_tsdb." + std::to_string(::getpid()) + ".tsdb";
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
  {
    auto reader = SessionReader::open(g_path);
    if (reader) {
      auto summary = reader.value()->summary();
      if (summary) (void)summaryToJson(summary.value());
      TraceStore store;
      if (reader.value()->loadAll(store)) {
        store.shrinkToFit();
        (void)summaryToJson(summarizeStore(store));
      }
      if (summary) {
        for (const auto& rank : summary.value().ranks) {
          TraceStore part;
          (void)reader.value()->loadRange(part, rank.rank, summary.value().startNs, summary.value().endNs);
        }
      }
    }
  }
  removeFiles();
  return 0;
}
