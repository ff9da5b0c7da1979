// The importer's view of one trace event: a compact read-only JSON tree, its nodes in one vector
// (preorder; a node's children follow it, a node knows the size of its subtree), strings pointing
// into the text being read (or, where they had escapes, into a small per-event arena). Building
// one costs a few appends to vectors that are reused from event to event, where nlohmann's
// ordered_json costs an allocation per member, string and container (issue 37: that DOM was most
// of the import's time). Its types follow nlohmann's exactly (a number without fraction or
// exponent is Unsigned, or Integer when negative, or Float when it does not fit), so that the
// events the importer sees are the same whichever reader built them (fast_reader.h, or
// json_reader.h's nlohmann SAX reader, whose events are converted with JsonDoc::assign).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace trainscope::core::chrome {

using Json = nlohmann::ordered_json;

class JsonValue {
 public:
  enum class Type : uint8_t { Null, Boolean, Integer, Unsigned, Float, String, Array, Object };

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::Null; }
  bool is_boolean() const { return type_ == Type::Boolean; }
  bool is_number_integer() const { return type_ == Type::Integer || type_ == Type::Unsigned; }
  bool is_number_unsigned() const { return type_ == Type::Unsigned; }
  bool is_number_float() const { return type_ == Type::Float; }
  bool is_number() const { return type_ == Type::Integer || type_ == Type::Unsigned || type_ == Type::Float; }
  bool is_string() const { return type_ == Type::String; }
  bool is_array() const { return type_ == Type::Array; }
  bool is_object() const { return type_ == Type::Object; }

  std::string_view str() const { return {s_.p, s_.n}; }  // strings only
  bool boolean() const { return u_ != 0; }
  int64_t int64() const { return i_; }    // Integer (and Unsigned's bits)
  uint64_t uint64() const { return u_; }  // Unsigned
  double number() const {                 // any number, as nlohmann's get<double>()
    return type_ == Type::Float      ? d_
           : type_ == Type::Unsigned ? static_cast<double>(u_)
                                     : static_cast<double>(i_);
  }
  // Arrays and objects: the number of elements / members, and iteration in document order.
  uint32_t size() const { return count_; }
  const JsonValue* firstChild() const { return count_ ? this + 1 : nullptr; }
  const JsonValue* nextSibling() const { return this + subtree_; }  // valid while within the parent's size()
  std::string_view key() const { return {key_.p, key_.n}; }         // members of objects

  // A member of an object (the first with that key; readers refuse or collapse duplicates), or
  // nullptr when absent or when this is not an object.
  const JsonValue* find(std::string_view key) const {
    if (type_ != Type::Object) return nullptr;
    const JsonValue* c = this + 1;
    for (uint32_t i = 0; i < count_; ++i, c = c->nextSibling())
      if (c->key_.n == key.size() && std::string_view(c->key_.p, c->key_.n) == key) return c;
    return nullptr;
  }

  // nlohmann's dump() of the same value: compact, non-ASCII kept, invalid UTF-8 replaced.
  std::string dump() const;

 private:
  friend class JsonDoc;
  friend class FastParser;
  struct Text {
    const char* p;
    uint32_t n;
  };
  Type type_ = Type::Null;
  bool keyInArena_ = false;  // while building: p holds an arena offset (JsonDoc::finish fixes it)
  bool strInArena_ = false;
  uint32_t count_ = 0;    // elements / members
  uint32_t subtree_ = 1;  // nodes in this subtree, itself included
  Text key_{nullptr, 0};
  union {
    int64_t i_ = 0;
    uint64_t u_;
    double d_;
    Text s_;
  };
};

// The nodes of one event (or top-level member); reused from one to the next.
class JsonDoc {
 public:
  const JsonValue& root() const { return nodes_.front(); }
  bool empty() const { return nodes_.empty(); }
  void clear() {
    nodes_.clear();
    arena_.clear();
    fixups_.clear();
  }
  // The same tree as an nlohmann value (the reader's events when it falls back to nlohmann, the
  // top-level members, dump()).
  void assign(const Json& v);
  static Json toJson(const JsonValue& v);

 private:
  friend class FastParser;
  void assignNode(const Json& v, std::string_view key);
  // Strings with escapes are decoded into arena_; their nodes hold an offset until finish().
  void finish() {
    for (uint32_t idx : fixups_) {
      JsonValue& n = nodes_[idx];
      if (n.keyInArena_)
        n.key_.p = arena_.data() + reinterpret_cast<uintptr_t>(n.key_.p), n.keyInArena_ = false;
      if (n.strInArena_) n.s_.p = arena_.data() + reinterpret_cast<uintptr_t>(n.s_.p), n.strInArena_ = false;
    }
  }
  std::vector<JsonValue> nodes_;
  std::string arena_;
  std::vector<uint32_t> fixups_;
};

}  // namespace trainscope::core::chrome
