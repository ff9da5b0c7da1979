// Non-blocking stream sockets with poll() timeouts, for AgentClient. Private to core.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "trainscope/core/base/status.h"

namespace trainscope::core::net {

// Opens and connects "unix:/path" or "tcp:host:port" (non-blocking, close-on-exec).
Result<int> connectEndpoint(const std::string& endpoint, int timeoutMs);
// Writes all bytes (MSG_NOSIGNAL: a dead peer is an error, not SIGPIPE).
Status sendAll(int fd, std::span<const uint8_t> bytes, int timeoutMs);
// Waits up to timeoutMs for fd to become readable; false on timeout.
Result<bool> waitReadable(int fd, int timeoutMs);

}  // namespace trainscope::core::net
