// libFuzzer target for the .tsdb reader: the input is a session file (SQLite). It is written
// to a temporary file (tmpfs) and read as `trainscope-cli info` and `analyze` read it: open and
// validate, summary, then every event (loadSession's path) and one time range per rank.
//
// Properties: a damaged or hostile file gives an error or data, never a crash, hang, leak or
// undefined behaviour (ASan/UBSan). SQLite itself is Debian's and not instrumented: coverage
// guides the fuzzer through our reader only.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_temp_file.h"
#include "trainscope/core/model/trace_store.h"
#include "trainscope/core/session/summary.h"
#include "trainscope/core/session/tsdb.h"

using namespace trainscope::core;

namespace {
const fuzz::TempInput* g_input = nullptr;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_input = new fuzz::TempInput("fuzz_tsdb", ".tsdb");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  g_input->write(data, size);
  const std::string& path = g_input->path();
  {
    auto reader = SessionReader::open(path);
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
  g_input->remove();
  return 0;
}
