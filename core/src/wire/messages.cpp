// Field-by-field payload layout of every message. The order of fields here IS the protocol
// (docs/ARCHITECTURE.md, "Protocol"): append new fields only with a protocol version bump.
#include "wire/messages.h"

#include <type_traits>

namespace trainscope::core::wire::detail {
namespace {

// Smallest encodings, used to refuse counts that cannot fit in the remaining payload.
constexpr size_t kMinString = 4;                    // u32 length
constexpr size_t kMinAttr = 4 + 1 + 8;              // key, type, bits
constexpr size_t kMinStringEntry = 4 + kMinString;  // id + string
constexpr size_t kMinTrack = 4 + 1 + 8 + kMinString;
constexpr size_t kMinEvent = 4 + 1 + 8 + 8 + 4 + 4;  // ..., attr count
constexpr size_t kMinKnob = kMinString + 1 + 8 + 8 + 4 + 3 * kMinString + 1;

void put(Writer& w, const Hello& m) {
  w.u16(m.minVersion);
  w.u16(m.maxVersion);
  w.str(m.clientName);
}
void put(Writer& w, const Challenge& m) {
  w.bytes(m.agentNonce);
  w.boolean(m.authRequired);
}
void put(Writer& w, const Auth& m) {
  w.bytes(m.clientNonce);
  w.bytes(m.mac);
}
void put(Writer& w, const JobInfo& m) {
  w.str(m.jobId);
  w.i32(m.rank);
  w.i32(m.worldSize);
  w.i32(m.localRank);
  w.str(m.host);
  w.i64(m.pid);
  w.i64(m.startTimeNs);
  w.i32(m.device);
  w.str(m.agentVersion);
  w.str(m.clockDomain);
}
void put(Writer& w, const ErrorMsg& m) {
  w.u32(m.code);
  w.str(m.message);
}
void put(Writer& w, const Subscribe& m) {
  w.boolean(m.history);
}
void put(Writer&, const Unsubscribe&) {}
void put(Writer&, const KnobListRequest&) {}
void put(Writer&, const StatsRequest&) {}
void put(Writer&, const Bye&) {}
void put(Writer& w, const EventBatch& m) {
  w.i32(m.rank);
  w.u64(m.firstSeq);
  w.boolean(m.history);
  w.u64(m.droppedTotal);
  w.count(m.strings.size());
  for (const auto& [id, s] : m.strings) {
    w.u32(id);
    w.str(s);
  }
  w.count(m.tracks.size());
  for (const WireTrack& t : m.tracks) {
    w.u32(t.id);
    w.u8(static_cast<uint8_t>(t.kind));
    w.i64(t.externalId);
    w.str(t.name);
  }
  w.count(m.events.size());
  // Events are the bulk of all traffic: each is written as one fixed 29-byte block (track u32,
  // kind u8, start i64, end i64, name u32, attribute count u32), then 13 bytes per attribute —
  // the same bytes as the field-by-field writes, with one capacity check per event.
  w.reserveMore(m.events.size() * 29);
  for (const WireEvent& e : m.events) {
    uint8_t* p = w.grow(29);
    Writer::storeLe(p, e.track, 4);
    p[4] = static_cast<uint8_t>(e.kind);
    Writer::storeLe(p + 5, static_cast<uint64_t>(e.startNs), 8);
    Writer::storeLe(p + 13, static_cast<uint64_t>(e.endNs), 8);
    Writer::storeLe(p + 21, e.name, 4);
    Writer::storeLe(p + 25, static_cast<uint32_t>(e.attrs.size()), 4);
    for (const Attr& a : e.attrs) {
      uint8_t* q = w.grow(13);
      Writer::storeLe(q, a.key, 4);
      q[4] = static_cast<uint8_t>(a.type);
      Writer::storeLe(q + 5, static_cast<uint64_t>(a.bits), 8);
    }
  }
}
void put(Writer& w, const KnobList& m) {
  w.u64(m.lastChangeSeq);
  w.i64(m.currentStep);
  w.count(m.knobs.size());
  for (const KnobDescriptor& k : m.knobs) {
    w.str(k.name);
    w.u8(static_cast<uint8_t>(k.type));
    w.f64(k.min);
    w.f64(k.max);
    w.count(k.choices.size());
    for (const std::string& c : k.choices) w.str(c);
    w.str(k.defaultValue);
    w.str(k.currentValue);
    w.str(k.description);
    w.boolean(k.changesMath);
  }
  w.u64(m.contiguousSeq);
  w.count(m.pending.size());
  for (const PendingChange& c : m.pending) {
    w.u64(c.changeSeq);
    w.str(c.name);
    w.str(c.value);
  }
}
void put(Writer& w, const SetKnob& m) {
  w.u64(m.changeSeq);
  w.str(m.name);
  w.str(m.value);
}
void put(Writer& w, const KnobAck& m) {
  w.u64(m.changeSeq);
  w.boolean(m.accepted);
  w.boolean(m.applied);
  w.i64(m.appliedStep);
  w.str(m.reason);
}
void put(Writer& w, const Ping& m) {
  w.i64(m.clientSendNs);
}
void put(Writer& w, const Pong& m) {
  w.i64(m.clientSendNs);
  w.i64(m.agentNs);
}
void put(Writer& w, const Stats& m) {
  w.u64(m.eventsRecorded);
  w.u64(m.eventsDropped);
  w.u64(m.queueBytesUsed);
  w.u64(m.queueBytesCap);
  w.u64(m.flightRecorderEvents);
  w.u64(m.flightRecorderBytes);
  w.u32(m.clients);
  w.u64(m.batchesDroppedForSlowClients);
  w.i64(m.currentStep);
}

Hello getHello(Reader& r) {
  Hello m;
  m.minVersion = r.u16();
  m.maxVersion = r.u16();
  m.clientName = r.str();
  return m;
}
Challenge getChallenge(Reader& r) {
  Challenge m;
  r.fixed(m.agentNonce);
  m.authRequired = r.boolean();
  return m;
}
Auth getAuth(Reader& r) {
  Auth m;
  r.fixed(m.clientNonce);
  r.fixed(m.mac);
  return m;
}
JobInfo getJobInfo(Reader& r) {
  JobInfo m;
  m.jobId = r.str();
  m.rank = r.i32();
  m.worldSize = r.i32();
  m.localRank = r.i32();
  m.host = r.str();
  m.pid = r.i64();
  m.startTimeNs = r.i64();
  m.device = r.i32();
  m.agentVersion = r.str();
  m.clockDomain = r.str();
  return m;
}
ErrorMsg getError(Reader& r) {
  ErrorMsg m;
  m.code = r.u32();
  m.message = r.str();
  return m;
}
Attr getAttr(Reader& r) {
  Attr a;
  a.key = r.u32();
  a.type = r.enumBelow<AttrType>(r.u8(), 3, "attribute type");
  a.bits = r.i64();
  return a;
}
EventBatch getBatch(Reader& r) {
  EventBatch m;
  m.rank = r.i32();
  m.firstSeq = r.u64();
  m.history = r.boolean();
  m.droppedTotal = r.u64();
  const uint32_t ns = r.count(kMinStringEntry, "strings");
  m.strings.reserve(ns);
  for (uint32_t i = 0; i < ns && r.ok(); ++i) {
    const uint32_t id = r.u32();
    m.strings.emplace_back(id, r.str());
  }
  const uint32_t nt = r.count(kMinTrack, "tracks");
  m.tracks.reserve(nt);
  for (uint32_t i = 0; i < nt && r.ok(); ++i) {
    WireTrack t;
    t.id = r.u32();
    t.kind = r.enumBelow<TrackKind>(r.u8(), kTrackKindCount, "track kind");
    t.externalId = r.i64();
    t.name = r.str();
    m.tracks.push_back(std::move(t));
  }
  const uint32_t ne = r.count(kMinEvent, "events");
  m.events.reserve(ne);
  for (uint32_t i = 0; i < ne && r.ok(); ++i) {
    WireEvent e;
    e.track = r.u32();
    e.kind = r.enumBelow<EventKind>(r.u8(), kEventKindCount, "event kind");
    e.startNs = r.i64();
    e.endNs = r.i64();
    e.name = r.u32();
    const uint32_t na = r.count(kMinAttr, "attributes");
    e.attrs.reserve(na);
    for (uint32_t k = 0; k < na && r.ok(); ++k) e.attrs.push_back(getAttr(r));
    m.events.push_back(std::move(e));
  }
  return m;
}
KnobList getKnobList(Reader& r) {
  KnobList m;
  m.lastChangeSeq = r.u64();
  m.currentStep = r.i64();
  const uint32_t n = r.count(kMinKnob, "knobs");
  m.knobs.reserve(n);
  for (uint32_t i = 0; i < n && r.ok(); ++i) {
    KnobDescriptor k;
    k.name = r.str();
    k.type = r.enumBelow<KnobType>(r.u8(), 4, "knob type");
    k.min = r.f64();
    k.max = r.f64();
    const uint32_t nc = r.count(kMinString, "knob choices");
    k.choices.reserve(nc);
    for (uint32_t c = 0; c < nc && r.ok(); ++c) k.choices.push_back(r.str());
    k.defaultValue = r.str();
    k.currentValue = r.str();
    k.description = r.str();
    k.changesMath = r.boolean();
    m.knobs.push_back(std::move(k));
  }
  m.contiguousSeq = r.u64();
  const uint32_t np = r.count(8 + 2 * kMinString, "pending changes");
  m.pending.reserve(np);
  for (uint32_t i = 0; i < np && r.ok(); ++i) {
    PendingChange c;
    c.changeSeq = r.u64();
    c.name = r.str();
    c.value = r.str();
    m.pending.push_back(std::move(c));
  }
  return m;
}
SetKnob getSetKnob(Reader& r) {
  SetKnob m;
  m.changeSeq = r.u64();
  m.name = r.str();
  m.value = r.str();
  return m;
}
KnobAck getKnobAck(Reader& r) {
  KnobAck m;
  m.changeSeq = r.u64();
  m.accepted = r.boolean();
  m.applied = r.boolean();
  m.appliedStep = r.i64();
  m.reason = r.str();
  return m;
}
Stats getStats(Reader& r) {
  Stats m;
  m.eventsRecorded = r.u64();
  m.eventsDropped = r.u64();
  m.queueBytesUsed = r.u64();
  m.queueBytesCap = r.u64();
  m.flightRecorderEvents = r.u64();
  m.flightRecorderBytes = r.u64();
  m.clients = r.u32();
  m.batchesDroppedForSlowClients = r.u64();
  m.currentStep = r.i64();
  return m;
}

}  // namespace

bool isKnownType(uint16_t type) {
  return type >= static_cast<uint16_t>(MsgType::Hello) && type <= static_cast<uint16_t>(MsgType::Unsubscribe);
}

void encodePayload(const Message& m, std::vector<uint8_t>& out) {
  Writer w(out);
  std::visit([&w](const auto& msg) { put(w, msg); }, m);
}

Message decodeMessage(MsgType type, Reader& r) {
  switch (type) {
    case MsgType::Hello:
      return getHello(r);
    case MsgType::Challenge:
      return getChallenge(r);
    case MsgType::Auth:
      return getAuth(r);
    case MsgType::Welcome:
      return getJobInfo(r);
    case MsgType::Error:
      return getError(r);
    case MsgType::Subscribe: {
      Subscribe s;
      s.history = r.boolean();
      return s;
    }
    case MsgType::EventBatch:
      return getBatch(r);
    case MsgType::KnobListRequest:
      return KnobListRequest{};
    case MsgType::KnobList:
      return getKnobList(r);
    case MsgType::SetKnob:
      return getSetKnob(r);
    case MsgType::KnobAck:
      return getKnobAck(r);
    case MsgType::Ping: {
      Ping p;
      p.clientSendNs = r.i64();
      return p;
    }
    case MsgType::Pong: {
      Pong p;
      p.clientSendNs = r.i64();
      p.agentNs = r.i64();
      return p;
    }
    case MsgType::StatsRequest:
      return StatsRequest{};
    case MsgType::Stats:
      return getStats(r);
    case MsgType::Bye:
      return Bye{};
    case MsgType::Unsubscribe:
      return Unsubscribe{};
  }
  r.fail("unknown message type " + std::to_string(static_cast<unsigned>(type)));
  return Bye{};
}

}  // namespace trainscope::core::wire::detail
