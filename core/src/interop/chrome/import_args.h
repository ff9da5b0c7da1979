// Turning one Chrome/Kineto trace event's category, name and args into Trainscope's event kind
// and typed attributes. Kept apart from the importer's bookkeeping (processes, threads, B/E
// stacks, flows) because this is the part that grows with every new producer we meet.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "interop/chrome/json_reader.h"
#include "trainscope/core/model/trace_store.h"

namespace trainscope::core::chrome {

// Appends the attributes of an args object to out, typed from the JSON: integers as Int,
// floats (and integers beyond int64) as Double, strings as String, booleans as Int 0/1, arrays
// and objects as their JSON text; nulls are dropped. Keys that name a built-in attribute
// (plus Kineto's "correlation") become that key when the JSON type fits its type, every other
// key a custom attribute. With skipExisting, keys already in out are not added again (the args
// of an "E" merged into those of its "B"). Returns the event kind if args carry a valid "kind"
// (our own exports).
std::optional<EventKind> appendArgs(const JsonValue& args, TraceStore& store, std::vector<Attr>& out,
                                    bool skipExisting = false);

// The kind of a duration event from its category and name, for traces without args.kind:
// PyTorch/Kineto categories ("kernel", "gpu_memcpy", "cpu_op", ...), NCCL names
// ("ncclDevKernel_AllReduce...", "nccl:all_reduce"), "ProfilerStep#N" (sets *step to N).
EventKind classifySlice(std::string_view cat, std::string_view name, std::optional<int64_t>* step);

// torch.distributed.pipelining's record_function names: "Forward 3" / "Backward 3"
// (PipelineScheduleSingle: GPipe, 1F1B; the stage is the rank's) and "PP:<stage><F|B|I|W><mb>"
// (the multi-stage runtime, e.g. "PP:2F1"; I and B are backward, W the weight gradient).
struct PipeOpName {
  EventKind kind = EventKind::MicroBatchF;
  int64_t microBatch = 0;
  int64_t stage = -1;  // -1: the rank's own (single-stage schedules)
};
std::optional<PipeOpName> parsePipeOp(std::string_view name);

// Categories Kineto uses for activity on a GPU stream: their threads become CudaStream tracks.
bool isGpuCategory(std::string_view cat);

// Small DOM helpers that never throw, for the top-level members (Json) and events (JsonValue).
const Json* member(const Json& obj, std::string_view key);  // nullptr if absent or not an object
std::string text(const Json* v);                            // a string's value, else its JSON text
std::optional<int64_t> integer(const Json* v);              // integral numbers and numeric strings
inline const JsonValue* member(const JsonValue& obj, std::string_view key) {
  return obj.find(key);
}
std::string text(const JsonValue* v);
// text() without a copy for strings (the common case); other values are dumped into scratch.
std::string_view textView(const JsonValue* v, std::string& scratch);
std::optional<int64_t> integer(const JsonValue* v);

}  // namespace trainscope::core::chrome
