// The control server: one background thread, poll() over a Unix (default) or TCP listening
// socket and all clients. Non-blocking everywhere; each client has a bounded output queue.
// Protocol: Hello -> Challenge -> [Auth] -> Welcome, then requests (knobs, stats, ping,
// subscribe). A misbehaving client is dropped with one log line; nothing else changes.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "config.h"
#include "hub.h"
#include "trainscope/core/base/status.h"
#include "trainscope/core/wire/protocol.h"

namespace trainscope::agent {

struct ServerHooks {
  std::function<core::wire::JobInfo()> jobInfo;
  std::function<core::wire::Stats()> stats;
  std::function<core::wire::KnobList()> knobList;
  std::function<core::wire::KnobAck(const core::wire::SetKnob&)> setKnob;
  std::function<core::wire::Inspect()> inspect;  // empty: InspectRequest is answered with an empty Inspect
  // Whether a SetKnob under this number must wait for the ranks' next agreement (it is beyond
  // the unagreed window); empty: never.
  std::function<bool(uint64_t changeSeq)> knobMustWait;
};

// What the server's per-client budgets did so far (tests and docs/SECURITY.md).
struct ServerCounters {
  uint64_t peakQueuedBytes = 0;   // the most bytes any one client had queued
  uint64_t peakQueuedFrames = 0;  // the most frames any one client had queued
  uint64_t cutOff = 0;            // clients dropped for not reading their output
  uint64_t pausedReads = 0;       // times a client's input was held back for its output budget
  uint64_t acceptsDeferred = 0;   // times the accept budget left connections in the backlog
};

class Server {
 public:
  Server(Hub& hub, const Config& cfg, ServerHooks hooks);
  ~Server();
  core::Status listen();  // binds; endpoint() and secretFile() are valid afterwards
  void start();
  void stop();            // flushes pending output briefly, says Bye, closes everything
  std::string endpoint() const { return endpoint_; }
  std::string secretFile() const { return secretPath_; }
  // The files this server created and stop() removes (for the SIGTERM cleanup in runtime.cpp).
  std::string socketPath() const { return socketPath_; }
  std::string ownSecretPath() const { return secretGenerated_ ? secretPath_ : std::string(); }
  uint32_t clientCount() const { return clientCount_.load(); }
  ServerCounters counters() const;
  void wake();

 private:
  friend struct ServerFuzzAccess;  // tests/fuzz/fuzz_agent_server.cpp drives one client's steps
  struct Client;
  void run();
  void acceptClients();
  bool readClient(Client& c);    // false: drop it (handles buffered frames first; reads only within budget)
  bool handleBuffered(Client& c);  // false: drop it
  bool holdInput(const Client& c) const;  // over its output budget, or waiting for a knob agreement
  bool overBudget(const Client& c) const;
  void noteQueue(const Client& c);
  bool writeClient(Client& c);   // false: drop it
  bool handle(Client& c, core::wire::Message& m);
  void reject(Client& c, const std::string& why);
  void send(Client& c, const core::wire::Message& m);
  void dropClient(size_t i, const char* why);
  core::Status setupSecret();

  Hub& hub_;
  Config cfg_;
  ServerHooks hooks_;
  int listenFd_ = -1;
  int wakeFd_ = -1;
  std::string endpoint_;
  std::string socketPath_;
  std::string secretPath_;
  bool secretGenerated_ = false;
  bool authRequired_ = false;
  std::vector<uint8_t> secret_;
  std::set<core::wire::Nonce> seenNonces_;
  std::deque<core::wire::Nonce> nonceOrder_;
  std::vector<std::unique_ptr<Client>> clients_;
  std::atomic<uint32_t> clientCount_{0};
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> peakQueuedBytes_{0}, peakQueuedFrames_{0}, cutOff_{0}, pausedReads_{0}, acceptsDeferred_{0};
  double acceptTokens_ = 0;
  int64_t acceptRefillNs_ = 0;
  std::thread thread_;
};

}  // namespace trainscope::agent
