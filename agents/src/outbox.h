// Messages the job's threads want broadcast to every connected client (knob "applied" acks).
// Kept apart from the server object so a job thread never touches the server's lifetime: it
// appends under a short lock and pokes the server's eventfd if one is running.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "trainscope/core/wire/protocol.h"

namespace trainscope::agent {

class Outbox {
 public:
  static Outbox& instance() {
    static Outbox* o = new Outbox();  // leaked: job threads may post during static destruction
    return *o;
  }
  void post(const core::wire::Message& m) {
    {
      std::lock_guard lock(mu_);
      if (msgs_.size() < 4096) msgs_.push_back(m);  // bounded: nobody may be listening
    }
    const int fd = wakeFd_.load();
    if (fd >= 0) {
      const uint64_t one = 1;
      [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof one);
    }
  }
  std::vector<core::wire::Message> take() {
    std::lock_guard lock(mu_);
    return std::exchange(msgs_, {});
  }
  void setWakeFd(int fd) { wakeFd_.store(fd); }

 private:
  std::mutex mu_;
  std::vector<core::wire::Message> msgs_;
  std::atomic<int> wakeFd_{-1};
};

}  // namespace trainscope::agent
