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
  overflowId_ = 1;
  texts_.emplace_back("(name table full)");
  ids_.emplace(texts_.back(), overflowId_);
  bytes_ = texts_.back().size();
}

uint32_t StringTable::intern(std::string_view s) {
  if (s.size() > kMaxLength) s = s.substr(0, kMaxLength);
  std::lock_guard lock(mu_);
  if (auto it = ids_.find(s); it != ids_.end()) return it->second;
  // Bounded (issue 40): every string goes to every client in the tables frame of a subscribe, and
  // a frame over 16 MiB is refused -- 600 k distinct names once made `record` fail for good.
  if (texts_.size() >= kMaxStrings || bytes_ + s.size() > kMaxBytes) {
    ++refused_;
    return overflowId_;
  }
  const auto id = static_cast<uint32_t>(texts_.size());
  texts_.emplace_back(s);
  ids_.emplace(texts_.back(), id);
  bytes_ += s.size();
  return id;
}

uint64_t StringTable::refused() const {
  std::lock_guard lock(mu_);
  return refused_;
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
