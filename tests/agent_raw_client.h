// A minimal wire-protocol client over a blocking socket, for the agent test suites: it
// speaks the frames directly, so the agent is tested independently of core::AgentClient.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "trainscope/core/wire/protocol.h"

namespace agent_test {

class RawClient {
 public:
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connectTo(const std::string& endpoint) {
    if (endpoint.rfind("unix:", 0) == 0) {
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      const std::string path = endpoint.substr(5);
      std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
      fd_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
      return ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    }
    const auto colon = endpoint.rfind(':');
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(std::stoi(endpoint.substr(colon + 1))));
    ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    return ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  void send(const trainscope::core::wire::Message& m) { sendRaw(frame(m)); }
  // One encoded frame, sealed when a TCP session is on (advances the send sequence).
  std::vector<uint8_t> frame(const trainscope::core::wire::Message& m) {
    std::vector<uint8_t> f;
    trainscope::core::wire::encode(m, f);
    if (sealer_.active()) sealer_.seal(f);
    return f;
  }
  // TCP after a successful Auth: MACs on everything sent, and required on everything received.
  void startSession(const trainscope::core::wire::SessionKey& key) {
    sealer_.start(key, trainscope::core::wire::MacDirection::ClientToAgent);
    dec_.requireMac(key, trainscope::core::wire::MacDirection::AgentToClient);
  }
  // Whether the peer closes the connection within ms (bytes before the close are ignored).
  bool peerClosedWithin(int ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      uint8_t buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return true;
    }
  }
  void sendRaw(const std::vector<uint8_t>& f) {
    [[maybe_unused]] ssize_t n = ::send(fd_, f.data(), f.size(), MSG_NOSIGNAL);
  }
  // The next message, or nullopt on timeout / close (closed() tells which).
  std::optional<trainscope::core::wire::Message> recv(int timeoutMs = 3000) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
    for (;;) {
      auto m = dec_.next();
      if (!m) return std::nullopt;
      if (m.value()) return *m.value();
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return std::nullopt;
      uint8_t buf[65536];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_ = true;
        return std::nullopt;
      }
      dec_.feed(std::span<const uint8_t>(buf, static_cast<size_t>(n)));
    }
  }
  template <typename T>
  std::optional<T> recvAs(int timeoutMs = 3000) {
    for (;;) {
      auto m = recv(timeoutMs);
      if (!m) return std::nullopt;
      if (auto* t = std::get_if<T>(&*m)) return *t;
      if (!std::holds_alternative<trainscope::core::wire::EventBatch>(*m)) return std::nullopt;
      skipped_.push_back(std::move(*m));  // batches interleave with replies: keep them for later
    }
  }
  bool closedWithin(int ms) {
    while (recv(ms)) {
    }
    return closed_;
  }
  trainscope::core::wire::Challenge hello() {
    using trainscope::core::wire::kProtocolVersion;
    send(trainscope::core::wire::Hello{kProtocolVersion, kProtocolVersion, "tst_agent_server"});
    auto c = recvAs<trainscope::core::wire::Challenge>();
    return c ? *c : trainscope::core::wire::Challenge{};
  }
  int fd() const { return fd_; }
  // Event batches that recvAs() stepped over, in arrival order.
  std::vector<trainscope::core::wire::Message> takeSkipped() { return std::exchange(skipped_, {}); }

 private:
  int fd_ = -1;
  trainscope::core::wire::FrameDecoder dec_;
  trainscope::core::wire::FrameSealer sealer_;
  bool closed_ = false;
  std::vector<trainscope::core::wire::Message> skipped_;
};

// Sends as much of bytes as the socket takes within 3 s without blocking (the agent may hold a
// client's input back, or stop reading it).
inline size_t sendWithoutBlocking(int fd, const std::vector<uint8_t>& bytes) {
  size_t off = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (off < bytes.size() && std::chrono::steady_clock::now() < deadline) {
    const ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return off;
}

}  // namespace agent_test
