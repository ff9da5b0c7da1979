// `trainscope-cli launch [--ranks N] [--tcp] [--no-gpu] [--torch|--mpi] -- CMD ARGS...`: run any
// command with the agent preloaded, under mpirun when N > 1, and forward its exit code. A Python
// command with N > 1 (or --torch) starts torch-style instead: N processes forked here with
// torch.distributed's env:// variables, no preload (the script's trainscope.init() loads the
// agent through TRAINSCOPE_AGENT_LIB; docs/PYTHON.md).
//
// With GPU support (the default when the agent was built with it) the same library is also
// named in CUDA_INJECTION64_PATH (CUDA calls its InitializeInjection at cuInit: CUPTI tracing),
// NCCL_PROFILER_PLUGIN and NCCL_TUNER_PLUGIN (NCCL finds ncclProfiler_v5/_v6 and
// ncclTunerPlugin_v5/_v6 in it), and NVTX_INJECTION64_PATH names CUPTI (NVTX ranges become
// CUPTI marker records), so an unmodified CUDA/NCCL program -- PyTorch included -- is traced.
// Variables the user already set are left alone.
//
// The agent is configured only through the environment (TRAINSCOPE_JOB_ID, TRAINSCOPE_LISTEN,
// TRAINSCOPE_SECRET_FILE, TRAINSCOPE_RUNTIME_DIR). LD_PRELOAD is handed to the ranks with
// `mpirun -x LD_PRELOAD=...` rather than set in our environment, so that mpirun itself does not
// load the agent and pose as a rank. MPI is kept on loopback (btl self,vader; oob/tcp on lo).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "commands.h"
#include "launch.h"
#include "trainscope/core/wire/discovery.h"
#include "trainscope/core/wire/protocol.h"

namespace trainscope::cli {
namespace {

namespace fs = std::filesystem;

#ifndef TRAINSCOPE_CUPTI_LIB
#define TRAINSCOPE_CUPTI_LIB ""
#endif

// The processes signals are forwarded to: mpirun, the command, or every rank of a torch-style
// start. Written before the handlers are installed, read in them.
constexpr int kMaxChildren = 1024;
pid_t gChildren[kMaxChildren];
volatile sig_atomic_t gChildCount = 0;
void forwardSignal(int sig) {
  for (int i = 0; i < gChildCount; ++i)
    if (gChildren[i] > 0) ::kill(gChildren[i], sig);
}

// A TCP port on 127.0.0.1 free right now (the kernel picks it); 0 when none could be had.
int freeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

pid_t spawn(const std::vector<std::string>& argv) {
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execvp(cargv[0], cargv.data());
    std::fprintf(stderr, "trainscope-cli: cannot run %s: %s\n", cargv[0], std::strerror(errno));
    ::_exit(127);
  }
  return pid;
}

int exitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kExitFailed;
}

}  // namespace

core::Result<std::string> newJobId() {
  uint8_t r[3];
  if (core::Status s = core::wire::randomBytes(r); !s.isOk()) return s;
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&now, &tm);
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  return std::string("job-") + stamp + "-" + core::wire::toHex(r);
}

namespace {

core::Result<fs::path> agentLibrary() {
  if (const char* e = std::getenv("TRAINSCOPE_AGENT_LIB"); e && *e) return fs::path(e);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return core::Status(core::ErrorCode::Io, "cannot locate trainscope-cli: " + ec.message());
  const fs::path lib = fs::weakly_canonical(exe.parent_path() / ".." / "lib" / "libtrainscope_agent.so", ec);
  if (ec || !fs::exists(lib))
    return core::Status(core::ErrorCode::NotFound, "agent library not found at " + lib.string() +
                                                       " (set TRAINSCOPE_AGENT_LIB to override)");
  return lib;
}

// A random 32-byte secret as 64 hex characters (no newline), mode 0600. The agent and the
// client both use the file's bytes verbatim as the HMAC key.
core::Result<fs::path> writeSecret(const std::string& jobId) {
  auto dir = core::discovery::runtimeDir();
  if (!dir) return dir.status();
  uint8_t secret[32];
  if (core::Status s = core::wire::randomBytes(secret); !s.isOk()) return s;
  const fs::path p = dir.value() / (jobId + ".secret");
  const std::string text = core::wire::toHex(secret);
  FILE* f = nullptr;
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd >= 0) f = ::fdopen(fd, "w");
  if (!f || std::fwrite(text.data(), 1, text.size(), f) != text.size()) {
    if (f)
      std::fclose(f);
    else if (fd >= 0)
      ::close(fd);
    return core::Status(core::ErrorCode::Io, "cannot write secret file " + p.string());
  }
  std::fclose(f);
  return p;
}

void setDefault(const char* name, const std::string& value) {
  ::setenv(name, value.c_str(), 0);
}

// Torch-style start: one process per rank, forked here, each with torch.distributed's env://
// variables. Waits for all; when a rank fails, the others get SIGTERM (a peer left alone would
// wait in its next collective). Returns the first non-zero exit code, else 0.
int runTorchRanks(const LaunchOptions& o) {
  setDefault("MASTER_ADDR", "127.0.0.1");
  if (!std::getenv("MASTER_PORT")) {
    const int port = freeLoopbackPort();
    if (port <= 0)
      return fail(core::Status(core::ErrorCode::Io, "no free TCP port on 127.0.0.1 for MASTER_PORT"));
    ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  }
  ::setenv("WORLD_SIZE", std::to_string(o.ranks).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(o.ranks).c_str(), 1);
  std::vector<pid_t> pids;
  for (int r = 0; r < o.ranks && r < kMaxChildren; ++r) {
    ::setenv("RANK", std::to_string(r).c_str(), 1);
    ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
    const pid_t pid = spawn(o.command);
    if (pid < 0) break;
    pids.push_back(pid);
    gChildren[r] = pid;
    gChildCount = r + 1;
  }
  int code = static_cast<int>(pids.size()) == o.ranks ? 0 : kExitFailed;
  if (code != 0) forwardSignal(SIGTERM);
  size_t left = pids.size();
  while (left > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < gChildCount; ++i) {
      if (gChildren[i] != pid) continue;
      gChildren[i] = -1;
      --left;
      const int c = exitCode(status);
      if (c != 0 && code == 0) {
        code = c;
        if (left > 0) {
          std::fprintf(stderr, "trainscope-cli: rank %d exited with %d; stopping the other ranks\n", i, c);
          forwardSignal(SIGTERM);
        }
      }
    }
  }
  return code;
}

}  // namespace

bool isPythonCommand(const std::string& program) {
  const std::string base = fs::path(program).filename().string();
  if (base.rfind("python", 0) != 0) return false;
  for (size_t i = 6; i < base.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(base[i])) && base[i] != '.') return false;
  return true;
}

std::string pythonPackageDir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  for (const fs::path& d :
       {exe.parent_path() / ".." / "python", exe.parent_path() / ".." / "share" / "trainscope" / "python"}) {
    if (fs::exists(d / "trainscope" / "__init__.py", ec)) return fs::weakly_canonical(d, ec).string();
  }
  return {};
}

int runLaunch(const LaunchOptions& o) {
  if (o.command.empty()) {
    std::fprintf(stderr, "trainscope-cli: launch needs a command after --\n");
    return kExitUsage;
  }
  if (o.ranks < 1) {
    std::fprintf(stderr, "trainscope-cli: --ranks must be >= 1\n");
    return kExitUsage;
  }
  auto lib = agentLibrary();
  if (!lib) return fail(lib.status());
  std::string jobId = o.jobId;
  if (jobId.empty()) {
    auto id = newJobId();
    if (!id) return fail(id.status());
    jobId = id.value();
  }
  fs::path secretFile;
  ::setenv("TRAINSCOPE_JOB_ID", jobId.c_str(), 1);
  if (o.tcp) {
    auto s = writeSecret(jobId);
    if (!s) return fail(s.status());
    secretFile = s.value();
    ::setenv("TRAINSCOPE_LISTEN", "tcp", 1);
    ::setenv("TRAINSCOPE_SECRET_FILE", secretFile.c_str(), 1);
  }
  std::string preload = lib->string();
  if (const char* old = std::getenv("LD_PRELOAD"); old && *old) preload += std::string(":") + old;
  if (o.gpu) {  // CUPTI injection and the NCCL plugins live in the same library
    setDefault("CUDA_INJECTION64_PATH", lib->string());
    setDefault("NCCL_PROFILER_PLUGIN", lib->string());
    setDefault("NCCL_TUNER_PLUGIN", lib->string());
    std::error_code ec;
    if (const fs::path cupti = TRAINSCOPE_CUPTI_LIB; !cupti.empty() && fs::exists(cupti, ec))
      setDefault("NVTX_INJECTION64_PATH", cupti.string());
  }

  const bool torch =
      o.starter == LaunchOptions::Starter::Torch ||
      (o.starter == LaunchOptions::Starter::Auto && o.ranks > 1 && isPythonCommand(o.command[0]));
  // The trainscope Python package finds the agent through TRAINSCOPE_AGENT_LIB, and is
  // importable from the build tree.
  setDefault("TRAINSCOPE_AGENT_LIB", lib->string());
  if (const std::string py = pythonPackageDir(); !py.empty()) {
    const char* old = std::getenv("PYTHONPATH");
    ::setenv("PYTHONPATH", (old && *old ? py + ":" + old : py).c_str(), 1);
  }

  std::vector<std::string> argv;
  if (torch) {
    argv = o.command;
  } else if (o.ranks == 1) {
    ::setenv("LD_PRELOAD", preload.c_str(), 1);
    argv = o.command;
    // A one-rank Python job keeps the preload (the agent starts at load even without
    // trainscope.init()) and gets torch.distributed's env:// variables unless set, so that
    // init_process_group() works as it does with more ranks.
    if (isPythonCommand(o.command[0]) && o.starter != LaunchOptions::Starter::Mpi) {
      for (const char* v : {"RANK", "LOCAL_RANK"}) setDefault(v, "0");
      for (const char* v : {"WORLD_SIZE", "LOCAL_WORLD_SIZE"}) setDefault(v, "1");
      setDefault("MASTER_ADDR", "127.0.0.1");
      if (!std::getenv("MASTER_PORT")) setDefault("MASTER_PORT", std::to_string(freeLoopbackPort()));
    }
  } else {
    setDefault("OMPI_MCA_btl", "self,vader");
    setDefault("OMPI_MCA_oob_tcp_if_include", "lo");
    setDefault("OMPI_MCA_btl_tcp_if_include", "lo");
    argv = {"mpirun", "-np", std::to_string(o.ranks), "--oversubscribe"};
    if (::geteuid() == 0) {
      setDefault("OMPI_ALLOW_RUN_AS_ROOT", "1");
      setDefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
      argv.push_back("--allow-run-as-root");
    }
    argv.insert(argv.end(), {"-x", "LD_PRELOAD=" + preload, "-x", "TRAINSCOPE_JOB_ID"});
    for (const char* v :
         {"TRAINSCOPE_LISTEN", "TRAINSCOPE_SECRET_FILE", "TRAINSCOPE_RUNTIME_DIR", "TRAINSCOPE_DISABLE",
          "CUDA_INJECTION64_PATH", "NCCL_PROFILER_PLUGIN", "NCCL_TUNER_PLUGIN", "NVTX_INJECTION64_PATH",
          "TRAINSCOPE_CUPTI", "TRAINSCOPE_AGENT_LIB", "PYTHONPATH"})
      if (std::getenv(v)) argv.insert(argv.end(), {"-x", v});
    argv.insert(argv.end(), o.command.begin(), o.command.end());
  }
  // This machine's relay for the job (--relay): the one address front ends on other machines use.
  pid_t relayPid = -1;
  fs::path relaySecret;
  if (!o.relay.empty()) {
    if (secretFile.empty()) {
      auto s = writeSecret(jobId);
      if (!s) return fail(s.status());
      relaySecret = s.value();
    }
    std::error_code ec;
    const fs::path relayExe = fs::read_symlink("/proc/self/exe", ec).parent_path() / "trainscope-relay";
    auto dir = core::discovery::runtimeDir();
    if (!dir) return fail(dir.status());
    const fs::path ready = dir.value() / (jobId + ".relay");
    ::unlink(ready.c_str());
    const std::string secret = (secretFile.empty() ? relaySecret : secretFile).string();
    // --exit-when-idle: should this launcher be killed outright, the relay still ends with the job.
    relayPid = spawn({relayExe.string(), "--job", jobId, "--listen", o.relay, "--secret-file", secret, "--ready-file",
                      ready.string(), "--exit-when-idle", "30"});
    std::string where;
    for (int i = 0; i < 100 && where.empty() && relayPid > 0; ++i) {
      ::usleep(50000);
      std::ifstream f(ready);
      std::getline(f, where);
    }
    if (where.empty()) {
      if (relayPid > 0) ::kill(relayPid, SIGTERM);
      return fail(core::Status(core::ErrorCode::Io, "the relay did not start (" + relayExe.string() + ")"));
    }
    std::fprintf(stderr, "trainscope-cli: relay %s (secret %s): trainscope-cli jobs --host %s --secret-file %s\n",
                 where.c_str(), secret.c_str(), where.substr(4).c_str(), secret.c_str());
  }
  std::printf("job %s\n", jobId.c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "trainscope-cli: job %s: %d rank(s)%s%s%s, agent %s\n", jobId.c_str(), o.ranks,
               torch ? " (torch-style: RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT)" : "",
               o.tcp ? ", tcp with secret" : "", o.gpu ? ", CUDA injection + NCCL plugins" : "",
               lib->c_str());

  // Handlers first: a signal arriving between fork and their installation would be lost.
  auto oldInt = std::signal(SIGINT, forwardSignal);
  auto oldTerm = std::signal(SIGTERM, forwardSignal);
  int code = kExitFailed;
  if (torch) {
    code = runTorchRanks(o);
  } else {
    const pid_t child = spawn(argv);
    if (child < 0) {
      std::signal(SIGINT, oldInt);
      std::signal(SIGTERM, oldTerm);
      return fail(core::Status(core::ErrorCode::Io, "fork failed"));
    }
    gChildren[0] = child;
    gChildren[1] = relayPid;
    gChildCount = relayPid > 0 ? 2 : 1;
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    code = exitCode(status);
  }
  gChildCount = 0;
  std::signal(SIGINT, oldInt);
  std::signal(SIGTERM, oldTerm);
  // mpirun can return while ranks it killed after another one died are still exiting: a rank
  // still listening when the leftovers are removed keeps its socket, then dies without removing
  // it (tst_faults knobChangeInFlightWhenARankIsKilled, once under load). Wait, at most 5 s,
  // until no rank of the job is alive.
  for (int i = 0; i < 100; ++i) {
    bool alive = false;
    for (const auto& e : core::discovery::listEntries()) alive = alive || e.jobId == jobId;
    if (!alive) break;
    ::usleep(50000);
  }
  // Leftovers of ranks that died without cleaning up (discovery files and sockets), and the
  // secret: the job is over.
  core::discovery::removeJobLeftovers(jobId);
  if (!secretFile.empty()) ::unlink(secretFile.c_str());
  if (relayPid > 0) {
    ::kill(relayPid, SIGTERM);
    while (::waitpid(relayPid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  if (!relaySecret.empty()) ::unlink(relaySecret.c_str());
  return code;
}

void addLaunchCommand(CLI::App& app, Runner& run) {
  auto opts = std::make_shared<LaunchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "launch", "Run a command with the agent injected (under mpirun when --ranks > 1); prints the job id");
  cmd->add_option("--ranks", opts->ranks, "Number of ranks (mpirun -np, or torch-style processes)")
      ->capture_default_str();
  cmd->add_flag("--tcp", opts->tcp,
                "Agents listen on TCP 127.0.0.1 with a random shared secret (default: Unix sockets)");
  cmd->add_flag("--gpu,!--no-gpu", opts->gpu,
                "Set CUDA_INJECTION64_PATH, NCCL_PROFILER_PLUGIN, NCCL_TUNER_PLUGIN (to the agent) and "
                "NVTX_INJECTION64_PATH (to CUPTI); on by default when built with GPU support");
  cmd->add_option("--job-id", opts->jobId, "Use this job id instead of a generated one");
  cmd->add_option("--relay", opts->relay,
                  "Also start this machine's trainscope-relay for the job on ADDR:PORT (front ends elsewhere: "
                  "--host ADDR:PORT; docs/RELAY.md). It registers with $TRAINSCOPE_RELAY_COORDINATOR when set");
  auto* torch = cmd->add_flag_callback(
      "--torch", [opts] { opts->starter = LaunchOptions::Starter::Torch; },
      "Start the ranks torch-style (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; no mpirun, no preload): the "
      "default for a Python command with --ranks > 1");
  cmd->add_flag_callback(
         "--mpi", [opts] { opts->starter = LaunchOptions::Starter::Mpi; },
         "Start the ranks under mpirun even for a Python command (mpi4py jobs)")
      ->excludes(torch);
  cmd->add_option("COMMAND", opts->command, "Command and arguments (after --)")->required();
  cmd->callback([opts, &run] { run = [opts] { return runLaunch(*opts); }; });
}

}  // namespace trainscope::cli
