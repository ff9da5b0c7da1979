// bench_scale --ranks N [--json]: one live session of N ranks through a trainscope-relay
// (issue 35, docs/BENCHMARKS.md "Many ranks").
//
// N real processes do not fit on a 2-core machine, so a load generator plays the N agents from
// one forked process, over the real wire protocol: each "rank" has its own discovery file and
// Unix socket in a private runtime directory, answers the handshake, Ping, Stats, KnobList and
// SetKnob (accepted at once, applied two steps after the last rank received it -- the in-process
// stand-in for the agents' agreement), and streams a step every --step-ms with --events-per-step
// kernel events. A real trainscope-relay serves them; the bench, as a front end, attaches a real
// LiveSession to all N ranks through the relay's one TCP port.
//
// Measured: ranks_seen (ranks that delivered events), attach_s (start to all ranks seen),
// events_per_s (ingested by the LiveSession), summary_latency_p50/p99_ms (a step event's end on
// the agent to its arrival at a front end through the relay, sampled on 16 ranks over their own
// connections while the session streams all N), knob_apply_ms (setKnobs on all N ranks, 5 times:
// the median and the max), relay_rss_mb (its peak), relay_cpu_s, frame_p99_ms (null: the rank
// overview of issue 35 item 4 is not built).
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "trainscope/core/live/agent_client.h"
#include "trainscope/core/live/live_session.h"
#include "trainscope/core/wire/discovery.h"
#include "trainscope/core/wire/protocol.h"

namespace fs = std::filesystem;
namespace w = trainscope::core::wire;
using trainscope::core::monotonicNowNs;

namespace {

struct Args {
  int ranks = 64;
  int stepMs = 100;
  int eventsPerStep = 20;
  double seconds = 8;
  bool json = false;
};

// ---- the load generator: N agents in one process ---------------------------------------------

struct FakeRank {
  int32_t rank = 0;
  int listenFd = -1;
  std::string path;
};
struct FakeConn {
  int fd = -1;
  FakeRank* rank = nullptr;
  w::FrameDecoder dec;
  std::vector<uint8_t> out;
  bool open = false;
  bool subscribed = false;
  uint64_t seq = 0;
  bool sentTables = false;
  int64_t lastStepSent = -1;
};

class FakeAgents {
 public:
  FakeAgents(const Args& a, std::string job) : a_(a), job_(std::move(job)) {}
  int run(const fs::path& dir) {
    ep_ = ::epoll_create1(EPOLL_CLOEXEC);
    t0_ = monotonicNowNs();
    for (int r = 0; r < a_.ranks; ++r) {
      auto fr = std::make_unique<FakeRank>();
      fr->rank = r;
      fr->path = (dir / (job_ + "." + std::to_string(r) + ".sock")).string();
      fr->listenFd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::strncpy(addr.sun_path, fr->path.c_str(), sizeof addr.sun_path - 1);
      if (::bind(fr->listenFd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fr->listenFd, 64) != 0) {
        std::perror("fake agent bind");
        return 1;
      }
      epoll_event e{};
      e.events = EPOLLIN;
      e.data.u64 = static_cast<uint64_t>(r);  // < ranks: a listening socket
      ::epoll_ctl(ep_, EPOLL_CTL_ADD, fr->listenFd, &e);
      trainscope::core::discovery::Entry en;
      en.jobId = job_;
      en.rank = r;
      en.worldSize = a_.ranks;
      en.localRank = r;
      en.host = "loadgen";
      en.pid = ::getpid();
      en.startTimeNs = t0_;
      en.endpoint = "unix:" + fr->path;
      if (!trainscope::core::discovery::writeEntry(en)) return 1;
      ranks_.push_back(std::move(fr));
    }
    epoll_event evs[512];
    int64_t nextTick = monotonicNowNs();
    for (;;) {
      const int n = ::epoll_wait(ep_, evs, 512, 10);
      for (int i = 0; i < n; ++i) {
        const uint64_t id = evs[i].data.u64;
        if (id < static_cast<uint64_t>(a_.ranks)) {
          accept(*ranks_[id]);
        } else if (auto it = conns_.find(static_cast<int>(id - a_.ranks)); it != conns_.end()) {
          if (evs[i].events & EPOLLOUT) flush(*it->second);
          if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) readable(*it->second);
        }
      }
      const int64_t now = monotonicNowNs();
      if (now >= nextTick) {
        nextTick = now + 10'000'000;
        tick(now);
      }
      for (auto it = conns_.begin(); it != conns_.end();)
        it = it->second->fd < 0 ? conns_.erase(it) : std::next(it);
      if (::getppid() == 1) return 0;  // the bench went away
    }
  }

 private:
  int64_t stepNow(int64_t now) const { return (now - t0_) / (int64_t{a_.stepMs} * 1'000'000); }
  void accept(FakeRank& r) {
    for (;;) {
      const int fd = ::accept4(r.listenFd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      auto c = std::make_unique<FakeConn>();
      c->fd = fd;
      c->rank = &r;
      epoll_event e{};
      e.events = EPOLLIN;
      e.data.u64 = static_cast<uint64_t>(a_.ranks) + static_cast<uint64_t>(fd);
      ::epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &e);
      conns_[fd] = std::move(c);
    }
  }
  void send(FakeConn& c, const w::Message& m) { w::encode(m, c.out); }
  void flush(FakeConn& c) {
    while (!c.out.empty() && c.fd >= 0) {
      const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n > 0) {
        c.out.erase(c.out.begin(), c.out.begin() + n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
      close(c);
      return;
    }
    if (c.fd < 0) return;
    epoll_event e{};
    e.events = EPOLLIN | (c.out.empty() ? 0u : uint32_t{EPOLLOUT});
    e.data.u64 = static_cast<uint64_t>(a_.ranks) + static_cast<uint64_t>(c.fd);
    ::epoll_ctl(ep_, EPOLL_CTL_MOD, c.fd, &e);
  }
  void close(FakeConn& c) {
    if (c.fd < 0) return;
    ::epoll_ctl(ep_, EPOLL_CTL_DEL, c.fd, nullptr);
    ::close(c.fd);
    c.fd = -1;
  }
  void readable(FakeConn& c) {
    uint8_t buf[65536];
    for (;;) {
      const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return close(c);
      if (n < 0) break;
      c.dec.feed({buf, static_cast<size_t>(n)});
    }
    for (;;) {
      auto m = c.dec.next();
      if (!m) return close(c);
      if (!m.value()) break;
      handle(c, *m.value());
    }
    flush(c);
  }
  w::KnobList knobList(int32_t rank) const {
    w::KnobList l;
    l.lastChangeSeq = lastSeq_.count(rank) ? lastSeq_.at(rank) : 0;
    l.contiguousSeq = l.lastChangeSeq;
    l.currentStep = stepNow(monotonicNowNs());
    l.knobs.push_back({"bench.knob", w::KnobType::Int, 0, 1e9, {}, "0", value_, "a knob of the load generator", false});
    return l;
  }
  void handle(FakeConn& c, w::Message& m) {
    const int32_t rank = c.rank->rank;
    if (std::holds_alternative<w::Hello>(m)) {
      send(c, w::Challenge{{}, false});
      w::JobInfo j;
      j.jobId = job_;
      j.rank = rank;
      j.worldSize = a_.ranks;
      j.localRank = rank;
      j.host = "loadgen";
      j.pid = ::getpid();
      j.startTimeNs = t0_;
      j.agentVersion = "bench_scale load generator";
      j.clockDomain = "monotonic";
      send(c, j);
    } else if (auto* p = std::get_if<w::Ping>(&m)) {
      send(c, w::Pong{p->clientSendNs, monotonicNowNs()});
    } else if (std::holds_alternative<w::StatsRequest>(m)) {
      w::Stats s;
      s.currentStep = stepNow(monotonicNowNs());
      s.eventsRecorded = static_cast<uint64_t>(s.currentStep) * static_cast<uint64_t>(a_.eventsPerStep + 1);
      send(c, s);
    } else if (std::holds_alternative<w::KnobListRequest>(m)) {
      send(c, knobList(rank));
    } else if (auto* k = std::get_if<w::SetKnob>(&m)) {
      if (k->changeSeq <= (lastSeq_.count(rank) ? lastSeq_[rank] : 0)) {
        send(c, w::KnobAck{k->changeSeq, false, false, -1, "change sequence number already used"});
        return;
      }
      lastSeq_[rank] = k->changeSeq;
      auto& ch = changes_[k->changeSeq];
      ch.value = k->value;
      ch.received.insert(rank);
      ch.waiting.push_back({c.fd, rank});
      send(c, w::KnobAck{k->changeSeq, true, false, -1, ""});
      // The agreement: once every rank has it, it applies two steps later on all.
      if (static_cast<int>(ch.received.size()) == a_.ranks) ch.applyStep = stepNow(monotonicNowNs()) + 2;
    } else if (auto* s = std::get_if<w::Subscribe>(&m)) {
      (void)s;
      c.subscribed = true;
      c.lastStepSent = stepNow(monotonicNowNs()) - 1;
    } else if (std::holds_alternative<w::Unsubscribe>(m)) {
      c.subscribed = false;
    } else if (std::holds_alternative<w::InspectRequest>(m)) {
      send(c, w::Inspect{});
    } else if (std::holds_alternative<w::Bye>(m)) {
      close(c);
    }
  }
  void tick(int64_t now) {
    const int64_t step = stepNow(now);
    for (auto it = changes_.begin(); it != changes_.end();) {
      auto& ch = it->second;
      if (ch.applyStep >= 0 && step >= ch.applyStep) {
        value_ = ch.value;
        for (auto [fd, rank] : ch.waiting)
          if (auto c = conns_.find(fd); c != conns_.end() && c->second->fd >= 0 && c->second->rank->rank == rank) {
            send(*c->second, w::KnobAck{it->first, true, true, ch.applyStep, ""});
            flush(*c->second);
          }
        it = changes_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto& [fd, c] : conns_) {
      if (!c->subscribed || c->fd < 0 || step <= c->lastStepSent) continue;
      if (c->out.size() > (8u << 20)) continue;  // a slow client: this batch is dropped
      w::EventBatch b;
      b.rank = c->rank->rank;
      b.firstSeq = c->seq;
      if (!c->sentTables) {
        b.strings = {{1, "step"}, {2, "kernel"}};
        b.tracks = {{1, trainscope::core::TrackKind::CpuThread, 1000 + c->rank->rank, "loadgen"}};
        c->sentTables = true;
      }
      for (int64_t s = c->lastStepSent + 1; s <= step; ++s) {
        const int64_t start = t0_ + s * int64_t{a_.stepMs} * 1'000'000;
        const int64_t end = std::min(now, start + int64_t{a_.stepMs} * 1'000'000);
        const int64_t slice = (end - start) / std::max(1, a_.eventsPerStep);
        for (int e = 0; e < a_.eventsPerStep; ++e)
          b.events.push_back({1, trainscope::core::EventKind::Kernel, start + e * slice, start + e * slice + slice / 2, 2, {}});
        // The step that ended now (its end is when it was sent: the latency probe's anchor).
        b.events.push_back({1, trainscope::core::EventKind::Step, start, now, 1,
                            {trainscope::core::Attr::ofInt(trainscope::core::AttrKey::Step, s)}});
      }
      c->lastStepSent = step;
      c->seq += b.events.size();
      send(*c, b);
      flush(*c);
    }
  }

  struct Change {
    std::string value;
    std::set<int32_t> received;
    std::vector<std::pair<int, int32_t>> waiting;  // (fd, rank) of the connections that sent it
    int64_t applyStep = -1;
  };
  Args a_;
  std::string job_;
  int ep_ = -1;
  int64_t t0_ = 0;
  std::vector<std::unique_ptr<FakeRank>> ranks_;
  std::map<int, std::unique_ptr<FakeConn>> conns_;
  std::map<int32_t, uint64_t> lastSeq_;
  std::map<uint64_t, Change> changes_;
  std::string value_ = "0";
};

// ---- measurements ------------------------------------------------------------------------------

double procValueKb(pid_t pid, const char* key) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return std::atof(line.c_str() + std::strlen(key));
  return 0;
}
double procCpuS(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t close = s.rfind(')');
  if (close == std::string::npos) return 0;
  std::vector<std::string> fields;
  size_t pos = close + 2;
  while (pos < s.size()) {
    const size_t sp = s.find(' ', pos);
    fields.push_back(s.substr(pos, sp - pos));
    if (sp == std::string::npos) break;
    pos = sp + 1;
  }
  if (fields.size() < 13) return 0;
  return (std::atof(fields[11].c_str()) + std::atof(fields[12].c_str())) / double(::sysconf(_SC_CLK_TCK));
}
double percentile(std::vector<double> v, double p) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * double(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : ""; };
    if (s == "--ranks") a.ranks = std::atoi(next());
    else if (s == "--step-ms") a.stepMs = std::atoi(next());
    else if (s == "--events-per-step") a.eventsPerStep = std::atoi(next());
    else if (s == "--seconds") a.seconds = std::atof(next());
    else if (s == "--json") a.json = true;
    else {
      std::fprintf(stderr, "usage: bench_scale --ranks N [--step-ms 100] [--events-per-step 20] [--seconds 8] [--json]\n");
      return 2;
    }
  }
  ::signal(SIGPIPE, SIG_IGN);
  const fs::path dir = fs::temp_directory_path() / ("bench-scale-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace);
  ::setenv("TRAINSCOPE_RUNTIME_DIR", dir.c_str(), 1);
  const std::string job = "scale-" + std::to_string(a.ranks);
  const fs::path secret = dir / "job.secret";
  {
    std::ofstream f(secret);
    f << "bench-scale-secret-" << ::getpid() << "-0123456789abcdef0123456789abcdef";
  }
  fs::permissions(secret, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace);

  const pid_t gen = ::fork();
  if (gen == 0) {
    ::setpgid(0, 0);
    FakeAgents f(a, job);
    ::_exit(f.run(dir));
  }
  const fs::path self = fs::read_symlink("/proc/self/exe");
  const fs::path ready = dir / "relay.ready";
  const pid_t relay = ::fork();
  if (relay == 0) {
    const std::string exe = (self.parent_path() / "trainscope-relay").string();
    ::execl(exe.c_str(), exe.c_str(), "--job", job.c_str(), "--listen", "127.0.0.1:0", "--secret-file", secret.c_str(),
            "--ready-file", ready.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  auto cleanup = [&] {
    ::kill(relay, SIGTERM);
    ::kill(-gen, SIGTERM);
    ::kill(gen, SIGTERM);
    ::waitpid(relay, nullptr, 0);
    ::waitpid(gen, nullptr, 0);
    std::error_code ec;
    fs::remove_all(dir, ec);
  };
  std::string host;
  for (int i = 0; i < 400 && host.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    std::ifstream f(ready);
    std::string line;
    if (std::getline(f, line) && line.rfind("tcp:", 0) == 0) host = line.substr(4);
  }
  if (host.empty()) {
    std::fprintf(stderr, "bench_scale: the relay did not start\n");
    cleanup();
    return 1;
  }
  trainscope::core::LiveSession::useRelay(host, secret.string());
  // Every rank listed by the relay (it rescans its runtime directory once a second).
  std::vector<trainscope::core::discovery::Entry> entries;
  const int64_t listDeadline = monotonicNowNs() + 60'000'000'000;
  while (monotonicNowNs() < listDeadline) {
    auto e = trainscope::core::LiveSession::entriesOf(job, true);
    if (e.isOk()) {
      entries = std::move(e).value();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (static_cast<int>(entries.size()) != a.ranks) {
    std::fprintf(stderr, "bench_scale: the relay lists %zu of %d ranks\n", entries.size(), a.ranks);
    cleanup();
    return 1;
  }
  const double relayCpu0 = procCpuS(relay);
  trainscope::core::LiveOptions lo;
  lo.pings = 8;
  lo.client.secretFile = secret.string();
  lo.client.timeoutMs = 30000;
  auto session = std::make_unique<trainscope::core::LiveSession>(entries, lo);
  const int64_t t0 = monotonicNowNs();
  session->start();
  double attachS = -1;
  while (monotonicNowNs() - t0 < 600'000'000'000) {
    const auto snap = session->snapshot();
    if (snap.ranksSeen == a.ranks) {
      attachS = double(monotonicNowNs() - t0) / 1e9;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  // Latency probe: 16 ranks, each over its own connection through the relay.
  std::vector<double> latMs;
  std::vector<std::unique_ptr<trainscope::core::AgentClient>> probes;
  for (int i = 0; i < std::min(16, a.ranks); ++i) {
    const int r = (i * a.ranks) / std::min(16, a.ranks);
    auto c = trainscope::core::AgentClient::connect("relay:" + host + "/" + std::to_string(r), lo.client);
    if (c.isOk() && c.value()->subscribe(false).isOk()) probes.push_back(std::move(c).value());
  }
  const int64_t probeEnd = monotonicNowNs() + static_cast<int64_t>(a.seconds * 1e9);
  const auto ev0 = session->snapshot().events;
  const int64_t evT0 = monotonicNowNs();
  while (monotonicNowNs() < probeEnd) {
    for (auto& p : probes)
      (void)p->takeEvents(1, [&](w::EventBatch&& b) {
        const int64_t now = monotonicNowNs();
        for (const auto& e : b.events)
          if (e.kind == trainscope::core::EventKind::Step && !b.history) latMs.push_back(double(now - e.endNs) / 1e6);
      });
  }
  const auto snapMid = session->snapshot();
  const double eventsPerS = double(snapMid.events - ev0) / (double(monotonicNowNs() - evT0) / 1e9);
  probes.clear();

  std::vector<double> knobMs;
  std::string knobError;
  for (int i = 1; i <= 5; ++i) {
    const int64_t k0 = monotonicNowNs();
    auto r = session->setKnobs({{"bench.knob", std::to_string(i)}}, 60000);
    if (!r.isOk()) {
      knobError = r.status().message();
      break;
    }
    knobMs.push_back(double(monotonicNowNs() - k0) / 1e6);
  }
  const auto snap = session->snapshot();
  const double relayRssMb = procValueKb(relay, "VmHWM:") / 1024.0;
  const double relayCpu = procCpuS(relay) - relayCpu0;
  const double wall = double(monotonicNowNs() - t0) / 1e9;
  session->detach();
  session.reset();
  cleanup();

  std::sort(knobMs.begin(), knobMs.end());
  if (a.json) {
    std::printf(
        "{\"ranks\": %d, \"ranks_seen\": %d, \"attach_s\": %.2f, \"events_per_s\": %.0f, \"summary_latency_p50_ms\": %.2f, "
        "\"summary_latency_p99_ms\": %.2f, \"latency_samples\": %zu, \"knob_apply_ms\": %.1f, \"knob_apply_max_ms\": %.1f, "
        "\"knob_error\": \"%s\", \"frame_p99_ms\": null, \"relay_rss_mb\": %.1f, \"relay_cpu_s\": %.2f, \"relay_cpu_share\": %.3f, "
        "\"dropped\": %" PRIu64 ", \"step_ms\": %d, \"events_per_step\": %d}\n",
        a.ranks, snap.ranksSeen, attachS, eventsPerS, percentile(latMs, 0.5), percentile(latMs, 0.99), latMs.size(),
        knobMs.empty() ? -1.0 : knobMs[knobMs.size() / 2], knobMs.empty() ? -1.0 : knobMs.back(), knobError.c_str(),
        relayRssMb, relayCpu, relayCpu / wall, snap.dropped + snap.notReceived, a.stepMs, a.eventsPerStep);
  } else {
    std::printf("ranks %d, seen %d after %.2f s; %.0f events/s; step latency p50 %.2f ms p99 %.2f ms (%zu samples); "
                "knob apply median %.1f ms max %.1f ms %s; relay peak RSS %.1f MB, CPU %.2f s (%.1f %% of one core)\n",
                a.ranks, snap.ranksSeen, attachS, eventsPerS, percentile(latMs, 0.5), percentile(latMs, 0.99), latMs.size(),
                knobMs.empty() ? -1.0 : knobMs[knobMs.size() / 2], knobMs.empty() ? -1.0 : knobMs.back(), knobError.c_str(),
                relayRssMb, relayCpu, 100 * relayCpu / wall);
  }
  return snap.ranksSeen == a.ranks && knobError.empty() ? 0 : 1;
}
