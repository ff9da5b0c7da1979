// Interned strings: every distinct string is stored once and named by a dense 32-bit id.
#pragma once

#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "trainscope/core/model/events.h"

namespace trainscope::core {

class StringTable {
 public:
  StringTable();
  StringTable(const StringTable& other);
  StringTable& operator=(const StringTable& other);
  StringTable(StringTable&&) noexcept = default;
  StringTable& operator=(StringTable&&) noexcept = default;

  // Returns the id of s, adding it if new. Id 0 is always "".
  StringId intern(std::string_view s);
  // Returns the id of s if present.
  std::optional<StringId> find(std::string_view s) const;
  // The string for id; "" for an id that does not exist.
  std::string_view get(StringId id) const;
  size_t size() const { return strings_.size(); }
  // For every id, whether its string starts with prefix (one pass over the table: the test
  // per event becomes an index, e.g. trainscope-train's "calibrate ..." events).
  std::vector<bool> withPrefix(std::string_view prefix) const;

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  void rebuildIndex();
  std::deque<std::string> strings_;  // deque: element addresses stay put, so views stay valid
  std::unordered_map<std::string_view, StringId, Hash, std::equal_to<>> index_;
};

}  // namespace trainscope::core
