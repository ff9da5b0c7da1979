// Streaming throughput from one agent to one client over the Unix socket (docs/BENCHMARKS.md,
// "Agent streaming throughput").
//
// Each run fork()s a producer *before* any agent initialisation: the child sets the agent's
// environment (TRAINSCOPE_RING_KB, TRAINSCOPE_BUFFER_MB, a private TRAINSCOPE_RUNTIME_DIR),
// calls ts_init and, once the client has subscribed, records ranges (ts_range_push + pop = one
// Range event, two 32-byte records) as fast as it can (or at --rate events/s) for --seconds. The
// parent is the client: core::AgentClient on the rank's Unix socket, Subscribe{history=false},
// counting events ("count") or also turning them into TraceStore content with a BatchIngestor
// as the live view / `record` do ("ingest"). Reported: events/s delivered, events the agent
// dropped (ring full, queue full, batches lost for a slow client: sequence gaps), bytes on the
// wire per event (1 batch in 16 re-encoded with the wire::encode the agent uses -- recv() on a
// socket is not counted in /proc/self/io) and CPU seconds of both processes (the agent's
// includes the producer thread). With --rate the producer sleeps whenever it is ahead of
// schedule, so the drain, server and client get the rest of the two cores.
//
// Anchor, in the same run: a writer process pushes 1 MiB buffers through a Unix socketpair to a
// reader (the parent) -- the same byte volume the agent run moved, as raw socket bandwidth.
//
//   bench_agent_stream [--seconds 5] [--reps 2] [--modes count,ingest] [--rate 0]
//                      [--ring-kb 16384] [--buffer-mb 512] [--anchor-mib 0 (= the measured volume)]
//                      [--listen unix|tcp (TCP: authenticated, a MAC on every frame)]
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "trainscope/agent.h"
#include "trainscope/core/live/agent_client.h"
#include "trainscope/core/wire/discovery.h"
#include "trainscope/core/model/trace_store.h"

namespace core = trainscope::core;
namespace fs = std::filesystem;

namespace {

struct Options {
  double seconds = 5;
  int reps = 2;
  std::vector<std::string> modes{"count", "ingest"};
  double rate = 0;  // events/s, 0 = as fast as possible
  long ringKb = 16384;
  long bufferMb = 512;
  double anchorMib = 0;
  std::string listen = "unix";  // or "tcp": authenticated, every frame carries a MAC
};

double nowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU seconds of the threads of pid whose name (comm) starts with prefix, from /proc.
double threadCpu(pid_t pid, const std::string& prefix) {
  double total = 0;
  std::error_code ec;
  const fs::path dir = fs::path("/proc") / std::to_string(pid) / "task";
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    char comm[64] = {}, stat[1024] = {};
    FILE* f = std::fopen((it->path() / "comm").c_str(), "r");
    if (!f) continue;
    const bool okComm = std::fgets(comm, sizeof comm, f) != nullptr;
    std::fclose(f);
    if (!okComm || std::string(comm).rfind(prefix, 0) != 0) continue;
    f = std::fopen((it->path() / "stat").c_str(), "r");
    if (!f) continue;
    const size_t n = std::fread(stat, 1, sizeof stat - 1, f);
    std::fclose(f);
    const char* p = std::strrchr(stat, ')');  // fields after "(comm)": state is field 3
    if (!p || n == 0) continue;
    unsigned long long ut = 0, st = 0;
    if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2)
      total += static_cast<double>(ut + st) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  }
  return total;
}

double cpuSeconds(const rusage& r) {
  return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
         static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1e-6;
}

bool readAll(int fd, void* p, size_t n) {
  auto* b = static_cast<uint8_t*>(p);
  while (n > 0) {
    const ssize_t r = ::read(fd, b, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    b += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}
bool writeAll(int fd, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t r = ::write(fd, b, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    b += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

struct ProducerReport {
  uint64_t events = 0;   // ranges recorded (attempted)
  uint64_t droppedRecords = 0;  // ts_dropped_events() at the end
  double seconds = 0;
};

// The agent process. Never returns.
[[noreturn]] void producer(const Options& o, const std::string& rtDir, const std::string& job, int toParent,
                           int fromParent) {
  ::setenv("TRAINSCOPE_RUNTIME_DIR", rtDir.c_str(), 1);
  ::setenv("TRAINSCOPE_RING_KB", std::to_string(o.ringKb).c_str(), 1);
  ::setenv("TRAINSCOPE_BUFFER_MB", std::to_string(o.bufferMb).c_str(), 1);
  ::setenv("TRAINSCOPE_LISTEN", o.listen.c_str(), 1);
  ts_init_params p = TS_INIT_PARAMS_DEFAULT;
  p.job_id = job.c_str();
  p.rank = 0;
  p.world_size = 1;
  const int rc = ts_init(&p);
  char c = rc == TS_OK ? 'R' : 'E';
  (void)writeAll(toParent, &c, 1);
  if (rc != TS_OK) ::_exit(2);
  if (!readAll(fromParent, &c, 1)) ::_exit(3);  // 'G': the client has subscribed
  const uint32_t id = ts_name("bench-range");
  ProducerReport rep;
  const auto t0 = std::chrono::steady_clock::now();
  const auto end = t0 + std::chrono::duration<double>(o.seconds);
  const double nsPerEvent = o.rate > 0 ? 1e9 / o.rate : 0;
  uint64_t n = 0;
  for (;;) {
    for (int i = 0; i < 256; ++i) {
      ts_range_push(id);
      ts_range_pop();
    }
    n += 256;
    const auto now = std::chrono::steady_clock::now();
    if (now >= end) break;
    if (nsPerEvent > 0) {
      const auto due = t0 + std::chrono::nanoseconds(static_cast<int64_t>(static_cast<double>(n) * nsPerEvent));
      if (due - now > std::chrono::microseconds(200)) std::this_thread::sleep_until(due);
    }
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rep.events = n;
  // Let the drain publish what is still in the ring before we read the drop counter.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  rep.droppedRecords = ts_dropped_events();
  (void)writeAll(toParent, &rep, sizeof rep);
  (void)readAll(fromParent, &c, 1);  // 'Q': the client has everything
  ts_shutdown();
  ::_exit(0);
}

struct StreamResult {
  std::string mode;
  ProducerReport prod;
  uint64_t received = 0, ingested = 0, seqGaps = 0, batches = 0;
  uint64_t wireBytes = 0;  // estimated: sampledBytes / sampledEvents * received
  uint64_t sampledBytes = 0, sampledEvents = 0;
  double streamSeconds = 0;  // go -> last live batch
  double clientCpu = 0, agentCpu = 0, drainCpu = 0;
  core::wire::Stats stats;
  uint64_t droppedTotal = 0;  // last EventBatch.droppedTotal
};

bool runStream(const Options& o, const std::string& mode, int run, StreamResult& res) {
  res.mode = mode;
  const fs::path rt = fs::temp_directory_path() / ("ts-bench-stream-" + std::to_string(::getpid()));
  fs::create_directories(rt);
  fs::permissions(rt, fs::perms::owner_all, fs::perm_options::replace);
  ::setenv("TRAINSCOPE_RUNTIME_DIR", rt.c_str(), 1);
  const std::string job = "bench-stream-" + std::to_string(::getpid()) + "-" + std::to_string(run);
  int up[2], down[2];
  if (::pipe(up) != 0 || ::pipe(down) != 0) return false;
  const pid_t child = ::fork();
  if (child < 0) return false;
  if (child == 0) {
    ::close(up[0]);
    ::close(down[1]);
    producer(o, rt.string(), job, up[1], down[0]);
  }
  ::close(up[1]);
  ::close(down[0]);
  auto fail = [&](const char* what) {
    std::fprintf(stderr, "bench_agent_stream: %s\n", what);
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    return false;
  };
  char c = 0;
  if (!readAll(up[0], &c, 1) || c != 'R') return fail("producer: ts_init failed");
  std::string endpoint;
  core::AgentClient::Options copt;
  for (int i = 0; i < 200 && endpoint.empty(); ++i) {
    for (const auto& e : core::discovery::listEntries())
      if (e.jobId == job) {
        endpoint = e.endpoint;
        copt.secretFile = e.secretFile;
      }
    if (endpoint.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (endpoint.empty()) return fail("no discovery entry");
  auto cl = core::AgentClient::connect(endpoint, copt);
  if (!cl) return fail(cl.status().message().c_str());
  core::AgentClient& client = *cl.value();
  if (!client.subscribe(false).isOk()) return fail("subscribe");

  core::TraceStore store;
  core::BatchIngestor ingestor(store, core::rankInfoFor(client.job(), core::ClockSync{}));
  const bool ingest = mode == "ingest";
  uint64_t nextSeq = UINT64_MAX;
  double lastLive = 0;
  auto handler = [&](const core::wire::EventBatch& b) {
    ++res.batches;
    if (!b.events.empty()) {
      if (nextSeq != UINT64_MAX && b.firstSeq > nextSeq) res.seqGaps += b.firstSeq - nextSeq;
      nextSeq = b.firstSeq + b.events.size();
      lastLive = nowS();
    }
    res.received += b.events.size();
    if (!b.events.empty() && res.batches % 16 == 0) {
      std::vector<uint8_t> frame;
      core::wire::encode(core::wire::Message{b}, frame);
      res.sampledBytes += frame.size();
      res.sampledEvents += b.events.size();
    }
    res.droppedTotal = std::max(res.droppedTotal, b.droppedTotal);
    if (ingest) (void)ingestor.ingest(b);
  };
  // The tables batch comes first; take it before the clock starts.
  (void)client.pollEvents(1000, handler);
  rusage ru0{};
  ::getrusage(RUSAGE_SELF, &ru0);
  const double tGo = nowS();
  c = 'G';
  (void)writeAll(down[1], &c, 1);
  // Stream while the producer records; its report arrives on the pipe when it is done.
  bool producerDone = false;
  double doneAt = 0;
  for (;;) {
    pollfd fds[2] = {{client.fd(), POLLIN, 0}, {up[0], POLLIN, 0}};
    (void)::poll(fds, producerDone ? 1 : 2, 50);
    auto n = client.pollEvents(0, handler);
    if (!n) return fail("connection closed early");
    if (!producerDone && (fds[1].revents & POLLIN)) {
      if (!readAll(up[0], &res.prod, sizeof res.prod)) return fail("producer report");
      producerDone = true;
      doneAt = nowS();
    }
    // Done: producer finished and nothing arrived for 300 ms (batches go out every 50 ms).
    if (producerDone && nowS() - std::max(doneAt, lastLive) > 0.3) break;
    if (nowS() - tGo > o.seconds + 60) return fail("timeout");
  }
  res.streamSeconds = lastLive - tGo;
  res.wireBytes = res.sampledEvents ? static_cast<uint64_t>(static_cast<double>(res.sampledBytes) /
                                                            static_cast<double>(res.sampledEvents) *
                                                            static_cast<double>(res.received))
                                     : 0;
  rusage ru1{};
  ::getrusage(RUSAGE_SELF, &ru1);
  res.clientCpu = cpuSeconds(ru1) - cpuSeconds(ru0);
  res.ingested = ingestor.eventsIngested();
  if (auto st = client.stats(); st.isOk()) res.stats = st.value();
  res.drainCpu = threadCpu(child, "ts-drain");
  c = 'Q';
  (void)writeAll(down[1], &c, 1);
  // Until Bye / close.
  for (int i = 0; i < 100 && !client.closed(); ++i) {
    auto n = client.pollEvents(100, handler);
    if (!n) break;
  }
  int status = 0;
  rusage cru{};
  ::wait4(child, &status, 0, &cru);
  res.agentCpu = cpuSeconds(cru);
  ::close(up[0]);
  ::close(down[1]);
  std::error_code ec;
  fs::remove_all(rt, ec);
  return true;
}

// Raw socket bandwidth: a child writes `bytes` in 1 MiB buffers into a socketpair, we read.
double anchorSocket(uint64_t bytes, double& cpuReader, double& cpuWriter) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 0;
  constexpr size_t kBuf = 1 << 20;
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(sv[0]);
    std::vector<uint8_t> buf(kBuf, 0x5a);
    uint64_t left = bytes;
    while (left > 0) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left, kBuf));
      if (!writeAll(sv[1], buf.data(), n)) ::_exit(1);
      left -= n;
    }
    ::_exit(0);
  }
  ::close(sv[1]);
  std::vector<uint8_t> buf(kBuf);
  rusage ru0{};
  ::getrusage(RUSAGE_SELF, &ru0);
  const double t0 = nowS();
  uint64_t got = 0;
  for (;;) {
    const ssize_t r = ::read(sv[0], buf.data(), kBuf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<uint64_t>(r);
  }
  const double dt = nowS() - t0;
  rusage ru1{}, cru{};
  ::getrusage(RUSAGE_SELF, &ru1);
  ::close(sv[0]);
  ::wait4(child, nullptr, 0, &cru);
  cpuReader = cpuSeconds(ru1) - cpuSeconds(ru0);
  cpuWriter = cpuSeconds(cru);
  return got == bytes ? static_cast<double>(bytes) / dt : 0;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  for (;;) {
    const size_t e = s.find(',', b);
    out.push_back(s.substr(b, e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const char* v = argv[i + 1];
    if (a == "--seconds") o.seconds = std::atof(v);
    else if (a == "--reps") o.reps = std::atoi(v);
    else if (a == "--modes") o.modes = split(v);
    else if (a == "--rate") o.rate = std::atof(v);
    else if (a == "--ring-kb") o.ringKb = std::atol(v);
    else if (a == "--buffer-mb") o.bufferMb = std::atol(v);
    else if (a == "--anchor-mib") o.anchorMib = std::atof(v);
    else if (a == "--listen") o.listen = v;
    else {
      std::fprintf(stderr, "unknown option %s (see the comment at the top of bench_agent_stream.cpp)\n", argv[i]);
      return 2;
    }
  }
  if (std::getenv("TRAINSCOPE_JOB_ID")) {
    std::fprintf(stderr, "unset TRAINSCOPE_JOB_ID: the client process must not start an agent\n");
    return 2;
  }
  std::printf("# transport: %s\n", o.listen.c_str());
  std::printf("# producer: %.1f s of ranges per run, %s; ring %ld KiB, budget %ld MiB; nproc %u\n", o.seconds,
              o.rate > 0 ? (std::to_string(o.rate / 1e6) + " M events/s").c_str() : "as fast as possible",
              o.ringKb, o.bufferMb, std::thread::hardware_concurrency());
  std::printf("| run | mode | recorded M ev/s | delivered M ev/s | delivered / recorded | agent dropped (records) | "
              "seq gaps | slow-client batches lost | wire bytes/event | client CPU s | agent CPU s | of it drain thread |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  int run = 0;
  for (int rep = 0; rep < o.reps; ++rep) {
    uint64_t lastBytes = 0;
    for (const auto& mode : o.modes) {
      StreamResult r;
      if (!runStream(o, mode, run++, r)) return 1;
      const double recRate = static_cast<double>(r.prod.events) / r.prod.seconds;
      const double delRate = static_cast<double>(r.received) / r.streamSeconds;
      std::printf("| %d | %s | %.2f | **%.2f** | %.3f | %llu | %llu | %llu | %.2f | %.2f | %.2f | %.2f |\n", rep, mode.c_str(),
                  recRate / 1e6, delRate / 1e6, static_cast<double>(r.received) / static_cast<double>(r.prod.events),
                  static_cast<unsigned long long>(r.prod.droppedRecords),
                  static_cast<unsigned long long>(r.seqGaps),
                  static_cast<unsigned long long>(r.stats.batchesDroppedForSlowClients),
                  r.received ? static_cast<double>(r.wireBytes) / static_cast<double>(r.received) : 0.0, r.clientCpu,
                  r.agentCpu, r.drainCpu);
      std::fflush(stdout);
      if (mode == "ingest" && r.ingested != r.received)
        std::printf("  (ingested %llu of %llu)\n", static_cast<unsigned long long>(r.ingested),
                    static_cast<unsigned long long>(r.received));
      std::fprintf(stderr, "  run %d %s: %llu events in %.2f s (stream), %llu batches, %.1f MiB on the wire, agent stats: "
                   "recorded %llu dropped %llu\n",
                   run - 1, mode.c_str(), static_cast<unsigned long long>(r.received), r.streamSeconds,
                   static_cast<unsigned long long>(r.batches), static_cast<double>(r.wireBytes) / 1048576.0,
                   static_cast<unsigned long long>(r.stats.eventsRecorded),
                   static_cast<unsigned long long>(r.stats.eventsDropped));
      lastBytes = std::max(lastBytes, r.wireBytes);
    }
    const uint64_t bytes = o.anchorMib > 0 ? static_cast<uint64_t>(o.anchorMib * 1048576.0)
                                           : std::max<uint64_t>(lastBytes, 64ull << 20);
    double cr = 0, cw = 0;
    const double bw = anchorSocket(bytes, cr, cw);
    std::printf("| %d | anchor: raw socketpair, 1 MiB writes, %.0f MiB | — | %.0f MiB/s | — | — | — | — | — | %.2f | %.2f | — |\n",
                rep, static_cast<double>(bytes) / 1048576.0, bw / 1048576.0, cr, cw);
    std::fflush(stdout);
  }
  return 0;
}
