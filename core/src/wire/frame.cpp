// Frames: header, optional zstd compression, and the incremental FrameDecoder.
//
// The decoder validates a header as soon as its 16 bytes are there, so an oversized or foreign
// frame is refused before any of its payload is buffered; an error is sticky and later bytes are
// discarded (the caller closes the connection).
#include <zstd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>

#include "trainscope/core/wire/protocol.h"
#include "wire/messages.h"

namespace trainscope::core::wire {
namespace {

// Batches below this stay uncompressed: zstd's frame overhead and CPU are not worth it.
constexpr size_t kCompressThreshold = 4096;
constexpr int kZstdLevel = 1;  // the agent compresses on the training host: keep it cheap
constexpr uint64_t kMaxDecompressed = static_cast<uint64_t>(kMaxFramePayload) * 4;
constexpr uint64_t kMaxRatio = 1024;  // decompressed / compressed

// The largest decompressed size accepted for a compressed payload of n bytes. Real batches
// compress 5-50x; a few bytes claiming 64 MiB is a bomb (or garbage) and must not make us
// allocate. encode() only compresses within this limit, so our own frames are never refused.
// One compression / decompression context per thread, reused: ZSTD_compress() would set up
// (allocate and clear) a fresh context for every batch, which costs ~40 % of compressing a
// 60 KB batch at level 1 on the agent's drain thread.
ZSTD_CCtx* compressionContext() {
  thread_local std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> ctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
  return ctx.get();
}
ZSTD_DCtx* decompressionContext() {
  thread_local std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> ctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  return ctx.get();
}

uint64_t decompressLimit(size_t n) {
  return std::min<uint64_t>(kMaxDecompressed, n * kMaxRatio + (64u << 10));
}

uint32_t le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}
uint16_t le16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | p[1] << 8);
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

Status wireError(ErrorCode code, const std::string& what) {
  return Status(code, "wire protocol: " + what);
}

// Checks a header; Ok when the frame may be read.
Status checkHeader(const uint8_t* h) {
  const uint32_t magic = le32(h);
  if (magic != kMagic)
    return wireError(ErrorCode::WrongMagic,
                     "wrong magic " + hex32(magic) + " (expected " + hex32(kMagic) +
                         " \"TSWP\"; the peer does not speak the Trainscope protocol)");
  const uint16_t version = le16(h + 4);
  if (version != kProtocolVersion)
    return wireError(ErrorCode::InvalidArgument, "unsupported protocol version " + std::to_string(version) +
                                                     " (this build speaks " +
                                                     std::to_string(kProtocolVersion) + ")");
  const uint16_t type = le16(h + 6);
  if (!detail::isKnownType(type))
    return wireError(ErrorCode::Corrupt, "unknown message type " + std::to_string(type));
  const uint32_t length = le32(h + 8);
  if (length > kMaxFramePayload)
    return wireError(ErrorCode::Corrupt, "frame payload length " + std::to_string(length) +
                                             " exceeds the limit of " + std::to_string(kMaxFramePayload) +
                                             " bytes");
  const uint32_t flags = le32(h + 12);
  if ((flags & ~(kFlagZstd | kFlagMac)) != 0)
    return wireError(ErrorCode::Corrupt, "unknown frame flags " + hex32(flags));
  return Status::ok();
}

void putHeader(std::vector<uint8_t>& out, size_t at, MsgType type, uint32_t length, uint32_t flags) {
  uint8_t* h = out.data() + at;
  auto put32 = [](uint8_t* p, uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
  };
  put32(h, kMagic);
  h[4] = static_cast<uint8_t>(kProtocolVersion & 0xff);
  h[5] = static_cast<uint8_t>(kProtocolVersion >> 8);
  h[6] = static_cast<uint8_t>(static_cast<uint16_t>(type) & 0xff);
  h[7] = static_cast<uint8_t>(static_cast<uint16_t>(type) >> 8);
  put32(h + 8, length);
  put32(h + 12, flags);
}

}  // namespace

MsgType typeOf(const Message& m) {
  // The variant's alternatives are declared in MsgType order (JobInfo is the Welcome payload).
  static_assert(std::variant_size_v<Message> == static_cast<size_t>(MsgType::RelayRegister));
  static_assert(std::is_same_v<std::variant_alternative_t<3, Message>, JobInfo>);
  static_assert(std::is_same_v<std::variant_alternative_t<6, Message>, EventBatch>);
  return static_cast<MsgType>(m.index() + 1);
}

void encode(const Message& m, std::vector<uint8_t>& out) {
  const size_t at = out.size();
  if (!std::holds_alternative<EventBatch>(m)) {
    out.resize(at + kHeaderSize);
    detail::encodePayload(m, out);
    putHeader(out, at, typeOf(m), static_cast<uint32_t>(out.size() - at - kHeaderSize), 0);
    return;
  }
  // Event batches are encoded into per-thread scratch buffers that keep their capacity, then
  // only the final bytes are copied into `out`. Fresh buffers per batch cost the agent's drain
  // thread more than the encoding itself: large vectors come from mmap, and the kernel zeroes
  // every new page (clear_page_erms was a quarter of the drain's time in a perf profile).
  thread_local std::vector<uint8_t> raw, packed;
  raw.clear();
  detail::encodePayload(m, raw);
  const uint8_t* bytes = raw.data();
  size_t length = raw.size();
  uint32_t flags = 0;
  if (length > kCompressThreshold) {
    const size_t bound = ZSTD_compressBound(length);
    if (packed.size() < bound) packed.resize(bound);
    ZSTD_CCtx* cctx = compressionContext();
    const size_t n = cctx ? ZSTD_compressCCtx(cctx, packed.data(), bound, raw.data(), length, kZstdLevel)
                          : ZSTD_compress(packed.data(), bound, raw.data(), length, kZstdLevel);
    // Keep the raw bytes when compression does not help, or compresses beyond what a decoder
    // accepts (decompressLimit; only absurdly repetitive payloads).
    if (!ZSTD_isError(n) && n < length && decompressLimit(n) >= length) {
      bytes = packed.data();
      length = n;
      flags |= kFlagZstd;
    }
  }
  out.reserve(at + kHeaderSize + length);
  out.resize(at + kHeaderSize);
  out.insert(out.end(), bytes, bytes + length);
  // A payload above kMaxFramePayload is still written (the header carries its true length) and
  // the peer refuses it: senders must split batches, and this way the mistake is loud.
  putHeader(out, at, typeOf(m), static_cast<uint32_t>(length), flags);
  // A rare huge batch must not pin its scratch memory for the thread's lifetime.
  constexpr size_t kKeep = 4u << 20;
  if (raw.capacity() > kKeep) std::vector<uint8_t>().swap(raw);
  if (packed.capacity() > kKeep) std::vector<uint8_t>().swap(packed);
}

Result<Message> decodePayload(MsgType type, uint32_t flags, std::span<const uint8_t> payload) {
  if (!detail::isKnownType(static_cast<uint16_t>(type)))
    return wireError(ErrorCode::Corrupt,
                     "unknown message type " + std::to_string(static_cast<unsigned>(type)));
  if ((flags & ~kFlagZstd) != 0) return wireError(ErrorCode::Corrupt, "unknown frame flags " + hex32(flags));
  if (payload.size() > kMaxFramePayload)
    return wireError(ErrorCode::Corrupt,
                     "frame payload of " + std::to_string(payload.size()) + " bytes exceeds the limit");
  std::vector<uint8_t> raw;
  if (flags & kFlagZstd) {
    const unsigned long long size = ZSTD_getFrameContentSize(payload.data(), payload.size());
    if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN)
      return wireError(ErrorCode::Corrupt, "compressed payload without a valid zstd content size");
    const uint64_t limit = decompressLimit(payload.size());
    if (size > limit)
      return wireError(ErrorCode::Corrupt, "compressed payload of " + std::to_string(payload.size()) +
                                               " bytes would expand to " + std::to_string(size) +
                                               " bytes (limit " + std::to_string(limit) + ")");
    raw.resize(static_cast<size_t>(size));
    ZSTD_DCtx* dctx = decompressionContext();
    const size_t n = dctx ? ZSTD_decompressDCtx(dctx, raw.data(), raw.size(), payload.data(), payload.size())
                          : ZSTD_decompress(raw.data(), raw.size(), payload.data(), payload.size());
    if (ZSTD_isError(n) || n != raw.size())
      return wireError(ErrorCode::Corrupt, std::string("zstd payload does not decompress: ") +
                                               (ZSTD_isError(n) ? ZSTD_getErrorName(n) : "size mismatch"));
    payload = raw;
  }
  detail::Reader r(payload);
  Message m = detail::decodeMessage(type, r);
  const std::string name = "message type " + std::to_string(static_cast<unsigned>(type));
  if (!r.ok()) return wireError(ErrorCode::Corrupt, name + ": " + r.error());
  if (r.remaining() != 0)
    return wireError(ErrorCode::Corrupt,
                     name + ": " + std::to_string(r.remaining()) + " trailing bytes inside the payload");
  return m;
}

void FrameDecoder::feed(std::span<const uint8_t> bytes) {
  if (!error_.isOk()) return;  // the stream is dead; do not grow the buffer
  // Compact lazily so that consumed frames do not pin memory.
  if (pos_ > 0 && pos_ >= buf_.size() / 2) {
    buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(pos_));
    pos_ = 0;
  }
  buf_.insert(buf_.end(), bytes.begin(), bytes.end());
  // Refuse a bad header right away, before its payload is buffered.
  if (buffered() >= kHeaderSize) {
    Status s = checkHeader(buf_.data() + pos_);
    if (s.isOk()) s = checkLimits(buf_.data() + pos_);
    if (!s.isOk()) {
      error_ = std::move(s);
      buf_.clear();
      pos_ = 0;
    }
  }
}

void FrameDecoder::setLimits(uint32_t maxPayload, bool allowCompressed) {
  maxPayload_ = std::min(maxPayload, kMaxFramePayload);
  allowCompressed_ = allowCompressed;
}

Status FrameDecoder::checkLimits(const uint8_t* h) const {
  const uint32_t length = le32(h + 8);
  if (length > maxPayload_)
    return wireError(ErrorCode::InvalidArgument, "frame payload length " + std::to_string(length) +
                                                     " exceeds this connection's limit of " +
                                                     std::to_string(maxPayload_) + " bytes");
  const uint32_t flags = le32(h + 12);
  if ((flags & kFlagZstd) && !allowCompressed_)
    return wireError(ErrorCode::InvalidArgument, "compressed frames are not accepted on this connection");
  // Without a session a MAC means nothing to us; with one, only the peer's refusal (an
  // ErrorMsg, which next() turns into an error) may come without it.
  if ((flags & kFlagMac) && !mac_)
    return wireError(ErrorCode::InvalidArgument, "a frame with a MAC on a connection without a session key");
  if (mac_ && !(flags & kFlagMac) && le16(h + 6) != static_cast<uint16_t>(MsgType::Error))
    return wireError(ErrorCode::InvalidArgument,
                     "a frame without a MAC after authentication (tampered with, or not from the peer)");
  return Status::ok();
}

void FrameDecoder::requireMac(const SessionKey& key, MacDirection dir) {
  mac_ = true;
  key_ = key;
  dir_ = dir;
  seq_ = 0;
}

// One complete frame, checked -- header, this stream's limits and, after the handshake, its MAC
// in sequence -- and copied to out without its trailer and with kFlagMac cleared. next() decodes
// what this gives; a relay forwards it as it is.
Result<bool> FrameDecoder::nextRaw(std::vector<uint8_t>& out) {
  if (!error_.isOk()) return error_;
  if (buffered() < kHeaderSize) return false;
  const uint8_t* h = buf_.data() + pos_;
  auto fail = [this](Status s) {
    error_ = std::move(s);
    buf_.clear();
    pos_ = 0;
    return error_;
  };
  Status hs = checkHeader(h);
  if (hs.isOk()) hs = checkLimits(h);
  if (!hs.isOk()) return fail(hs);
  const uint32_t length = le32(h + 8);
  const uint32_t flags = le32(h + 12);
  const size_t trailer = (flags & kFlagMac) ? kMacSize : 0;
  if (buffered() < kHeaderSize + length + trailer) return false;
  const std::span<const uint8_t> payload(h + kHeaderSize, length);
  if (mac_ && !(flags & kFlagMac)) {
    // checkLimits let only an ErrorMsg through: the peer refusing us, unauthenticated. It ends
    // the stream either way, so it cannot be used to inject anything.
    Result<Message> e = decodePayload(static_cast<MsgType>(le16(h + 6)), flags, payload);
    const auto* err = e ? std::get_if<ErrorMsg>(&e.value()) : nullptr;
    return fail(Status(ErrorCode::InvalidArgument,
                       "peer refused: " + (err ? err->message.substr(0, 256) : std::string("(unreadable)"))));
  }
  if (mac_) {
    const Mac want = frameMac(key_, dir_, seq_, std::span<const uint8_t>(h, kHeaderSize), payload);
    if (!constantTimeEqual(want, std::span<const uint8_t>(h + kHeaderSize + length, kMacSize)))
      return fail(wireError(ErrorCode::InvalidArgument,
                            "frame " + std::to_string(seq_) +
                                " has a wrong MAC (tampered with, replayed, or the peer does not know the secret)"));
    ++seq_;
  }
  const size_t at = out.size();
  out.insert(out.end(), h, h + kHeaderSize + length);
  const uint32_t plain = flags & ~kFlagMac;
  for (int i = 0; i < 4; ++i) out[at + 12 + i] = static_cast<uint8_t>(plain >> (8 * i));
  pos_ += kHeaderSize + length + trailer;
  if (pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
    // A large frame is past: do not keep its buffer (many idle peers would pin that memory).
    if (buf_.capacity() > kKeepCapacity) buf_.shrink_to_fit();
  }
  return true;
}

Result<std::optional<Message>> FrameDecoder::next() {
  thread_local std::vector<uint8_t> frame;  // one frame at a time; keeps its capacity per thread
  frame.clear();
  auto r = nextRaw(frame);
  if (!r) return r.status();
  if (!r.value()) return std::optional<Message>{};
  const uint8_t* h = frame.data();
  Result<Message> m = decodePayload(static_cast<MsgType>(le16(h + 6)), le32(h + 12),
                                    std::span<const uint8_t>(h + kHeaderSize, le32(h + 8)));
  if (frame.capacity() > kKeepCapacity) frame = std::vector<uint8_t>();
  if (!m) {
    error_ = m.status();
    buf_.clear();
    pos_ = 0;
    return error_;
  }
  return std::optional<Message>(std::move(m).value());
}

}  // namespace trainscope::core::wire
