#include "trainscope/core/model/string_table.h"

namespace trainscope::core {

StringTable::StringTable() { intern(""); }

StringTable::StringTable(const StringTable& other) : strings_(other.strings_) { rebuildIndex(); }

StringTable& StringTable::operator=(const StringTable& other) {
  if (this != &other) {
    strings_ = other.strings_;
    rebuildIndex();
  }
  return *this;
}

void StringTable::rebuildIndex() {
  index_.clear();
  index_.reserve(strings_.size());
  for (size_t i = 0; i < strings_.size(); ++i)
    index_.emplace(std::string_view(strings_[i]), static_cast<StringId>(i));
}

StringId StringTable::intern(std::string_view s) {
  if (auto it = index_.find(s); it != index_.end()) return it->second;
  const auto id = static_cast<StringId>(strings_.size());
  strings_.emplace_back(s);
  index_.emplace(std::string_view(strings_.back()), id);
  return id;
}

std::optional<StringId> StringTable::find(std::string_view s) const {
  if (auto it = index_.find(s); it != index_.end()) return it->second;
  return std::nullopt;
}

std::vector<bool> StringTable::withPrefix(std::string_view prefix) const {
  std::vector<bool> out(strings_.size());
  for (size_t i = 0; i < strings_.size(); ++i) out[i] = strings_[i].starts_with(prefix);
  return out;
}

std::string_view StringTable::get(StringId id) const {
  return id < strings_.size() ? std::string_view(strings_[id]) : std::string_view();
}

}  // namespace trainscope::core
