// libFuzzer target for the agent's control server: the bytes a client sends, handled by the
// real Server code (frame decoding, the handshake state machine, every request, the knob
// registry behind SetKnob) over a real socket. Two servers are set up once, as a job's agent
// would: one on a Unix socket (no authentication) and one on loopback TCP (authentication
// required). Each input is one client connection:
//   byte 0 % 3 == 0: Unix socket, the bytes from the start (Hello and everything after);
//                 1: Unix socket, a valid Hello first, then the bytes (the open session);
//                 2: TCP, the bytes from the start (pre-authentication limits, Auth checks).
// The server's private steps (accept, read, write, drop) are reached through ServerFuzzAccess,
// a friend of Server (agents/src/server.h); nothing else in the server changes for the fuzzer.
//
// Properties: no crash, leak or undefined behaviour (ASan/UBSan), and the agent's state stays
// bounded: after each input the client is gone and the knob changes it queued are forgotten.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "hub.h"
#include "knobs.h"
#include "server.h"
#include "trainscope/agent.h"
#include "trainscope/core/wire/protocol.h"

namespace trainscope::agent {

struct ServerFuzzAccess {
  // The client the server accepted from its listening socket, or nullptr.
  static void* accept(Server& s) {
    const size_t before = s.clients_.size();
    s.acceptClients();
    return s.clients_.size() > before ? s.clients_.back().get() : nullptr;
  }
  static size_t indexOf(Server& s, void* c) {
    for (size_t i = 0; i < s.clients_.size(); ++i)
      if (s.clients_[i].get() == c) return i;
    return SIZE_MAX;
  }
  static bool read(Server& s, void* c) { return s.readClient(*static_cast<Server::Client*>(c)); }
  static bool write(Server& s, void* c) { return s.writeClient(*static_cast<Server::Client*>(c)); }
  static void drop(Server& s, void* c) {
    const size_t i = indexOf(s, c);
    if (i != SIZE_MAX) s.dropClient(i, nullptr);
  }
  static size_t clients(Server& s) { return s.clients_.size(); }
};

}  // namespace trainscope::agent

namespace {

using namespace trainscope;
using agent::ServerFuzzAccess;
namespace wire = core::wire;

struct Setup {
  agent::Hub hub{agent::HubConfig{}};
  agent::Server* unixServer = nullptr;
  agent::Server* tcpServer = nullptr;
  sockaddr_un unixAddr{};
  sockaddr_in tcpAddr{};
};

Setup* g = nullptr;

agent::ServerHooks hooks() {
  return agent::ServerHooks{
      [] {
        wire::JobInfo j;
        j.jobId = "fuzz";
        j.worldSize = 4;
        j.agentVersion = "fuzz";
        j.clockDomain = "monotonic";
        return j;
      },
      [] { return wire::Stats{}; },
      [] { return agent::KnobRegistry::instance().list(7); },
      [](const wire::SetKnob& s) { return agent::KnobRegistry::instance().receive(s, 4, true); }};
}

agent::Server* makeServer(const char* listen, const char* jobId) {
  agent::Config cfg;
  cfg.jobId = jobId;
  cfg.worldSize = 4;
  cfg.listen = listen;
  cfg.clientQueueBytes = 1u << 20;
  cfg.acceptPerSec = 0;  // one connection per input, a million inputs: no accept budget here
  auto* s = new agent::Server(g->hub, cfg, hooks());
  if (core::Status st = s->listen(); !st) {
    std::fprintf(stderr, "fuzz_agent_server: listen %s: %s\n", listen, st.toString().c_str());
    std::abort();
  }
  return s;
}

// Runs one connection to completion: sends bytes (interleaved with the server's reads, so that
// neither side's socket buffer fills), then lets the server read what is left and drops it.
void oneClient(agent::Server& s, int domain, const sockaddr* addr, socklen_t addrLen,
               const std::vector<uint8_t>& bytes) {
  const int fd = ::socket(domain, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) std::abort();
  if (::connect(fd, addr, addrLen) != 0) std::abort();
  void* c = ServerFuzzAccess::accept(s);
  if (!c) std::abort();  // one client at a time: a slot is always free
  uint8_t sink[64 * 1024];
  size_t off = 0;
  bool open = true;
  while (open) {
    if (off < bytes.size()) {
      const ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) off += static_cast<size_t>(n);
    }
    open = ServerFuzzAccess::read(s, c) && ServerFuzzAccess::write(s, c);
    while (::recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
    if (off >= bytes.size()) break;
  }
  // Close with a reset (linger 0) before the server drops its end: no TIME_WAIT is left behind,
  // so a million TCP connections do not run out of loopback ports.
  const linger reset{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  ::close(fd);
  ServerFuzzAccess::drop(s, c);
  if (ServerFuzzAccess::clients(s) != 0) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  char dir[] = "/tmp/fuzz_agent_server.XXXXXX";
  if (!::mkdtemp(dir)) std::abort();
  ::setenv("TRAINSCOPE_RUNTIME_DIR", dir, 1);
  g = new Setup;
  // Knobs of every type for SetKnob to find (registered once; changes are reset per input).
  static const char* const algos[] = {"ring", "recursive-doubling", "tree"};
  ts_knob_int("dp.bucket_bytes", 1024, 1 << 30, 1 << 20, "bucket size", 0);
  ts_knob_float("opt.lr_scale", 0.0, 10.0, 1.0, "learning-rate scale", TS_KNOB_CHANGES_MATH);
  ts_knob_bool("dp.overlap", 1, "overlap communication", 0);
  ts_knob_enum("dp.algorithm", algos, 3, 0, "allreduce algorithm", 0);
  g->unixServer = makeServer("unix", "fuzzunix");
  g->tcpServer = makeServer("tcp:127.0.0.1:0", "fuzztcp");
  const std::string ue = g->unixServer->endpoint().substr(5);  // "unix:PATH"
  g->unixAddr.sun_family = AF_UNIX;
  std::memcpy(g->unixAddr.sun_path, ue.c_str(), ue.size() + 1);
  const std::string te = g->tcpServer->endpoint();  // "tcp:127.0.0.1:PORT"
  g->tcpAddr.sin_family = AF_INET;
  g->tcpAddr.sin_port = htons(static_cast<uint16_t>(std::atoi(te.c_str() + te.rfind(':') + 1)));
  g->tcpAddr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int mode = data[0] % 3;
  std::vector<uint8_t> bytes;
  if (mode == 1) wire::encode(wire::Message{wire::Hello{wire::kProtocolVersion, wire::kProtocolVersion, "fuzz"}}, bytes);
  bytes.insert(bytes.end(), data + 1, data + size);
  agent::KnobRegistry::instance().resetChangesForTest();
  if (mode == 2)
    oneClient(*g->tcpServer, AF_INET, reinterpret_cast<const sockaddr*>(&g->tcpAddr), sizeof g->tcpAddr, bytes);
  else
    oneClient(*g->unixServer, AF_UNIX, reinterpret_cast<const sockaddr*>(&g->unixAddr), sizeof g->unixAddr, bytes);
  return 0;
}
