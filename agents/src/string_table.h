// The agent-local string table: ts_name() ids are indices into it and travel unchanged in
// EventBatch::strings. Interning locks (it is meant to be done once per name and cached); the
// drain thread copies the tail it has not sent yet. Id 0 is the empty string.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace trainscope::agent {

class StringTable {
 public:
  static StringTable& instance();

  uint32_t intern(std::string_view s);
  size_t size() const;
  // Appends (id, text) for ids in [from, size()) to out; returns the new size.
  size_t copyFrom(size_t from, std::vector<std::pair<uint32_t, std::string>>& out) const;
  std::string text(uint32_t id) const;
  // Limits (agent.h, ts_name): past them a new name maps to the overflow id and is counted.
  static constexpr size_t kMaxStrings = 1u << 20;
  static constexpr size_t kMaxBytes = 8u << 20;
  static constexpr size_t kMaxLength = 1024;
  uint64_t refused() const;

 private:
  StringTable();
  mutable std::mutex mu_;
  std::deque<std::string> texts_;  // deque: stable storage, the map's keys view into it
  std::unordered_map<std::string_view, uint32_t> ids_;
  size_t bytes_ = 0;
  uint32_t overflowId_ = 0;
  uint64_t refused_ = 0;
};

}  // namespace trainscope::agent
