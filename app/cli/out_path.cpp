#include "out_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <system_error>

namespace trainscope::cli {
namespace fs = std::filesystem;

namespace {

// The same file as `out` (device and inode; symbolic and hard links included).
bool sameFile(const struct stat& out, const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && st.st_dev == out.st_dev && st.st_ino == out.st_ino;
}

}  // namespace

core::Status checkOutputPath(const std::string& out, const std::vector<std::string>& inputs, bool force) {
  if (out.empty()) return {core::ErrorCode::InvalidArgument, "the output path is empty"};
  struct stat outSt {};
  if (::stat(out.c_str(), &outSt) != 0) return core::Status::ok();  // nothing there yet
  if (S_ISDIR(outSt.st_mode))
    return {core::ErrorCode::InvalidArgument, out + ": is a directory; name the file to write"};
  for (const std::string& in : inputs) {
    if (sameFile(outSt, in)) {
      // With --force the input is read whole before the output replaces it (OutputFile).
      if (force) continue;
      return {core::ErrorCode::InvalidArgument,
              out + ": is also an input (" + in +
                  "); writing it would destroy what is being read. Name another --out, or pass --force to "
                  "replace the input once the output is complete"};
    }
  }
  if (!force)
    return {core::ErrorCode::InvalidArgument,
            out + ": already exists; pass --force to replace it (or name another --out)"};
  return core::Status::ok();
}

core::Result<OutputFile> OutputFile::create(const std::string& out, const std::vector<std::string>& inputs,
                                            bool force, Options options) {
  if (core::Status st = checkOutputPath(out, inputs, force); !st) return st;
  OutputFile f;
  f.options_ = options;
  std::error_code ec;
  const bool exists = fs::symlink_status(out, ec).type() != fs::file_type::not_found && !ec;
  // Through a symbolic link the file it names is replaced, not the link.
  f.target_ = out;
  if (exists && fs::is_symlink(out, ec)) {
    const fs::path resolved = fs::canonical(out, ec);
    if (!ec) f.target_ = resolved.string();
  }
  if (!exists && options.directWhenNew) {
    f.writePath_ = f.target_;
  } else {
    // Beside the target: the rename stays within one file system (atomic).
    f.writePath_ = f.target_ + ".writing-" + std::to_string(::getpid());
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(f.writePath_ + suffix, ec);
  }
  return f;
}

OutputFile::OutputFile(OutputFile&& o) noexcept
    : target_(std::move(o.target_)), writePath_(std::move(o.writePath_)), options_(o.options_), done_(o.done_) {
  o.done_ = true;
}

OutputFile::~OutputFile() {
  if (!done_) removeTemporary();
}

void OutputFile::removeTemporary() {
  if (!isTemporary()) return;  // written directly: what was written stays (record's contract)
  std::error_code ec;
  fs::remove(writePath_, ec);
  if (options_.session)
    for (const char* suffix : {"-wal", "-shm", "-journal"}) fs::remove(writePath_ + suffix, ec);
}

core::Status OutputFile::commit() {
  if (done_) return {core::ErrorCode::InvalidArgument, target_ + ": already committed"};
  done_ = true;
  if (!isTemporary()) return core::Status::ok();
  std::error_code ec;
  // The replaced file's permissions carry over (a session shared read-only stays so).
  if (const auto old = fs::status(target_, ec); !ec && fs::exists(old))
    fs::permissions(writePath_, old.permissions(), ec);
  ec.clear();
  fs::rename(writePath_, target_, ec);
  if (ec) {
    removeTemporary();
    return {core::ErrorCode::Io, target_ + ": cannot write: " + ec.message()};
  }
  if (options_.session) {
    // The old session's side files would be replayed into (or confuse) the new one.
    for (const char* suffix : {"-wal", "-shm", "-journal"}) fs::remove(target_ + suffix, ec);
    for (const char* suffix : {"-wal", "-shm", "-journal"}) fs::remove(writePath_ + suffix, ec);
  }
  return core::Status::ok();
}

core::Status OutputFile::writeText(const std::string& text) {
  {
    std::ofstream out(writePath_, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) return {core::ErrorCode::Io, target_ + ": cannot write the file"};
  }
  return commit();
}

}  // namespace trainscope::cli
