// Import speed and memory of Chrome/Kineto traces (docs/BENCHMARKS.md, "Importing PyTorch
// traces"). One file per process, so that peak RSS is this import's:
//   bench_import stream FILE   -- importChromeTraceFile: streamed through zlib (plain or .gz)
//   bench_import whole FILE    -- the previous path: the whole file read into a string, then parsed
// Prints one JSON line: bytes (on disk), json_events (traceEvents entries), events (kept),
// wall_s, cpu_s, MB/s and events/s (per CPU second: the machine is shared), peak_rss_mb.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "trainscope/core/interop/chrome_trace.h"

using namespace trainscope::core;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: bench_import stream|whole FILE\n");
    return 2;
  }
  const std::string mode = argv[1];
  const std::filesystem::path path = argv[2];
  const auto t0 = std::chrono::steady_clock::now();
  const std::clock_t c0 = std::clock();
  Result<TraceStore> r = Status(ErrorCode::InvalidArgument, "mode");
  if (mode == "stream") {
    r = importChromeTraceFile(path);
  } else if (mode == "whole") {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    r = importChromeTrace(text, path.string());
  }
  const double cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r) {
    std::fprintf(stderr, "%s\n", r.status().toString().c_str());
    return 1;
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double bytes = static_cast<double>(std::filesystem::file_size(path));
  const double kept = static_cast<double>(r->eventCount());
  std::printf(
      "{\"mode\":\"%s\",\"file\":\"%s\",\"bytes\":%.0f,\"events\":%.0f,\"wall_s\":%.3f,\"cpu_s\":%.3f,"
      "\"mb_per_cpu_s\":%.1f,\"events_per_cpu_s\":%.0f,\"peak_rss_mb\":%.1f}\n",
      mode.c_str(), path.filename().c_str(), bytes, kept, wall, cpu, bytes / 1e6 / cpu, kept / cpu,
      static_cast<double>(ru.ru_maxrss) / 1024.0);
  return 0;
}
