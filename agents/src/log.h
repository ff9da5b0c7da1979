// One-line diagnostics to stderr, always prefixed so users can tell them from their job's output.
#pragma once

#include <cstdarg>
#include <cstdio>

namespace trainscope::agent {

__attribute__((format(printf, 1, 2))) inline void logLine(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "trainscope-agent: %s\n", buf);
}

}  // namespace trainscope::agent
