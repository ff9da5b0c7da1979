// The running agent: configuration, drain thread, hub (flight recorder), control server and
// discovery entry. One per process, created by ts_init and destroyed by ts_shutdown. The
// capture path and knob registry are process-wide singletons that outlive it, so job threads
// never race with its destruction.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "config.h"
#include "drain.h"
#include "hub.h"
#include "server.h"
#include "trainscope/core/wire/discovery.h"

namespace trainscope::agent {

class Runtime {
 public:
  explicit Runtime(Config cfg);
  ~Runtime();
  int start();  // TS_OK or TS_ERR_LISTEN (capture runs either way)
  void stop();
  const Config& config() const { return cfg_; }
  Drain& drain() { return drain_; }
  Hub& hub() { return hub_; }
  Server& server() { return server_; }
  core::wire::Stats stats() const;
  // What the rank is doing now (doctor): open operations and its threads' kernel states; the
  // answer is reused for 100 ms, so a client that floods requests costs the server little.
  core::wire::Inspect inspect();

 private:
  core::wire::JobInfo jobInfo() const;

  Config cfg_;
  int64_t startNs_ = 0;
  Hub hub_;
  Drain drain_;
  Server server_;
  core::discovery::Entry entry_;
  bool entryWritten_ = false;
  core::wire::Inspect lastInspect_;  // the server thread's, reused for 100 ms
  int64_t inspectAtNs_ = 0;
};

// Process-wide state shared by the C API and the runtime.
struct Globals {
  std::atomic<int32_t> worldSize{1};
  std::atomic<int64_t> currentStep{-1};
  std::atomic<ts_agree_fn> agreeFn{nullptr};
  std::atomic<void*> agreeCtx{nullptr};
};
Globals& globals();

// Internal entry points (the C API wraps them; tests call them directly).
int initRuntime(const ts_init_params* p);
void shutdownRuntime();
Runtime* runtime();  // nullptr when not running; valid only while nobody calls shutdown
// mpirun, orted, srun, shells, env, our own tools...: processes that carry the job's environment
// but are not a rank (c_api.cpp).
bool isLauncherProcess();

}  // namespace trainscope::agent
