// Discovery of running agents on this machine. Each rank's agent writes a small text file into
// the per-user runtime directory and removes it on exit; clients list the directory and ignore
// files whose pid is gone (stale after a crash).
//
// Runtime directory: $TRAINSCOPE_RUNTIME_DIR, else $XDG_RUNTIME_DIR/trainscope, else
// /tmp/trainscope-<uid>. Created with mode 0700; refused if owned by another user or
// group/world-accessible. File name: <job id>.<rank>.agent; format: one `key=value` per line:
//   version=1  job_id=...  rank=3  world_size=4  local_rank=3  host=...  pid=1234
//   start_time_ns=...  endpoint=unix:/run/user/0/trainscope/<job>.3.sock | tcp:127.0.0.1:40123
//   secret_file=/path (TCP only)
// Written to a temporary name and renamed, so readers never see half a file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "trainscope/core/base/status.h"

namespace trainscope::core::discovery {

struct Entry {
  std::string jobId;
  int32_t rank = 0;
  int32_t worldSize = 1;
  int32_t localRank = 0;
  std::string host;
  int64_t pid = 0;
  int64_t startTimeNs = 0;
  std::string endpoint;    // "unix:/path" or "tcp:host:port"
  std::string secretFile;  // empty for unix sockets
  std::filesystem::path file;  // where this entry was read from
};

// The runtime directory, created (0700) if needed and checked (owner = us, no group/other bits).
// With create = false (readers and removers: listing jobs, removing an entry or a job's
// leftovers) a missing directory is NotFound and nothing is created: a process that cleans up
// after the directory was removed (a test's temporary directory, a logout) must not bring it back.
Result<std::filesystem::path> runtimeDir(bool create = true);

Status writeEntry(const Entry& e);   // to runtimeDir()/<job>.<rank>.agent (atomic rename)
void removeEntry(const Entry& e);    // best effort, never fails loudly
std::string entryFileName(const std::string& jobId, int32_t rank);

// After a job has ended (`launch`, once mpirun returned): removes what its ranks left in the
// runtime directory -- every <job>.<rank>.agent, and every <job>.<rank>.sock nothing accepts
// connections on (a rank killed by SIGKILL, or by mpirun after another rank died, cleans up
// nothing). Best effort, never fails loudly.
void removeJobLeftovers(const std::string& jobId);

// All live entries (stale ones -- pid not alive -- are skipped), sorted by job id then rank.
std::vector<Entry> listEntries();
Result<Entry> parseEntry(const std::string& text, const std::filesystem::path& file);

}  // namespace trainscope::core::discovery
