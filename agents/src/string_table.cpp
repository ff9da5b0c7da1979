#include "string_table.h"

namespace trainscope::agent {

StringTable& StringTable::instance() {
  // Leaked on purpose: capture calls from other threads may still run during static destruction.
  static StringTable* t = new StringTable();
  return *t;
}

StringTable::StringTable() {
  texts_.emplace_back();
  ids_.emplace(texts_.back(), 0);
}

uint32_t StringTable::intern(std::string_view s) {
  std::lock_guard lock(mu_);
  if (auto it = ids_.find(s); it != ids_.end()) return it->second;
  const auto id = static_cast<uint32_t>(texts_.size());
  texts_.emplace_back(s);
  ids_.emplace(texts_.back(), id);
  return id;
}

size_t StringTable::size() const {
  std::lock_guard lock(mu_);
  return texts_.size();
}

size_t StringTable::copyFrom(size_t from, std::vector<std::pair<uint32_t, std::string>>& out) const {
  std::lock_guard lock(mu_);
  for (size_t i = from; i < texts_.size(); ++i) out.emplace_back(static_cast<uint32_t>(i), texts_[i]);
  return texts_.size();
}

std::string StringTable::text(uint32_t id) const {
  std::lock_guard lock(mu_);
  return id < texts_.size() ? texts_[id] : std::string();
}

}  // namespace trainscope::agent
