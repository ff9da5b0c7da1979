#include "interop/chrome/json_value.h"

#include <charconv>

namespace trainscope::core::chrome {

namespace {

// nlohmann's compact dump for what Kineto's args hold ("Input Dims": [[2048, 1], []],
// "Input type": ["float", "Scalar"]): integers, plain strings and containers of them. false for
// anything else (floats, strings that need escapes), which then goes through nlohmann itself.
bool dumpPlain(const JsonValue& v, std::string& out) {
  auto plain = [](std::string_view s) {
    for (unsigned char c : s)
      if (c < 0x20 || c == '"' || c == '\\') return false;
    return true;
  };
  char digits[24];
  switch (v.type()) {
    case JsonValue::Type::Null:
      out += "null";
      return true;
    case JsonValue::Type::Boolean:
      out += v.boolean() ? "true" : "false";
      return true;
    case JsonValue::Type::Integer:
      out.append(digits, std::to_chars(digits, digits + sizeof digits, v.int64()).ptr);
      return true;
    case JsonValue::Type::Unsigned:
      out.append(digits, std::to_chars(digits, digits + sizeof digits, v.uint64()).ptr);
      return true;
    case JsonValue::Type::Float:
      return false;
    case JsonValue::Type::String:
      if (!plain(v.str())) return false;
      out += '"';
      out += v.str();
      out += '"';
      return true;
    case JsonValue::Type::Array:
    case JsonValue::Type::Object: {
      const bool object = v.is_object();
      out += object ? '{' : '[';
      const JsonValue* c = v.firstChild();
      for (uint32_t i = 0; i < v.size(); ++i, c = c->nextSibling()) {
        if (i) out += ',';
        if (object) {
          if (!plain(c->key())) return false;
          out += '"';
          out += c->key();
          out += "\":";
        }
        if (!dumpPlain(*c, out)) return false;
      }
      out += object ? '}' : ']';
      return true;
    }
  }
  return false;
}

}  // namespace

std::string JsonValue::dump() const {
  std::string out;
  if (dumpPlain(*this, out)) return out;
  return JsonDoc::toJson(*this).dump(-1, ' ', false, Json::error_handler_t::replace);
}

Json JsonDoc::toJson(const JsonValue& v) {
  switch (v.type()) {
    case JsonValue::Type::Null:
      return Json(nullptr);
    case JsonValue::Type::Boolean:
      return Json(v.boolean());
    case JsonValue::Type::Integer:
      return Json(static_cast<Json::number_integer_t>(v.int64()));
    case JsonValue::Type::Unsigned:
      return Json(static_cast<Json::number_unsigned_t>(v.uint64()));
    case JsonValue::Type::Float:
      return Json(static_cast<Json::number_float_t>(v.number()));
    case JsonValue::Type::String:
      return Json(std::string(v.str()));
    case JsonValue::Type::Array: {
      Json a = Json::array();
      const JsonValue* c = v.firstChild();
      for (uint32_t i = 0; i < v.size(); ++i, c = c->nextSibling()) a.push_back(toJson(*c));
      return a;
    }
    case JsonValue::Type::Object: {
      Json o = Json::object();
      const JsonValue* c = v.firstChild();
      for (uint32_t i = 0; i < v.size(); ++i, c = c->nextSibling()) o[std::string(c->key())] = toJson(*c);
      return o;
    }
  }
  return Json();
}

void JsonDoc::assign(const Json& v) {
  clear();
  assignNode(v, {});
}

void JsonDoc::assignNode(const Json& v, std::string_view key) {
  const size_t idx = nodes_.size();
  nodes_.emplace_back();
  JsonValue& n = nodes_.back();
  n.key_ = {key.data(), static_cast<uint32_t>(key.size())};
  switch (v.type()) {
    case Json::value_t::boolean:
      n.type_ = JsonValue::Type::Boolean;
      n.u_ = v.get<bool>() ? 1 : 0;
      return;
    case Json::value_t::number_integer:
      n.type_ = JsonValue::Type::Integer;
      n.i_ = v.get<int64_t>();
      return;
    case Json::value_t::number_unsigned:
      n.type_ = JsonValue::Type::Unsigned;
      n.u_ = v.get<uint64_t>();
      return;
    case Json::value_t::number_float:
      n.type_ = JsonValue::Type::Float;
      n.d_ = v.get<double>();
      return;
    case Json::value_t::string: {
      const std::string& s = v.get_ref<const std::string&>();
      n.type_ = JsonValue::Type::String;
      n.s_ = {s.data(), static_cast<uint32_t>(s.size())};
      return;
    }
    case Json::value_t::array:
    case Json::value_t::object: {
      n.type_ = v.is_array() ? JsonValue::Type::Array : JsonValue::Type::Object;
      n.count_ = static_cast<uint32_t>(v.size());
      if (v.is_array())
        for (const Json& e : v) assignNode(e, {});
      else
        for (auto it = v.begin(); it != v.end(); ++it) assignNode(it.value(), it.key());
      nodes_[idx].subtree_ = static_cast<uint32_t>(nodes_.size() - idx);
      return;
    }
    default:  // null, discarded, binary
      return;
  }
}

}  // namespace trainscope::core::chrome
