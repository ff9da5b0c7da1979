// libFuzzer target for the wire decoder (built with -DTRAINSCOPE_FUZZ=ON and clang; see
// tests/CMakeLists.txt). Properties checked on every input:
//  - FrameDecoder and decodePayload never crash, hang or over-allocate (ASan/UBSan watch);
//  - whatever decodes re-encodes to a frame that decodes again to the same bytes.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "trainscope/core/wire/protocol.h"

using namespace trainscope::core::wire;

namespace {

void checkRoundTrip(const Message& m) {
  std::vector<uint8_t> a;
  encode(m, a);
  if (a.size() > kHeaderSize + kMaxFramePayload) return;  // too big to send; refused by design
  FrameDecoder d;
  d.feed(a);
  auto back = d.next();
  if (!back || !back.value()) __builtin_trap();
  std::vector<uint8_t> b;
  encode(*back.value(), b);
  if (a != b) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // 1. The bytes as a stream, fed in two pieces to exercise the incremental path.
  FrameDecoder d;
  const size_t cut = size > 0 ? data[0] % (size + 1) : 0;
  d.feed({data, cut});
  d.feed({data + cut, size - cut});
  for (int i = 0; i < 64; ++i) {
    auto m = d.next();
    if (!m || !m.value()) break;
    checkRoundTrip(*m.value());
  }
  // 2. The same stream as a relay reads it (nextRaw: header checks, no payload decoding); what
  //    comes out is whole frames, in order, each of which the full decoder takes or refuses.
  {
    FrameDecoder raw;
    raw.feed({data, size});
    std::vector<uint8_t> frames;
    for (int i = 0; i < 64; ++i) {
      auto r = raw.nextRaw(frames);
      if (!r || !r.value()) break;
    }
    FrameDecoder again;
    again.feed(frames);
    for (int i = 0; i < 64; ++i) {
      auto m = again.next();
      if (!m || !m.value()) break;
    }
  }
  // 3. The bytes as one payload of a chosen type (skips the header checks).
  if (size >= 2) {
    const auto type = static_cast<MsgType>(1 + data[0] % static_cast<uint8_t>(MsgType::RelayRegister));
    auto m = decodePayload(type, data[1] & kFlagZstd, {data + 2, size - 2});
    if (m) checkRoundTrip(m.value());
  }
  return 0;
}
