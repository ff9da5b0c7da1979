// `trainscope-cli launch [--ranks N] [--tcp] [--no-gpu] -- CMD ARGS...`: run any command with the
// agent preloaded, under mpirun when N > 1, and forward its exit code.
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
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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

pid_t gChild = -1;
void forwardSignal(int sig) {
  if (gChild > 0) ::kill(gChild, sig);
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

}  // namespace

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

  std::vector<std::string> argv;
  if (o.ranks == 1) {
    ::setenv("LD_PRELOAD", preload.c_str(), 1);
    argv = o.command;
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
          "TRAINSCOPE_CUPTI"})
      if (std::getenv(v)) argv.insert(argv.end(), {"-x", v});
    argv.insert(argv.end(), o.command.begin(), o.command.end());
  }
  std::printf("job %s\n", jobId.c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "trainscope-cli: job %s: %d rank(s)%s%s, agent %s\n", jobId.c_str(), o.ranks,
               o.tcp ? ", tcp with secret" : "", o.gpu ? ", CUDA injection + NCCL plugins" : "", lib->c_str());

  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  gChild = ::fork();
  if (gChild < 0) return fail(core::Status(core::ErrorCode::Io, "fork failed"));
  if (gChild == 0) {
    ::execvp(cargv[0], cargv.data());
    std::fprintf(stderr, "trainscope-cli: cannot run %s: %s\n", cargv[0], std::strerror(errno));
    ::_exit(127);
  }
  auto oldInt = std::signal(SIGINT, forwardSignal);
  auto oldTerm = std::signal(SIGTERM, forwardSignal);
  int status = 0;
  while (::waitpid(gChild, &status, 0) < 0 && errno == EINTR) {
  }
  std::signal(SIGINT, oldInt);
  std::signal(SIGTERM, oldTerm);
  // Leftovers of ranks that died without cleaning up, and the secret: the job is over.
  if (auto dir = core::discovery::runtimeDir(); dir.isOk()) {
    std::error_code ec;
    for (fs::directory_iterator it(dir.value(), ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.rfind(jobId + ".", 0) == 0 && it->path().extension() == ".agent") fs::remove(it->path(), ec);
    }
  }
  if (!secretFile.empty()) ::unlink(secretFile.c_str());
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kExitFailed;
}

void addLaunchCommand(CLI::App& app, Runner& run) {
  auto opts = std::make_shared<LaunchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "launch", "Run a command with the agent injected (under mpirun when --ranks > 1); prints the job id");
  cmd->add_option("--ranks", opts->ranks, "Number of ranks (mpirun -np)")->capture_default_str();
  cmd->add_flag("--tcp", opts->tcp,
                "Agents listen on TCP 127.0.0.1 with a random shared secret (default: Unix sockets)");
  cmd->add_flag("--gpu,!--no-gpu", opts->gpu,
                "Set CUDA_INJECTION64_PATH, NCCL_PROFILER_PLUGIN, NCCL_TUNER_PLUGIN (to the agent) and "
                "NVTX_INJECTION64_PATH (to CUPTI); on by default when built with GPU support");
  cmd->add_option("--job-id", opts->jobId, "Use this job id instead of a generated one");
  cmd->add_option("COMMAND", opts->command, "Command and arguments (after --)")->required();
  cmd->callback([opts, &run] { run = [opts] { return runLaunch(*opts); }; });
}

}  // namespace trainscope::cli
