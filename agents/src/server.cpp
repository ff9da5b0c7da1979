#include "server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "clock.h"
#include "log.h"
#include "outbox.h"
#include "trainscope/core/wire/discovery.h"

namespace trainscope::agent {

namespace wire = core::wire;
using core::ErrorCode;
using core::Status;

namespace {
constexpr size_t kMaxClients = 64;
constexpr size_t kReadChunk = 64 * 1024;
// A connection that has not completed the handshake by then is dropped: it would otherwise
// hold one of the kMaxClients slots forever.
constexpr int64_t kHandshakeTimeoutNs = 10'000'000'000LL;
}  // namespace

struct Server::Client {
  enum class State { AwaitHello, AwaitAuth, Open };
  int fd = -1;
  State state = State::AwaitHello;
  wire::FrameDecoder decoder;
  wire::Nonce agentNonce{};
  std::shared_ptr<OutQueue> out;
  bool subscribed = false;
  int64_t connectedNs = 0;
  std::string name = "client";
};

Server::Server(Hub& hub, const Config& cfg, ServerHooks hooks) : hub_(hub), cfg_(cfg), hooks_(std::move(hooks)) {}

Server::~Server() { stop(); }

Status Server::setupSecret() {
  if (!cfg_.secretFile.empty()) {
    struct stat st {};
    if (::stat(cfg_.secretFile.c_str(), &st) != 0)
      return {ErrorCode::NotFound, "TRAINSCOPE_SECRET_FILE " + cfg_.secretFile + ": " + std::strerror(errno)};
    if ((st.st_mode & 077) != 0 || st.st_uid != ::getuid())
      return {ErrorCode::InvalidArgument, "TRAINSCOPE_SECRET_FILE " + cfg_.secretFile +
                                              " must be owned by this user with mode 0600"};
    std::ifstream in(cfg_.secretFile, std::ios::binary);
    secret_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (secret_.empty()) return {ErrorCode::InvalidArgument, "TRAINSCOPE_SECRET_FILE is empty"};
    secretPath_ = cfg_.secretFile;
    return {};
  }
  auto dir = core::discovery::runtimeDir();
  if (!dir) return dir.status();
  secret_.resize(32);
  if (Status s = wire::randomBytes(secret_); !s) return s;
  secretPath_ = (dir.value() / (cfg_.jobId + "." + std::to_string(cfg_.rank) + ".secret")).string();
  ::unlink(secretPath_.c_str());
  const int fd = ::open(secretPath_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return {ErrorCode::Io, secretPath_ + ": " + std::strerror(errno)};
  const bool ok = ::write(fd, secret_.data(), secret_.size()) == static_cast<ssize_t>(secret_.size());
  ::close(fd);
  if (!ok) return {ErrorCode::Io, secretPath_ + ": short write"};
  secretGenerated_ = true;
  return {};
}

Status Server::listen() {
  const std::string& l = cfg_.listen;
  if (l.empty() || l == "unix") {
    auto dir = core::discovery::runtimeDir();
    if (!dir) return dir.status();
    socketPath_ = (dir.value() / (cfg_.jobId + "." + std::to_string(cfg_.rank) + ".sock")).string();
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (socketPath_.size() >= sizeof addr.sun_path)
      return {ErrorCode::InvalidArgument, "socket path too long: " + socketPath_};
    std::memcpy(addr.sun_path, socketPath_.c_str(), socketPath_.size() + 1);
    listenFd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (listenFd_ < 0) return {ErrorCode::Io, std::string("socket: ") + std::strerror(errno)};
    ::unlink(socketPath_.c_str());  // a stale socket from a crashed run with the same job/rank
    if (::bind(listenFd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      return {ErrorCode::Io, "bind " + socketPath_ + ": " + std::strerror(errno)};
    ::chmod(socketPath_.c_str(), 0600);
    endpoint_ = "unix:" + socketPath_;
  } else if (l.rfind("tcp", 0) == 0) {
    std::string host = "127.0.0.1";
    int port = 0;
    if (l.size() > 4 && l[3] == ':') {
      const std::string rest = l.substr(4);
      const auto colon = rest.rfind(':');
      if (colon == std::string::npos) return {ErrorCode::InvalidArgument, "TRAINSCOPE_LISTEN=" + l + ": want tcp:ADDR:PORT"};
      host = rest.substr(0, colon);
      port = std::atoi(rest.c_str() + colon + 1);
    } else if (l != "tcp") {
      return {ErrorCode::InvalidArgument, "TRAINSCOPE_LISTEN=" + l + ": want unix, tcp or tcp:ADDR:PORT"};
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1)
      return {ErrorCode::InvalidArgument, "TRAINSCOPE_LISTEN: bad IPv4 address " + host};
    if (Status s = setupSecret(); !s) return s;
    authRequired_ = true;
    listenFd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (listenFd_ < 0) return {ErrorCode::Io, std::string("socket: ") + std::strerror(errno)};
    const int one = 1;
    ::setsockopt(listenFd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(listenFd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      return {ErrorCode::Io, "bind " + host + ":" + std::to_string(port) + ": " + std::strerror(errno)};
    socklen_t len = sizeof addr;
    ::getsockname(listenFd_, reinterpret_cast<sockaddr*>(&addr), &len);
    endpoint_ = "tcp:" + host + ":" + std::to_string(ntohs(addr.sin_port));
  } else {
    return {ErrorCode::InvalidArgument, "TRAINSCOPE_LISTEN=" + l + ": want unix, tcp or tcp:ADDR:PORT"};
  }
  if (::listen(listenFd_, 16) != 0) return {ErrorCode::Io, std::string("listen: ") + std::strerror(errno)};
  wakeFd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wakeFd_ < 0) return {ErrorCode::Io, std::string("eventfd: ") + std::strerror(errno)};
  return {};
}

void Server::start() {
  if (listenFd_ < 0 || thread_.joinable()) return;
  stop_.store(false);
  hub_.setWake([this] { wake(); });
  Outbox::instance().setWakeFd(wakeFd_);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  thread_ = std::thread([this] { run(); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  pthread_setname_np(thread_.native_handle(), "ts-server");
}

void Server::wake() {
  if (wakeFd_ < 0) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wakeFd_, &one, sizeof one);
}

void Server::stop() {
  if (thread_.joinable()) {
    stop_.store(true);
    wake();
    thread_.join();
  }
  Outbox::instance().setWakeFd(-1);
  hub_.setWake(nullptr);
  for (auto& c : clients_) {
    hub_.unsubscribe(c->out);
    ::close(c->fd);
  }
  clients_.clear();
  clientCount_.store(0);
  if (listenFd_ >= 0) ::close(listenFd_);
  listenFd_ = -1;
  if (wakeFd_ >= 0) ::close(wakeFd_);
  wakeFd_ = -1;
  if (!socketPath_.empty()) ::unlink(socketPath_.c_str());
  if (secretGenerated_) ::unlink(secretPath_.c_str());
  secretGenerated_ = false;
}

void Server::send(Client& c, const wire::Message& m) {
  auto f = std::make_shared<std::vector<uint8_t>>();
  wire::encode(m, *f);
  c.out->pushForce(std::move(f));
}

void Server::reject(Client& c, const std::string& why) {
  // Best effort, one non-blocking write: the client is closed right after.
  std::vector<uint8_t> f;
  wire::encode(wire::Message{wire::ErrorMsg{static_cast<uint32_t>(ErrorCode::InvalidArgument), why}}, f);
  [[maybe_unused]] ssize_t n = ::send(c.fd, f.data(), f.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

void Server::dropClient(size_t i, const char* why) {
  Client& c = *clients_[i];
  if (why) logLine("dropping %s: %s", c.name.c_str(), why);
  hub_.unsubscribe(c.out);
  ::close(c.fd);
  clients_.erase(clients_.begin() + static_cast<std::ptrdiff_t>(i));
  clientCount_.store(static_cast<uint32_t>(clients_.size()));
}

void Server::acceptClients() {
  for (;;) {
    const int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (clients_.size() >= kMaxClients) {
      logLine("refusing a client: %zu already connected", clients_.size());
      ::close(fd);
      continue;
    }
    auto c = std::make_unique<Client>();
    c->fd = fd;
    c->connectedNs = nowNs();
    c->out = std::make_shared<OutQueue>(cfg_.clientQueueBytes);
    clients_.push_back(std::move(c));
    clientCount_.store(static_cast<uint32_t>(clients_.size()));
  }
}

bool Server::readClient(Client& c) {
  uint8_t buf[kReadChunk];
  for (;;) {
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0) return false;
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      return false;
    }
    c.decoder.feed(std::span<const uint8_t>(buf, static_cast<size_t>(n)));
    for (;;) {
      auto r = c.decoder.next();
      if (!r) {
        logLine("dropping %s: bad frame: %s", c.name.c_str(), r.status().toString().c_str());
        reject(c, "bad frame: " + r.status().message());
        return false;
      }
      if (!r.value()) break;
      if (!handle(c, *r.value())) return false;
    }
    // A peer that keeps us buffering without completing a frame is not a client we want.
    if (c.decoder.buffered() > wire::kMaxFramePayload + wire::kHeaderSize) {
      logLine("dropping %s: oversized frame", c.name.c_str());
      return false;
    }
  }
  return true;
}

bool Server::writeClient(Client& c) {
  for (;;) {
    auto [p, n] = c.out->front();
    if (!p) return true;
    const ssize_t w = ::send(c.fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      if (errno == EINTR) continue;
      return false;
    }
    c.out->consumed(static_cast<size_t>(w));
  }
}

bool Server::handle(Client& c, wire::Message& m) {
  if (c.state == Client::State::AwaitHello) {
    auto* h = std::get_if<wire::Hello>(&m);
    if (!h) {
      logLine("dropping %s: expected Hello", c.name.c_str());
      reject(c, "expected Hello");
      return false;
    }
    if (!h->clientName.empty()) c.name = "client '" + h->clientName.substr(0, 64) + "'";
    if (h->minVersion > wire::kProtocolVersion || h->maxVersion < wire::kProtocolVersion) {
      logLine("dropping %s: protocol versions %u..%u, agent speaks %u", c.name.c_str(), h->minVersion,
              h->maxVersion, wire::kProtocolVersion);
      reject(c, "unsupported protocol version (agent speaks " + std::to_string(wire::kProtocolVersion) + ")");
      return false;
    }
    wire::Challenge ch;
    if (Status s = wire::randomBytes(ch.agentNonce); !s) return false;
    ch.authRequired = authRequired_;
    c.agentNonce = ch.agentNonce;
    send(c, ch);
    if (authRequired_) {
      c.state = Client::State::AwaitAuth;
    } else {
      c.state = Client::State::Open;
      send(c, hooks_.jobInfo());
    }
    return true;
  }
  if (c.state == Client::State::AwaitAuth) {
    auto* a = std::get_if<wire::Auth>(&m);
    if (!a) {
      logLine("dropping %s: expected Auth", c.name.c_str());
      reject(c, "authentication required");
      return false;
    }
    const wire::Mac want = wire::authMac(secret_, c.agentNonce, a->clientNonce);
    if (!wire::constantTimeEqual(want, a->mac)) {
      logLine("dropping %s: authentication failed", c.name.c_str());
      reject(c, "authentication failed");
      return false;
    }
    if (!seenNonces_.insert(a->clientNonce).second) {
      logLine("dropping %s: replayed client nonce", c.name.c_str());
      reject(c, "authentication failed (replayed nonce)");
      return false;
    }
    c.state = Client::State::Open;
    send(c, hooks_.jobInfo());
    return true;
  }
  // Open session.
  if (std::holds_alternative<wire::Auth>(m)) return true;  // harmless when auth is not required
  if (std::holds_alternative<wire::KnobListRequest>(m)) {
    send(c, hooks_.knobList());
  } else if (auto* s = std::get_if<wire::SetKnob>(&m)) {
    send(c, hooks_.setKnob(*s));
  } else if (auto* p = std::get_if<wire::Ping>(&m)) {
    send(c, wire::Pong{p->clientSendNs, nowNs()});
  } else if (std::holds_alternative<wire::StatsRequest>(m)) {
    send(c, hooks_.stats());
  } else if (auto* sub = std::get_if<wire::Subscribe>(&m)) {
    if (!c.subscribed) hub_.subscribe(c.out, sub->history);
    c.subscribed = true;
  } else if (std::holds_alternative<wire::Unsubscribe>(m)) {
    hub_.unsubscribe(c.out);
    c.subscribed = false;
  } else if (std::holds_alternative<wire::Bye>(m)) {
    return false;
  } else if (auto* e = std::get_if<wire::ErrorMsg>(&m)) {
    logLine("%s reported: %s", c.name.c_str(), e->message.c_str());
    return false;
  } else {
    logLine("dropping %s: unexpected message type %u", c.name.c_str(), static_cast<unsigned>(wire::typeOf(m)));
    reject(c, "unexpected message");
    return false;
  }
  return true;
}

void Server::run() {
  std::vector<pollfd> fds;
  while (!stop_.load()) {
    fds.clear();
    fds.push_back({listenFd_, POLLIN, 0});
    fds.push_back({wakeFd_, POLLIN, 0});
    for (auto& c : clients_) {
      short ev = POLLIN;
      if (c->out->bytes() > 0) ev |= POLLOUT;
      fds.push_back({c->fd, ev, 0});
    }
    const int n = ::poll(fds.data(), fds.size(), 200);
    if (n < 0 && errno != EINTR) break;
    try {
      if (fds[1].revents & POLLIN) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = ::read(wakeFd_, &v, sizeof v);
      }
      for (const auto& m : Outbox::instance().take())
        for (auto& c : clients_)
          if (c->state == Client::State::Open) send(*c, m);
      // Clients: iterate by index from the back so dropping one keeps the others' indices.
      const size_t nc = clients_.size();
      for (size_t i = nc; i-- > 0;) {
        Client& c = *clients_[i];
        const short re = fds[2 + i].revents;
        bool ok = true;
        if (re & (POLLIN | POLLHUP | POLLERR)) ok = readClient(c);
        if (ok) ok = writeClient(c);
        // Control replies are forced into the queue; a client that sends requests but never
        // reads would grow it without bound, so it goes once it is far over its cap.
        if (ok && c.out->bytes() > 4 * cfg_.clientQueueBytes + (64u << 20)) {
          dropClient(i, "not reading its output");
          continue;
        }
        if (ok && c.state != Client::State::Open && nowNs() - c.connectedNs > kHandshakeTimeoutNs) {
          dropClient(i, "no handshake within 10 s");
          continue;
        }
        if (!ok) dropClient(i, nullptr);
      }
      if (fds[0].revents & POLLIN) acceptClients();
    } catch (...) {
      logLine("control server error; continuing");
    }
  }
  // Shutdown: give clients a moment to receive what is queued (the final batch), then Bye.
  const int64_t deadline = nowNs() + 500'000'000;
  for (auto& m : Outbox::instance().take())
    for (auto& c : clients_)
      if (c->state == Client::State::Open) send(*c, m);
  for (auto& c : clients_)
    if (c->state == Client::State::Open) send(*c, wire::Bye{});
  while (nowNs() < deadline) {
    bool pending = false;
    for (size_t i = clients_.size(); i-- > 0;) {
      if (!writeClient(*clients_[i])) {
        dropClient(i, nullptr);
        continue;
      }
      pending |= clients_[i]->out->bytes() > 0;
    }
    if (!pending) break;
    ::usleep(2000);
  }
}

}  // namespace trainscope::agent
