// Starting a command with the agent injected: shared by `launch` (waits for the job) and `demo`
// (runs the same launcher detached, in the background).
#pragma once

#include <string>
#include <vector>

#include "trainscope/core/base/status.h"

#ifndef TRAINSCOPE_HAVE_GPU
#define TRAINSCOPE_HAVE_GPU 0
#endif

namespace trainscope::cli {

struct LaunchOptions {
  int ranks = 1;
  bool tcp = false;
  bool gpu = TRAINSCOPE_HAVE_GPU != 0;  // CUDA injection + NCCL plugins (see cmd_launch.cpp)
  std::string jobId;
  // ADDR:PORT: also start this machine's trainscope-relay for the job there (docs/RELAY.md); it
  // registers with $TRAINSCOPE_RELAY_COORDINATOR when set, else it is the coordinator.
  std::string relay;
  std::vector<std::string> command;
  // How ranks > 1 start: Auto = Torch for a Python command (python, python3, python3.11, ...),
  // Mpi otherwise. Torch: the launcher forks the ranks itself with RANK, LOCAL_RANK, WORLD_SIZE,
  // LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (torch.distributed's env:// rendezvous, what
  // torchrun sets), TRAINSCOPE_AGENT_LIB and PYTHONPATH for the trainscope package; no
  // LD_PRELOAD (the script's trainscope.init() loads the agent, so subprocesses the script runs
  // do not start agents of their own). See docs/PYTHON.md.
  enum class Starter { Auto, Mpi, Torch };
  Starter starter = Starter::Auto;
};

// True for python, python3, python3.11, /usr/bin/python3, ...
bool isPythonCommand(const std::string& program);
// The build tree's (or install's) python/ directory holding the trainscope package, or "".
std::string pythonPackageDir();

// "job-YYYYmmdd-HHMMSS-xxxxxx"
core::Result<std::string> newJobId();
// Runs the command (under mpirun when ranks > 1) with the agent preloaded, prints "job <id>",
// waits for it, cleans up its leftovers and returns its exit code. SIGINT/SIGTERM are forwarded.
int runLaunch(const LaunchOptions& o);

}  // namespace trainscope::cli
