// Reads Chrome trace JSON through nlohmann's SAX interface, one trace event at a time. Since
// issue 37 this is the careful path: imports read with fast_reader.h and come here only when
// that reader meets something it leaves to this one (malformed text, a limit, ...), so that the
// messages and refusals below stay what they were. Events reach onEvent as a JsonValue tree
// (json_value.h) converted from the nlohmann DOM, the same tree the fast reader builds.
//
// Why SAX and not one DOM: a DOM of a large trace costs many times the file size, and a DOM
// keeps only the double value of a number, while "ts": 1718000000123456.789 needs its digits to
// become exact nanoseconds. The reader builds a small DOM per event (insertion-ordered, so
// attributes keep their order) and hands it over with the original text of its "ts" and "dur"
// numbers; other top-level members ("otherData", ...) are collected as DOMs.
#pragma once

#include <cstddef>
#include <functional>
#include <istream>
#include <nlohmann/json.hpp>
#include <string_view>

#include "interop/chrome/json_value.h"
#include "trainscope/core/base/status.h"

namespace trainscope::core::chrome {

struct RawEvent {
  size_t index = 0;                  // position in the traceEvents array
  const JsonValue* value = nullptr;  // the event (an object), valid during the onEvent call
  std::string_view tsText;           // original text of a floating "ts", empty for integers
  std::string_view durText;          // likewise for "dur"
};

struct ReadResult {
  Json topLevel = Json::object();  // every top-level member except traceEvents
  bool objectForm = false;
  size_t events = 0;
};

// Calls onEvent for every element of traceEvents (object form) or of the top-level array.
// Errors: MalformedJson (with the byte offset) for text that does not parse; BadTrace for JSON
// that is not a trace (a scalar, an object without a traceEvents array, a non-object event); and
// whatever onEvent returns, which stops the read.
Status readChromeJson(std::string_view text, std::string_view sourceName,
                      const std::function<Status(const RawEvent&)>& onEvent, ReadResult& result);
// The same, streaming from a stream (a file, or a gzip stream: import.cpp); only the event being
// read is held, never the file's text.
Status readChromeJson(std::istream& in, std::string_view sourceName,
                      const std::function<Status(const RawEvent&)>& onEvent, ReadResult& result);

// Containers nested deeper than this inside one event (or top-level member) are refused with
// BadTrace naming the event: Kineto nests args 2-3 levels; 70,000 levels is an attack or a bug.
inline constexpr size_t kMaxJsonDepth = 512;
// Members of one object and bytes of one string inside an event (or top-level member): Kineto
// writes ~10 args per event and names of at most a few KiB. The DOM keeps insertion order, so a
// member is found by a linear search: 400 k args keys in one event took 117 s to import (issue
// 40); a 300 MB event name took the GUI to 3.4 GB and a crash. Both are refused with BadTrace.
inline constexpr size_t kMaxObjectMembers = 4096;
inline constexpr size_t kMaxStringBytes = 1u << 20;

}  // namespace trainscope::core::chrome
