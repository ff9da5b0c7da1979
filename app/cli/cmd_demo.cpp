// `trainscope-cli demo [--ranks N] [--mode dp|pp|hybrid|disco|torch-ddp|torch-pp] [--steps S] [-- ARGS]`:
// starts the reference job (trainscope-train, CPU backend) with the agent under mpirun -- or, in
// torch-ddp mode, the PyTorch DDP demo (python/trainscope/demo_ddp.py, gloo on the CPU, started
// torch-style with Debian's /usr/bin/python3 or $TRAINSCOPE_PYTHON), in torch-pp mode the
// torch.distributed.pipelining demo (python/trainscope/demo_pp.py; PyTorch >= 2.4: build/torch2-venv
// from `make torch2-venv`, or $TRAINSCOPE_TORCH2_PYTHON) -- in the background, prints its job id
// and returns once every rank is discoverable and lists its knobs.
//
// The launcher (the same code as `launch`) runs in a detached child -- its own session, output
// to <runtime dir>/<job>.log -- that waits for mpirun and cleans up after it. Stop the job with
// `kill <pid>` (the printed launcher pid; SIGTERM is forwarded to mpirun, which stops the ranks),
// or let it finish its --steps.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "commands.h"
#include "launch.h"
#include "live.h"
#include "trainscope/core/wire/discovery.h"

namespace trainscope::cli {
namespace {

namespace fs = std::filesystem;

struct DemoOptions {
  int ranks = 0;  // 0: the mode's default (4; torch-ddp, torch-pp 2)
  std::string mode = "dp";
  long long steps = 1000000;
  double waitSeconds = 0;  // 0: the mode's default (30 s; torch modes 90 s: importing torch is slow)
  int nice = 10;           // the demo yields the CPU to the tool watching it (0: as any job)
  std::vector<std::string> trainerArgs;
};

// Lowers the detached launcher's session -- the launcher, mpirun and every rank -- to `nice`: a
// demo on the machine that also runs the GUI must not take the cores the GUI wakes up on. Linux
// schedules sessions against each other (autogroups, /proc/sys/kernel/sched_autogroup_enabled),
// so a thread's own nice value does not weigh against another session's threads; the session's
// autogroup gets the nice value too. On the 2-core VM, the 4 ranks of the pp demo (MPI ranks spin
// while they wait) took 80 % of the CPU from the GUI's session before this (docs/BENCHMARKS.md).
void lowerSessionPriority(int nice) {
  if (nice <= 0) return;
  (void)::setpriority(PRIO_PROCESS, 0, nice);
  if (const int fd = ::open("/proc/self/autogroup", O_WRONLY | O_CLOEXEC); fd >= 0) {
    const std::string v = std::to_string(nice);
    (void)!::write(fd, v.data(), v.size());
    ::close(fd);
  }
}

int ranksFound(const std::string& jobId) {
  int n = 0;
  for (const auto& e : core::discovery::listEntries()) n += e.jobId == jobId;
  return n;
}

// The agent starts when the rank's process loads, before the trainer has registered its knobs:
// wait until every rank lists `knob` (dp.bucket_bytes; pp, hybrid: pp.schedule; disco:
// disco.sparsity; torch-ddp: dp.compression), so that
// `knobs` and `set` work right away.
bool knobsRegistered(const std::string& jobId, const std::string& knob) {
  auto js = connectJob(jobId, true, 2000);
  if (!js) return false;
  for (auto* c : js.value()->clients()) {
    auto l = c->knobList();
    if (!l) return false;
    bool found = false;
    for (const auto& k : l.value().knobs) found |= k.name == knob;
    if (!found) return false;
  }
  return true;
}

int startDetached(const DemoOptions& o, LaunchOptions& lo, const std::string& knob);

// Debian's interpreter: the one that imports Debian's python3-torch (a pyenv python3 first on
// PATH does not). $TRAINSCOPE_PYTHON overrides it.
std::string torchPython() {
  if (const char* p = std::getenv("TRAINSCOPE_PYTHON"); p && *p) return p;
  std::error_code ec;
  return fs::exists("/usr/bin/python3", ec) ? "/usr/bin/python3" : "python3";
}

// A Python with PyTorch >= 2.4 (torch.distributed.pipelining) for torch-pp:
// $TRAINSCOPE_TORCH2_PYTHON, else the venv `make torch2-venv` makes next to this build
// (build/torch2-venv), else the torch-ddp interpreter. Empty with `why` set when none imports it.
std::string torch2Python(std::string* why) {
  std::vector<std::string> tried;
  if (const char* p = std::getenv("TRAINSCOPE_TORCH2_PYTHON"); p && *p) {
    tried.emplace_back(p);
  } else {
    std::error_code ec;
    const fs::path venv = fs::read_symlink("/proc/self/exe", ec).parent_path().parent_path() / "torch2-venv/bin/python";
    if (!ec && fs::exists(venv, ec)) tried.push_back(venv.string());
    tried.push_back(torchPython());
  }
  for (const std::string& py : tried) {
    std::string quoted = "'";
    for (char c : py) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    quoted += "'";
    const std::string cmd = quoted + " -c 'import torch.distributed.pipelining' >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return py;
  }
  std::string list;
  for (const std::string& py : tried) list += (list.empty() ? "" : ", ") + py;
  *why = "demo --mode torch-pp needs PyTorch >= 2.4 (torch.distributed.pipelining), which " + list +
         " cannot import. Make a venv with it: `make torch2-venv` (build/torch2-venv, torch from PyPI), "
         "or point TRAINSCOPE_TORCH2_PYTHON at a python that has it";
  return {};
}

core::Status torchDemoCommand(const DemoOptions& o, LaunchOptions& lo) {
  const std::string py = pythonPackageDir();
  if (py.empty())
    return core::Status(
        core::ErrorCode::NotFound,
        "the trainscope Python package is not next to trainscope-cli (build/python); rebuild");
  lo.starter = LaunchOptions::Starter::Torch;
  if (o.mode == "torch-pp") {
    std::string why;
    const std::string python = torch2Python(&why);
    if (python.empty()) return core::Status(core::ErrorCode::NotFound, why);
    lo.command = {python, "-m", "trainscope.demo_pp", "--steps", std::to_string(o.steps), "--log-every", "100"};
    lo.command.insert(lo.command.end(), o.trainerArgs.begin(), o.trainerArgs.end());
    return {};
  }
  lo.command = {torchPython(), "-m", "trainscope.demo_ddp", "--steps", std::to_string(o.steps),
                "--log-every", "100"};
  lo.command.insert(lo.command.end(), o.trainerArgs.begin(), o.trainerArgs.end());
  return {};
}

int runDemo(DemoOptions o) {
  const bool torch = o.mode == "torch-ddp" || o.mode == "torch-pp";
  if (o.mode != "dp" && o.mode != "pp" && o.mode != "hybrid" && o.mode != "disco" && !torch) {
    std::fprintf(stderr,
                 "trainscope-cli: demo --mode must be dp, pp, hybrid, disco, torch-ddp or torch-pp, not '%s'\n",
                 o.mode.c_str());
    return kExitUsage;
  }
  if (o.ranks == 0) o.ranks = torch ? 2 : 4;
  if (o.waitSeconds <= 0) o.waitSeconds = torch ? 90 : 30;
  if (o.ranks < 1) {
    std::fprintf(stderr, "trainscope-cli: --ranks must be >= 1\n");
    return kExitUsage;
  }
  LaunchOptions lo;
  lo.ranks = o.ranks;
  if (torch) {
    if (core::Status s = torchDemoCommand(o, lo); !s.isOk()) return fail(s);
    return startDetached(o, lo, o.mode == "torch-pp" ? "pp.schedule" : "dp.compression");
  }
  std::error_code ec;
  const fs::path trainer = fs::read_symlink("/proc/self/exe", ec).parent_path() / "trainscope-train";
  if (ec || !fs::exists(trainer))
    return fail(
        core::Status(core::ErrorCode::NotFound, "trainscope-train not found next to trainscope-cli (" +
                                                    trainer.string() + "); build it with MPI and OpenBLAS"));
  lo.command = {trainer.string(), "--steps", std::to_string(o.steps), "--log-every", "100"};
  // Pipeline modes: 8 layers, so every schedule (interleaved with 2 chunks on 4 stages too) fits.
  if (o.mode == "pp") lo.command.insert(lo.command.end(), {"--mode", "pp", "--layers", "7"});
  if (o.mode == "hybrid")
    lo.command.insert(lo.command.end(), {"--mode", "hybrid", "--pp-stages", "2", "--layers", "7"});
  if (o.mode == "disco") lo.command.insert(lo.command.end(), {"--mode", "disco", "--layers", "4"});
  lo.command.insert(lo.command.end(), o.trainerArgs.begin(), o.trainerArgs.end());
  // A knob every rank of that mode registers: dp.* exist only where gradients are averaged over
  // replicas (not in pp, disco, or a hybrid grid with one replica).
  const char* ready = o.mode == "pp" || o.mode == "hybrid" ? "pp.schedule"
                      : o.mode == "disco"                  ? "disco.sparsity"
                                                           : "dp.bucket_bytes";
  return startDetached(o, lo, ready);
}

// Runs the launcher detached (own session, output to <runtime dir>/<job>.log), prints the job id
// and waits until every rank is discoverable and lists `knob`.
int startDetached(const DemoOptions& o, LaunchOptions& lo, const std::string& knob) {
  auto id = newJobId();
  if (!id) return fail(id.status());
  auto dir = core::discovery::runtimeDir();
  if (!dir) return fail(dir.status());
  const fs::path log = dir.value() / (id.value() + ".log");
  lo.jobId = id.value();
  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid < 0) return fail(core::Status(core::ErrorCode::Io, "fork failed"));
  if (pid == 0) {  // the detached launcher
    ::setsid();
    lowerSessionPriority(o.nice);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, 0);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::_exit(runLaunch(lo));
  }
  std::printf("job %s\n", id.value().c_str());
  std::fflush(stdout);
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.waitSeconds);
  while (ranksFound(id.value()) < o.ranks && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  bool controllable = false;
  while (ranksFound(id.value()) >= o.ranks && !(controllable = knobsRegistered(id.value(), knob)) &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const int found = ranksFound(id.value());
  std::fprintf(stderr,
               "trainscope-cli: demo job %s: %d of %d rank(s) up, launcher pid %d, log %s\n"
               "  stop it with: kill %d\n",
               id.value().c_str(), found, o.ranks, static_cast<int>(pid), log.c_str(), static_cast<int>(pid));
  if (found < o.ranks) {
    std::fprintf(stderr, "trainscope-cli: not every rank came up within %.0f s; see the log\n",
                 o.waitSeconds);
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace

void addDemoCommand(CLI::App& app, Runner& run) {
  auto opts = std::make_shared<DemoOptions>();
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "Start the reference training job (CPU, MPI) with the agent in the background; prints its job id");
  cmd->add_option("--ranks", opts->ranks, "Number of ranks (default 4; torch-ddp, torch-pp 2)");
  cmd->add_option(
         "--mode", opts->mode,
         "dp | pp (one pipeline over all ranks) | hybrid (2 pipeline stages x ranks/2 replicas) | disco "
         "(feature-split MLP) | torch-ddp (PyTorch DDP with the trainscope hook, gloo, CPU) | torch-pp "
         "(torch.distributed.pipelining, one pipeline over all ranks, gloo, CPU; PyTorch >= 2.4: make torch2-venv)")
      ->capture_default_str();
  cmd->add_option("--steps", opts->steps, "Training steps before the job ends by itself")
      ->capture_default_str();
  cmd->add_option("--nice", opts->nice,
                  "Run the demo job at this nice value, its whole session too (Linux autogroup), so that a "
                  "GUI on the same machine keeps its cores; 0: as any job")
      ->capture_default_str()
      ->check(CLI::Range(0, 19));
  cmd->add_option("--wait", opts->waitSeconds,
                  "Seconds to wait for every rank to come up (default 30; torch 90)");
  cmd->add_option(
      "TRAINER_ARGS", opts->trainerArgs,
      "More trainscope-train options (torch-ddp / torch-pp: python -m trainscope.demo_ddp / demo_pp options) "
      "after --");
  cmd->callback([opts, &run] { run = [opts] { return runDemo(*opts); }; });
}

}  // namespace trainscope::cli
