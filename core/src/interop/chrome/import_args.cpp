#include "interop/chrome/import_args.h"

#include <charconv>
#include <limits>
#include <string>

#include "interop/chrome/format.h"

namespace trainscope::core::chrome {

namespace {

// Kineto's names for keys we have built-in (the rest of Kineto's keys already match ours,
// like "stream", "device" and "bytes", or stay custom, like "External id").
std::optional<AttrKey> builtinKeyFor(std::string_view key) {
  if (key == "correlation") return AttrKey::CorrelationId;
  return builtinAttrFromName(key);
}

bool hasKey(const std::vector<Attr>& attrs, uint32_t key) {
  for (const Attr& a : attrs)
    if (a.key == key) return true;
  return false;
}

}  // namespace

std::optional<EventKind> appendArgs(const JsonValue& args, TraceStore& store, std::vector<Attr>& out,
                                    bool skipExisting) {
  std::optional<EventKind> kind;
  if (!args.is_object()) return kind;
  const JsonValue* v = args.firstChild();
  for (uint32_t i = 0; i < args.size(); ++i, v = v->nextSibling()) {
    const std::string_view key = v->key();
    if (key == kKindArg && v->is_string()) {
      if (auto k = eventKindFromName(v->str())) {
        kind = k;
        continue;
      }
    }
    AttrType type = AttrType::Int;
    int64_t bits = 0;
    switch (v->type()) {
      case JsonValue::Type::Unsigned:
        if (v->uint64() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          type = AttrType::Double;
          bits = Attr::ofDouble(AttrKey::Value, static_cast<double>(v->uint64())).bits;
        } else {
          bits = static_cast<int64_t>(v->uint64());
        }
        break;
      case JsonValue::Type::Integer:
        bits = v->int64();
        break;
      case JsonValue::Type::Float:
        type = AttrType::Double;
        bits = Attr::ofDouble(AttrKey::Value, v->number()).bits;
        break;
      case JsonValue::Type::Boolean:
        bits = v->boolean() ? 1 : 0;
        break;
      case JsonValue::Type::String:
        type = AttrType::String;
        bits = store.intern(v->str());
        break;
      case JsonValue::Type::Null:
        continue;
      default:  // arrays and objects ("grid": [1, 1, 1]) keep their JSON text
        type = AttrType::String;
        bits = store.intern(v->dump());
        break;
    }
    uint32_t attrKey = 0;
    const auto builtin = builtinKeyFor(key);
    const bool fits = builtin && !v->is_boolean() &&
                      ((builtinAttrType(*builtin) == AttrType::String) == (type == AttrType::String));
    if (fits)
      attrKey = static_cast<uint32_t>(*builtin);
    else
      attrKey = kCustomAttrBase + store.intern(key);
    if (skipExisting && hasKey(out, attrKey)) continue;
    out.push_back(Attr{attrKey, type, bits});
  }
  return kind;
}

EventKind classifySlice(std::string_view cat, std::string_view name, std::optional<int64_t>* step) {
  constexpr std::string_view kStep = "ProfilerStep#";
  if (name.starts_with(kStep) && cat != "gpu_user_annotation") {
    // The GPU-side copy of a step annotation stays a Range: the step is the CPU window.
    int64_t n = 0;
    const auto digits = name.substr(kStep.size());
    const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    if (ec == std::errc() && ptr == digits.data() + digits.size()) {
      if (step) *step = n;
      return EventKind::Step;
    }
  }
  if (cat.find("nccl") != std::string_view::npos || name.starts_with("nccl")) {
    if (name.starts_with("nccl:send")) return EventKind::P2PSend;
    if (name.starts_with("nccl:recv")) return EventKind::P2PRecv;
    return EventKind::Collective;
  }
  if (cat == "kernel") return EventKind::Kernel;
  if (cat == "gpu_memcpy") return EventKind::Memcpy;
  if (cat == "gpu_memset") return EventKind::Memset;
  return EventKind::Range;
}

const Json* member(const Json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

std::string text(const Json* v) {
  if (!v || v->is_null()) return {};
  return v->is_string() ? v->get<std::string>() : v->dump();
}

std::optional<int64_t> integer(const Json* v) {
  if (!v) return std::nullopt;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() &&
        v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return std::nullopt;
    return v->get<int64_t>();
  }
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (d >= -9.2e18 && d <= 9.2e18 && d == static_cast<double>(static_cast<int64_t>(d)))
      return static_cast<int64_t>(d);
    return std::nullopt;
  }
  if (v->is_string()) {
    int64_t n = 0;
    const std::string& s = v->get_ref<const std::string&>();
    const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (ec == std::errc() && ptr == s.data() + s.size() && !s.empty()) return n;
  }
  return std::nullopt;
}

std::string text(const JsonValue* v) {
  if (!v || v->is_null()) return {};
  return v->is_string() ? std::string(v->str()) : v->dump();
}

std::string_view textView(const JsonValue* v, std::string& scratch) {
  if (!v || v->is_null()) return {};
  if (v->is_string()) return v->str();
  scratch = v->dump();
  return scratch;
}

std::optional<int64_t> integer(const JsonValue* v) {
  if (!v) return std::nullopt;
  switch (v->type()) {
    case JsonValue::Type::Integer:
      return v->int64();
    case JsonValue::Type::Unsigned:
      if (v->uint64() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(v->uint64());
    case JsonValue::Type::Float: {
      const double d = v->number();
      if (d >= -9.2e18 && d <= 9.2e18 && d == static_cast<double>(static_cast<int64_t>(d)))
        return static_cast<int64_t>(d);
      return std::nullopt;
    }
    case JsonValue::Type::String: {
      int64_t n = 0;
      const std::string_view s = v->str();
      const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
      if (ec == std::errc() && ptr == s.data() + s.size() && !s.empty()) return n;
      return std::nullopt;
    }
    default:
      return std::nullopt;
  }
}

std::optional<PipeOpName> parsePipeOp(std::string_view n) {
  auto number = [](std::string_view d) -> std::optional<int64_t> {
    int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(d.data(), d.data() + d.size(), v);
    if (d.empty() || ec != std::errc() || ptr != d.data() + d.size() || v < 0) return std::nullopt;
    return v;
  };
  for (const auto& [prefix, kind] :
       {std::pair<std::string_view, EventKind>{"Forward ", EventKind::MicroBatchF},
        {"Backward ", EventKind::MicroBatchB}})
    if (n.starts_with(prefix))
      if (auto mb = number(n.substr(prefix.size()))) return PipeOpName{kind, *mb, -1};
  if (!n.starts_with("PP:")) return std::nullopt;
  n.remove_prefix(3);
  const size_t letter = n.find_first_not_of("0123456789");
  if (letter == 0 || letter == std::string_view::npos || letter + 1 >= n.size()) return std::nullopt;
  const auto stage = number(n.substr(0, letter)), mb = number(n.substr(letter + 1));
  if (!stage || !mb) return std::nullopt;
  switch (n[letter]) {
    case 'F':
      return PipeOpName{EventKind::MicroBatchF, *mb, *stage};
    case 'B':
    case 'I':
      return PipeOpName{EventKind::MicroBatchB, *mb, *stage};
    case 'W':
      return PipeOpName{EventKind::MicroBatchW, *mb, *stage};
    default:
      return std::nullopt;
  }
}

bool isGpuCategory(std::string_view cat) {
  return cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset" || cat == "gpu_user_annotation";
}

}  // namespace trainscope::core::chrome
