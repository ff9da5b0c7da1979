#include "runtime.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <string>
#include <vector>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "capture.h"
#include "external.h"
#include "gpu.h"
#include "knobs.h"
#include "log.h"

#ifndef TRAINSCOPE_VERSION
#define TRAINSCOPE_VERSION "0.0.0"
#endif

namespace trainscope::agent {

namespace wire = core::wire;

Globals& globals() {
  static Globals* g = new Globals();  // leaked: read by job threads during static destruction
  return *g;
}

namespace {
HubConfig hubConfig(const Config& c) { return {c.rank, c.flightBytes, c.flightNs}; }

// --- files left behind by SIGTERM --------------------------------------------------------------
// A job ended by SIGTERM (mpirun, torchrun, a scheduler) never runs atexit, so the socket, the
// discovery entry and a generated secret would stay behind. When, and only when, SIGTERM still
// has its default action (the process is about to die anyway), the agent installs a handler
// that unlinks those files -- unlink(2) is async-signal-safe, the paths are fixed buffers
// filled beforehand -- then restores the default action and re-raises, so the process still
// dies of SIGTERM with the status its launcher expects. A host that handles SIGTERM itself is
// left alone (readers remove what a dead agent left: discovery::listEntries), and a handler the
// host installs later simply replaces ours.
struct TermCleanup {
  char paths[3][1024] = {};
  struct sigaction previous {};
};
TermCleanup g_term;
std::atomic<bool> g_termArmed{false};
std::atomic<bool> g_termInstalled{false};

void onTerm(int sig) {
  if (g_termArmed.exchange(false))
    for (const char* p : g_term.paths)
      if (p[0]) ::unlink(p);
  // Default action again, then die of the same signal (it is blocked while we run, so it is
  // delivered as soon as the handler returns).
  ::sigaction(sig, &g_term.previous, nullptr);
  ::raise(sig);
}

void armTermCleanup(const std::string& entry, const std::string& socket, const std::string& secret) {
  const std::string* in[3] = {&entry, &socket, &secret};
  for (int i = 0; i < 3; ++i) {
    g_term.paths[i][0] = '\0';
    if (in[i]->size() < sizeof g_term.paths[i])
      std::memcpy(g_term.paths[i], in[i]->c_str(), in[i]->size() + 1);
  }
  g_termArmed.store(true);
  if (g_termInstalled.load()) return;
  struct sigaction current {};
  if (::sigaction(SIGTERM, nullptr, &current) != 0) return;
  if ((current.sa_flags & SA_SIGINFO) || current.sa_handler != SIG_DFL) return;  // the host's
  struct sigaction ours {};
  ours.sa_handler = onTerm;
  sigemptyset(&ours.sa_mask);
  ours.sa_flags = SA_RESTART;
  g_term.previous = current;
  if (::sigaction(SIGTERM, &ours, nullptr) == 0) g_termInstalled.store(true);
}

// Normal shutdown: the files are gone already; give SIGTERM back its default action unless
// the host has installed its own handler since.
void disarmTermCleanup() {
  g_termArmed.store(false);
  if (!g_termInstalled.exchange(false)) return;
  struct sigaction current {};
  if (::sigaction(SIGTERM, nullptr, &current) == 0 && !(current.sa_flags & SA_SIGINFO) &&
      current.sa_handler == onTerm)
    ::sigaction(SIGTERM, &g_term.previous, nullptr);
}
}  // namespace

namespace {
// The name of a system call number, for the ones a blocked training process sits in.
std::string syscallName(long nr) {
#if defined(__x86_64__)
  switch (nr) {
    case 0: return "read";
    case 1: return "write";
    case 7: return "poll";
    case 17: return "pread64";
    case 23: return "select";
    case 24: return "sched_yield";
    case 35: return "nanosleep";
    case 43: return "accept";
    case 44: return "sendto";
    case 45: return "recvfrom";
    case 46: return "sendmsg";
    case 47: return "recvmsg";
    case 61: return "wait4";
    case 202: return "futex";
    case 230: return "clock_nanosleep";
    case 232: return "epoll_wait";
    case 270: return "pselect6";
    case 271: return "ppoll";
    case 281: return "epoll_pwait";
    case 288: return "accept4";
    case 441: return "epoll_pwait2";
    default: break;
  }
#elif defined(__aarch64__)
  switch (nr) {
    case 63: return "read";
    case 64: return "write";
    case 73: return "ppoll";
    case 98: return "futex";
    case 101: return "nanosleep";
    case 115: return "clock_nanosleep";
    case 22: return "epoll_pwait";
    case 207: return "recvfrom";
    case 206: return "sendto";
    default: break;
  }
#endif
  return "syscall " + std::to_string(nr);
}

std::string readSmallFile(const std::string& path) {
  std::string out;
  if (FILE* f = std::fopen(path.c_str(), "re")) {
    char buf[512];
    const size_t n = std::fread(buf, 1, sizeof buf, f);
    std::fclose(f);
    out.assign(buf, n);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\0')) out.pop_back();
  return out;
}

// This process's threads as the kernel shows them (at most 256). Reading /proc of our own
// threads stops nobody: no signal, no ptrace.
std::vector<wire::ThreadInfo> readThreads() {
  std::vector<wire::ThreadInfo> out;
  DIR* d = ::opendir("/proc/self/task");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    if (out.size() >= 256) break;
    const std::string dir = std::string("/proc/self/task/") + e->d_name;
    wire::ThreadInfo t;
    t.tid = std::atoll(e->d_name);
    t.name = readSmallFile(dir + "/comm");
    // stat: "tid (comm) S ..." -- the state follows the last ')'.
    const std::string stat = readSmallFile(dir + "/stat");
    if (const size_t p = stat.rfind(')'); p != std::string::npos && p + 2 < stat.size()) t.state = stat.substr(p + 2, 1);
    t.wchan = readSmallFile(dir + "/wchan");
    if (t.wchan == "0") t.wchan.clear();
    const std::string sc = readSmallFile(dir + "/syscall");  // "nr args...", "running" or "-1 ..."
    if (!sc.empty() && sc[0] >= '0' && sc[0] <= '9') t.syscall = syscallName(std::atol(sc.c_str()));
    out.push_back(std::move(t));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(), [](const wire::ThreadInfo& a, const wire::ThreadInfo& b) { return a.tid < b.tid; });
  return out;
}

}  // namespace

Runtime::Runtime(Config cfg)
    : cfg_(std::move(cfg)), hub_(hubConfig(cfg_)), drain_(hub_, DrainConfig{}),
      server_(hub_, cfg_, ServerHooks{
                              [this] { return jobInfo(); },
                              [this] { return stats(); },
                              [] {
                                return KnobRegistry::instance().list(globals().currentStep.load());
                              },
                              [](const wire::SetKnob& s) {
                                return KnobRegistry::instance().receive(
                                    s, globals().worldSize.load(), globals().agreeFn.load() != nullptr);
                              },
                              [this] { return inspect(); },
                              [](uint64_t seq) { return KnobRegistry::instance().mustWait(seq); }}) {}

Runtime::~Runtime() { stop(); }

int Runtime::start() {
  g_clockShiftNs.store(cfg_.clockShiftNs);
  g_clockDriftT0.store(monotonicNs());
  g_clockDriftPpb.store(cfg_.clockDriftPpb);
  // Chosen once, before the drain calibrates and before capture is on: the hot path's branch on
  // it never changes while records are written.
  g_clockTsc.store(cfg_.clock != "monotonic" && tscIsInvariant(), std::memory_order_relaxed);
  startNs_ = nowNs();
  globals().worldSize.store(cfg_.worldSize);
  Capture& cap = Capture::instance();
  cap.configure(cfg_.ringRecords, cfg_.bufferBytes - cfg_.flightBytes);
  ExternalQueue::instance().resetDevice();
  drain_.start();
  cap.setActive(true);
  gpuAfterStart();  // CUPTI, when asked for or injected (no-op without GPU support)
  if (cfg_.listen == "none") return TS_OK;  // capture only (tests, or a job that wants no server)
  if (core::Status s = server_.listen(); !s) {
    logLine("control server disabled: %s", s.toString().c_str());
    return TS_ERR_LISTEN;
  }
  server_.start();
  entry_.jobId = cfg_.jobId;
  entry_.rank = cfg_.rank;
  entry_.worldSize = cfg_.worldSize;
  entry_.localRank = cfg_.localRank;
  entry_.host = cfg_.host;
  entry_.pid = ::getpid();
  entry_.startTimeNs = startNs_;
  entry_.endpoint = server_.endpoint();
  entry_.secretFile = server_.endpoint().rfind("tcp:", 0) == 0 ? server_.secretFile() : std::string();
  if (core::Status s = core::discovery::writeEntry(entry_); !s) {
    logLine("discovery file not written: %s", s.toString().c_str());
  } else {
    entryWritten_ = true;
    std::string entryPath;
    if (auto dir = core::discovery::runtimeDir())
      entryPath = (dir.value() / core::discovery::entryFileName(entry_.jobId, entry_.rank)).string();
    armTermCleanup(entryPath, server_.socketPath(), server_.ownSecretPath());
  }
  return TS_OK;
}

void Runtime::stop() {
  disarmTermCleanup();
  gpuBeforeStop();  // CUPTI's last buffers, then cuptiFinalize: the job is not left slower
  Capture::instance().setActive(false);
  drain_.stop();   // the last records become the last batch, queued to subscribers
  server_.stop();  // which the server flushes briefly before closing
  if (entryWritten_) core::discovery::removeEntry(entry_);
  entryWritten_ = false;
}

wire::JobInfo Runtime::jobInfo() const {
  wire::JobInfo j;
  j.jobId = cfg_.jobId;
  j.rank = cfg_.rank;
  j.worldSize = cfg_.worldSize;
  j.localRank = cfg_.localRank;
  j.host = cfg_.host;
  j.pid = ::getpid();
  j.startTimeNs = startNs_;
  j.device = ExternalQueue::instance().device();
  j.agentVersion = TRAINSCOPE_VERSION;
  j.clockDomain = "monotonic";
  return j;
}

wire::Inspect Runtime::inspect() {
  const int64_t now = nowNs();
  if (inspectAtNs_ != 0 && now - inspectAtNs_ < 100'000'000) return lastInspect_;
  wire::Inspect in;
  in.agentNs = now;
  in.currentStep = globals().currentStep.load();
  in.open = drain_.openOps();
  in.threads = readThreads();
  lastInspect_ = in;
  inspectAtNs_ = now;
  return in;
}

wire::Stats Runtime::stats() const {
  wire::Stats s;
  const Capture& cap = Capture::instance();
  s.eventsRecorded = drain_.eventsRecorded();
  s.eventsDropped = cap.dropped();
  s.queueBytesUsed = cap.bytesUsed();
  s.queueBytesCap = cap.bytesCap();
  s.flightRecorderEvents = hub_.flightEvents();
  s.flightRecorderBytes = hub_.flightBytes();
  s.clients = server_.clientCount();
  s.batchesDroppedForSlowClients = hub_.batchesDroppedForSlowClients();
  s.currentStep = globals().currentStep.load();
  return s;
}

namespace {
std::mutex g_lifeMu;
Runtime* g_runtime = nullptr;
bool g_forkedChild = false;

void afterForkInChild() {
  // The child has none of our threads: record nothing and never touch the parent's files.
  g_forkedChild = true;
  g_termArmed.store(false);  // the files are the parent's
  Capture::instance().setActive(false);
  g_runtime = nullptr;  // leaked on purpose; its threads do not exist here
}

void atExit() { shutdownRuntime(); }
}  // namespace

int initRuntime(const ts_init_params* p) {
  std::lock_guard lock(g_lifeMu);
  if (g_forkedChild) return TS_ERR_INTERNAL;
  if (g_runtime) return TS_ALREADY_INITIALIZED;
  static bool hooksInstalled = false;
  if (!hooksInstalled) {
    hooksInstalled = true;
    pthread_atfork(nullptr, nullptr, afterForkInChild);
    std::atexit(atExit);
  }
  auto rt = std::make_unique<Runtime>(configFromEnv(p));
  const int rc = rt->start();
  g_runtime = rt.release();
  return rc;
}

void shutdownRuntime() {
  std::lock_guard lock(g_lifeMu);
  if (g_forkedChild || !g_runtime) return;
  Runtime* rt = g_runtime;
  g_runtime = nullptr;
  rt->stop();
  delete rt;
}

Runtime* runtime() { return g_runtime; }

}  // namespace trainscope::agent
