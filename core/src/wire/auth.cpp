// SHA-256, HMAC-SHA256, randomness and the handshake/frame MACs, from libsodium (Debian's
// libsodium-dev). The agent links libsodium's static archive with its symbols hidden
// (agents/CMakeLists.txt: --exclude-libs and the exports.map version script), so our copy can
// neither clash with nor bind to a libsodium the host process has loaded. Checked against the
// FIPS 180 and RFC 4231 vectors in tst_wire.
#include <sodium.h>

#include <cstring>
#include <mutex>

#include "trainscope/core/wire/protocol.h"

namespace trainscope::core::wire {
namespace {

constexpr char kAuthLabel[] = "trainscope-auth-v2";
constexpr char kSessionLabel[] = "trainscope-session-v2";

// sodium_init() picks the fastest implementations and readies the random generator; it is
// idempotent but must not race with itself, hence call_once. It fails only when no entropy
// source can be opened.
bool sodiumReady() {
  static std::once_flag once;
  static bool ok = false;
  std::call_once(once, [] { ok = ::sodium_init() >= 0; });
  return ok;
}

Mac labelledMac(std::span<const uint8_t> secret, const char* label, size_t labelLen, const Nonce& a,
                const Nonce& c) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, secret.data(), secret.size());
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(label), labelLen);
  crypto_auth_hmacsha256_update(&st, a.data(), a.size());
  crypto_auth_hmacsha256_update(&st, c.data(), c.size());
  Mac out{};
  crypto_auth_hmacsha256_final(&st, out.data());
  ::sodium_memzero(&st, sizeof st);
  return out;
}

}  // namespace

std::array<uint8_t, 32> sha256(std::span<const uint8_t> data) {
  static_assert(crypto_hash_sha256_BYTES == 32);
  std::array<uint8_t, 32> out{};
  crypto_hash_sha256(out.data(), data.data(), data.size());
  return out;
}

Mac hmacSha256(std::span<const uint8_t> key, std::span<const uint8_t> message) {
  // The _state API takes keys of any length (RFC 2104: longer than a block are hashed first);
  // crypto_auth_hmacsha256() itself wants exactly 32 bytes.
  static_assert(crypto_auth_hmacsha256_BYTES == 32);
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, key.data(), key.size());
  crypto_auth_hmacsha256_update(&st, message.data(), message.size());
  Mac out{};
  crypto_auth_hmacsha256_final(&st, out.data());
  ::sodium_memzero(&st, sizeof st);
  return out;
}

Mac authMac(std::span<const uint8_t> secret, const Nonce& agentNonce, const Nonce& clientNonce) {
  return labelledMac(secret, kAuthLabel, sizeof kAuthLabel - 1, agentNonce, clientNonce);
}

SessionKey sessionKey(std::span<const uint8_t> secret, const Nonce& agentNonce, const Nonce& clientNonce) {
  return labelledMac(secret, kSessionLabel, sizeof kSessionLabel - 1, agentNonce, clientNonce);
}

Mac frameMac(const SessionKey& key, MacDirection dir, uint64_t seq, std::span<const uint8_t> header,
             std::span<const uint8_t> payload) {
  uint8_t prefix[9];
  prefix[0] = static_cast<uint8_t>(dir);
  for (int i = 0; i < 8; ++i) prefix[1 + i] = static_cast<uint8_t>(seq >> (8 * i));
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, key.data(), key.size());
  crypto_auth_hmacsha256_update(&st, prefix, sizeof prefix);
  crypto_auth_hmacsha256_update(&st, header.data(), header.size());
  crypto_auth_hmacsha256_update(&st, payload.data(), payload.size());
  Mac out{};
  crypto_auth_hmacsha256_final(&st, out.data());
  ::sodium_memzero(&st, sizeof st);
  return out;
}

bool constantTimeEqual(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  if (a.size() != b.size()) return false;  // lengths are public (MACs are fixed-size)
  if (a.empty()) return true;
  return ::sodium_memcmp(a.data(), b.data(), a.size()) == 0;
}

Status randomBytes(std::span<uint8_t> out) {
  if (!sodiumReady()) return Status(ErrorCode::Io, "libsodium could not be initialised (no entropy source)");
  ::randombytes_buf(out.data(), out.size());
  return Status::ok();
}

void FrameSealer::start(const SessionKey& key, MacDirection dir) {
  key_ = key;
  dir_ = dir;
  seq_ = 0;
  active_ = true;
}

void FrameSealer::seal(std::vector<uint8_t>& frame, size_t start) {
  if (!active_ || frame.size() < start + kHeaderSize) return;
  uint8_t* h = frame.data() + start;
  h[12] = static_cast<uint8_t>(h[12] | kFlagMac);  // flags are little endian: bit 1 is in byte 12
  const Mac tag = frameMac(key_, dir_, seq_++, std::span<const uint8_t>(h, kHeaderSize),
                           std::span<const uint8_t>(h + kHeaderSize, frame.size() - start - kHeaderSize));
  frame.insert(frame.end(), tag.begin(), tag.end());
}

std::string toHex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

}  // namespace trainscope::core::wire
