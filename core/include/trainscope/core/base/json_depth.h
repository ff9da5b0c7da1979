#pragma once
// How deep JSON text nests, found by a linear scan before any JSON library sees the text (issue
// 40). nlohmann-json parses iteratively, but copying, dumping and walking a document recurse once
// per level: a 140 KB tuned configuration nested 70,000 deep overflowed the stack (SIGSEGV) in
// `trainscope-cli set --from`, `export` and `trainscope-train --config`. Every reader of JSON
// from a user's file (tuned configurations, the trainer's --config, the counts in a .tsdb)
// refuses text nested deeper than kMaxJsonNesting first. Header-only and free of any JSON
// library: the trainer and core's readers share it. (The Chrome/Kineto importer has its own
// depth check in its SAX handler: interop/chrome/json_reader.h.)
#include <cstddef>
#include <string>
#include <string_view>

#include "trainscope/core/base/status.h"

namespace trainscope::core {

// No file a person or Trainscope writes comes near this; nlohmann recursing this deep needs a
// few hundred KB of stack at most.
inline constexpr size_t kMaxJsonNesting = 256;

// True when `text` opens more than `limit` arrays/objects ([ and {) at once. Brackets inside
// strings (with their escapes, \" included) do not count; the text need not be valid JSON (the
// parser says what else is wrong). Stops at the first level past the limit.
inline bool jsonNestedDeeperThan(std::string_view text, size_t limit = kMaxJsonNesting) {
  size_t depth = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i;  // the escaped character, whatever it is (\" or \\ above all)
      else if (c == '"')
        inString = false;
      continue;
    }
    switch (c) {
      case '"':
        inString = true;
        break;
      case '[':
      case '{':
        if (++depth > limit) return true;
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default:
        break;
    }
  }
  return false;
}

// "<source>: JSON nested deeper than 256 levels" (MalformedJson), or ok.
inline Status checkJsonNesting(std::string_view text, std::string_view source, size_t limit = kMaxJsonNesting) {
  if (!jsonNestedDeeperThan(text, limit)) return Status::ok();
  return Status(ErrorCode::MalformedJson,
                std::string(source) + ": JSON nested deeper than " + std::to_string(limit) + " levels");
}

}  // namespace trainscope::core
