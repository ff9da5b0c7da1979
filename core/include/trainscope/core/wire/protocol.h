// The agent <-> client wire protocol (docs/ARCHITECTURE.md, "Protocol").
//
// A connection carries frames. Every frame is a 16-byte header followed by its payload:
//   u32 magic 'TSWP' (0x50575354, little endian) | u16 protocol version | u16 message type
//   u32 payload length (<= kMaxFramePayload)      | u32 flags (bit 0: payload is zstd-compressed)
// Payloads are little-endian fixed-width integers, IEEE doubles, and strings/byte arrays
// prefixed by a u32 length. Decoding never trusts a length: every read is bounds-checked and a
// malformed frame yields an error Status, never a crash (fuzzed: tests/fuzz/fuzz_wire.cpp).
//
// This part of core is deliberately small and free of SQLite/JSON so the agent can link it.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "trainscope/core/base/status.h"
#include "trainscope/core/model/events.h"

namespace trainscope::core::wire {

inline constexpr uint32_t kMagic = 0x50575354;  // "TSWP"
inline constexpr uint16_t kProtocolVersion = 1;
inline constexpr size_t kHeaderSize = 16;
inline constexpr uint32_t kMaxFramePayload = 16u << 20;  // hard cap; larger frames are refused
inline constexpr uint32_t kFlagZstd = 1u;

enum class MsgType : uint16_t {
  Hello = 1,       // client -> agent: versions it speaks, client name
  Challenge = 2,   // agent -> client: nonce, whether auth is required (TCP: always)
  Auth = 3,        // client -> agent: client nonce + HMAC-SHA256(secret, transcript)
  Welcome = 4,     // agent -> client: JobInfo; the session is open
  Error = 5,       // either way: code + message; the sender may close afterwards
  Subscribe = 6,   // client -> agent: start streaming (with flight-recorder history first?)
  EventBatch = 7,  // agent -> client: new strings, new tracks, events
  KnobListRequest = 8,
  KnobList = 9,
  SetKnob = 10,  // client -> agent
  KnobAck = 11,  // agent -> client: accepted/refused, later applied at step k
  Ping = 12,     // client -> agent: clock sync
  Pong = 13,
  StatsRequest = 14,
  Stats = 15,
  Bye = 16,
  Unsubscribe = 17,
};

struct Hello {
  uint16_t minVersion = kProtocolVersion;
  uint16_t maxVersion = kProtocolVersion;
  std::string clientName;

  bool operator==(const Hello&) const = default;
};

using Nonce = std::array<uint8_t, 32>;
using Mac = std::array<uint8_t, 32>;

struct Challenge {
  Nonce agentNonce{};
  bool authRequired = false;

  bool operator==(const Challenge&) const = default;
};

// mac = HMAC-SHA256(secret, "trainscope-auth-v1" || agentNonce || clientNonce). The agent
// refuses a clientNonce it has seen before (replay) and compares MACs in constant time.
struct Auth {
  Nonce clientNonce{};
  Mac mac{};

  bool operator==(const Auth&) const = default;
};

struct JobInfo {
  std::string jobId;
  int32_t rank = 0;
  int32_t worldSize = 1;
  int32_t localRank = 0;
  std::string host;
  int64_t pid = 0;
  int64_t startTimeNs = 0;  // agent clock (CLOCK_MONOTONIC ns unless clockDomain says otherwise)
  int32_t device = -1;
  std::string agentVersion;
  std::string clockDomain;  // "monotonic"

  bool operator==(const JobInfo&) const = default;
};

struct ErrorMsg {
  uint32_t code = 0;  // core::ErrorCode value
  std::string message;

  bool operator==(const ErrorMsg&) const = default;
};

struct Subscribe {
  bool history = true;  // send the flight recorder's contents first

  bool operator==(const Subscribe&) const = default;
};
struct Unsubscribe {
  bool operator==(const Unsubscribe&) const = default;
};

struct WireTrack {
  uint32_t id = 0;  // agent-local track id, stable for the process lifetime
  TrackKind kind = TrackKind::CpuThread;
  int64_t externalId = 0;
  std::string name;

  bool operator==(const WireTrack&) const = default;
};

struct WireEvent {
  uint32_t track = 0;  // WireTrack::id
  EventKind kind = EventKind::Range;
  int64_t startNs = 0;  // agent clock
  int64_t endNs = 0;
  uint32_t name = 0;        // agent-local string id (see EventBatch::strings)
  std::vector<Attr> attrs;  // string-typed attrs and custom keys use agent-local string ids

  bool operator==(const WireEvent&) const = default;
};

struct EventBatch {
  int32_t rank = 0;
  uint64_t firstSeq = 0;      // sequence number of events[0] in this rank's stream
  bool history = false;       // from the flight recorder (sent before live batches)
  uint64_t droppedTotal = 0;  // events dropped by this agent so far (queue full)
  std::vector<std::pair<uint32_t, std::string>> strings;  // new agent-local strings
  std::vector<WireTrack> tracks;                          // new tracks
  std::vector<WireEvent> events;

  bool operator==(const EventBatch&) const = default;
};

enum class KnobType : uint8_t { Int = 0, Float = 1, Bool = 2, Enum = 3 };

struct KnobDescriptor {
  std::string name;
  KnobType type = KnobType::Int;
  double min = 0, max = 0;           // Int/Float ranges (inclusive)
  std::vector<std::string> choices;  // Enum
  std::string defaultValue;          // textual, as `set` accepts it
  std::string currentValue;
  std::string description;
  bool changesMath = false;

  bool operator==(const KnobDescriptor&) const = default;
};

struct KnobListRequest {
  bool operator==(const KnobListRequest&) const = default;
};
// A change a rank accepted and has not applied yet (it waits for every rank to have it).
struct PendingChange {
  uint64_t changeSeq = 0;
  std::string name;
  std::string value;

  bool operator==(const PendingChange&) const = default;
};

struct KnobList {
  uint64_t lastChangeSeq = 0;  // highest change sequence number this rank has received
  int64_t currentStep = -1;
  std::vector<KnobDescriptor> knobs;
  uint64_t contiguousSeq = 0;  // every sequence number up to this one has been received
  std::vector<PendingChange> pending;

  bool operator==(const KnobList&) const = default;
};

// A change is sent to every rank with the same changeSeq (= max lastChangeSeq over ranks + 1).
// An empty name fills a gap: the rank marks changeSeq received without changing anything (sent
// by a client to ranks that missed a change no rank holds pending, see docs/AGENT.md).
struct SetKnob {
  uint64_t changeSeq = 0;
  std::string name;
  std::string value;

  bool operator==(const SetKnob&) const = default;
};

struct KnobAck {
  uint64_t changeSeq = 0;
  bool accepted = false;
  bool applied = false;  // false: validated and queued; true: applied at appliedStep
  int64_t appliedStep = -1;
  std::string reason;  // why it was refused

  bool operator==(const KnobAck&) const = default;
};

struct Ping {
  int64_t clientSendNs = 0;

  bool operator==(const Ping&) const = default;
};
struct Pong {
  int64_t clientSendNs = 0;
  int64_t agentNs = 0;

  bool operator==(const Pong&) const = default;
};

struct StatsRequest {
  bool operator==(const StatsRequest&) const = default;
};
struct Stats {
  uint64_t eventsRecorded = 0;
  uint64_t eventsDropped = 0;
  uint64_t queueBytesUsed = 0;
  uint64_t queueBytesCap = 0;
  uint64_t flightRecorderEvents = 0;
  uint64_t flightRecorderBytes = 0;
  uint32_t clients = 0;
  uint64_t batchesDroppedForSlowClients = 0;
  int64_t currentStep = -1;

  bool operator==(const Stats&) const = default;
};

struct Bye {
  bool operator==(const Bye&) const = default;
};

using Message =
    std::variant<Hello, Challenge, Auth, JobInfo, ErrorMsg, Subscribe, EventBatch, KnobListRequest, KnobList,
                 SetKnob, KnobAck, Ping, Pong, StatsRequest, Stats, Bye, Unsubscribe>;

MsgType typeOf(const Message& m);

// Encodes one message as a complete frame (header + payload), appended to out. Payloads of
// EventBatch larger than a few KiB are zstd-compressed.
void encode(const Message& m, std::vector<uint8_t>& out);

// Incremental decoder for a byte stream: feed() what arrived, then next() until it returns
// nullopt (needs more bytes). An error is sticky: the connection should be closed.
class FrameDecoder {
 public:
  void feed(std::span<const uint8_t> bytes);
  // A decoded message, nullopt when more bytes are needed, or an error Status.
  Result<std::optional<Message>> next();
  size_t buffered() const { return buf_.size() - pos_; }
  // Tighter limits for this stream: frames longer than maxPayload, or compressed ones when not
  // allowed, are refused from their header, before their payload is buffered or decompressed
  // (the agent's server: 4 KiB and no compression before authentication).
  void setLimits(uint32_t maxPayload, bool allowCompressed);
  uint32_t maxPayload() const { return maxPayload_; }

 private:
  static constexpr size_t kKeepCapacity = 256 * 1024;
  Status checkLimits(const uint8_t* header) const;
  std::vector<uint8_t> buf_;
  size_t pos_ = 0;
  Status error_;
  uint32_t maxPayload_ = kMaxFramePayload;
  bool allowCompressed_ = true;
};

// Decodes exactly one frame's payload (used by FrameDecoder and the fuzzer).
Result<Message> decodePayload(MsgType type, uint32_t flags, std::span<const uint8_t> payload);

// --- authentication ---------------------------------------------------------------------------
std::array<uint8_t, 32> sha256(std::span<const uint8_t> data);
Mac hmacSha256(std::span<const uint8_t> key, std::span<const uint8_t> message);
Mac authMac(std::span<const uint8_t> secret, const Nonce& agentNonce, const Nonce& clientNonce);
bool constantTimeEqual(std::span<const uint8_t> a, std::span<const uint8_t> b);
// Cryptographically random bytes (getrandom(2)).
Status randomBytes(std::span<uint8_t> out);
// Lower-case hex ("00ff..."), e.g. for secret files and job ids.
std::string toHex(std::span<const uint8_t> bytes);

}  // namespace trainscope::core::wire
