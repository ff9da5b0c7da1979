// An EventSink that keeps what a source produced, for tests of CUPTI translation and the NCCL
// plugins without the agent in between.
#pragma once

#include <string>
#include <vector>

#include "trainscope/profiler/event_sink.h"

namespace gpu_test {

class CollectingSink final : public trainscope::profiler::EventSink {
 public:
  uint32_t intern(std::string_view s) override {
    for (size_t i = 0; i < strings.size(); ++i)
      if (strings[i] == s) return static_cast<uint32_t>(i);
    strings.emplace_back(s);
    return static_cast<uint32_t>(strings.size() - 1);
  }
  bool push(const trainscope::profiler::ExternalEvent& e) noexcept override {
    events.push_back(e);
    return true;
  }
  void countDropped(uint64_t n) noexcept override { dropped += n; }
  int64_t nowNs() noexcept override { return clock += 1000; }
  void log(const char* line) noexcept override { logs.emplace_back(line); }

  const std::string& text(uint32_t id) const { return strings.at(id); }
  int64_t attr(const trainscope::profiler::ExternalEvent& e, trainscope::core::AttrKey k) const {
    const auto* a = e.find(k);
    return a ? a->bits : INT64_MIN;
  }
  std::string attrText(const trainscope::profiler::ExternalEvent& e, trainscope::core::AttrKey k) const {
    const auto* a = e.find(k);
    return a ? text(static_cast<uint32_t>(a->bits)) : std::string("<none>");
  }

  std::vector<std::string> strings{""};
  std::vector<trainscope::profiler::ExternalEvent> events;
  std::vector<std::string> logs;
  uint64_t dropped = 0;
  int64_t clock = 0;
};

}  // namespace gpu_test
