// Discovery files (see discovery.h for the format). Part of trainscope_wire because the agent
// writes them; no exceptions escape: std::filesystem calls use their error_code overloads.
#include "trainscope/core/wire/discovery.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

namespace trainscope::core::discovery {
namespace {

namespace fs = std::filesystem;
constexpr size_t kMaxEntryBytes = 64 * 1024;  // an entry is a few hundred bytes; refuse junk

std::string errnoText() {
  return std::strerror(errno);
}

// Creates one directory level with mode 0700 (EEXIST is fine: it is checked afterwards).
Status makeDir(const fs::path& p) {
  if (::mkdir(p.c_str(), 0700) != 0 && errno != EEXIST)
    return Status(ErrorCode::Io, "cannot create runtime directory " + p.string() + ": " + errnoText());
  return Status::ok();
}

// A job id becomes part of a file name: keep it to one path component of printable characters.
bool validJobId(const std::string& id) {
  if (id.empty() || id == "." || id == ".." || id.size() > 200) return false;
  return std::none_of(id.begin(), id.end(),
                      [](char c) { return c == '/' || c == '\0' || c == '\n' || c == '\r'; });
}

template <typename T>
bool parseInt(const std::string& s, T& out) {
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && p == end && !s.empty();
}

bool pidAlive(int64_t pid) {
  if (pid <= 0 || pid > INT32_MAX) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

bool readSmallFile(const fs::path& p, std::string& out) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  char buf[4096];
  bool ok = true;
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = n == 0;
      break;
    }
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > kMaxEntryBytes) {
      ok = false;
      break;
    }
  }
  ::close(fd);
  return ok;
}

}  // namespace

Result<fs::path> runtimeDir(bool create) {
  fs::path dir;
  bool createParents = false;
  if (const char* e = std::getenv("TRAINSCOPE_RUNTIME_DIR"); e && *e) {
    dir = e;
    createParents = true;  // an explicit choice (tests, launchers): create what is missing
  } else if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x) {
    dir = fs::path(x) / "trainscope";
  } else {
    dir = "/tmp/trainscope-" + std::to_string(::geteuid());
  }
  if (!create) {
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0 && errno == ENOENT)
      return Status(ErrorCode::NotFound, "no runtime directory " + dir.string());
  } else {
    if (createParents && dir.has_parent_path()) {
      std::error_code ec;
      fs::create_directories(dir.parent_path(), ec);  // errors surface in makeDir below
    }
    if (Status s = makeDir(dir); !s.isOk()) return s;
  }
  // lstat: a symlink planted in /tmp by someone else must not redirect us.
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0)
    return Status(ErrorCode::Io, "cannot stat runtime directory " + dir.string() + ": " + errnoText());
  if (!S_ISDIR(st.st_mode))
    return Status(ErrorCode::InvalidArgument, "runtime directory " + dir.string() + " is not a directory");
  if (st.st_uid != ::geteuid())
    return Status(ErrorCode::InvalidArgument, "runtime directory " + dir.string() + " is owned by uid " +
                                                  std::to_string(st.st_uid) + ", not by us (uid " +
                                                  std::to_string(::geteuid()) + "); refusing to use it");
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status(ErrorCode::InvalidArgument,
                  "runtime directory " + dir.string() + " has mode " + mode +
                      " (group/other access); refusing to use it -- chmod 700 it");
  }
  return dir;
}

std::string entryFileName(const std::string& jobId, int32_t rank) {
  return jobId + "." + std::to_string(rank) + ".agent";
}

Status writeEntry(const Entry& e) {
  if (!validJobId(e.jobId))
    return Status(ErrorCode::InvalidArgument, "job id \"" + e.jobId + "\" cannot name a discovery file");
  auto dir = runtimeDir();
  if (!dir) return dir.status();
  std::string text = "version=1\njob_id=" + e.jobId + "\nrank=" + std::to_string(e.rank) +
                     "\nworld_size=" + std::to_string(e.worldSize) +
                     "\nlocal_rank=" + std::to_string(e.localRank) + "\nhost=" + e.host +
                     "\npid=" + std::to_string(e.pid) + "\nstart_time_ns=" + std::to_string(e.startTimeNs) +
                     "\nendpoint=" + e.endpoint + "\n";
  if (!e.secretFile.empty()) text += "secret_file=" + e.secretFile + "\n";
  const fs::path final = dir.value() / entryFileName(e.jobId, e.rank);
  const fs::path tmp =
      dir.value() / ("." + entryFileName(e.jobId, e.rank) + ".tmp" + std::to_string(::getpid()));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Status(ErrorCode::Io, "cannot write " + tmp.string() + ": " + errnoText());
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = errnoText();
      ::close(fd);
      ::unlink(tmp.c_str());
      return Status(ErrorCode::Io, "cannot write " + tmp.string() + ": " + why);
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), final.c_str()) != 0) {
    const std::string why = errnoText();
    ::unlink(tmp.c_str());
    return Status(ErrorCode::Io, "cannot rename " + tmp.string() + " to " + final.string() + ": " + why);
  }
  return Status::ok();
}

void removeEntry(const Entry& e) {
  fs::path p = e.file;
  if (p.empty()) {
    if (!validJobId(e.jobId)) return;
    auto dir = runtimeDir(/*create=*/false);
    if (!dir) return;
    p = dir.value() / entryFileName(e.jobId, e.rank);
  }
  ::unlink(p.c_str());
}

Result<Entry> parseEntry(const std::string& text, const fs::path& file) {
  std::map<std::string, std::string> kv;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty()) continue;
    const size_t eq = line.find('=');
    if (eq == std::string::npos || eq == 0)
      return Status(ErrorCode::Corrupt, file.string() + ": line without key=value: \"" + line + "\"");
    kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  auto bad = [&file](const std::string& what) {
    return Status(ErrorCode::Corrupt, file.string() + ": " + what);
  };
  if (kv["version"] != "1") return bad("unsupported discovery file version \"" + kv["version"] + "\"");
  Entry e;
  e.file = file;
  e.jobId = kv["job_id"];
  if (!validJobId(e.jobId)) return bad("missing or invalid job_id");
  if (!parseInt(kv["rank"], e.rank) || e.rank < 0) return bad("missing or invalid rank");
  if (!parseInt(kv["pid"], e.pid) || e.pid <= 0) return bad("missing or invalid pid");
  if (kv.count("world_size") && !parseInt(kv["world_size"], e.worldSize)) return bad("invalid world_size");
  if (kv.count("local_rank") && !parseInt(kv["local_rank"], e.localRank)) return bad("invalid local_rank");
  if (kv.count("start_time_ns") && !parseInt(kv["start_time_ns"], e.startTimeNs))
    return bad("invalid start_time_ns");
  if (e.worldSize < 1 || e.rank >= e.worldSize) return bad("rank outside world_size");
  e.host = kv["host"];
  e.endpoint = kv["endpoint"];
  if (e.endpoint.rfind("unix:", 0) != 0 && e.endpoint.rfind("tcp:", 0) != 0)
    return bad("endpoint \"" + e.endpoint + "\" is neither unix:PATH nor tcp:HOST:PORT");
  e.secretFile = kv["secret_file"];
  return e;
}

namespace {
// Whether something accepts connections on the Unix socket at path (a live agent, maybe one
// that just re-bound the same name for a new run of the same job and rank).
bool someoneListens(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path) return true;  // cannot tell: keep it
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return true;
  const bool refused = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 &&
                       (errno == ECONNREFUSED || errno == ENOENT);
  ::close(fd);
  return !refused;
}

bool inside(const fs::path& dir, const std::string& path) {
  return !path.empty() && fs::path(path).parent_path() == dir;
}

// An agent killed by a signal it could not clean up after (SIGKILL, or SIGTERM in a process
// that handles SIGTERM itself) leaves its entry, socket and secret behind; the first reader
// that finds its pid gone removes them. Only files in our own runtime directory, only when the
// entry still names the dead pid (re-read just before), and a socket only when nobody listens
// on it any more: a new run of the same job and rank may already have bound the same name.
void removeStale(const fs::path& dir, const Entry& e) {
  std::string again;
  if (!readSmallFile(e.file, again)) return;
  auto now = parseEntry(again, e.file);
  if (!now || now->pid != e.pid || pidAlive(now->pid)) return;
  if (e.endpoint.rfind("unix:", 0) == 0) {
    const std::string sock = e.endpoint.substr(5);
    if (inside(dir, sock) && !someoneListens(sock)) ::unlink(sock.c_str());
  }
  // Only the secret this rank's agent generated for itself; a job-wide one (launch --tcp's
  // <job>.secret) still serves the job's other ranks.
  if (inside(dir, e.secretFile) &&
      fs::path(e.secretFile).filename() == e.jobId + "." + std::to_string(e.rank) + ".secret")
    ::unlink(e.secretFile.c_str());
  ::unlink(e.file.c_str());
}
}  // namespace

void removeJobLeftovers(const std::string& jobId) {
  auto dir = runtimeDir(/*create=*/false);
  if (!dir || jobId.empty()) return;
  std::error_code ec;
  std::vector<fs::path> agents, sockets;
  for (fs::directory_iterator it(dir.value(), ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    const std::string name = p.filename().string();
    if (name.rfind(jobId + ".", 0) != 0) continue;
    if (p.extension() == ".agent") agents.push_back(p);
    if (p.extension() == ".sock") sockets.push_back(p);
  }
  for (const auto& p : agents) fs::remove(p, ec);
  for (const auto& p : sockets)
    if (!someoneListens(p.string())) ::unlink(p.c_str());
}

std::vector<Entry> listEntries() {
  std::vector<Entry> out;
  auto dir = runtimeDir(/*create=*/false);
  if (!dir) return out;
  std::error_code ec;
  for (fs::directory_iterator it(dir.value(), ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    const std::string name = p.filename().string();
    if (name.empty() || name[0] == '.' || p.extension() != ".agent") continue;
    std::string text;
    if (!readSmallFile(p, text)) continue;
    auto e = parseEntry(text, p);
    if (!e) continue;         // unreadable: skip
    if (!pidAlive(e->pid)) {  // stale (the agent died without cleaning up)
      removeStale(dir.value(), e.value());
      continue;
    }
    out.push_back(std::move(e).value());
  }
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) {
    return a.jobId != b.jobId ? a.jobId < b.jobId : a.rank < b.rank;
  });
  return out;
}

}  // namespace trainscope::core::discovery
