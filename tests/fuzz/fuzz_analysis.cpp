// libFuzzer target for the analysis (`trainscope-cli analyze`) on an imported trace: the input
// is Chrome/Kineto trace JSON (byte 0: strict or partial import, as fuzz_chrome_import), and
// whatever imports is analysed whole (analyzeStore: steps, data/pipeline parallelism, critical
// path, HTA breakdowns) and written as the `analyze --json` document.
//
// Properties: any trace the importer accepts is analysed without a crash, hang, leak or
// undefined behaviour (ASan/UBSan): steps without ends, overlapping or extreme timestamps,
// collectives that do not match across ranks.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trainscope/core/analysis/analysis.h"
#include "trainscope/core/interop/chrome_trace.h"

using namespace trainscope::core;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  ChromeImportOptions options;
  options.partial = data[0] & 1;
  const std::string_view json(reinterpret_cast<const char*>(data + 1), size - 1);
  auto store = importChromeTrace(json, "fuzz.json", options);
  if (!store) return 0;
  const AnalysisResult result = analyzeStore(store.value());
  (void)analysisToJson(result);
  return 0;
}
