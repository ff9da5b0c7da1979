// Cost of the per-frame MAC on TCP (docs/BENCHMARKS.md, "Control channel under attack"): seals
// frames of 256 B, 64 KiB and 1 MiB payload with wire::FrameSealer (libsodium HMAC-SHA256 over
// header + payload, plus the copy the agent's server makes of a shared frame) and prints
// microseconds per frame and MB/s. Anchor in the same run: the copy alone (memcpy of the frame).
//
//   bench_frame_mac
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "trainscope/core/wire/protocol.h"

using namespace trainscope::core::wire;

int main() {
  SessionKey key{};
  key[0] = 1;
  FrameSealer sealer;
  sealer.start(key, MacDirection::AgentToClient);
  std::printf("| payload | sealed: us/frame | sealed: MB/s | copy only: us/frame |\n|---:|---:|---:|---:|\n");
  for (size_t size : {size_t{256}, size_t{64} << 10, size_t{1} << 20}) {
    std::vector<uint8_t> frame;
    encode(Message{ErrorMsg{1, std::string(size, 'x')}}, frame);
    const int n = size < 4096 ? 200000 : size < (1u << 20) ? 2000 : 200;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      std::vector<uint8_t> f = frame;
      sealer.seal(f);
    }
    const double sealed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    t0 = std::chrono::steady_clock::now();
    volatile uint8_t sink = 0;  // keeps the copies from being optimised away
    for (int i = 0; i < n; ++i) {
      std::vector<uint8_t> f = frame;
      sink = static_cast<uint8_t>(sink + f[static_cast<size_t>(i) % f.size()]);
    }
    const double copied = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("| %zu B | %.2f | %.0f | %.2f |\n", size, sealed / n * 1e6,
                static_cast<double>(frame.size()) * n / sealed / 1e6, copied / n * 1e6);
  }
  return 0;
}
