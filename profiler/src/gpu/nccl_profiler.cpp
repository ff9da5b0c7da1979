// The NCCL profiler plugin (ABI v5 and v6). NCCL calls startEvent/stopEvent from the thread that
// enqueues work and from its proxy thread; handles come from a bounded pool under one mutex
// (a few hundred ns per collective, nothing per byte).
//
// When a collective ends: NCCL's stopEvent for a Coll/P2p only says it was *enqueued*. With
// kernel-channel events in the mask (the default), a Coll/P2p stays open until a KernelCh child
// has stopped for each of its channels (and no child is still running); its end is then the
// last child's end -- when the proxy thread saw the GPU finish. Collectives of one communicator
// complete in order, so finishing one also finishes any older one still waiting (a channel that
// never reported). Without kernel-channel events the event spans the enqueue only.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "trainscope/profiler/nccl_plugins.h"

namespace trainscope::profiler {

using core::Attr;
using core::AttrKey;
using core::AttrType;
using core::EventKind;
using core::TrackKind;

namespace {

constexpr size_t kMaxHandles = 16384;  // events in flight at once (about 3.5 MB at most)

struct Handle;

struct Comm {
  uint64_t hash = 0;
  int rank = 0, nranks = 0;
  int* ncclMask = nullptr;  // NCCL's activation mask; it reads it at every group start
  uint32_t trackName = 0;
  // Per-channel track names, interned on first use (proxy steps are frequent: no intern each).
  std::atomic<uint32_t> channelNames[256] = {};
  std::deque<Handle*> waiting;  // stopped (enqueued) Coll/P2p events waiting for their channels
};

constexpr size_t kMaxWaiting = 1024;  // per communicator; the oldest is finished beyond it

struct Handle {
  Comm* comm = nullptr;
  uint64_t type = 0;
  ExternalEvent ev;
  uint32_t gen = 0;  // bumped at every reuse: a child's link to a finished parent goes stale
  bool live = false;
  // As a Coll/P2p parent:
  bool selfStopped = false;
  int openChildren = 0, kernelDone = 0, kernelExpected = 0;
  int64_t childEnd = INT64_MIN;
  // As a KernelCh/ProxyOp child:
  Handle* parent = nullptr;
  uint32_t parentGen = 0;
};

bool isTask(uint64_t type) {
  return type == nccl::ProfileColl || type == nccl::ProfileP2p;
}

struct State {
  std::atomic<EventSink*> sink{nullptr};
  std::atomic<int> mask{kDefaultNcclProfileMask};
  std::mutex mu;               // handles, comms
  std::deque<Handle> storage;  // stable addresses
  std::vector<Handle*> freeList;
  std::vector<Comm*> comms;
  std::atomic<uint64_t> dropped{0};
  std::atomic<uint64_t> inUse{0};
};

State& state() {
  static State* s = new State();  // leaked: NCCL may finalize communicators during exit
  return *s;
}

Handle* acquireHandle() {
  State& s = state();
  std::lock_guard lock(s.mu);
  Handle* h = nullptr;
  if (!s.freeList.empty()) {
    h = s.freeList.back();
    s.freeList.pop_back();
  } else if (s.storage.size() < kMaxHandles) {
    try {
      s.freeList.reserve(kMaxHandles);
      h = &s.storage.emplace_back();
    } catch (...) {
      h = nullptr;
    }
  }
  if (!h) {
    s.dropped.fetch_add(1, std::memory_order_relaxed);
    if (EventSink* sink = s.sink.load()) sink->countDropped(1);
    return nullptr;
  }
  s.inUse.fetch_add(1, std::memory_order_relaxed);
  const uint32_t gen = h->gen + 1;
  *h = Handle{};
  h->gen = gen;
  h->live = true;
  return h;
}

void releaseLocked(State& s, Handle* h) {
  h->live = false;
  s.freeList.push_back(h);  // capacity reserved for every handle that exists
  s.inUse.fetch_sub(1, std::memory_order_relaxed);
}

void releaseHandle(Handle* h) {
  State& s = state();
  std::lock_guard lock(s.mu);
  releaseLocked(s, h);
}

// Under s.mu. Emits a finished Coll/P2p (end extended to its children's) and releases it.
void emitTaskLocked(State& s, EventSink* sink, Handle* h) {
  h->ev.endNs = std::max(h->ev.endNs, h->childEnd);
  if (sink) sink->push(h->ev);
  releaseLocked(s, h);
}

// Under s.mu. Finishes h and every older task of its communicator still waiting (in-order
// completion), then h itself.
void finishTaskLocked(State& s, EventSink* sink, Handle* h) {
  auto& w = h->comm->waiting;
  while (!w.empty()) {
    Handle* q = w.front();
    w.pop_front();
    if (q == h) break;
    emitTaskLocked(s, sink, q);
  }
  emitTaskLocked(s, sink, h);
}

bool taskReady(const Handle& h) {
  return h.openChildren == 0 && h.kernelDone >= h.kernelExpected;
}

// Interned strings the plugin uses over and over, per sink.
struct Names {
  EventSink* sink = nullptr;
  uint32_t group = 0, proxySend = 0, proxyRecv = 0, proxyStep = 0, kernelCh = 0, channel = 0, step = 0;
};
Names& names(EventSink& sink) {
  static Names n;
  static std::mutex mu;
  std::lock_guard lock(mu);
  if (n.sink != &sink) {
    n.sink = &sink;
    n.group = sink.intern("nccl group");
    n.proxySend = sink.intern("proxy send");
    n.proxyRecv = sink.intern("proxy recv");
    n.proxyStep = sink.intern("proxy step");
    n.kernelCh = sink.intern("kernel channel");
    n.channel = sink.intern("channel");
    n.step = sink.intern("proxy_step");
  }
  return n;
}

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

void onCommTrack(ExternalEvent& e, const Comm& c) {
  e.trackKind = TrackKind::Communicator;
  e.trackId = static_cast<int64_t>(c.hash);
  e.trackName = c.trackName;
}

void onChannelTrack(ExternalEvent& e, Comm& c, EventSink& sink, unsigned channel) {
  e.trackKind = TrackKind::Communicator;
  // Distinct from the communicator's own track id, stable per (communicator, channel).
  e.trackId = static_cast<int64_t>((c.hash * 0x9E3779B97F4A7C15ull) ^ (uint64_t{channel} + 1));
  auto& cached = c.channelNames[channel & 0xff];
  uint32_t name = cached.load(std::memory_order_relaxed);
  if (name == 0) {  // two threads may both intern it: the same id either way
    name = sink.intern("nccl " + hex(c.hash).substr(0, 8) + " ch " + std::to_string(channel));
    cached.store(name, std::memory_order_relaxed);
  }
  e.trackName = name;
  e.add(Attr::custom(names(sink).channel, AttrType::Int, channel));
}

void addString(ExternalEvent& e, EventSink& sink, AttrKey k, const char* s) {
  if (s && *s) e.add(Attr::ofString(k, sink.intern(s)));
}

// Fills h->ev from the descriptor fields shared by v5 and v6. False: not an event we record.
template <typename Descr>
bool describe(Handle& h, EventSink& sink, const Descr& d) {
  ExternalEvent& e = h.ev;
  Comm& c = *h.comm;
  const Names& n = names(sink);
  switch (d.type) {
    case nccl::ProfileGroup:
      e.kind = EventKind::Range;
      e.name = n.group;
      onCommTrack(e, c);
      return true;
    case nccl::ProfileColl: {
      const auto& x = d.coll;
      e.kind = EventKind::Collective;
      e.name = sink.intern(x.func ? x.func : "collective");
      onCommTrack(e, c);
      e.add(Attr::ofInt(AttrKey::Bytes, static_cast<int64_t>(x.count) * ncclDatatypeSize(x.datatype)));
      addString(e, sink, AttrKey::Datatype, x.datatype);
      addString(e, sink, AttrKey::Algorithm, x.algo);
      addString(e, sink, AttrKey::Protocol, x.proto);
      e.add(Attr::ofInt(AttrKey::Channels, x.nChannels));
      e.add(Attr::ofInt(AttrKey::Seq, static_cast<int64_t>(x.seqNumber)));
      e.add(Attr::ofInt(AttrKey::CommHash, static_cast<int64_t>(c.hash)));
      return true;
    }
    case nccl::ProfileP2p: {
      const auto& x = d.p2p;
      const bool recv = x.func && std::strstr(x.func, "Recv");
      e.kind = recv ? EventKind::P2PRecv : EventKind::P2PSend;
      e.name = sink.intern(x.func ? x.func : (recv ? "Recv" : "Send"));
      onCommTrack(e, c);
      e.add(Attr::ofInt(AttrKey::Bytes, static_cast<int64_t>(x.count) * ncclDatatypeSize(x.datatype)));
      addString(e, sink, AttrKey::Datatype, x.datatype);
      e.add(Attr::ofInt(AttrKey::Peer, x.peer));
      e.add(Attr::ofInt(AttrKey::Channels, x.nChannels));
      e.add(Attr::ofInt(AttrKey::CommHash, static_cast<int64_t>(c.hash)));
      return true;
    }
    case nccl::ProfileGroupApi:
      e.kind = EventKind::Range;
      e.name = sink.intern("ncclGroup");
      onCommTrack(e, c);
      return true;
    case nccl::ProfileCollApi:
    case nccl::ProfileP2pApi: {
      const char* func = d.type == nccl::ProfileCollApi ? d.collApi.func : d.p2pApi.func;
      e.kind = EventKind::Range;
      e.name = sink.intern(std::string("nccl") + (func ? func : "Api"));
      onCommTrack(e, c);
      return true;
    }
    case nccl::ProfileKernelLaunch:
      e.kind = EventKind::Range;
      e.name = sink.intern("nccl kernel launch");
      onCommTrack(e, c);
      return true;
    case nccl::ProfileProxyOp:
      e.kind = EventKind::Range;
      e.name = d.proxyOp.isSend ? n.proxySend : n.proxyRecv;
      onChannelTrack(e, c, sink, d.proxyOp.channelId);
      e.add(Attr::ofInt(AttrKey::Peer, d.proxyOp.peer));
      e.add(Attr::ofInt(AttrKey::CommHash, static_cast<int64_t>(c.hash)));
      return true;
    case nccl::ProfileProxyStep: {
      e.kind = EventKind::Range;
      e.name = n.proxyStep;
      // The parent proxy op knows the channel; without it the step goes to channel 0's track.
      const auto* parent = static_cast<const Handle*>(d.parentObj);
      const core::Attr* ch =
          parent ? parent->ev.find(static_cast<AttrKey>(core::kCustomAttrBase + n.channel)) : nullptr;
      onChannelTrack(e, c, sink, ch ? static_cast<unsigned>(ch->bits) : 0u);
      e.add(Attr::custom(n.step, AttrType::Int, d.proxyStep.step));
      return true;
    }
    case nccl::ProfileKernelCh:
      e.kind = EventKind::Range;
      e.name = n.kernelCh;
      onChannelTrack(e, c, sink, d.kernelCh.channelId);
      return true;
    default:
      return false;  // ProxyCtrl, NetPlugin, CE events: not recorded
  }
}

template <typename Descr>
nccl::Result startEvent(void* context, void** eHandle, Descr* d) {
  if (eHandle) *eHandle = nullptr;
  State& s = state();
  EventSink* sink = s.sink.load(std::memory_order_acquire);
  auto* comm = static_cast<Comm*>(context);
  if (!eHandle || !d || !comm || !sink) return nccl::Success;
  if ((static_cast<uint64_t>(s.mask.load(std::memory_order_relaxed)) & d->type) == 0) return nccl::Success;
  Handle* h = acquireHandle();
  if (!h) return nccl::Success;
  h->comm = comm;
  h->type = d->type;
  h->ev = ExternalEvent{};
  try {
    if (!describe(*h, *sink, *d)) {
      releaseHandle(h);
      return nccl::Success;
    }
  } catch (...) {  // out of memory interning a name: lose the event, not the job
    releaseHandle(h);
    return nccl::Success;
  }
  h->ev.startNs = sink->nowNs();
  {
    std::lock_guard lock(s.mu);
    if (isTask(h->type)) {
      const int channels = d->type == nccl::ProfileColl ? d->coll.nChannels : d->p2p.nChannels;
      if (s.mask.load(std::memory_order_relaxed) & nccl::ProfileKernelCh)
        h->kernelExpected = std::max(1, channels);
    } else if ((h->type == nccl::ProfileKernelCh || h->type == nccl::ProfileProxyOp) && d->parentObj) {
      auto* p = static_cast<Handle*>(d->parentObj);
      if (p->live && isTask(p->type)) {
        h->parent = p;
        h->parentGen = p->gen;
        ++p->openChildren;
      }
    }
  }
  *eHandle = h;
  return nccl::Success;
}

}  // namespace

int ncclDatatypeSize(const char* t) {
  if (!t) return 0;
  if (std::strncmp(t, "nccl", 4) == 0) t += 4;
  static const struct {
    const char* name;
    int size;
  } kSizes[] = {{"Int8", 1},    {"Char", 1},    {"Uint8", 1},    {"Float8e4m3", 1}, {"Float8e5m2", 1},
                {"Float16", 2}, {"Half", 2},    {"Bfloat16", 2}, {"Int32", 4},      {"Int", 4},
                {"Uint32", 4},  {"Float32", 4}, {"Float", 4},    {"Int64", 8},      {"Uint64", 8},
                {"Float64", 8}, {"Double", 8}};
  for (const auto& s : kSizes)
    if (std::strcmp(t, s.name) == 0) return s.size;
  return 0;
}

void NcclProfiler::setSink(EventSink* sink) {
  state().sink.store(sink, std::memory_order_release);
}

void NcclProfiler::setMask(int mask) {
  State& s = state();
  s.mask.store(mask);
  std::lock_guard lock(s.mu);
  for (Comm* c : s.comms)
    if (c->ncclMask) __atomic_store_n(c->ncclMask, mask, __ATOMIC_RELAXED);
}

int NcclProfiler::mask() {
  return state().mask.load();
}
uint64_t NcclProfiler::droppedHandles() {
  return state().dropped.load();
}
uint64_t NcclProfiler::handlesInUse() {
  return state().inUse.load();
}

nccl::Result NcclProfiler::init(void** context, uint64_t commId, int* eActivationMask, const char* commName,
                                int /*nNodes*/, int nranks, int rank, nccl::DebugLogger /*logfn*/) {
  if (!context) return nccl::InvalidArgument;
  *context = nullptr;
  State& s = state();
  EventSink* sink = s.sink.load(std::memory_order_acquire);
  if (!sink) return nccl::InvalidUsage;  // the agent is off: NCCL runs without this plugin
  auto* c = new (std::nothrow) Comm();
  if (!c) return nccl::SystemError;
  c->hash = commId;
  c->rank = rank;
  c->nranks = nranks;
  c->ncclMask = eActivationMask;
  try {
    std::string name = "nccl ";
    name += (commName && *commName) ? commName : hex(commId);
    c->trackName = sink->intern(name);
    std::lock_guard lock(s.mu);
    s.comms.push_back(c);
  } catch (...) {
    delete c;
    return nccl::SystemError;
  }
  if (eActivationMask) __atomic_store_n(eActivationMask, s.mask.load(), __ATOMIC_RELAXED);
  *context = c;
  return nccl::Success;
}

nccl::Result NcclProfiler::startEventV5(void* context, void** eHandle, nccl::ProfilerEventDescr_v5* d) {
  return startEvent(context, eHandle, d);
}

nccl::Result NcclProfiler::startEventV6(void* context, void** eHandle, nccl::ProfilerEventDescr_v6* d) {
  return startEvent(context, eHandle, d);
}

nccl::Result NcclProfiler::stopEvent(void* eHandle) {
  auto* h = static_cast<Handle*>(eHandle);
  if (!h) return nccl::Success;
  State& s = state();
  EventSink* sink = s.sink.load(std::memory_order_acquire);
  const int64_t now = sink ? sink->nowNs() : h->ev.startNs;
  std::lock_guard lock(s.mu);
  if (!h->live) return nccl::Success;  // stopped twice: nothing to do
  h->ev.endNs = std::max(h->ev.startNs, now);
  if (isTask(h->type)) {  // enqueued; done when its channels are
    h->selfStopped = true;
    if (taskReady(*h)) {
      finishTaskLocked(s, sink, h);
    } else {
      try {
        h->comm->waiting.push_back(h);
      } catch (...) {
        finishTaskLocked(s, sink, h);
        return nccl::Success;
      }
      if (h->comm->waiting.size() > kMaxWaiting) finishTaskLocked(s, sink, h->comm->waiting.front());
    }
    return nccl::Success;
  }
  if (sink) sink->push(h->ev);
  if (Handle* p = h->parent; p && p->live && p->gen == h->parentGen) {
    --p->openChildren;
    p->childEnd = std::max(p->childEnd, h->ev.endNs);
    if (h->type == nccl::ProfileKernelCh) ++p->kernelDone;
    if (p->selfStopped && taskReady(*p)) finishTaskLocked(s, sink, p);
  }
  releaseLocked(s, h);
  return nccl::Success;
}

nccl::Result NcclProfiler::recordEventState(void* eHandle, nccl::ProfilerEventState st,
                                            nccl::ProfilerEventStateArgs_v5* args) {
  auto* h = static_cast<Handle*>(eHandle);
  if (!h || !args) return nccl::Success;
  // A proxy step learns how many bytes it moved while it runs.
  if (h->type == nccl::ProfileProxyStep &&
      (st == nccl::ProxyStepSendWait || st == nccl::ProxyStepRecvFlushWait ||
       st == nccl::ProxyStepRecvGPUWait) &&
      !h->ev.find(AttrKey::Bytes))
    h->ev.add(Attr::ofInt(AttrKey::Bytes, static_cast<int64_t>(args->proxyStep.transSize)));
  return nccl::Success;
}

nccl::Result NcclProfiler::finalize(void* context) {
  auto* c = static_cast<Comm*>(context);
  if (!c) return nccl::Success;
  State& s = state();
  {
    std::lock_guard lock(s.mu);
    std::erase(s.comms, c);
    // Tasks still waiting for channels that will not report any more: what we know of them.
    EventSink* sink = s.sink.load(std::memory_order_acquire);
    while (!c->waiting.empty()) {
      Handle* h = c->waiting.front();
      c->waiting.pop_front();
      emitTaskLocked(s, sink, h);
    }
  }
  delete c;
  return nccl::Success;
}

}  // namespace trainscope::profiler
