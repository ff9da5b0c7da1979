// A fuzz input written to a file, for readers that take a path (SQLite files: .tsdb, nsys
// exports): on tmpfs when there is one, named per process, with SQLite's side files removed
// before and after each input.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace fuzz {

class TempInput {
 public:
  TempInput(const char* stem, const char* extension) {
    const char* base = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    path_ = std::string(base) + "/" + stem + "." + std::to_string(::getpid()) + extension;
  }
  const std::string& path() const { return path_; }
  // Replaces the file with the input (a write that fails is the harness's fault: abort).
  void write(const uint8_t* data, size_t size) const {
    remove();
    FILE* f = std::fopen(path_.c_str(), "wb");
    if (!f) std::abort();
    const bool ok = std::fwrite(data, 1, size, f) == size;
    std::fclose(f);
    if (!ok) std::abort();
  }
  void remove() const {
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) ::unlink((path_ + suffix).c_str());
  }

 private:
  std::string path_;
};

}  // namespace fuzz
