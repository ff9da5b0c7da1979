// libFuzzer target for the Chrome/Kineto trace JSON importer (core/src/interop/chrome): the
// input is a trace file's text. Byte 0's low bit picks strict or partial import (the rest of
// the input is the JSON either way, so seeds are plain trace files with one byte in front).
// Whatever imports is summarised (`info`) and exported again (`export`).
//
// Properties: malformed or hostile JSON (deep nesting, huge numbers, extreme timestamps) gives
// an error or a trace, never a crash, hang, leak or undefined behaviour (ASan/UBSan). And the
// fast reader (interop/chrome/fast_reader.h) agrees with the reference reader: when it read the
// input itself, the reference reader's store exports to the same text (else it traps).
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string_view>

#include "trainscope/core/interop/chrome_trace.h"
#include "trainscope/core/session/summary.h"

using namespace trainscope::core;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  ChromeImportOptions options;
  options.partial = data[0] & 1;
  const std::string_view json(reinterpret_cast<const char*>(data + 1), size - 1);
  bool usedReference = true;
  options.usedReferenceReader = &usedReference;
  auto store = importChromeTrace(json, "fuzz.json", options);
  if (!usedReference) {
    ChromeImportOptions ref{.partial = options.partial, .referenceReader = true};
    auto again = importChromeTrace(json, "fuzz.json", ref);
    if (store.isOk() != again.isOk()) __builtin_trap();
    if (!store) {
      if (store.status().message() != again.status().message()) __builtin_trap();
    } else {
      std::ostringstream a, b;
      (void)exportChromeTrace(store.value(), a);
      (void)exportChromeTrace(again.value(), b);
      if (a.str() != b.str() || store->metadata() != again->metadata()) __builtin_trap();
    }
  }
  if (!store) return 0;
  (void)summaryToJson(summarizeStore(store.value()));
  std::ostringstream out;
  (void)exportChromeTrace(store.value(), out);
  return 0;
}
