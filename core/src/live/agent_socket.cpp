// Socket plumbing for AgentClient: every wait goes through poll() with a deadline so no call can
// hang on a stuck agent.
#include "live/agent_socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace trainscope::core::net {
namespace {

std::string errnoText(int e) {
  return std::strerror(e);
}

// Finishes a non-blocking connect within timeoutMs.
Status finishConnect(int fd, const sockaddr* addr, socklen_t len, int timeoutMs, const std::string& what) {
  if (::connect(fd, addr, len) == 0) return Status::ok();
  if (errno != EINPROGRESS && errno != EAGAIN && errno != EINTR)
    return Status(ErrorCode::Io, "cannot connect to " + what + ": " + errnoText(errno));
  pollfd p{fd, POLLOUT, 0};
  int n;
  do n = ::poll(&p, 1, timeoutMs);
  while (n < 0 && errno == EINTR);
  if (n == 0) return Status(ErrorCode::Io, "timed out connecting to " + what);
  int err = 0;
  socklen_t elen = sizeof err;
  if (n < 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0) err = errno;
  if (err != 0) return Status(ErrorCode::Io, "cannot connect to " + what + ": " + errnoText(err));
  return Status::ok();
}

Result<int> connectUnix(const std::string& path, int timeoutMs) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path)
    return Status(ErrorCode::InvalidArgument, "unix socket path \"" + path + "\" is empty or too long");
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status(ErrorCode::Io, "socket: " + errnoText(errno));
  Status s =
      finishConnect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr, timeoutMs, "unix:" + path);
  if (!s.isOk()) {
    ::close(fd);
    return s;
  }
  return fd;
}

Result<int> connectTcp(const std::string& hostPort, int timeoutMs) {
  const size_t colon = hostPort.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == hostPort.size())
    return Status(ErrorCode::InvalidArgument, "tcp endpoint \"" + hostPort + "\" is not HOST:PORT");
  std::string host = hostPort.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = hostPort.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return Status(ErrorCode::Io, "cannot resolve " + hostPort + ": " + ::gai_strerror(rc));
  Status last(ErrorCode::Io, "no address for " + hostPort);
  int fd = -1;
  for (addrinfo* a = res; a; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    last = finishConnect(fd, a->ai_addr, a->ai_addrlen, timeoutMs, "tcp:" + hostPort);
    if (last.isOk()) break;
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  if (fd < 0) return last;
  const int one = 1;  // requests are small and latency-bound (clock pings)
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

}  // namespace

Result<int> connectEndpoint(const std::string& endpoint, int timeoutMs) {
  if (endpoint.rfind("unix:", 0) == 0) return connectUnix(endpoint.substr(5), timeoutMs);
  if (endpoint.rfind("tcp:", 0) == 0) return connectTcp(endpoint.substr(4), timeoutMs);
  return Status(ErrorCode::InvalidArgument,
                "endpoint \"" + endpoint + "\" is neither unix:PATH nor tcp:HOST:PORT");
}

Status sendAll(int fd, std::span<const uint8_t> bytes, int timeoutMs) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      const int r = ::poll(&p, 1, timeoutMs);
      if (r == 0) return Status(ErrorCode::Io, "timed out sending to the agent");
      if (r < 0 && errno != EINTR) return Status(ErrorCode::Io, "poll: " + errnoText(errno));
      continue;
    }
    return Status(ErrorCode::Io, "send to the agent failed: " + errnoText(errno));
  }
  return Status::ok();
}

Result<bool> waitReadable(int fd, int timeoutMs) {
  pollfd p{fd, POLLIN, 0};
  for (;;) {
    const int r = ::poll(&p, 1, timeoutMs < 0 ? 0 : timeoutMs);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status(ErrorCode::Io, "poll: " + errnoText(errno));
    return r > 0;
  }
}

}  // namespace trainscope::core::net
