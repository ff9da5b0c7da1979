// Helpers shared by the agent test suites: start/stop the in-process agent runtime with a
// given environment, and read back everything it recorded through the flight recorder (the
// same path a late-attaching client takes).
#pragma once

#include <QByteArray>
#include <QtGlobal>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hub.h"
#include "runtime.h"
#include "trainscope/core/wire/protocol.h"

namespace agent_test {

namespace wire = trainscope::core::wire;
namespace ag = trainscope::agent;

using Env = std::vector<std::pair<std::string, std::string>>;

struct Recorded {
  std::map<uint32_t, std::string> strings;
  std::map<uint32_t, wire::WireTrack> tracks;
  std::vector<wire::WireEvent> events;
  std::vector<wire::EventBatch> batches;
  std::string name(uint32_t id) const {
    auto it = strings.find(id);
    return it == strings.end() ? std::string("<unresolved>") : it->second;
  }
  std::vector<wire::WireEvent> named(const std::string& n) const {
    std::vector<wire::WireEvent> out;
    for (const auto& e : events)
      if (name(e.name) == n) out.push_back(e);
    return out;
  }
};

inline void absorb(Recorded& r, const wire::Message& m) {
  if (const auto* b = std::get_if<wire::EventBatch>(&m)) {
    for (const auto& [id, s] : b->strings) r.strings[id] = s;
    for (const auto& t : b->tracks) r.tracks[t.id] = t;
    r.events.insert(r.events.end(), b->events.begin(), b->events.end());
    r.batches.push_back(*b);
  }
}

// Decodes every frame waiting in q.
inline Recorded drainQueue(ag::OutQueue& q) {
  Recorded r;
  wire::FrameDecoder dec;
  for (;;) {
    auto [p, n] = q.front();
    if (!p) break;
    dec.feed(std::span<const uint8_t>(p, n));
    q.consumed(n);
  }
  for (;;) {
    auto m = dec.next();
    if (!m || !m.value()) break;
    absorb(r, *m.value());
  }
  return r;
}

// Everything the running agent has recorded so far (flushes the drain first).
inline Recorded recorded() {
  ag::Runtime* rt = ag::runtime();
  if (!rt) return {};
  rt->drain().flushNow();
  auto q = std::make_shared<ag::OutQueue>(size_t{1} << 30);
  rt->hub().subscribe(q, true);
  rt->hub().unsubscribe(q);
  return drainQueue(*q);
}

// Starts the agent with the given environment; stops it and restores nothing else on exit.
class ScopedAgent {
 public:
  explicit ScopedAgent(std::vector<std::pair<std::string, std::string>> env, int32_t worldSize = 1,
                       int32_t rank = 0)
      : env_(std::move(env)) {
    // qputenv, not setenv: it holds Qt's environment lock, which QtTest's watchdog thread takes
    // to read its variables; a bare setenv beside that getenv crashed tst_agent_interop under
    // ASan (environ reallocated under the reader).
    for (const auto& [k, v] : env_) qputenv(k.c_str(), QByteArray(v.c_str()));
    ts_init_params p = TS_INIT_PARAMS_DEFAULT;
    p.job_id = "tst-agent";
    p.rank = rank;
    p.world_size = worldSize;
    rc_ = ag::initRuntime(&p);
  }
  ~ScopedAgent() {
    ag::shutdownRuntime();
    for (const auto& [k, v] : env_) qunsetenv(k.c_str());
  }
  int rc() const { return rc_; }

 private:
  std::vector<std::pair<std::string, std::string>> env_;
  int rc_ = 0;
};

}  // namespace agent_test
