// Payload encoding of each message type (frame handling lives in frame.cpp). Private.
#pragma once

#include <vector>

#include "trainscope/core/wire/protocol.h"
#include "wire/codec_io.h"

namespace trainscope::core::wire::detail {

void encodePayload(const Message& m, std::vector<uint8_t>& out);
// Decodes a (decompressed) payload of the given type; r.ok() is false on malformed input.
Message decodeMessage(MsgType type, Reader& r);
bool isKnownType(uint16_t type);

}  // namespace trainscope::core::wire::detail
