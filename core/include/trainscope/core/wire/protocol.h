// The agent <-> client wire protocol (docs/ARCHITECTURE.md, "Protocol").
//
// A connection carries frames. Every frame is a 16-byte header followed by its payload:
//   u32 magic 'TSWP' (0x50575354, little endian) | u16 protocol version | u16 message type
//   u32 payload length (<= kMaxFramePayload)      | u32 flags (bit 0: payload is zstd-compressed,
//                                                     bit 1: a 32-byte MAC trailer follows)
// On TCP, once the handshake is done, every frame in both directions carries kFlagMac and is
// followed by HMAC-SHA256(session key, direction || u64 sequence || header || payload); a frame
// with a missing or wrong MAC ends the connection (docs/SECURITY.md, "TCP").
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
// 2: mutual authentication and per-frame MACs on TCP (libsodium's HMAC-SHA256).
inline constexpr uint16_t kProtocolVersion = 2;
inline constexpr size_t kHeaderSize = 16;
inline constexpr uint32_t kMaxFramePayload = 16u << 20;  // hard cap; larger frames are refused
inline constexpr uint32_t kFlagZstd = 1u;
inline constexpr uint32_t kFlagMac = 2u;
inline constexpr size_t kMacSize = 32;

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
  InspectRequest = 18,  // client -> agent: what is this rank doing right now (doctor)
  Inspect = 19,         // agent -> client: the operations begun and not ended, the threads' states
  // A relay (trainscope-relay, one per machine: docs/RELAY.md) speaks the agent's handshake on
  // its TCP port, then answers these; after a Route the connection is that rank's, end to end.
  RankListRequest = 20,  // client -> relay: every rank of the job, on every machine
  RankList = 21,         // relay -> client (and coordinator -> relay)
  Route = 22,            // client -> relay: make this connection rank N's (its Welcome follows)
  RelayRegister = 23,    // relay -> coordinator relay: my machine, my address, my ranks
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

// mac = HMAC-SHA256(secret, "trainscope-auth-v2" || agentNonce || clientNonce). The agent
// refuses a clientNonce it has seen before (replay) and compares MACs in constant time.
// Mutual: both sides then derive sessionKey(secret, agentNonce, clientNonce), and every later
// frame carries a MAC under it -- the Welcome's MAC is the agent's proof that it knows the
// secret too, so a client is not fooled by an impostor listening on the port.
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

struct InspectRequest {
  bool operator==(const InspectRequest&) const = default;
};
// An operation a thread of the rank began and has not ended (a step, phase, range, kernel,
// collective, point-to-point transfer, micro-batch op or bucket collective), as the agent's drain
// thread last saw it: what `doctor` reads to name the collective a hung job waits in.
struct OpenOp {
  int64_t tid = 0;  // the thread that began it
  EventKind kind = EventKind::Range;
  std::string name;
  int64_t startNs = 0;  // agent clock
  int64_t step = -1;    // the rank's step when it began (-1: none)
  int64_t bucket = -1;  // bucket collectives
  int64_t bytes = -1;
  int64_t seq = -1;  // bucket collectives: how many this process began before it (all ranks alike)

  bool operator==(const OpenOp&) const = default;
};
// One thread of the rank as the kernel shows it (/proc/self/task/TID): read by the agent's own
// server thread; the job's threads are never stopped or signalled.
struct ThreadInfo {
  int64_t tid = 0;
  std::string name;
  std::string state;    // R running, S sleeping, D disk wait, ...
  std::string wchan;    // the kernel function it sleeps in ("" when running or unknown)
  std::string syscall;  // the system call it is blocked in ("futex", "clock_nanosleep", ...; "" when none)

  bool operator==(const ThreadInfo&) const = default;
};
struct Inspect {
  int64_t agentNs = 0;  // the agent clock when the answer was made
  int64_t currentStep = -1;
  std::vector<OpenOp> open;  // oldest first; at most a few hundred
  std::vector<ThreadInfo> threads;  // at most 256

  bool operator==(const Inspect&) const = default;
};

// One rank of a job as a relay knows it: where it runs and which relay reaches it.
struct RankEntry {
  int32_t rank = 0;
  int32_t worldSize = 1;
  int32_t localRank = 0;
  std::string host;     // the agent's host name
  std::string machine;  // the relay's machine name (--machine; the host name by default)
  int64_t pid = 0;
  int64_t startTimeNs = 0;
  std::string relay;  // "tcp:ADDR:PORT" of the relay on the rank's machine
  // What the rank's relay last heard from it (its Stats, once a second): for /metrics.
  int64_t step = -1;
  double stepSeconds = 0;  // mean step time over the last interval in which steps advanced
  uint64_t events = 0;     // recorded by the agent
  uint64_t dropped = 0;    // dropped by the agent (queue full)

  bool operator==(const RankEntry&) const = default;
};
struct RankListRequest {
  bool operator==(const RankListRequest&) const = default;
};
struct RankList {
  std::string jobId;
  std::vector<RankEntry> ranks;  // sorted by rank; at most kMaxRelayRanks
  std::vector<std::string> problems;  // relays that registered and are gone, and the like

  bool operator==(const RankList&) const = default;
};
struct Route {
  int32_t rank = 0;

  bool operator==(const Route&) const = default;
};
struct RelayRegister {
  std::string machine;
  std::string endpoint;  // "tcp:ADDR:PORT" where this relay serves
  std::vector<RankEntry> ranks;

  bool operator==(const RelayRegister&) const = default;
};
inline constexpr size_t kMaxRelayRanks = 65536;

using Message =
    std::variant<Hello, Challenge, Auth, JobInfo, ErrorMsg, Subscribe, EventBatch, KnobListRequest, KnobList,
                 SetKnob, KnobAck, Ping, Pong, StatsRequest, Stats, Bye, Unsubscribe, InspectRequest, Inspect,
                 RankListRequest, RankList, Route, RelayRegister>;

MsgType typeOf(const Message& m);

// Encodes one message as a complete frame (header + payload), appended to out. Payloads of
// EventBatch larger than a few KiB are zstd-compressed.
void encode(const Message& m, std::vector<uint8_t>& out);

using SessionKey = std::array<uint8_t, 32>;
enum class MacDirection : uint8_t { ClientToAgent = 1, AgentToClient = 2 };

// Seals the outgoing frames of one direction of a TCP session: each complete frame gets
// kFlagMac in its header and a MAC trailer over the next sequence number.
class FrameSealer {
 public:
  void start(const SessionKey& key, MacDirection dir);
  bool active() const { return active_; }
  // frame[start..] must be exactly one complete frame (as encode() appends it).
  void seal(std::vector<uint8_t>& frame, size_t start = 0);

 private:
  bool active_ = false;
  SessionKey key_{};
  MacDirection dir_ = MacDirection::ClientToAgent;
  uint64_t seq_ = 0;
};

// Incremental decoder for a byte stream: feed() what arrived, then next() until it returns
// nullopt (needs more bytes). An error is sticky: the connection should be closed.
class FrameDecoder {
 public:
  void feed(std::span<const uint8_t> bytes);
  // A decoded message, nullopt when more bytes are needed, or an error Status.
  Result<std::optional<Message>> next();
  // The same checks (header, limits, MAC), without decoding the payload: appends the frame --
  // header (kFlagMac cleared) and payload, no trailer -- to out and returns true; false when
  // more bytes are needed. For a relay, which forwards frames it need not read.
  Result<bool> nextRaw(std::vector<uint8_t>& out);
  size_t buffered() const { return buf_.size() - pos_; }
  // Tighter limits for this stream: frames longer than maxPayload, or compressed ones when not
  // allowed, are refused from their header, before their payload is buffered or decompressed
  // (the agent's server: 4 KiB and no compression before authentication).
  void setLimits(uint32_t maxPayload, bool allowCompressed);
  uint32_t maxPayload() const { return maxPayload_; }
  // From the next frame on, every frame must carry a valid MAC of direction dir under key, with
  // sequence numbers 0, 1, 2, ...; anything else is a sticky error, checked before the payload
  // is decompressed or decoded. An unauthenticated ErrorMsg (the peer refusing the handshake)
  // becomes the error "peer refused: <message>".
  void requireMac(const SessionKey& key, MacDirection dir);
  bool macRequired() const { return mac_; }
  // Bytes a frame of maxPayload() may occupy on the wire (header, payload, MAC trailer).
  size_t maxFrameBytes() const { return kHeaderSize + maxPayload_ + (mac_ ? kMacSize : 0); }

 private:
  static constexpr size_t kKeepCapacity = 256 * 1024;
  Status checkLimits(const uint8_t* header) const;
  std::vector<uint8_t> buf_;
  size_t pos_ = 0;
  Status error_;
  uint32_t maxPayload_ = kMaxFramePayload;
  bool allowCompressed_ = true;
  bool mac_ = false;
  SessionKey key_{};
  MacDirection dir_ = MacDirection::ClientToAgent;
  uint64_t seq_ = 0;
};

// Decodes exactly one frame's payload (used by FrameDecoder and the fuzzer).
Result<Message> decodePayload(MsgType type, uint32_t flags, std::span<const uint8_t> payload);

// --- authentication (libsodium, linked statically and hidden: docs/SECURITY.md) ---------------
std::array<uint8_t, 32> sha256(std::span<const uint8_t> data);
Mac hmacSha256(std::span<const uint8_t> key, std::span<const uint8_t> message);
// The client's proof: HMAC-SHA256(secret, "trainscope-auth-v2" || agentNonce || clientNonce).
Mac authMac(std::span<const uint8_t> secret, const Nonce& agentNonce, const Nonce& clientNonce);
// HMAC-SHA256(secret, "trainscope-session-v2" || agentNonce || clientNonce): keys the frame MACs.
SessionKey sessionKey(std::span<const uint8_t> secret, const Nonce& agentNonce, const Nonce& clientNonce);
// HMAC-SHA256(key, direction || u64 seq (LE) || header || payload).
Mac frameMac(const SessionKey& key, MacDirection dir, uint64_t seq, std::span<const uint8_t> header,
             std::span<const uint8_t> payload);
bool constantTimeEqual(std::span<const uint8_t> a, std::span<const uint8_t> b);
// Cryptographically random bytes (libsodium's randombytes_buf: getrandom(2)).
Status randomBytes(std::span<uint8_t> out);
// Lower-case hex ("00ff..."), e.g. for secret files and job ids.
std::string toHex(std::span<const uint8_t> bytes);

}  // namespace trainscope::core::wire
