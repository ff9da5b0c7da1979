// The fast path of Chrome trace reading (issue 37): one pass over a bounded window of the text,
// each trace event parsed straight into a reused JsonDoc (json_value.h), no per-value
// allocation. It reads only what it is sure of: valid JSON (UTF-8, escapes, numbers as nlohmann
// reads them) shaped like a trace, within the reader's limits, without duplicate keys. For
// anything else -- malformed or truncated text, a limit reached, a read error, a duplicate key, a
// byte-order mark -- it answers Fallback, and the caller imports the file again from the start
// with the nlohmann reader (json_reader.h), which then says what is wrong with the same words as
// before. So every message, refusal and --partial result stays that reader's, and the fast path
// only ever has to be right about valid traces.
//
// Memory: the window (4 MiB, doubled while one event or top-level member does not fit in it, so
// at most ~2x the largest of those) and one event's nodes; never the file.
#pragma once

#include <cstddef>
#include <functional>
#include <string_view>

#include "interop/chrome/json_reader.h"

namespace trainscope::core::chrome {

// Reads up to n bytes into dst: the count, 0 at the end, < 0 on a read error.
using ReadBytes = std::function<long(char* dst, size_t n)>;

struct FastRead {
  bool fallback = false;  // read again with readChromeJson; nothing of this attempt is valid
  Status status;          // otherwise: ok, or what onEvent returned (which stopped the read)
};

FastRead readChromeJsonFast(std::string_view text, const std::function<Status(const RawEvent&)>& onEvent,
                            ReadResult& result);
FastRead readChromeJsonFast(const ReadBytes& read, const std::function<Status(const RawEvent&)>& onEvent,
                            ReadResult& result, size_t window = size_t{4} << 20);

}  // namespace trainscope::core::chrome
