// libFuzzer target for the tuned-configuration reader (core/src/tune/config.cpp): the input is
// a configuration file's text, as `set --from` and `trainscope-train --config` read it.
// Whatever reads is translated into every export format (`export --format ...`) and written back
// as our own JSON.
//
// Properties: no crash, hang, leak or undefined behaviour (ASan/UBSan); and what the reader
// accepts, written back, reads again to the same document (configToJson is a fixed point after
// one round), so a configuration we accept once is never refused after we saved it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "trainscope/core/tune/config.h"

using namespace trainscope::core;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = configFromJson(text, "fuzz.json");
  if (!config) return 0;
  for (std::string_view format : kConfigFormats) (void)exportConfig(config.value(), format);
  const std::string once = configToJson(config.value());
  auto again = configFromJson(once, "written");
  if (!again) {
    std::fprintf(stderr, "written configuration does not read back: %s\n%s\n",
                 again.status().toString().c_str(), once.c_str());
    __builtin_trap();
  }
  if (configToJson(again.value()) != once) {
    std::fprintf(stderr, "configuration changed on a second round:\n%s\n---\n%s\n", once.c_str(),
                 configToJson(again.value()).c_str());
    __builtin_trap();
  }
  return 0;
}
