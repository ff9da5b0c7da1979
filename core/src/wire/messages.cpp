// The payload layout of every message, described once: one field list per struct (fields()),
// walked in list order by the Encoder (writes) and the Decoder (bounds-checked reads). The order
// of the fields here IS the protocol (docs/ARCHITECTURE.md, "Protocol"): append new fields only
// with a protocol version bump; tests/tst_wire.cpp pins the bytes of every message.
//
// A field list calls v(field) for each field and v(vector, "what") for a vector (u32 count, then
// the items; "what" names it in error messages). Scalars are little-endian fixed width, enums
// one byte, strings u32 length + bytes, std::array<uint8_t, N> its N bytes; a struct field is
// walked through its own field list.
#include "wire/messages.h"

#include <concepts>
#include <type_traits>

namespace trainscope::core::wire::detail {
namespace {

// `Of<T> auto& m` binds both a T (decoding) and a const T (encoding).
template <class M, class T>
concept Of = std::same_as<std::remove_const_t<M>, T>;

// --- field lists ------------------------------------------------------------------------------

template <class V, class M>
requires std::is_empty_v<std::remove_const_t<M>>  // KnobListRequest, StatsRequest, Bye, ...
void fields(V&, M&) {}

template <class V>
void fields(V& v, Of<Hello> auto& m) {
  v(m.minVersion);
  v(m.maxVersion);
  v(m.clientName);
}
template <class V>
void fields(V& v, Of<Challenge> auto& m) {
  v(m.agentNonce);
  v(m.authRequired);
}
template <class V>
void fields(V& v, Of<Auth> auto& m) {
  v(m.clientNonce);
  v(m.mac);
}
template <class V>
void fields(V& v, Of<JobInfo> auto& m) {
  v(m.jobId);
  v(m.rank);
  v(m.worldSize);
  v(m.localRank);
  v(m.host);
  v(m.pid);
  v(m.startTimeNs);
  v(m.device);
  v(m.agentVersion);
  v(m.clockDomain);
}
template <class V>
void fields(V& v, Of<ErrorMsg> auto& m) {
  v(m.code);
  v(m.message);
}
template <class V>
void fields(V& v, Of<Subscribe> auto& m) {
  v(m.history);
}
template <class V>
void fields(V& v, Of<std::pair<uint32_t, std::string>> auto& s) {  // EventBatch::strings
  v(s.first);
  v(s.second);
}
template <class V>
void fields(V& v, Of<WireTrack> auto& t) {
  v(t.id);
  v(t.kind);
  v(t.externalId);
  v(t.name);
}
template <class V>
void fields(V& v, Of<Attr> auto& a) {
  v(a.key);
  v(a.type);
  v(a.bits);
}
template <class V>
void fields(V& v, Of<WireEvent> auto& e) {
  v(e.track);
  v(e.kind);
  v(e.startNs);
  v(e.endNs);
  v(e.name);
  v(e.attrs, "attributes");
}
template <class V>
void fields(V& v, Of<EventBatch> auto& m) {
  v(m.rank);
  v(m.firstSeq);
  v(m.history);
  v(m.droppedTotal);
  v(m.strings, "strings");
  v(m.tracks, "tracks");
  v(m.events, "events");
}
template <class V>
void fields(V& v, Of<KnobDescriptor> auto& k) {
  v(k.name);
  v(k.type);
  v(k.min);
  v(k.max);
  v(k.choices, "knob choices");
  v(k.defaultValue);
  v(k.currentValue);
  v(k.description);
  v(k.changesMath);
}
template <class V>
void fields(V& v, Of<PendingChange> auto& c) {
  v(c.changeSeq);
  v(c.name);
  v(c.value);
}
template <class V>
void fields(V& v, Of<KnobList> auto& m) {
  v(m.lastChangeSeq);
  v(m.currentStep);
  v(m.knobs, "knobs");
  v(m.contiguousSeq);
  v(m.pending, "pending changes");
}
template <class V>
void fields(V& v, Of<SetKnob> auto& m) {
  v(m.changeSeq);
  v(m.name);
  v(m.value);
}
template <class V>
void fields(V& v, Of<KnobAck> auto& m) {
  v(m.changeSeq);
  v(m.accepted);
  v(m.applied);
  v(m.appliedStep);
  v(m.reason);
}
template <class V>
void fields(V& v, Of<Ping> auto& m) {
  v(m.clientSendNs);
}
template <class V>
void fields(V& v, Of<Pong> auto& m) {
  v(m.clientSendNs);
  v(m.agentNs);
}
template <class V>
void fields(V& v, Of<Stats> auto& m) {
  v(m.eventsRecorded);
  v(m.eventsDropped);
  v(m.queueBytesUsed);
  v(m.queueBytesCap);
  v(m.flightRecorderEvents);
  v(m.flightRecorderBytes);
  v(m.clients);
  v(m.batchesDroppedForSlowClients);
  v(m.currentStep);
}
template <class V>
void fields(V& v, Of<OpenOp> auto& m) {
  v(m.tid);
  v(m.kind);
  v(m.name);
  v(m.startNs);
  v(m.step);
  v(m.bucket);
  v(m.bytes);
  v(m.seq);
}
template <class V>
void fields(V& v, Of<ThreadInfo> auto& m) {
  v(m.tid);
  v(m.name);
  v(m.state);
  v(m.wchan);
  v(m.syscall);
}
template <class V>
void fields(V& v, Of<Inspect> auto& m) {
  v(m.agentNs);
  v(m.currentStep);
  v(m.open, "open operations");
  v(m.threads, "threads");
}

template <class V>
void fields(V& v, Of<RankEntry> auto& m) {
  v(m.rank);
  v(m.worldSize);
  v(m.localRank);
  v(m.host);
  v(m.machine);
  v(m.pid);
  v(m.startTimeNs);
  v(m.relay);
  v(m.step);
  v(m.stepSeconds);
  v(m.events);
  v(m.dropped);
}
template <class V>
void fields(V& v, Of<RankList> auto& m) {
  v(m.jobId);
  v(m.ranks, "ranks");
  v(m.problems, "problems");
}
template <class V>
void fields(V& v, Of<Route> auto& m) {
  v(m.rank);
}
template <class V>
void fields(V& v, Of<RelayRegister> auto& m) {
  v(m.machine);
  v(m.endpoint);
  v(m.ranks, "ranks");
}

// The values the decoder accepts for each enum (all are one byte on the wire).
struct EnumSpec {
  uint64_t limit;  // values are 0 .. limit-1
  const char* what;
};
constexpr EnumSpec spec(TrackKind) {
  return {kTrackKindCount, "track kind"};
}
constexpr EnumSpec spec(EventKind) {
  return {kEventKindCount, "event kind"};
}
constexpr EnumSpec spec(AttrType) {
  return {3, "attribute type"};
}
constexpr EnumSpec spec(KnobType) {
  return {4, "knob type"};
}

// --- the two visitors -------------------------------------------------------------------------

struct Encoder {
  Writer& w;

  void operator()(uint8_t x) { w.u8(x); }
  void operator()(uint16_t x) { w.u16(x); }
  void operator()(uint32_t x) { w.u32(x); }
  void operator()(uint64_t x) { w.u64(x); }
  void operator()(int32_t x) { w.i32(x); }
  void operator()(int64_t x) { w.i64(x); }
  void operator()(double x) { w.f64(x); }
  void operator()(bool x) { w.boolean(x); }
  void operator()(const std::string& s) { w.str(s); }
  template <size_t N>
  void operator()(const std::array<uint8_t, N>& b) {
    w.bytes(b);
  }
  template <class T>
  void operator()(const std::vector<T>& items, const char*);
  template <class T>
  void operator()(const T& x) {
    if constexpr (std::is_enum_v<T>) {
      static_assert(sizeof(T) == 1, "wire enums are one byte");
      w.u8(static_cast<uint8_t>(x));
    } else {
      fields(*this, x);
    }
  }
};

// The encoded size of a default-constructed T. Every string and vector in it is empty, so this
// is the smallest encoding of any T: a count of T's that does not fit in this many bytes each
// cannot be genuine.
template <class T>
size_t minEncodedSize() {
  static const size_t size = [] {
    std::vector<uint8_t> out;
    Writer w(out);
    Encoder{w}(T{});
    return w.size();
  }();
  return size;
}

template <class T>
void Encoder::operator()(const std::vector<T>& items, const char*) {
  w.count(items.size());
  w.reserveMore(items.size() * minEncodedSize<T>());
  for (const T& x : items) (*this)(x);
}

// Reads the fields in list order. Every read is bounds-checked by the Reader; after the first
// failure reads return zeros and vectors stop growing, and decodeMessage()'s caller checks
// r.ok() once.
struct Decoder {
  Reader& r;

  void operator()(uint8_t& x) { x = r.u8(); }
  void operator()(uint16_t& x) { x = r.u16(); }
  void operator()(uint32_t& x) { x = r.u32(); }
  void operator()(uint64_t& x) { x = r.u64(); }
  void operator()(int32_t& x) { x = r.i32(); }
  void operator()(int64_t& x) { x = r.i64(); }
  void operator()(double& x) { x = r.f64(); }
  void operator()(bool& x) { x = r.boolean(); }
  void operator()(std::string& s) { s = r.str(); }
  template <size_t N>
  void operator()(std::array<uint8_t, N>& b) {
    r.fixed(b);
  }
  template <class T>
  void operator()(std::vector<T>& items, const char* what) {
    const uint32_t n = r.count(minEncodedSize<T>(), what);  // refuses counts the bytes cannot hold
    items.reserve(n);
    for (uint32_t i = 0; i < n && r.ok(); ++i) (*this)(items.emplace_back());
  }
  template <class T>
  void operator()(T& x) {
    if constexpr (std::is_enum_v<T>) {
      x = r.enumBelow<T>(r.u8(), spec(T{}).limit, spec(T{}).what);
    } else {
      fields(*this, x);
    }
  }
};

template <class M>
Message decodeAs(Reader& r) {
  M m;
  Decoder{r}(m);
  return m;
}

// decoders[type - 1] decodes that type: Message's alternatives are in MsgType order (typeOf).
template <size_t... I>
constexpr auto makeDecoders(std::index_sequence<I...>) {
  return std::array<Message (*)(Reader&), sizeof...(I)>{&decodeAs<std::variant_alternative_t<I, Message>>...};
}
constexpr auto decoders = makeDecoders(std::make_index_sequence<std::variant_size_v<Message>>{});

}  // namespace

bool isKnownType(uint16_t type) {
  return type >= static_cast<uint16_t>(MsgType::Hello) && type <= static_cast<uint16_t>(MsgType::RelayRegister);
}

void encodePayload(const Message& m, std::vector<uint8_t>& out) {
  Writer w(out);
  std::visit(Encoder{w}, m);
}

Message decodeMessage(MsgType type, Reader& r) {
  const auto t = static_cast<uint16_t>(type);
  if (!isKnownType(t)) {
    r.fail("unknown message type " + std::to_string(t));
    return Bye{};
  }
  return decoders[t - 1u](r);
}

}  // namespace trainscope::core::wire::detail
