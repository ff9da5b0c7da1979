// trainscope-relay: one per machine of a job (docs/RELAY.md). It reaches the machine's agents
// over their per-user Unix sockets and serves front ends on one TCP port with the agents' own
// mutual authentication and per-frame MACs: a front end asks it for the job's ranks (on every
// machine) and then routes a connection to any rank, through the rank's own relay when that rank
// is on another machine. Relays find each other through one coordinator (rank 0's machine, or
// the launcher's), which every other relay registers with.
//
// One thread, one epoll set, no per-rank thread or poll: sockets wake it, and a 100 ms tick
// rescans the runtime directory (once a second), asks each local rank for its Stats (once a
// second: /metrics) and ends handshakes that take too long. Routed connections forward frames
// without decoding them (FrameDecoder::nextRaw checks header and MAC, FrameSealer re-seals);
// when one side does not take what it is sent, the relay stops reading the other side (at
// 4 MiB queued), and the agent's own budgets for a slow client apply: the ranks never wait.
// No Qt.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/core/base/status.h"

namespace trainscope::relay {

struct Options {
  std::string jobId;        // the job whose ranks are served ("": the first job found here)
  std::string listen = "0.0.0.0:0";  // ADDR:PORT to serve on (port 0: the kernel picks one)
  std::string advertise;    // ADDR:PORT other relays reach this one at (default: see docs)
  std::string coordinator;  // HOST:PORT of the coordinator relay ("": this relay is one)
  std::string machine;      // this machine's name in rank lists (default: the host name)
  std::string secretFile;   // the job's secret (required: front ends and relays authenticate)
  std::string readyFile;    // written once listening: "tcp:ADDR:PORT\n"
  double exitWhenIdleS = 0;  // > 0: exit when no local rank was seen for this long (after one was)
  bool metrics = true;       // answer GET /metrics on the same port
};

// Runs until SIGINT/SIGTERM (or idle exit). Returns the process exit code.
int run(const Options& o);

}  // namespace trainscope::relay
