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
  std::vector<std::string> command;
};

// "job-YYYYmmdd-HHMMSS-xxxxxx"
core::Result<std::string> newJobId();
// Runs the command (under mpirun when ranks > 1) with the agent preloaded, prints "job <id>",
// waits for it, cleans up its leftovers and returns its exit code. SIGINT/SIGTERM are forwarded.
int runLaunch(const LaunchOptions& o);

}  // namespace trainscope::cli
