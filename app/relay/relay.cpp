// trainscope-relay's event loop (see relay.h and docs/RELAY.md).
#include "relay.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "trainscope/core/wire/discovery.h"
#include "trainscope/core/wire/protocol.h"

namespace trainscope::relay {
namespace {

namespace w = core::wire;
namespace disc = core::discovery;
using core::ErrorCode;
using core::Status;

constexpr uint32_t kPreAuthMaxPayload = 4 * 1024;   // Hello and Auth are < 100 bytes
constexpr uint32_t kControlMaxPayload = 8u << 20;   // a RelayRegister of 65,536 ranks
constexpr size_t kPauseBytes = 4u << 20;            // stop reading the other side past this
constexpr size_t kResumeBytes = 1u << 20;
constexpr size_t kMaxPreAuth = 64;                  // connections that have not authenticated
constexpr size_t kMaxConnections = 16384;
constexpr int64_t kHandshakeNs = 5'000'000'000;
constexpr int64_t kRescanNs = 1'000'000'000;
constexpr int64_t kStatsNs = 1'000'000'000;
constexpr int64_t kRegisterNs = 2'000'000'000;
constexpr int64_t kRetryNs = 2'000'000'000;
constexpr size_t kMaxNonces = 4096;

volatile sig_atomic_t gStop = 0;
void onSignal(int) { gStop = 1; }

int64_t nowNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

void logf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void logf(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "trainscope-relay: %s\n", buf);
}

bool splitHostPort(const std::string& hp, std::string& host, std::string& port) {
  const size_t c = hp.rfind(':');
  if (c == std::string::npos || c + 1 >= hp.size()) return false;
  host = hp.substr(0, c);
  port = hp.substr(c + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return true;
}

std::string addrText(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
    return buf;
  }
  const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
  ::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
  return std::string("[") + buf + "]";
}

// Is host one of this machine's addresses (or a name that resolves to one)?
bool isLocalAddress(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return false;
  std::set<std::string> mine;
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i; i = i->ifa_next) {
      if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
      sockaddr_storage ss{};
      std::memcpy(&ss, i->ifa_addr, i->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
      mine.insert(addrText(ss));
    }
    ::freeifaddrs(ifs);
  }
  bool local = false;
  for (addrinfo* a = res; a && !local; a = a->ai_next) {
    sockaddr_storage ss{};
    std::memcpy(&ss, a->ai_addr, a->ai_addrlen);
    local = mine.count(addrText(ss)) > 0;
  }
  ::freeaddrinfo(res);
  return local;
}

enum class Kind { Listen, Front, Up, Register, Monitor };
enum class State {
  AwaitHello,      // front: relay plays the agent
  AwaitAuth,
  Control,         // front: authenticated, asking the relay
  Routing,         // front: waiting for its rank's Welcome
  Raw,             // front/up: frames forwarded both ways
  Connecting,      // up/register/monitor: connect() in progress
  AwaitChallenge,  // up/register/monitor: relay plays the client
  AwaitWelcome,
  AwaitRouteWelcome,
  Open,  // register/monitor: handshake done
  Http,
};

struct Conn {
  int fd = -1;
  Kind kind = Kind::Front;
  State state = State::AwaitHello;
  w::FrameDecoder dec;
  w::FrameSealer sealer;
  w::Nonce agentNonce{};
  std::vector<uint8_t> out;
  size_t outOff = 0;
  Conn* pair = nullptr;  // routed: the other half
  int64_t deadlineNs = 0;
  int32_t routeRank = -1;  // up: Route this rank once the remote relay welcomed us
  bool tcp = false;        // up/register: the peer must authenticate
  bool readPaused = false;
  bool closed = false;
  uint32_t interest = 0;
  std::string name;     // for logs
  std::string http;     // a GET request as it arrives
  bool responded = false;
  bool isPeer = false;  // front: a relay that registered with us
  w::RelayRegister reg;  // its registration
  // monitor
  int32_t rank = -1;
  int64_t lastStatsAskNs = 0;
  int64_t stepAtNs = 0;
  int64_t stepAt = -1;
  // up: bytes forwarded (for /metrics)
  uint64_t forwarded = 0;

  size_t pending() const { return out.size() - outOff; }
};

class Relay {
 public:
  explicit Relay(const Options& o) : o_(o) {}
  int run();

 private:
  Status setup();
  void loop();
  void tick();
  void accept();
  void onEvent(Conn& c, uint32_t ev);
  void onReadable(Conn& c);
  void flush(Conn& c);
  void interest(Conn& c);
  void close(Conn& c, const std::string& why = {});
  void queue(Conn& c, const w::Message& m);
  void queueRaw(Conn& c, std::vector<uint8_t>& frame);
  void refuse(Conn& c, const std::string& why);
  Conn* add(int fd, Kind kind, State state);
  Conn* dial(const std::string& endpoint, Kind kind, std::string* error);

  // message handling per role
  bool handleFront(Conn& c, w::Message& m);
  bool handleUp(Conn& c, w::Message& m);
  void forward(Conn& from);
  void httpRequest(Conn& c);

  // the job's ranks
  void rescan();
  void rebuildView();
  w::RankList view() const;
  void route(Conn& front, int32_t rank);
  void keepRegistered();
  void pollStats();
  std::string metricsText() const;

  Options o_;
  std::vector<uint8_t> secret_;
  int ep_ = -1;
  Conn listen_;
  std::string self_;  // "tcp:ADDR:PORT" as other relays reach us
  int port_ = 0;
  std::string machine_;
  bool coordinator_ = true;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::set<w::Nonce> seenNonces_;
  std::deque<w::Nonce> nonceOrder_;
  // local ranks (from the runtime directory) and their monitors
  std::map<int32_t, disc::Entry> local_;
  std::map<int32_t, w::RankEntry> localStats_;
  std::map<int32_t, Conn*> monitors_;
  std::map<int32_t, int64_t> monitorRetryNs_;
  int64_t lastLocalNs_ = 0;
  bool sawLocal_ = false;
  // the whole job: from the coordinator (when we are not it), or ours + registrations
  w::RankList remote_;
  std::map<int32_t, w::RankEntry> view_;
  std::vector<std::string> problems_;
  Conn* register_ = nullptr;
  int64_t registerRetryNs_ = 0;
  int64_t lastRegisterNs_ = 0;
  bool registerDirty_ = true;
  int64_t lastRescanNs_ = 0;
  uint64_t forwardedToFront_ = 0, forwardedToRanks_ = 0, routedTotal_ = 0, refusedTotal_ = 0;
  int64_t startNs_ = nowNs();
};

// ---- setup -------------------------------------------------------------------------------------

Status readSecretFile(const std::string& path, std::vector<uint8_t>& out) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {ErrorCode::NotFound, "secret file " + path + ": " + std::strerror(errno)};
  if ((st.st_mode & 077) != 0 || st.st_uid != ::getuid())
    return {ErrorCode::InvalidArgument, "secret file " + path + " must be owned by this user with mode 0600"};
  std::ifstream in(path, std::ios::binary);
  out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (out.empty()) return {ErrorCode::InvalidArgument, "secret file " + path + " is empty"};
  return {};
}

Status Relay::setup() {
  if (o_.secretFile.empty())
    return {ErrorCode::InvalidArgument,
            "a relay serves TCP only with the job's secret: --secret-file FILE (or TRAINSCOPE_SECRET_FILE)"};
  if (Status s = readSecretFile(o_.secretFile, secret_); !s) return s;
  char hn[256] = {};
  ::gethostname(hn, sizeof hn - 1);
  machine_ = o_.machine.empty() ? hn : o_.machine;
  // Many ranks, many front ends: one descriptor each (and one more per routed connection).
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  std::string host, port;
  if (!splitHostPort(o_.listen, host, port)) return {ErrorCode::InvalidArgument, "--listen " + o_.listen + ": want ADDR:PORT"};
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return {ErrorCode::InvalidArgument, "--listen " + o_.listen + ": " + ::gai_strerror(rc)};
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd < 0 || ::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, 1024) != 0) {
    const std::string e = std::strerror(errno);
    ::freeaddrinfo(res);
    if (fd >= 0) ::close(fd);
    return {ErrorCode::Io, "cannot listen on " + o_.listen + ": " + e};
  }
  ::freeaddrinfo(res);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  port_ = ntohs(ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                        : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  const std::string bound = addrText(ss);
  ep_ = ::epoll_create1(EPOLL_CLOEXEC);
  listen_.fd = fd;
  listen_.kind = Kind::Listen;
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.ptr = &listen_;
  ::epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &e);

  // Who coordinates: --coordinator (or TRAINSCOPE_RELAY_COORDINATOR, set by `launch`), else
  // torchrun's MASTER_ADDR with our port; the relay whose own address it names is the coordinator.
  std::string coord = o_.coordinator;
  if (coord.empty()) {
    if (const char* c = std::getenv("TRAINSCOPE_RELAY_COORDINATOR")) coord = c;
    else if (const char* m = std::getenv("MASTER_ADDR")) coord = std::string(m) + ":" + std::to_string(port_);
  }
  std::string ch, cp;
  if (!coord.empty() && !splitHostPort(coord, ch, cp))
    return {ErrorCode::InvalidArgument, "--coordinator " + coord + ": want HOST:PORT"};
  coordinator_ = coord.empty() || (isLocalAddress(ch) && cp == std::to_string(port_));
  o_.coordinator = coordinator_ ? "" : coord;
  if (!o_.advertise.empty()) self_ = "tcp:" + o_.advertise;
  else if (bound != "0.0.0.0" && bound != "[::]") self_ = "tcp:" + bound + ":" + std::to_string(port_);
  else if (coordinator_ && !ch.empty()) self_ = "tcp:" + ch + ":" + std::to_string(port_);
  else self_ = "tcp:" + std::string(hn) + ":" + std::to_string(port_);  // refined when we reach the coordinator
  logf("serving job %s on %s:%d as %s (%s), machine %s", o_.jobId.empty() ? "(first found)" : o_.jobId.c_str(),
       bound.c_str(), port_, self_.c_str(), coordinator_ ? "coordinator" : ("registering with " + coord).c_str(),
       machine_.c_str());
  if (!o_.readyFile.empty()) {
    const std::string tmp = o_.readyFile + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    if (!f) return {ErrorCode::Io, "--ready-file " + o_.readyFile + ": " + std::strerror(errno)};
    std::fprintf(f, "%s\n", self_.c_str());
    std::fclose(f);
    ::rename(tmp.c_str(), o_.readyFile.c_str());
  }
  return {};
}

int Relay::run() {
  if (Status s = setup(); !s) {
    logf("%s", s.message().c_str());
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  loop();
  for (auto& c : conns_)
    if (!c->closed) ::close(c->fd);
  ::close(listen_.fd);
  ::close(ep_);
  if (!o_.readyFile.empty()) ::unlink(o_.readyFile.c_str());
  return 0;
}

void Relay::loop() {
  epoll_event evs[256];
  while (!gStop) {
    const int n = ::epoll_wait(ep_, evs, 256, 100);
    for (int i = 0; i < n; ++i) {
      auto* c = static_cast<Conn*>(evs[i].data.ptr);
      if (c == &listen_) accept();
      else if (!c->closed) onEvent(*c, evs[i].events);
    }
    tick();
    // Closed connections are freed here, after every event of this round that may name them.
    std::erase_if(conns_, [](const std::unique_ptr<Conn>& c) { return c->closed; });
    if (o_.exitWhenIdleS > 0 && sawLocal_ && local_.empty() &&
        nowNs() - lastLocalNs_ > static_cast<int64_t>(o_.exitWhenIdleS * 1e9)) {
      logf("no rank of the job on this machine for %.0f s: exiting", o_.exitWhenIdleS);
      break;
    }
  }
}

void Relay::tick() {
  const int64_t now = nowNs();
  for (auto& c : conns_)
    if (!c->closed && c->deadlineNs && now > c->deadlineNs) close(*c, "handshake timed out");
  if (now - lastRescanNs_ >= kRescanNs) {
    lastRescanNs_ = now;
    rescan();
  }
  pollStats();
  keepRegistered();
}

// ---- connections -------------------------------------------------------------------------------

Conn* Relay::add(int fd, Kind kind, State state) {
  auto c = std::make_unique<Conn>();
  c->fd = fd;
  c->kind = kind;
  c->state = state;
  Conn* p = c.get();
  conns_.push_back(std::move(c));
  epoll_event e{};
  e.events = EPOLLIN;
  p->interest = EPOLLIN;
  e.data.ptr = p;
  ::epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &e);
  return p;
}

void Relay::accept() {
  for (;;) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    const int fd = ::accept4(listen_.fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    size_t preAuth = 0;
    for (auto& c : conns_) preAuth += !c->closed && c->kind == Kind::Front && (c->state == State::AwaitHello || c->state == State::AwaitAuth || c->state == State::Http);
    if (preAuth >= kMaxPreAuth || conns_.size() >= kMaxConnections) {
      ++refusedTotal_;
      ::close(fd);  // costs nothing: nothing read, nothing kept
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    Conn* c = add(fd, Kind::Front, State::AwaitHello);
    c->dec.setLimits(kPreAuthMaxPayload, false);
    c->deadlineNs = nowNs() + kHandshakeNs;
    c->name = "front end " + addrText(ss);
  }
}

// Connects (non-blocking) to "unix:PATH" or "tcp:HOST:PORT".
Conn* Relay::dial(const std::string& endpoint, Kind kind, std::string* error) {
  int fd = -1;
  bool tcp = false;
  int rc = -1;
  if (endpoint.rfind("unix:", 0) == 0) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    const std::string path = endpoint.substr(5);
    if (path.size() >= sizeof a.sun_path) {
      *error = "socket path too long";
      return nullptr;
    }
    std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
    fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    rc = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else if (endpoint.rfind("tcp:", 0) == 0) {
    tcp = true;
    std::string host, port;
    if (!splitHostPort(endpoint.substr(4), host, port)) {
      *error = "bad endpoint " + endpoint;
      return nullptr;
    }
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (int g = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); g != 0) {
      *error = endpoint + ": " + ::gai_strerror(g);
      return nullptr;
    }
    fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    rc = ::connect(fd, res->ai_addr, res->ai_addrlen);
    ::freeaddrinfo(res);
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  } else {
    *error = "unknown endpoint " + endpoint;
    return nullptr;
  }
  if (fd < 0 || (rc != 0 && errno != EINPROGRESS && errno != EAGAIN)) {
    *error = endpoint + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return nullptr;
  }
  Conn* c = add(fd, kind, State::Connecting);
  c->tcp = tcp;
  c->name = endpoint;
  c->deadlineNs = nowNs() + kHandshakeNs;
  c->interest = EPOLLOUT;  // connected when writable
  epoll_event e{};
  e.events = EPOLLOUT;
  e.data.ptr = c;
  ::epoll_ctl(ep_, EPOLL_CTL_MOD, fd, &e);
  return c;
}

void Relay::interest(Conn& c) {
  if (c.closed) return;
  uint32_t want = c.readPaused ? 0u : uint32_t{EPOLLIN};
  if (c.pending() > 0 || c.state == State::Connecting) want |= EPOLLOUT;
  if (want == c.interest) return;
  c.interest = want;
  epoll_event e{};
  e.events = want;
  e.data.ptr = &c;
  ::epoll_ctl(ep_, EPOLL_CTL_MOD, c.fd, &e);
}

void Relay::close(Conn& c, const std::string& why) {
  if (c.closed) return;
  if (!why.empty() && c.kind != Kind::Monitor) logf("%s: %s", c.name.c_str(), why.c_str());
  c.closed = true;
  ::epoll_ctl(ep_, EPOLL_CTL_DEL, c.fd, nullptr);
  ::close(c.fd);
  if (c.kind == Kind::Register) {
    register_ = nullptr;
    registerRetryNs_ = nowNs() + kRetryNs;
  }
  if (c.kind == Kind::Monitor) {
    monitors_.erase(c.rank);
    monitorRetryNs_[c.rank] = nowNs() + kRetryNs;
  }
  if (c.isPeer) {
    problems_.push_back("relay of machine " + c.reg.machine + " (" + c.reg.endpoint + ") went away");
    if (problems_.size() > 16) problems_.erase(problems_.begin());
    c.isPeer = false;
    rebuildView();
  }
  if (Conn* p = c.pair) {
    c.pair = nullptr;
    p->pair = nullptr;
    if (p->state == State::Routing && p->kind == Kind::Front) {
      // The rank could not be reached: say why, then end the front end's connection.
      queue(*p, w::ErrorMsg{static_cast<uint32_t>(ErrorCode::NotFound),
                            "relay " + machine_ + ": rank " + std::to_string(c.routeRank >= 0 ? c.routeRank : c.rank) +
                                " cannot be reached (" + (why.empty() ? "closed" : why) + ")"});
      flush(*p);
    }
    close(*p);
  }
}

void Relay::queue(Conn& c, const w::Message& m) {
  std::vector<uint8_t> f;
  w::encode(m, f);
  queueRaw(c, f);
}

void Relay::queueRaw(Conn& c, std::vector<uint8_t>& frame) {
  if (c.closed) return;
  if (c.sealer.active()) c.sealer.seal(frame);
  if (c.outOff > 0 && c.outOff == c.out.size()) {
    c.out.clear();
    c.outOff = 0;
  }
  c.out.insert(c.out.end(), frame.begin(), frame.end());
}

void Relay::refuse(Conn& c, const std::string& why) {
  ++refusedTotal_;
  queue(c, w::ErrorMsg{static_cast<uint32_t>(ErrorCode::InvalidArgument), why});
  flush(c);
  close(c, why);
}

void Relay::flush(Conn& c) {
  while (!c.closed && c.pending() > 0) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.outOff, c.pending(), MSG_NOSIGNAL);
    if (n > 0) {
      c.outOff += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    close(c, "send failed");
    return;
  }
  if (c.closed) return;
  if (c.pending() == 0) {
    c.out.clear();
    c.outOff = 0;
    if (c.out.capacity() > (1u << 20)) c.out.shrink_to_fit();
  } else if (c.outOff > (1u << 20)) {
    c.out.erase(c.out.begin(), c.out.begin() + static_cast<ptrdiff_t>(c.outOff));
    c.outOff = 0;
  }
  // The other side was held back because this one was full: let it go on.
  if (c.pair && c.pair->readPaused && c.pending() < kResumeBytes) {
    c.pair->readPaused = false;
    interest(*c.pair);
    forward(*c.pair);  // frames it had already read
  }
  interest(c);
}

void Relay::onEvent(Conn& c, uint32_t ev) {
  if (c.state == State::Connecting && (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      close(c, std::string("connect: ") + std::strerror(err));
      return;
    }
    c.state = State::AwaitChallenge;
    w::Hello h;
    h.clientName = "trainscope-relay " + machine_;
    queue(c, h);
  }
  if (ev & EPOLLOUT) flush(c);
  if (c.closed) return;
  if (c.state == State::Http && c.responded && c.pending() == 0) return close(c);
  if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) onReadable(c);
}

void Relay::onReadable(Conn& c) {
  uint8_t buf[256 * 1024];
  for (int round = 0; round < 4 && !c.closed && !c.readPaused; ++round) {
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n == 0) {
      close(c);
      return;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // A front end that goes away resets its connection: not worth a line each time.
      close(c, errno == ECONNRESET && c.kind == Kind::Front ? "" : std::string("recv: ") + std::strerror(errno));
      return;
    }
    // A front end's first bytes may be an HTTP request for /metrics.
    if (c.kind == Kind::Front && (c.state == State::Http ||
                                  (c.state == State::AwaitHello && c.dec.buffered() == 0 && n >= 4 &&
                                   std::memcmp(buf, "GET ", 4) == 0 && o_.metrics))) {
      c.state = State::Http;
      c.http.append(reinterpret_cast<char*>(buf), static_cast<size_t>(n));
      if (c.http.size() > 4096) {
        close(c, "HTTP request too long");
        return;
      }
      if (c.http.find("\r\n\r\n") != std::string::npos || c.http.find("\n\n") != std::string::npos) httpRequest(c);
      return;
    }
    c.dec.feed({buf, static_cast<size_t>(n)});
    if (c.state == State::Raw) {
      forward(c);
      continue;
    }
    for (;;) {
      if (c.closed || c.state == State::Raw) break;
      auto m = c.dec.next();
      if (!m) {
        if (c.kind == Kind::Front) refuse(c, m.status().message());
        else close(c, m.status().message());
        return;
      }
      if (!m.value()) break;
      const bool keep = c.kind == Kind::Front ? handleFront(c, *m.value()) : handleUp(c, *m.value());
      if (!keep) return;
    }
    if (c.state == State::Raw && c.dec.buffered() > 0) forward(c);
    flush(c);
  }
}

// Raw forwarding: every complete frame c has read goes to its pair, re-sealed for that link.
void Relay::forward(Conn& from) {
  Conn* to = from.pair;
  if (!to || from.closed) return;
  std::vector<uint8_t> frame;
  for (;;) {
    frame.clear();
    auto r = from.dec.nextRaw(frame);
    if (!r) {
      close(from, r.status().message());
      return;
    }
    if (!r.value()) break;
    (from.kind == Kind::Front ? forwardedToRanks_ : forwardedToFront_) += frame.size();
    queueRaw(*to, frame);
    if (to->pending() > kPauseBytes) {
      from.readPaused = true;  // the agent's budget for a slow client takes over from here
      interest(from);
      break;
    }
  }
  flush(*to);
}

// ---- the relay as an agent, to front ends and other relays ------------------------------------

bool Relay::handleFront(Conn& c, w::Message& m) {
  if (c.state == State::AwaitHello) {
    auto* h = std::get_if<w::Hello>(&m);
    if (!h) return refuse(c, "expected Hello"), false;
    if (h->minVersion > w::kProtocolVersion || h->maxVersion < w::kProtocolVersion)
      return refuse(c, "unsupported protocol version (relay speaks " + std::to_string(w::kProtocolVersion) + ")"), false;
    if (!h->clientName.empty()) c.name += " '" + h->clientName.substr(0, 64) + "'";
    w::Challenge ch;
    if (!w::randomBytes(ch.agentNonce)) return close(c, "no random bytes"), false;
    ch.authRequired = true;
    c.agentNonce = ch.agentNonce;
    queue(c, ch);
    c.state = State::AwaitAuth;
    return true;
  }
  if (c.state == State::AwaitAuth) {
    auto* a = std::get_if<w::Auth>(&m);
    if (!a) return refuse(c, "authentication required"), false;
    const w::Mac want = w::authMac(secret_, c.agentNonce, a->clientNonce);
    if (!w::constantTimeEqual(want, a->mac)) return refuse(c, "authentication failed"), false;
    if (seenNonces_.count(a->clientNonce)) return refuse(c, "authentication failed (replayed nonce)"), false;
    seenNonces_.insert(a->clientNonce);
    nonceOrder_.push_back(a->clientNonce);
    while (nonceOrder_.size() > kMaxNonces) {
      seenNonces_.erase(nonceOrder_.front());
      nonceOrder_.pop_front();
    }
    const w::SessionKey key = w::sessionKey(secret_, c.agentNonce, a->clientNonce);
    c.sealer.start(key, w::MacDirection::AgentToClient);
    c.dec.requireMac(key, w::MacDirection::ClientToAgent);
    c.dec.setLimits(kControlMaxPayload, true);
    c.deadlineNs = 0;
    c.state = State::Control;
    w::JobInfo j;
    j.jobId = o_.jobId;
    j.rank = -1;  // a relay, not a rank
    j.worldSize = view_.empty() ? 0 : view_.begin()->second.worldSize;
    j.localRank = -1;
    j.host = machine_;
    j.pid = ::getpid();
    j.startTimeNs = startNs_;
    j.agentVersion = "trainscope-relay";
    j.clockDomain = "monotonic";
    queue(c, j);
    return true;
  }
  if (c.state != State::Control) return true;  // Routing: nothing is expected from it yet
  if (std::holds_alternative<w::RankListRequest>(m)) {
    queue(c, view());
  } else if (auto* r = std::get_if<w::Route>(&m)) {
    route(c, r->rank);
  } else if (auto* reg = std::get_if<w::RelayRegister>(&m)) {
    if (!coordinator_) return refuse(c, "this relay is not the coordinator; register with " + o_.coordinator), false;
    if (reg->ranks.size() > w::kMaxRelayRanks) return refuse(c, "too many ranks in one registration"), false;
    if (!c.isPeer) logf("relay of machine %s (%s) registered %zu ranks", reg->machine.c_str(), reg->endpoint.c_str(), reg->ranks.size());
    c.isPeer = true;
    c.reg = std::move(*reg);
    c.name = "relay " + c.reg.machine;
    rebuildView();
  } else if (auto* p = std::get_if<w::Ping>(&m)) {
    queue(c, w::Pong{p->clientSendNs, nowNs()});
  } else if (std::holds_alternative<w::Bye>(m)) {
    close(c);
    return false;
  } else {
    return refuse(c, "a relay answers RankListRequest, Route, RelayRegister and Ping; got message type " +
                         std::to_string(static_cast<unsigned>(w::typeOf(m)))), false;
  }
  return true;
}

void Relay::route(Conn& front, int32_t rank) {
  std::string endpoint;
  bool viaRelay = false;
  if (auto it = local_.find(rank); it != local_.end()) {
    endpoint = it->second.endpoint;
  } else if (auto v = view_.find(rank); v != view_.end() && v->second.relay != self_) {
    endpoint = v->second.relay;
    viaRelay = true;
  } else {
    refuse(front, "relay " + machine_ + ": rank " + std::to_string(rank) + " of job " + o_.jobId +
                      " is not known (see the rank list)");
    return;
  }
  std::string error;
  Conn* up = dial(endpoint, Kind::Up, &error);
  if (!up) {
    refuse(front, "relay " + machine_ + ": rank " + std::to_string(rank) + ": " + error);
    return;
  }
  up->routeRank = viaRelay ? rank : -1;
  up->rank = rank;
  up->name = "rank " + std::to_string(rank) + " (" + endpoint + ")";
  up->pair = &front;
  front.pair = up;
  front.state = State::Routing;
  ++routedTotal_;
}

// ---- the relay as a client, to agents and to other relays --------------------------------------

bool Relay::handleUp(Conn& c, w::Message& m) {
  if (auto* e = std::get_if<w::ErrorMsg>(&m)) {
    close(c, "refused: " + e->message);
    return false;
  }
  if (c.state == State::AwaitChallenge) {
    auto* ch = std::get_if<w::Challenge>(&m);
    if (!ch) return close(c, "expected Challenge"), false;
    if (c.tcp && !ch->authRequired) return close(c, "the peer did not ask for authentication over TCP"), false;
    if (ch->authRequired) {
      w::Auth a;
      if (!w::randomBytes(a.clientNonce)) return close(c, "no random bytes"), false;
      a.mac = w::authMac(secret_, ch->agentNonce, a.clientNonce);
      queue(c, a);
      const w::SessionKey key = w::sessionKey(secret_, ch->agentNonce, a.clientNonce);
      c.sealer.start(key, w::MacDirection::ClientToAgent);
      c.dec.requireMac(key, w::MacDirection::AgentToClient);
    }
    c.state = State::AwaitWelcome;
    return true;
  }
  if (c.state == State::AwaitWelcome || c.state == State::AwaitRouteWelcome) {
    auto* j = std::get_if<w::JobInfo>(&m);
    if (!j) return close(c, "expected Welcome"), false;
    if (c.kind == Kind::Register) {
      if (j->rank != -1) return close(c, "the coordinator address is an agent, not a relay"), false;
      c.state = State::Open;
      c.deadlineNs = 0;
      // The address the coordinator's network reaches us at: the one this connection left from.
      if (o_.advertise.empty()) {
        sockaddr_storage ss{};
        socklen_t len = sizeof ss;
        if (::getsockname(c.fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
          const std::string s = "tcp:" + addrText(ss) + ":" + std::to_string(port_);
          if (s != self_) {
            self_ = s;
            for (auto& [r, e] : localStats_) e.relay = self_;
          }
        }
      }
      registerDirty_ = true;
      return true;
    }
    if (c.kind == Kind::Monitor) {
      c.state = State::Open;
      c.deadlineNs = 0;
      return true;
    }
    if (c.routeRank >= 0 && c.state == State::AwaitWelcome) {
      if (j->rank != -1) return close(c, "expected a relay at " + c.name), false;
      queue(c, w::Route{c.routeRank});
      c.state = State::AwaitRouteWelcome;
      return true;
    }
    // The rank's Welcome: the front end's connection is the rank's from here on.
    Conn* f = c.pair;
    if (!f) return close(c), false;
    c.state = State::Raw;
    c.deadlineNs = 0;
    f->state = State::Raw;
    queue(*f, *j);
    flush(*f);
    if (c.dec.buffered() > 0) forward(c);
    if (f->dec.buffered() > 0) forward(*f);
    return true;
  }
  if (c.state == State::Open && c.kind == Kind::Register) {
    if (auto* l = std::get_if<w::RankList>(&m)) {
      remote_ = std::move(*l);
      rebuildView();
    }
    return true;
  }
  if (c.state == State::Open && c.kind == Kind::Monitor) {
    if (auto* s = std::get_if<w::Stats>(&m)) {
      auto& e = localStats_[c.rank];
      const int64_t now = nowNs();
      if (s->currentStep > c.stepAt && c.stepAt >= 0 && now > c.stepAtNs)
        e.stepSeconds = double(now - c.stepAtNs) / 1e9 / double(s->currentStep - c.stepAt);
      if (s->currentStep != c.stepAt) {
        c.stepAt = s->currentStep;
        c.stepAtNs = now;
      }
      e.step = s->currentStep;
      e.events = s->eventsRecorded;
      e.dropped = s->eventsDropped;
      if (auto v = view_.find(c.rank); v != view_.end() && v->second.relay == self_) v->second = e;
    }
    return true;
  }
  return true;
}

// ---- the job's ranks ---------------------------------------------------------------------------

void Relay::rescan() {
  std::map<int32_t, disc::Entry> now;
  for (auto& e : disc::listEntries()) {
    if (o_.jobId.empty()) {
      o_.jobId = e.jobId;
      logf("serving job %s", o_.jobId.c_str());
    }
    if (e.jobId == o_.jobId) now[e.rank] = std::move(e);
  }
  bool changed = now.size() != local_.size();
  for (auto& [r, e] : now) {
    auto it = local_.find(r);
    if (it == local_.end() || it->second.pid != e.pid || it->second.endpoint != e.endpoint) changed = true;
  }
  if (!now.empty()) {
    sawLocal_ = true;
    lastLocalNs_ = nowNs();
  }
  if (!changed) return;
  local_ = std::move(now);
  for (auto it = localStats_.begin(); it != localStats_.end();)
    it = local_.count(it->first) ? std::next(it) : localStats_.erase(it);
  for (auto& [r, e] : local_) {
    auto& s = localStats_[r];
    if (s.pid != e.pid) s = w::RankEntry{};
    s.rank = r;
    s.worldSize = e.worldSize;
    s.localRank = e.localRank;
    s.host = e.host;
    s.machine = machine_;
    s.pid = e.pid;
    s.startTimeNs = e.startTimeNs;
    s.relay = self_;
  }
  registerDirty_ = true;
  rebuildView();
}

void Relay::rebuildView() {
  view_.clear();
  if (!coordinator_)
    for (const auto& e : remote_.ranks) view_[e.rank] = e;
  for (const auto& [r, e] : localStats_) view_[r] = e;
  if (coordinator_)
    for (auto& c : conns_)
      if (!c->closed && c->isPeer)
        for (const auto& e : c->reg.ranks)
          if (!view_.count(e.rank) || view_[e.rank].relay != self_) view_[e.rank] = e;
  if (!coordinator_) return;
  // Every registered relay learns the whole job (a front end may reach any one of them).
  const w::RankList all = view();
  for (auto& c : conns_)
    if (!c->closed && c->isPeer) {
      queue(*c, all);
      flush(*c);
    }
}

w::RankList Relay::view() const {
  w::RankList l;
  l.jobId = o_.jobId;
  for (const auto& [r, e] : view_) l.ranks.push_back(e);
  l.problems = problems_;
  if (!coordinator_)
    l.problems.insert(l.problems.end(), remote_.problems.begin(), remote_.problems.end());
  if (!coordinator_ && !register_) l.problems.push_back("relay " + machine_ + ": not registered with the coordinator " + o_.coordinator + " (yet)");
  return l;
}

void Relay::keepRegistered() {
  if (coordinator_) return;
  const int64_t now = nowNs();
  if (!register_) {
    if (now < registerRetryNs_) return;
    std::string error;
    register_ = dial("tcp:" + o_.coordinator, Kind::Register, &error);
    if (!register_) {
      logf("cannot reach the coordinator %s: %s", o_.coordinator.c_str(), error.c_str());
      registerRetryNs_ = now + kRetryNs;
      return;
    }
    register_->name = "coordinator " + o_.coordinator;
    return;
  }
  if (register_->state != State::Open) return;
  if (!registerDirty_ && now - lastRegisterNs_ < kRegisterNs) return;
  w::RelayRegister r;
  r.machine = machine_;
  r.endpoint = self_;
  for (const auto& [k, e] : localStats_) r.ranks.push_back(e);
  queue(*register_, r);
  flush(*register_);
  registerDirty_ = false;
  lastRegisterNs_ = now;
}

void Relay::pollStats() {
  const int64_t now = nowNs();
  for (auto& [r, e] : local_) {
    auto it = monitors_.find(r);
    if (it == monitors_.end()) {
      if (now < monitorRetryNs_[r]) continue;
      std::string error;
      Conn* m = dial(e.endpoint, Kind::Monitor, &error);
      if (!m) {
        monitorRetryNs_[r] = now + kRetryNs;
        continue;
      }
      m->rank = r;
      m->name = "monitor of rank " + std::to_string(r);
      monitors_[r] = m;
      continue;
    }
    Conn* m = it->second;
    if (m->state == State::Open && now - m->lastStatsAskNs >= kStatsNs) {
      m->lastStatsAskNs = now;
      queue(*m, w::StatsRequest{});
      flush(*m);
    }
  }
  for (auto it = monitors_.begin(); it != monitors_.end();) {
    if (!local_.count(it->first)) {
      Conn* m = it->second;
      it = monitors_.erase(it);
      m->rank = -2;
      close(*m);
    } else {
      ++it;
    }
  }
}

// ---- /metrics ------------------------------------------------------------------------------------

std::string Relay::metricsText() const {
  std::string t;
  auto label = [&](const w::RankEntry& e) {
    return "{job=\"" + o_.jobId + "\",rank=\"" + std::to_string(e.rank) + "\",machine=\"" + e.machine + "\"}";
  };
  auto family = [&](const char* name, const char* type, const char* help, auto value) {
    t += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    for (const auto& [r, e] : view_) t += name + label(e) + " " + value(e) + "\n";
  };
  family("trainscope_rank_step", "gauge", "The step the rank is in (its agent's Stats).",
         [](const w::RankEntry& e) { return std::to_string(e.step); });
  family("trainscope_rank_step_seconds", "gauge", "Mean step time over the last second in which steps advanced.",
         [](const w::RankEntry& e) {
           char b[32];
           std::snprintf(b, sizeof b, "%.6f", e.stepSeconds);
           return std::string(b);
         });
  family("trainscope_rank_events_total", "counter", "Events the rank's agent recorded.",
         [](const w::RankEntry& e) { return std::to_string(e.events); });
  family("trainscope_rank_dropped_events_total", "counter", "Events the rank's agent dropped (queue full).",
         [](const w::RankEntry& e) { return std::to_string(e.dropped); });
  size_t routed = 0, peers = 0;
  for (auto& c : conns_) {
    routed += !c->closed && c->kind == Kind::Front && c->state == State::Raw;
    peers += !c->closed && c->isPeer;
  }
  const std::string me = "{job=\"" + o_.jobId + "\",machine=\"" + machine_ + "\"}";
  t += "# HELP trainscope_relay_local_ranks Ranks of the job on this relay's machine.\n# TYPE trainscope_relay_local_ranks gauge\n";
  t += "trainscope_relay_local_ranks" + me + " " + std::to_string(local_.size()) + "\n";
  t += "# HELP trainscope_relay_job_ranks Ranks of the job this relay knows of (all machines).\n# TYPE trainscope_relay_job_ranks gauge\n";
  t += "trainscope_relay_job_ranks" + me + " " + std::to_string(view_.size()) + "\n";
  t += "# HELP trainscope_relay_registered_relays Relays registered with this one (the coordinator).\n# TYPE trainscope_relay_registered_relays gauge\n";
  t += "trainscope_relay_registered_relays" + me + " " + std::to_string(peers) + "\n";
  t += "# HELP trainscope_relay_routed_connections Front-end connections routed to a rank now.\n# TYPE trainscope_relay_routed_connections gauge\n";
  t += "trainscope_relay_routed_connections" + me + " " + std::to_string(routed) + "\n";
  t += "# HELP trainscope_relay_forwarded_bytes_total Bytes of frames forwarded.\n# TYPE trainscope_relay_forwarded_bytes_total counter\n";
  t += "trainscope_relay_forwarded_bytes_total{job=\"" + o_.jobId + "\",machine=\"" + machine_ + "\",direction=\"to_front_ends\"} " + std::to_string(forwardedToFront_) + "\n";
  t += "trainscope_relay_forwarded_bytes_total{job=\"" + o_.jobId + "\",machine=\"" + machine_ + "\",direction=\"to_ranks\"} " + std::to_string(forwardedToRanks_) + "\n";
  t += "# HELP trainscope_relay_refused_total Connections refused (limits, failed authentication).\n# TYPE trainscope_relay_refused_total counter\n";
  t += "trainscope_relay_refused_total" + me + " " + std::to_string(refusedTotal_) + "\n";
  return t;
}

void Relay::httpRequest(Conn& c) {
  const bool metrics = c.http.rfind("GET /metrics ", 0) == 0 || c.http.rfind("GET /metrics?", 0) == 0;
  const std::string body = metrics ? metricsText() : "not found: this relay serves /metrics\n";
  std::string head = std::string("HTTP/1.1 ") + (metrics ? "200 OK" : "404 Not Found") +
                     "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  c.out.insert(c.out.end(), head.begin(), head.end());
  c.out.insert(c.out.end(), body.begin(), body.end());
  c.deadlineNs = nowNs() + kHandshakeNs;
  c.responded = true;
  flush(c);
  if (!c.closed && c.pending() == 0) close(c);
  // Otherwise closed once it took the rest (onEvent), or by the deadline.
}

}  // namespace

int run(const Options& o) {
  Relay r(o);
  return r.run();
}

}  // namespace trainscope::relay
