// AgentClient: handshake, requests and event streaming over one agent connection.
#include "trainscope/core/live/agent_client.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <climits>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>

#include "live/agent_socket.h"

namespace trainscope::core {

using namespace wire;

int64_t monotonicNowNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

namespace {

int remainingMs(int64_t deadlineNs) {
  const int64_t left = deadlineNs - monotonicNowNs();
  return left <= 0 ? 0 : static_cast<int>((left + 999'999) / 1'000'000);
}

Result<std::vector<uint8_t>> readSecret(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status(ErrorCode::NotFound, "cannot read secret file " + path);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.empty()) return Status(ErrorCode::InvalidArgument, "secret file " + path + " is empty");
  return bytes;
}

}  // namespace

Result<std::unique_ptr<AgentClient>> AgentClient::connect(const std::string& endpoint,
                                                          const Options& options) {
  // "relay:HOST:PORT/RANK": a relay's TCP port (authenticated like an agent's), then a Route to
  // the rank; "relay:HOST:PORT" alone is a connection to the relay itself (rank lists).
  std::string dial = endpoint;
  int32_t routeTo = -1;
  const bool relay = endpoint.rfind("relay:", 0) == 0;
  if (relay) {
    std::string rest = endpoint.substr(6);
    if (const size_t slash = rest.rfind('/'); slash != std::string::npos) {
      const std::string r = rest.substr(slash + 1);
      char* end = nullptr;
      const long v = std::strtol(r.c_str(), &end, 10);
      if (r.empty() || *end != '\0' || v < 0 || v > INT32_MAX)
        return Status(ErrorCode::InvalidArgument, "endpoint \"" + endpoint + "\": want relay:HOST:PORT/RANK");
      routeTo = static_cast<int32_t>(v);
      rest.resize(slash);
    }
    dial = "tcp:" + rest;
  }
  auto fd = net::connectEndpoint(dial, options.timeoutMs);
  if (!fd) return fd.status();
  std::unique_ptr<AgentClient> c(new AgentClient());
  c->fd_ = fd.value();
  c->endpoint_ = dial;
  c->timeoutMs_ = options.timeoutMs;
  if (Status s = c->handshake(options); !s.isOk()) return Status(s.code(), endpoint + ": " + s.message());
  if (relay && c->job_.rank != -1)
    return Status(ErrorCode::InvalidArgument, endpoint + ": the peer is an agent, not a relay (use tcp:)");
  if (!relay && c->job_.rank == -1)
    return Status(ErrorCode::InvalidArgument,
                  endpoint + ": the peer is a relay; attach with --host HOST:PORT (relay:HOST:PORT/RANK)");
  c->endpoint_ = endpoint;
  if (routeTo >= 0) {
    if (Status s = c->send(Route{routeTo}); !s.isOk()) return Status(s.code(), endpoint + ": " + s.message());
    // The relay connects to the rank (through the rank's own relay when it is on another
    // machine) and forwards the agent's Welcome; it says why when it cannot.
    auto w = c->waitFor([](const Message& m) { return std::holds_alternative<JobInfo>(m); }, c->timeoutMs_,
                        "the rank's Welcome through the relay");
    if (!w) return Status(w.status().code(), endpoint + ": " + w.status().message());
    c->job_ = std::get<JobInfo>(w.value());
  }
  return c;
}

Result<RankList> AgentClient::rankList() {
  if (Status s = send(RankListRequest{}); !s.isOk()) return s;
  auto m = waitFor([](const Message& x) { return std::holds_alternative<RankList>(x); }, timeoutMs_, "RankList");
  if (!m) return m.status();
  return std::get<RankList>(std::move(m).value());
}

AgentClient::~AgentClient() {
  shutdown();
}

void AgentClient::shutdown() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void AgentClient::close() {
  if (fd_ >= 0) (void)send(Bye{});
  shutdown();
}

Status AgentClient::handshake(const Options& options) {
  Hello hello;
  hello.clientName = options.clientName;
  if (Status s = send(hello); !s.isOk()) return s;
  auto ch =
      waitFor([](const Message& m) { return std::holds_alternative<Challenge>(m); }, timeoutMs_, "Challenge");
  if (!ch) return ch.status();
  const Challenge challenge = std::get<Challenge>(ch.value());
  // Over TCP anyone may be listening on the port: an agent that does not ask us to authenticate
  // cannot prove it knows the secret either, so it is not ours.
  if (!challenge.authRequired && endpoint_.rfind("tcp:", 0) == 0)
    return Status(ErrorCode::InvalidArgument,
                  "the peer did not ask for authentication over TCP; it is not a Trainscope agent of this "
                  "job (an impostor on the port?)");
  if (challenge.authRequired) {
    if (options.secretFile.empty())
      return Status(ErrorCode::InvalidArgument,
                    "the agent requires authentication but no secret file was given");
    auto secret = readSecret(options.secretFile);
    if (!secret) return secret.status();
    Auth auth;
    if (Status s = randomBytes(auth.clientNonce); !s.isOk()) return s;
    auth.mac = authMac(secret.value(), challenge.agentNonce, auth.clientNonce);
    if (Status s = send(auth); !s.isOk()) return s;
    // Every later frame, both ways, carries a MAC under the session key; the Welcome's is the
    // agent's proof that it knows the secret (mutual authentication).
    const SessionKey key = sessionKey(secret.value(), challenge.agentNonce, auth.clientNonce);
    sealer_.start(key, MacDirection::ClientToAgent);
    decoder_.requireMac(key, MacDirection::AgentToClient);
  }
  auto welcome =
      waitFor([](const Message& m) { return std::holds_alternative<JobInfo>(m); }, timeoutMs_, "Welcome");
  if (!welcome) {
    if (challenge.authRequired && welcome.status().message().find("MAC") != std::string::npos)
      return Status(welcome.status().code(),
                    "the agent did not prove that it knows the job's secret (an "
                    "impostor on the port?): " +
                        welcome.status().message());
    return welcome.status();
  }
  job_ = std::get<JobInfo>(welcome.value());
  return Status::ok();
}

Status AgentClient::send(const Message& m) {
  if (fd_ < 0) return Status(ErrorCode::Io, "connection to the agent is closed");
  std::vector<uint8_t> frame;
  encode(m, frame);
  if (sealer_.active()) sealer_.seal(frame);
  Status s = net::sendAll(fd_, frame, timeoutMs_);
  if (!s.isOk()) shutdown();
  return s;
}

Status AgentClient::readSome(int timeoutMs) {
  if (fd_ < 0) return Status(ErrorCode::NotFound, "connection closed by the agent");
  auto ready = net::waitReadable(fd_, timeoutMs);
  if (!ready) return ready.status();
  if (!ready.value()) return Status::ok();  // nothing yet
  uint8_t buf[64 * 1024];
  bool eof = false;
  for (;;) {
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n > 0) {
      decoder_.feed({buf, static_cast<size_t>(n)});
      if (decoder_.buffered() > 2 * kMaxFramePayload) break;  // drain before reading more
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    eof = true;  // 0 = orderly close; other errors end the connection too
    break;
  }
  for (;;) {
    auto m = decoder_.next();
    if (!m) {
      shutdown();
      return m.status();
    }
    if (!m.value()) break;
    queue_.push_back(std::move(*m.value()));
  }
  if (eof) {
    shutdown();
    if (queue_.empty()) return Status(ErrorCode::NotFound, "connection closed by the agent");
  }
  return Status::ok();
}

Result<Message> AgentClient::waitFor(const std::function<bool(const Message&)>& match, int timeoutMs,
                                     const char* what) {
  const int64_t deadline = monotonicNowNs() + static_cast<int64_t>(timeoutMs) * 1'000'000;
  for (;;) {
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (const auto* err = std::get_if<ErrorMsg>(&*it)) {
        const std::string text = "the agent answered with an error: " + err->message;
        queue_.erase(it);
        return Status(ErrorCode::InvalidArgument, text);
      }
      if (match(*it)) {
        Message m = std::move(*it);
        queue_.erase(it);
        return m;
      }
    }
    if (fd_ < 0)
      return Status(ErrorCode::NotFound, std::string("connection closed while waiting for ") + what);
    const int left = remainingMs(deadline);
    if (left == 0)
      return Status(ErrorCode::Io,
                    std::string("timed out after ") + std::to_string(timeoutMs) + " ms waiting for " + what);
    if (Status s = readSome(left); !s.isOk() && queue_.empty()) return s;
  }
}

Result<KnobList> AgentClient::knobList() {
  if (Status s = send(KnobListRequest{}); !s.isOk()) return s;
  auto m =
      waitFor([](const Message& x) { return std::holds_alternative<KnobList>(x); }, timeoutMs_, "KnobList");
  if (!m) return m.status();
  return std::get<KnobList>(std::move(m).value());
}

Result<KnobAck> AgentClient::setKnob(uint64_t changeSeq, const std::string& name, const std::string& value) {
  SetKnob set;
  set.changeSeq = changeSeq;
  set.name = name;
  set.value = value;
  if (Status s = send(set); !s.isOk()) return s;
  auto m = waitFor(
      [changeSeq](const Message& x) {
        const auto* a = std::get_if<KnobAck>(&x);
        return a && a->changeSeq == changeSeq;
      },
      timeoutMs_, "KnobAck");
  if (!m) return m.status();
  return std::get<KnobAck>(std::move(m).value());
}

Status AgentClient::sendSetKnob(uint64_t changeSeq, const std::string& name, const std::string& value) {
  SetKnob set;
  set.changeSeq = changeSeq;
  set.name = name;
  set.value = value;
  return send(set);
}

Result<int> AgentClient::takeReplies(int timeoutMs, const std::function<void(Message&&)>& handler) {
  auto deliver = [this, &handler] {
    int n = 0;
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (std::holds_alternative<KnobList>(*it) || std::holds_alternative<KnobAck>(*it) ||
          std::holds_alternative<ErrorMsg>(*it)) {
        Message m = std::move(*it);
        it = queue_.erase(it);
        handler(std::move(m));
        ++n;
      } else {
        ++it;
      }
    }
    return n;
  };
  int n = deliver();
  if (n > 0 || fd_ < 0) return n;
  Status s = readSome(timeoutMs);
  n = deliver();
  if (n > 0) return n;
  if (!s.isOk()) return s;
  return 0;
}

Result<KnobAck> AgentClient::waitForApplied(uint64_t changeSeq, int timeoutMs) {
  auto m = waitFor(
      [changeSeq](const Message& x) {
        const auto* a = std::get_if<KnobAck>(&x);
        return a && a->changeSeq == changeSeq && (a->applied || !a->accepted);
      },
      timeoutMs, "the knob change to be applied");
  if (!m) return m.status();
  return std::get<KnobAck>(std::move(m).value());
}

Result<Stats> AgentClient::stats() {
  if (Status s = send(StatsRequest{}); !s.isOk()) return s;
  auto m = waitFor([](const Message& x) { return std::holds_alternative<Stats>(x); }, timeoutMs_, "Stats");
  if (!m) return m.status();
  return std::get<Stats>(std::move(m).value());
}

Result<Inspect> AgentClient::inspect() {
  if (Status s = send(InspectRequest{}); !s.isOk()) return s;
  auto m = waitFor([](const Message& x) { return std::holds_alternative<Inspect>(x); }, timeoutMs_, "Inspect");
  if (!m) return m.status();
  return std::get<Inspect>(std::move(m).value());
}

Result<ClockSync> AgentClient::estimateClockOffset(int pings) {
  // NTP-style: the agent's reading is assumed to lie at the midpoint of the round trip, which
  // is off by at most rtt/2; the fastest round trip gives the tightest bound.
  ClockSync best;
  best.minRttNs = INT64_MAX;
  for (int i = 0; i < pings; ++i) {
    Ping ping;
    ping.clientSendNs = monotonicNowNs();
    if (Status s = send(ping); !s.isOk()) return s;
    const int64_t sent = ping.clientSendNs;
    auto m = waitFor(
        [sent](const Message& x) {
          const auto* p = std::get_if<Pong>(&x);
          return p && p->clientSendNs == sent;
        },
        timeoutMs_, "Pong");
    const int64_t recv = monotonicNowNs();
    if (!m) return m.status();
    const int64_t rtt = recv - sent;
    ++best.samples;
    if (rtt < best.minRttNs) {
      best.minRttNs = rtt;
      best.agentMinusClientNs = std::get<Pong>(m.value()).agentNs - (sent + rtt / 2);
      best.errorBoundNs = (rtt + 1) / 2;
    }
  }
  if (best.samples == 0) return Status(ErrorCode::InvalidArgument, "clock sync needs at least one ping");
  return best;
}

Status AgentClient::subscribe(bool history) {
  Subscribe s;
  s.history = history;
  return send(s);
}

Result<int> AgentClient::pollEvents(int timeoutMs, const std::function<void(const EventBatch&)>& handler) {
  return takeEvents(timeoutMs, [&handler](EventBatch&& b) { handler(b); });
}

Result<int> AgentClient::takeEvents(int timeoutMs, const std::function<void(EventBatch&&)>& handler) {
  std::string agentError;
  auto deliver = [this, &handler, &agentError] {
    int n = 0;
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (auto* b = std::get_if<EventBatch>(&*it)) {
        handler(std::move(*b));
        ++n;
        it = queue_.erase(it);
      } else if (std::holds_alternative<Bye>(*it)) {
        it = queue_.erase(it);  // the agent is leaving; the close follows
      } else if (const auto* e = std::get_if<ErrorMsg>(&*it)) {
        agentError = e->message;
        it = queue_.erase(it);
      } else {
        ++it;  // a reply someone may still wait for
      }
    }
    return n;
  };
  int n = deliver();
  if (n > 0) return n;
  Status s = readSome(timeoutMs);
  n = deliver();
  if (n > 0) return n;
  if (!agentError.empty())
    return Status(ErrorCode::InvalidArgument, "the agent reported an error: " + agentError);
  if (!s.isOk()) return s;
  if (fd_ < 0) return Status(ErrorCode::NotFound, "connection closed by the agent");
  return 0;
}

}  // namespace trainscope::core
