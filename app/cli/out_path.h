// The one rule for every `--out` of trainscope-cli (issue 40, "nothing lost while reporting
// success"): `export S.tsdb --out S.tsdb` replaced a 100 MB session with 758 bytes and exited 0.
//
//  - An output that is one of the inputs (the same file: device and inode, not the same string)
//    or any existing file is refused -- unless --force.
//  - The output is written to a temporary file beside the target and renamed over it only once
//    complete, so a failure (or an input still being read) never leaves the old file damaged;
//    with --force even `export S.tsdb --out S.tsdb` is safe: the input is read whole first.
#pragma once

#include <string>
#include <vector>

#include "trainscope/core/base/status.h"

namespace trainscope::cli {

// Ok, or why `out` may not be written: InvalidArgument "<out>: is also an input (<in>); ..." or
// "<out>: already exists; pass --force to replace it". Inputs that do not exist are ignored
// (their reader says so); a file inside an input directory is an existing file like any other.
core::Status checkOutputPath(const std::string& out, const std::vector<std::string>& inputs, bool force);

// Where a command writes its output: a temporary file beside the target (same directory, so the
// final rename is atomic), renamed over the target by commit(). Destroyed uncommitted (an error
// on the way), it removes the temporary file and leaves the target as it was.
class OutputFile {
 public:
  struct Options {
    // A .tsdb: SQLite's side files (-wal, -shm, -journal) of the temporary file are removed with
    // it, and those an old session left at the target are removed after the rename (a stale -wal
    // would be replayed into the new file).
    bool session = false;
    // Write the target itself when it does not exist yet (record: a killed recording then still
    // leaves its committed events at the path the user named).
    bool directWhenNew = false;
  };
  // Checks the path (checkOutputPath) and picks where to write.
  static core::Result<OutputFile> create(const std::string& out, const std::vector<std::string>& inputs, bool force,
                                         Options options);
  static core::Result<OutputFile> create(const std::string& out, const std::vector<std::string>& inputs,
                                         bool force) {
    return create(out, inputs, force, Options{});
  }

  OutputFile(OutputFile&& o) noexcept;
  OutputFile& operator=(OutputFile&&) = delete;
  OutputFile(const OutputFile&) = delete;
  ~OutputFile();

  // The file to write now (the temporary file, or the target itself when written directly).
  const std::string& writePath() const { return writePath_; }
  const std::string& target() const { return target_; }
  bool isTemporary() const { return writePath_ != target_; }
  // Renames the written file over the target (keeping the old file's permissions).
  core::Status commit();
  // Writes `text` to writePath() and commits.
  core::Status writeText(const std::string& text);

 private:
  OutputFile() = default;
  void removeTemporary();

  std::string target_, writePath_;
  Options options_;
  bool done_ = false;
};

}  // namespace trainscope::cli
