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

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <tuple>

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
// Connections that have not completed the handshake may hold at most this many slots; a new one
// beyond it replaces the oldest (as sshd's MaxStartups), so a flood of silent connections costs
// the agent a few KiB each and never locks a real client out: the handshake takes milliseconds.
constexpr size_t kMaxUnauthenticated = 8;
constexpr size_t kReadChunk = 16 * 1024;
// Before the handshake completes a peer may send only small, uncompressed frames (Hello and
// Auth take well under 100 bytes); afterwards client requests are still small (knob values).
constexpr uint32_t kPreAuthMaxPayload = 4 * 1024;
constexpr uint32_t kOpenMaxPayload = 64 * 1024;
// A connection that has not completed the handshake by then is dropped.
constexpr int64_t kHandshakeTimeoutNs = 5'000'000'000LL;
// A client that is not subscribed, waits for no knob change to apply, and has sent nothing for
// this long may lose its slot to a new connection when every slot is taken. Real clients either
// stream (subscribed: never evicted) or talk continuously (a CLI command); one waiting for its
// change to apply is kept until that change's ack goes out.
constexpr int64_t kIdleNs = 2'000'000'000LL;
// Client nonces remembered against replay (FIFO); the agent nonce is fresh per connection and
// part of the MAC, so an old nonce cannot be replayed into a new handshake anyway.
constexpr size_t kMaxNonces = 4096;
// Refusal texts sent to a client are cut to this many characters (never echo a large input).
constexpr size_t kMaxReason = 256;
// A client's output budget: while its queue holds more than Config::clientQueueBytes or more than
// this many frames, nothing more of what it sent is read or handled (its requests wait in its
// socket, which is the client's memory, not the job's). Replies are therefore counted against
// it before the next request is read: at most one reply, or one history replay, beyond the
// budget. A client over its budget that takes none of its output for Config::clientStallNs is
// cut off and everything queued for it is released.
constexpr size_t kMaxQueuedFrames = OutQueue::kCapFrames;
// Accepted connections: a token bucket of Config::acceptPerSec with this burst; the rest wait in
// the kernel's backlog (connect blocks or fails there), so a connection flood costs the rank at
// most acceptPerSec accepts and handshakes a second.
constexpr double kAcceptBurst = 64;
// A SetKnob beyond the unagreed window (KnobRegistry::kMaxUnagreed) waits this long at most for
// the ranks' next agreement, holding that client's later requests behind it; then it is refused.
constexpr int64_t kKnobWaitNs = 5'000'000'000LL;

#define budgetedLog(...)       \
  do {                          \
    if (logBudget()) logLine(__VA_ARGS__); \
  } while (0)

std::string clip(std::string s) {
  if (s.size() > kMaxReason) {
    s.resize(kMaxReason);
    s += "…";
  }
  return s;
}

// Drop and refusal log lines: at most 20 per 10 s, then one line saying how many were left out,
// so a connection flood cannot grow the job's log.
bool logBudget() {
  static int64_t windowStart = 0;
  static int used = 0, suppressed = 0;
  const int64_t now = nowNs();
  if (now - windowStart > 10'000'000'000LL) {
    if (suppressed > 0) logLine("(%d more control-server messages left out in the last 10 s)", suppressed);
    windowStart = now;
    used = suppressed = 0;
  }
  if (used < 20) {
    ++used;
    return true;
  }
  ++suppressed;
  return false;
}
}  // namespace

struct Server::Client {
  enum class State { AwaitHello, AwaitAuth, Open };
  int fd = -1;
  State state = State::AwaitHello;
  wire::FrameDecoder decoder;
  wire::Nonce agentNonce{};
  std::shared_ptr<OutQueue> out;
  // TCP after the handshake: every outgoing frame gets a MAC as it is written (frames in `out`
  // may be shared with other clients, so they are sealed into `sealed`, one at a time, in the
  // order they go out). The first `unsealedBytes` of `out` were queued before the session key
  // existed (the Challenge) and go out as they are.
  wire::FrameSealer sealer;
  std::vector<uint8_t> sealed;
  size_t sealedOff = 0;
  size_t unsealedBytes = 0;
  bool subscribed = false;
  int64_t connectedNs = 0;
  int64_t lastMessageNs = 0;
  bool awaitingApply = false;  // sent a SetKnob that was accepted and has not applied yet
  int64_t progressNs = 0;      // last time its output was within budget or some of it was taken
  bool held = false;           // its input is held back (counted once per episode)
  std::optional<wire::SetKnob> waitingKnob;  // beyond the unagreed window: waits for an agreement
  int64_t waitingKnobSinceNs = 0;
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

ServerCounters Server::counters() const {
  ServerCounters k;
  k.peakQueuedBytes = peakQueuedBytes_.load();
  k.peakQueuedFrames = peakQueuedFrames_.load();
  k.cutOff = cutOff_.load();
  k.pausedReads = pausedReads_.load();
  k.acceptsDeferred = acceptsDeferred_.load();
  return k;
}

bool Server::overBudget(const Client& c) const {
  return c.out->bytes() > cfg_.clientQueueBytes || c.out->frames() > kMaxQueuedFrames;
}

bool Server::holdInput(const Client& c) const { return c.waitingKnob.has_value() || overBudget(c); }

void Server::noteQueue(const Client& c) {
  const uint64_t b = c.out->bytes(), f = c.out->frames();
  if (b > peakQueuedBytes_.load(std::memory_order_relaxed)) peakQueuedBytes_.store(b, std::memory_order_relaxed);
  if (f > peakQueuedFrames_.load(std::memory_order_relaxed)) peakQueuedFrames_.store(f, std::memory_order_relaxed);
}

void Server::start() {
  if (listenFd_ < 0 || thread_.joinable()) return;
  stop_.store(false);
  acceptTokens_ = kAcceptBurst;
  acceptRefillNs_ = nowNs();
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
  wire::encode(wire::Message{wire::ErrorMsg{static_cast<uint32_t>(ErrorCode::InvalidArgument), clip(why)}}, f);
  [[maybe_unused]] ssize_t n = ::send(c.fd, f.data(), f.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

void Server::dropClient(size_t i, const char* why) {
  Client& c = *clients_[i];
  if (why) budgetedLog("dropping %s: %s", c.name.c_str(), why);
  hub_.unsubscribe(c.out);
  ::close(c.fd);
  clients_.erase(clients_.begin() + static_cast<std::ptrdiff_t>(i));
  clientCount_.store(static_cast<uint32_t>(clients_.size()));
}

void Server::acceptClients() {
  for (;;) {
    if (cfg_.acceptPerSec > 0 && acceptTokens_ < 1) {
      ++acceptsDeferred_;  // the rest wait in the backlog until the bucket refills
      return;
    }
    const int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (cfg_.acceptPerSec > 0) acceptTokens_ -= 1;
    // The Unix socket is for this user only (the 0600 socket file says so too; SO_PEERCRED
    // checks the peer itself, as Perfetto's traced does).
    if (!socketPath_.empty()) {
      ucred cred{};
      socklen_t len = sizeof cred;
      if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != ::geteuid()) {
        budgetedLog("refusing a client of uid %u (the agent runs as uid %u)", static_cast<unsigned>(cred.uid),
                    static_cast<unsigned>(::geteuid()));
        ::close(fd);
        continue;
      }
    }
    const int64_t now = nowNs();
    // Slots: silent connections may hold only a few of them; a full table gives way to the
    // oldest unauthenticated connection, else to the longest-idle unsubscribed client.
    size_t pending = 0, oldestPending = SIZE_MAX, idlest = SIZE_MAX;
    for (size_t i = 0; i < clients_.size(); ++i) {
      const Client& k = *clients_[i];
      if (k.state != Client::State::Open) {
        ++pending;
        if (oldestPending == SIZE_MAX || k.connectedNs < clients_[oldestPending]->connectedNs) oldestPending = i;
      } else if (!k.subscribed && (!k.awaitingApply || now - k.lastMessageNs > cfg_.pendingHoldNs) &&
                 now - k.lastMessageNs > kIdleNs &&
                 (idlest == SIZE_MAX || k.lastMessageNs < clients_[idlest]->lastMessageNs)) {
        idlest = i;
      }
    }
    if (pending >= kMaxUnauthenticated && oldestPending != SIZE_MAX) {
      dropClient(oldestPending, "too many connections without a handshake; the oldest goes");
    } else if (clients_.size() >= kMaxClients) {
      const size_t victim = oldestPending != SIZE_MAX ? oldestPending : idlest;
      if (victim == SIZE_MAX) {
        budgetedLog("refusing a client: %zu already connected", clients_.size());
        ::close(fd);
        continue;
      }
      dropClient(victim, "every slot is taken; it was the one waiting longest");
    }
    auto c = std::make_unique<Client>();
    c->fd = fd;
    c->connectedNs = now;
    c->lastMessageNs = now;
    c->progressNs = now;
    c->decoder.setLimits(kPreAuthMaxPayload, false);
    c->out = std::make_shared<OutQueue>(cfg_.clientQueueBytes);
    clients_.push_back(std::move(c));
    clientCount_.store(static_cast<uint32_t>(clients_.size()));
  }
}

bool Server::readClient(Client& c) {
  uint8_t buf[kReadChunk];
  for (;;) {
    if (!handleBuffered(c)) return false;
    if (holdInput(c)) {
      if (!c.held) ++pausedReads_;
      c.held = true;
      return true;  // the rest stays in the client's socket until its output drains
    }
    c.held = false;
    // A peer that keeps us buffering without completing a frame is not a client we want.
    if (c.decoder.buffered() > c.decoder.maxFrameBytes()) {
      budgetedLog("dropping %s: oversized frame", c.name.c_str());
      return false;
    }
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0) return false;
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      if (errno == EINTR) continue;
      return false;
    }
    c.decoder.feed(std::span<const uint8_t>(buf, static_cast<size_t>(n)));
  }
}

bool Server::handleBuffered(Client& c) {
  if (c.waitingKnob) {
    if (hooks_.knobMustWait && hooks_.knobMustWait(c.waitingKnob->changeSeq) &&
        nowNs() - c.waitingKnobSinceNs < kKnobWaitNs)
      return true;
    wire::Message m{std::move(*c.waitingKnob)};
    c.waitingKnob.reset();
    c.waitingKnobSinceNs = -1;  // handle() answers it now: accepted, or refused if still beyond
    if (!handle(c, m)) return false;
    c.waitingKnobSinceNs = 0;
  }
  // One request at a time, each reply queued (and counted) before the next is decoded.
  while (!holdInput(c)) {
    auto r = c.decoder.next();
    if (!r) {
      budgetedLog("dropping %s: bad frame: %s", c.name.c_str(), r.status().toString().c_str());
      reject(c, "bad frame: " + r.status().message());
      return false;
    }
    if (!r.value()) break;
    c.lastMessageNs = nowNs();
    const bool wasOpen = c.state == Client::State::Open;
    if (!handle(c, *r.value())) return false;
    if (!wasOpen && c.state == Client::State::Open) c.decoder.setLimits(kOpenMaxPayload, false);
  }
  return true;
}

bool Server::writeClient(Client& c) {
  for (;;) {
    const uint8_t* p = nullptr;
    size_t n = 0;
    const bool sealing = c.sealer.active() && c.unsealedBytes == 0;
    if (sealing) {
      if (c.sealedOff == c.sealed.size()) {
        // The next whole frame (sealing only ever starts on a frame boundary, so front() is one).
        auto [fp, fn] = c.out->front();
        if (!fp) {
          if (c.sealed.capacity() > kReadChunk * 16) std::vector<uint8_t>().swap(c.sealed);
          return true;
        }
        c.sealed.assign(fp, fp + fn);
        c.out->consumed(fn);
        c.sealer.seal(c.sealed);
        c.sealedOff = 0;
      }
      p = c.sealed.data() + c.sealedOff;
      n = c.sealed.size() - c.sealedOff;
    } else {
      std::tie(p, n) = c.out->front();
      if (!p) return true;
      if (c.sealer.active()) n = std::min(n, c.unsealedBytes);
    }
    const ssize_t w = ::send(c.fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      if (errno == EINTR) continue;
      return false;
    }
    if (w > 0) c.progressNs = nowNs();
    if (sealing) {
      c.sealedOff += static_cast<size_t>(w);
    } else {
      c.out->consumed(static_cast<size_t>(w));
      if (c.sealer.active()) c.unsealedBytes -= static_cast<size_t>(w);
    }
  }
}

bool Server::handle(Client& c, wire::Message& m) {
  if (c.state == Client::State::AwaitHello) {
    auto* h = std::get_if<wire::Hello>(&m);
    if (!h) {
      budgetedLog("dropping %s: expected Hello", c.name.c_str());
      reject(c, "expected Hello");
      return false;
    }
    if (!h->clientName.empty()) c.name = "client '" + h->clientName.substr(0, 64) + "'";
    if (h->minVersion > wire::kProtocolVersion || h->maxVersion < wire::kProtocolVersion) {
      budgetedLog("dropping %s: protocol versions %u..%u, agent speaks %u", c.name.c_str(), h->minVersion,
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
      budgetedLog("dropping %s: expected Auth", c.name.c_str());
      reject(c, "authentication required");
      return false;
    }
    const wire::Mac want = wire::authMac(secret_, c.agentNonce, a->clientNonce);
    if (!wire::constantTimeEqual(want, a->mac)) {
      budgetedLog("dropping %s: authentication failed", c.name.c_str());
      reject(c, "authentication failed");
      return false;
    }
    if (seenNonces_.count(a->clientNonce)) {
      budgetedLog("dropping %s: replayed client nonce", c.name.c_str());
      reject(c, "authentication failed (replayed nonce)");
      return false;
    }
    seenNonces_.insert(a->clientNonce);
    nonceOrder_.push_back(a->clientNonce);
    while (nonceOrder_.size() > kMaxNonces) {
      seenNonces_.erase(nonceOrder_.front());
      nonceOrder_.pop_front();
    }
    // From here on both directions carry MACs under a key only holders of the secret can
    // derive; the sealed Welcome is the agent's half of the mutual authentication.
    const wire::SessionKey key = wire::sessionKey(secret_, c.agentNonce, a->clientNonce);
    c.unsealedBytes = c.out->bytes();
    c.sealer.start(key, wire::MacDirection::AgentToClient);
    c.decoder.requireMac(key, wire::MacDirection::ClientToAgent);
    c.state = Client::State::Open;
    send(c, hooks_.jobInfo());
    return true;
  }
  // Open session.
  if (std::holds_alternative<wire::Auth>(m)) return true;  // harmless when auth is not required
  if (std::holds_alternative<wire::KnobListRequest>(m)) {
    send(c, hooks_.knobList());
  } else if (auto* s = std::get_if<wire::SetKnob>(&m)) {
    // Beyond the unagreed window: wait for the ranks' next agreement (this client's later
    // requests wait behind it, so its answers keep their order); waitingKnobSinceNs < 0 means
    // the wait is over and it is answered now, whatever the window says.
    if (c.waitingKnobSinceNs >= 0 && hooks_.knobMustWait && hooks_.knobMustWait(s->changeSeq)) {
      c.waitingKnob = *s;
      c.waitingKnobSinceNs = nowNs();
      return true;
    }
    wire::KnobAck ack = hooks_.setKnob(*s);
    if (ack.accepted && !ack.applied) c.awaitingApply = true;
    ack.reason = clip(std::move(ack.reason));
    send(c, ack);
  } else if (auto* p = std::get_if<wire::Ping>(&m)) {
    send(c, wire::Pong{p->clientSendNs, nowNs()});
  } else if (std::holds_alternative<wire::StatsRequest>(m)) {
    send(c, hooks_.stats());
  } else if (std::holds_alternative<wire::InspectRequest>(m)) {
    send(c, hooks_.inspect ? hooks_.inspect() : wire::Inspect{});
  } else if (auto* sub = std::get_if<wire::Subscribe>(&m)) {
    // A history replay queues the flight recorder's own frames (shared, not copied); the output
    // budget then holds this client's next request until it has taken them.
    if (!c.subscribed) hub_.subscribe(c.out, sub->history);
    c.subscribed = true;
  } else if (std::holds_alternative<wire::Unsubscribe>(m)) {
    hub_.unsubscribe(c.out);
    c.subscribed = false;
  } else if (std::holds_alternative<wire::Bye>(m)) {
    return false;
  } else if (auto* e = std::get_if<wire::ErrorMsg>(&m)) {
    budgetedLog("%s reported: %s", c.name.c_str(), e->message.c_str());
    return false;
  } else {
    budgetedLog("dropping %s: unexpected message type %u", c.name.c_str(), static_cast<unsigned>(wire::typeOf(m)));
    reject(c, "unexpected message");
    return false;
  }
  return true;
}

void Server::run() {
  std::vector<pollfd> fds;
  while (!stop_.load()) {
    fds.clear();
    int timeoutMs = 200;
    bool listenOn = true;
    if (cfg_.acceptPerSec > 0) {
      const int64_t now = nowNs();
      acceptTokens_ = std::min(kAcceptBurst, acceptTokens_ + static_cast<double>(now - acceptRefillNs_) *
                                                                 static_cast<double>(cfg_.acceptPerSec) / 1e9);
      acceptRefillNs_ = now;
      if (acceptTokens_ < 1) {  // leave the listening socket out of the poll until a token is due
        listenOn = false;
        timeoutMs = std::clamp(static_cast<int>((1 - acceptTokens_) * 1000.0 / static_cast<double>(cfg_.acceptPerSec)) + 1,
                               1, 200);
      }
    }
    fds.push_back({listenOn ? listenFd_ : -1, POLLIN, 0});
    fds.push_back({wakeFd_, POLLIN, 0});
    for (auto& c : clients_) {
      short ev = holdInput(*c) ? 0 : POLLIN;
      if (c->out->bytes() > 0 || c->sealedOff < c->sealed.size()) ev |= POLLOUT;
      if (c->waitingKnob) timeoutMs = std::min(timeoutMs, 10);  // the next agreement may come any step
      fds.push_back({c->fd, ev, 0});
    }
    const int n = ::poll(fds.data(), fds.size(), timeoutMs);
    if (n < 0 && errno != EINTR) break;
    try {
      if (fds[1].revents & POLLIN) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = ::read(wakeFd_, &v, sizeof v);
      }
      for (const auto& m : Outbox::instance().take()) {
        const auto* ack = std::get_if<wire::KnobAck>(&m);
        for (auto& c : clients_) {
          if (c->state != Client::State::Open) continue;
          send(*c, m);
          if (ack && (ack->applied || !ack->accepted)) c->awaitingApply = false;
        }
      }
      // Clients: iterate by index from the back so dropping one keeps the others' indices.
      const size_t nc = clients_.size();
      for (size_t i = nc; i-- > 0;) {
        Client& c = *clients_[i];
        const short re = fds[2 + i].revents;
        bool ok = true;
        // A client held back for its output budget is not read; a hung-up one is gone (its
        // output can no longer be taken).
        if ((re & (POLLHUP | POLLERR)) && holdInput(c)) ok = false;
        else if ((re & (POLLIN | POLLHUP | POLLERR)) || c.decoder.buffered() > 0 || c.waitingKnob) ok = readClient(c);
        if (ok) ok = writeClient(c);
        if (ok) {
          noteQueue(c);
          const int64_t now = nowNs();
          if (!overBudget(c)) {
            c.progressNs = now;
          } else if (now - c.progressNs > cfg_.clientStallNs) {
            ++cutOff_;
            dropClient(i, "not reading its output (over its budget and nothing taken)");
            continue;
          }
        }
        if (ok && c.state != Client::State::Open && nowNs() - c.connectedNs > kHandshakeTimeoutNs) {
          dropClient(i, "no handshake within 5 s");
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
      pending |= clients_[i]->out->bytes() > 0 || clients_[i]->sealedOff < clients_[i]->sealed.size();
    }
    if (!pending) break;
    ::usleep(2000);
  }
}

}  // namespace trainscope::agent
