#include "trainscope/core/model/events.h"

#include <array>
#include <bit>

namespace trainscope::core {

namespace {
constexpr std::array<std::string_view, kEventKindCount> kEventKindNames = {
    "kernel", "memcpy", "memset", "collective", "p2p_send", "p2p_recv", "range", "step",
    "phase", "mb_forward", "mb_backward", "mb_weight", "bucket", "counter", "knob_change", "marker"};
constexpr std::array<std::string_view, kTrackKindCount> kTrackKindNames = {
    "cpu_thread", "cuda_stream", "communicator", "pipeline_stage", "counter"};

struct AttrDesc {
  std::string_view name;
  AttrType type;
};
// Index = AttrKey value; [0] unused.
constexpr std::array<AttrDesc, kBuiltinAttrMax + 1> kAttrs = {{
    {"", AttrType::Int},
    {"bytes", AttrType::Int},
    {"peer", AttrType::Int},
    {"stream", AttrType::Int},
    {"device", AttrType::Int},
    {"correlation_id", AttrType::Int},
    {"step", AttrType::Int},
    {"micro_batch", AttrType::Int},
    {"stage", AttrType::Int},
    {"chunk", AttrType::Int},
    {"bucket", AttrType::Int},
    {"algorithm", AttrType::String},
    {"protocol", AttrType::String},
    {"layer", AttrType::Int},
    {"value", AttrType::Double},
    {"flow_id", AttrType::Int},
    {"seq", AttrType::Int},
    {"comm_hash", AttrType::Int},
    {"datatype", AttrType::String},
    {"channels", AttrType::Int},
    {"knob", AttrType::String},
    {"knob_value", AttrType::String},
    {"segment", AttrType::Int},
    {"segment_offset", AttrType::Int},
    {"segment_length", AttrType::Int},
}};
}  // namespace

Attr Attr::ofDouble(AttrKey k, double v) {
  return {static_cast<uint32_t>(k), AttrType::Double, std::bit_cast<int64_t>(v)};
}
double Attr::asDouble() const {
  return type == AttrType::Double ? std::bit_cast<double>(bits) : static_cast<double>(bits);
}

std::string_view eventKindName(EventKind k) {
  const auto i = static_cast<size_t>(k);
  return i < kEventKindNames.size() ? kEventKindNames[i] : std::string_view("unknown");
}
std::optional<EventKind> eventKindFromName(std::string_view name) {
  for (size_t i = 0; i < kEventKindNames.size(); ++i)
    if (kEventKindNames[i] == name) return static_cast<EventKind>(i);
  return std::nullopt;
}
std::string_view trackKindName(TrackKind k) {
  const auto i = static_cast<size_t>(k);
  return i < kTrackKindNames.size() ? kTrackKindNames[i] : std::string_view("unknown");
}
std::optional<TrackKind> trackKindFromName(std::string_view name) {
  for (size_t i = 0; i < kTrackKindNames.size(); ++i)
    if (kTrackKindNames[i] == name) return static_cast<TrackKind>(i);
  return std::nullopt;
}
std::string_view builtinAttrName(AttrKey k) {
  const auto i = static_cast<uint32_t>(k);
  return i >= 1 && i <= kBuiltinAttrMax ? kAttrs[i].name : std::string_view();
}
std::optional<AttrKey> builtinAttrFromName(std::string_view name) {
  for (uint32_t i = 1; i <= kBuiltinAttrMax; ++i)
    if (kAttrs[i].name == name) return static_cast<AttrKey>(i);
  return std::nullopt;
}
AttrType builtinAttrType(AttrKey k) {
  const auto i = static_cast<uint32_t>(k);
  return i >= 1 && i <= kBuiltinAttrMax ? kAttrs[i].type : AttrType::Int;
}
bool isInstantKind(EventKind k) {
  return k == EventKind::Counter || k == EventKind::KnobChange || k == EventKind::Marker;
}

}  // namespace trainscope::core
