// The trace model: ranks, tracks, event kinds and typed attributes. Timestamps are int64
// nanoseconds on one clock per session (the session's "clock domain", see docs/FORMATS.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace trainscope::core {

using StringId = uint32_t;  // index into a StringTable; 0 is the empty string
using TrackId = uint32_t;   // index into TraceStore::tracks()
using RankId = int32_t;     // the job's rank number (MPI rank / global rank)

inline constexpr StringId kEmptyString = 0;
inline constexpr TrackId kInvalidTrack = UINT32_MAX;

// What an event is. Values are stored in .tsdb files: append only, never renumber.
enum class EventKind : uint8_t {
  Kernel = 0,       // GPU kernel (or a CPU compute kernel in the CPU backend)
  Memcpy = 1,
  Memset = 2,
  Collective = 3,   // allreduce, reduce-scatter, allgather, broadcast, ...
  P2PSend = 4,
  P2PRecv = 5,
  Range = 6,        // user / NVTX range, or any nested CPU slice
  Step = 7,         // a training step window
  Phase = 8,        // forward / backward / optimizer
  MicroBatchF = 9,  // pipeline op: forward of one micro-batch
  MicroBatchB = 10, // pipeline op: backward, input gradient
  MicroBatchW = 11, // pipeline op: backward, weight gradient
  Bucket = 12,      // a gradient bucket (ready -> communication done)
  Counter = 13,     // a sampled value (attribute Value), instant
  KnobChange = 14,  // a knob took a new value (attributes Knob, KnobValue, Step), instant
  Marker = 15,      // an instant marker
};
inline constexpr int kEventKindCount = 16;

// Where events live. Values are stored in .tsdb files: append only.
enum class TrackKind : uint8_t {
  CpuThread = 0,
  CudaStream = 1,
  Communicator = 2,
  PipelineStage = 3,
  Counter = 4,
};
inline constexpr int kTrackKindCount = 5;

enum class AttrType : uint8_t { Int = 0, Double = 1, String = 2 };

// Attribute keys. Built-in keys have a fixed type; keys >= kCustomAttrBase name an interned
// string (kCustomAttrBase + StringId) and carry their type in the Attr. Stored in .tsdb files
// by name, so values may be added freely but never renamed.
enum class AttrKey : uint32_t {
  Bytes = 1,
  Peer = 2,
  Stream = 3,
  Device = 4,
  CorrelationId = 5,
  Step = 6,
  MicroBatch = 7,
  Stage = 8,
  Chunk = 9,
  Bucket = 10,
  Algorithm = 11,  // string
  Protocol = 12,   // string
  Layer = 13,
  Value = 14,      // double, counters
  FlowId = 15,     // events sharing a flow id are linked (send <-> recv, launch <-> kernel)
  Seq = 16,        // collective / p2p sequence number within a communicator
  CommHash = 17,   // communicator identity
  Datatype = 18,   // string
  Channels = 19,
  Knob = 20,       // string, knob name on KnobChange events
  KnobValue = 21,  // string
  Segment = 22,        // seq1f1b: sequence segment of a pipeline op
  SegmentOffset = 23,  // seq1f1b: its first position (mlp: first sample within the micro-batch)
  SegmentLength = 24,  // seq1f1b: its positions (mlp: samples)
};
inline constexpr uint32_t kBuiltinAttrMax = 24;
inline constexpr uint32_t kCustomAttrBase = 0x10000;

// One typed attribute: 16 bytes. Strings are StringIds of the owning store's table.
struct Attr {
  uint32_t key = 0;
  AttrType type = AttrType::Int;
  int64_t bits = 0;

  static Attr ofInt(AttrKey k, int64_t v) { return {static_cast<uint32_t>(k), AttrType::Int, v}; }
  static Attr ofDouble(AttrKey k, double v);
  static Attr ofString(AttrKey k, StringId s) {
    return {static_cast<uint32_t>(k), AttrType::String, static_cast<int64_t>(s)};
  }
  static Attr custom(StringId keyName, AttrType t, int64_t bits) {
    return {kCustomAttrBase + keyName, t, bits};
  }
  bool isCustom() const { return key >= kCustomAttrBase; }
  int64_t asInt() const { return bits; }
  double asDouble() const;
  StringId asString() const { return static_cast<StringId>(bits); }
  bool operator==(const Attr&) const = default;
};
static_assert(sizeof(Attr) == 16, "Attr is stored in flat arrays; keep it 16 bytes");

struct RankInfo {
  RankId rank = 0;
  std::string host;
  int64_t pid = 0;
  int32_t localRank = 0;
  int32_t device = -1;         // CUDA device, -1 for CPU ranks
  int64_t clockOffsetNs = 0;   // added to this rank's raw timestamps to reach the session clock
  uint64_t droppedEvents = 0;  // events the agent had to drop (queue full), reported by the agent
  bool operator==(const RankInfo&) const = default;
};

struct TrackInfo {
  RankId rank = 0;
  TrackKind kind = TrackKind::CpuThread;
  std::string name;
  int64_t externalId = 0;  // thread id, stream id, communicator hash or stage number
  bool operator==(const TrackInfo&) const = default;
};

// An event as appended to / read from a store (attributes travel separately).
struct EventRecord {
  int64_t startNs = 0;
  int64_t endNs = 0;  // == startNs for instant events
  StringId name = kEmptyString;
  EventKind kind = EventKind::Range;
};

// Stable lower-case names used in files, JSON and the CLI ("kernel", "p2p_send", ...).
std::string_view eventKindName(EventKind k);
std::optional<EventKind> eventKindFromName(std::string_view name);
std::string_view trackKindName(TrackKind k);
std::optional<TrackKind> trackKindFromName(std::string_view name);
// Built-in keys only ("bytes", "correlation_id", ...); empty for custom keys.
std::string_view builtinAttrName(AttrKey k);
std::optional<AttrKey> builtinAttrFromName(std::string_view name);
AttrType builtinAttrType(AttrKey k);
// True for kinds whose events are instants (start == end) by definition.
bool isInstantKind(EventKind k);

}  // namespace trainscope::core
