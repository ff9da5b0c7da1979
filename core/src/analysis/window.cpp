// One rank, one step window: classify its events (docs/TRACE_CONVENTIONS.md) and compute the
// breakdown, gradient-bucket overlap and DISCO layer times of that window.
#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <string_view>
#include <span>

#include "analysis/state.h"

namespace trainscope::core {
namespace {

bool computeTrack(TrackKind k) {
  return k == TrackKind::CpuThread || k == TrackKind::CudaStream || k == TrackKind::PipelineStage;
}

// A double attribute where an integer is expected: truncated when it fits in int64, else 0 (NaN,
// infinities and |v| >= 2^63 would be undefined behaviour to convert; found by fuzz_analysis).
int64_t doubleToInt(double d) {
  return d > -9.2e18 && d < 9.2e18 ? static_cast<int64_t>(d) : 0;
}

// One pass over the event's attributes (the first of each key wins, as findAttr).
void readAttrs(std::span<const Attr> attrs, WinEvent& e) {
  uint32_t seen = 0;
  for (const Attr& a : attrs) {
    if (a.key > kBuiltinAttrMax || a.type == AttrType::String || (seen >> a.key & 1u)) continue;
    seen |= 1u << a.key;
    const int64_t v = a.type == AttrType::Double ? doubleToInt(a.asDouble()) : a.asInt();
    switch (static_cast<AttrKey>(a.key)) {
      case AttrKey::MicroBatch:
        e.microBatch = v;
        break;
      case AttrKey::Chunk:
        e.chunk = v;
        break;
      case AttrKey::Stage:
        e.stage = v;
        break;
      case AttrKey::Bucket:
        e.bucket = v;
        break;
      case AttrKey::Layer:
        e.layer = v;
        break;
      case AttrKey::Peer:
        e.peer = v;
        break;
      case AttrKey::FlowId:
        e.flow = v;
        break;
      case AttrKey::Seq:
        e.seq = v;
        break;
      case AttrKey::CommHash:
        e.commHash = v;
        break;
      case AttrKey::Bytes:
        e.bytes = a.type == AttrType::Double ? a.asDouble() : static_cast<double>(v);
        break;
      default:
        break;
    }
  }
}

bool isComputeEvent(EventKind k, StringId name, const std::vector<StringId>& phaseNames) {
  switch (k) {
    case EventKind::Kernel:
    case EventKind::MicroBatchF:
    case EventKind::MicroBatchB:
    case EventKind::MicroBatchW:
      return true;
    case EventKind::Phase:
      return std::find(phaseNames.begin(), phaseNames.end(), name) != phaseNames.end();
    default:
      return false;
  }
}

bool isCommEvent(EventKind k) {
  return k == EventKind::Collective || k == EventKind::P2PSend || k == EventKind::P2PRecv;
}

}  // namespace

void classifyNames(const StringTable& strings, std::vector<uint8_t>& classes) {
  for (size_t id = classes.size(); id < strings.size(); ++id) {
    const std::string_view n = strings.get(static_cast<StringId>(id));
    uint8_t c = 0;
    if (n.starts_with("calibrate")) c |= kNameCalibrate;
    // HTA 0.5 (hta/utils/utils.py, is_comm_kernel; trace_analysis' temporal breakdown): a GPU
    // kernel is communication when its name matches ^nccl.*Kernel (case-sensitive), e.g.
    // ncclDevKernel_AllReduce_Sum_f32_RING_LL, ncclKernel_ReduceScatter_RING_LL_Sum_float.
    if (n.starts_with("nccl") && n.find("Kernel", 4) != std::string_view::npos) {
      c |= kNameNcclKernel;
      std::string a;  // the collective's type: letters and digits, lower case
      for (char ch : n)
        if (std::isalnum(static_cast<unsigned char>(ch)))
          a += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (a.find("allreduce") != std::string::npos || a.find("reducescatter") != std::string::npos)
        c |= kNameGradKernel;
    }
    classes.push_back(c);
  }
}

WindowEvents collectWindow(const TraceStore& store, const std::vector<TrackId>& tracks, Interval w,
                           const std::vector<StringId>& phaseNames, StringId discoName,
                           const std::vector<uint8_t>& names) {
  WindowEvents we;
  we.window = w;
  std::vector<Interval> comp, comm;
  const std::optional<StringId> sentName = store.strings().find("bytes_sent");
  const std::optional<StringId> recvName = store.strings().find("bytes_received");
  size_t bound = 0;
  for (TrackId t : tracks) bound += store.events(t).candidates(w.start, w.end).size();
  we.events.reserve(bound);
  comp.reserve(bound);
  std::vector<Interval> trackComp, trackColl;
  for (TrackId t : tracks) {
    const TrackKind tk = store.track(t).kind;
    const bool ct = computeTrack(tk);
    const TrackEvents& ev = store.events(t);
    trackComp.clear();
    trackColl.clear();
    ev.forEachOverlapping(w.start, w.end, [&](size_t i) {
      EventKind k = ev.kind(i);
      const StringId name = ev.name(i);
      const uint8_t cls = name < names.size() ? names[name] : 0;
      // An NCCL kernel (HTA's rule) is communication wherever it was recorded as a kernel.
      if (k == EventKind::Kernel && (cls & kNameNcclKernel)) k = EventKind::Collective;
      const bool isBucket = k == EventKind::Bucket;
      const bool isComp = ct && isComputeEvent(k, name, phaseNames);
      const bool isComm = isCommEvent(k);
      if (!isBucket && !isComp && !isComm) return;
      if (!isBucket && ev.end(i) <= ev.start(i)) return;  // missing end: no interval
      WinEvent e;
      e.kind = k;
      e.start = ev.start(i);
      e.end = ev.end(i);
      e.name = name;
      e.ref = {t, static_cast<uint32_t>(i)};
      e.compute = isComp;
      e.comm = isComm;
      e.gradKernel = isComm && (cls & kNameGradKernel);
      readAttrs(ev.attrs(i), e);
      if (isComm && e.bucket >= 0) {
        for (const Attr& a : ev.attrs(i)) {
          const double v = a.type == AttrType::Double ? a.asDouble() : static_cast<double>(a.asInt());
          if (sentName && a.key == kCustomAttrBase + *sentName) e.bytesSent = v;
          if (recvName && a.key == kCustomAttrBase + *recvName) e.bytesReceived = v;
          if (a.key == static_cast<uint32_t>(AttrKey::Algorithm) && a.type == AttrType::String) {
            const std::string_view algo = store.str(a.asString());
            e.neighbour = algo.substr(0, 13) == "decentralized";
          }
        }
      }
      e.discoExchange = isComm && e.name == discoName && e.layer >= 0;
      e.calibration = k == EventKind::Kernel && e.layer >= 0 && (cls & kNameCalibrate);
      const Interval clipped{std::max(e.start, w.start), std::min(e.end, w.end)};
      if (isComp) trackComp.push_back(clipped);
      if (isComm) comm.push_back(clipped);
      if (k == EventKind::Collective && tk == TrackKind::CpuThread) trackColl.push_back(clipped);
      we.events.push_back(e);
    });
    // A thread inside a collective call (c10d::allreduce_, gloo:all_reduce, ...) is
    // communicating or waiting for it, not computing: the ops around the call on that thread
    // (AccumulateGrad, FSDP's hooks, a phase) count as compute only outside it.
    if (trackColl.empty()) {
      comp.insert(comp.end(), trackComp.begin(), trackComp.end());
    } else {
      const IntervalList c = subtract(unionOf(std::move(trackComp)), unionOf(std::move(trackColl)));
      comp.insert(comp.end(), c.begin(), c.end());
    }
  }
  std::sort(we.events.begin(), we.events.end(), [](const WinEvent& a, const WinEvent& b) {
    return a.start < b.start || (a.start == b.start && a.end > b.end);
  });
  we.compute = unionOf(std::move(comp));
  we.comm = unionOf(std::move(comm));
  return we;
}

int64_t activityIn(const TraceStore& store, const std::vector<TrackId>& tracks, Interval w,
                   const std::vector<StringId>& phaseNames) {
  if (w.end <= w.start) return 0;
  std::vector<Interval> all;
  for (TrackId t : tracks) {
    const bool ct = computeTrack(store.track(t).kind);
    const TrackEvents& ev = store.events(t);
    ev.forEachOverlapping(w.start, w.end, [&](size_t i) {
      const EventKind k = ev.kind(i);
      if ((ct && isComputeEvent(k, ev.name(i), phaseNames)) || isCommEvent(k))
        all.push_back({std::max(ev.start(i), w.start), std::min(ev.end(i), w.end)});
    });
  }
  return totalLength(unionOf(std::move(all)));
}

RankStepRecord recordWindow(const WindowEvents& we, RankId rank, int64_t step) {
  RankStepRecord r;
  r.rank = rank;
  r.step = step;
  r.window = we.window;
  const IntervalList both = intersect(we.compute, we.comm);
  r.overlapped = totalLength(both);
  r.computeOnly = totalLength(we.compute) - r.overlapped;
  const IntervalList exposed = subtract(we.comm, we.compute);
  r.exposed = totalLength(exposed);
  r.idle = we.window.length() - r.computeOnly - r.overlapped - r.exposed;
  for (const Interval& x : exposed)
    r.overlays.push_back({OverlayKind::ExposedComm, rank, -1, step, x.start, x.end, "exposed communication"});

  // Gradient buckets: Collective events with a Bucket attribute; Bucket events give ready times.
  std::map<int64_t, std::vector<Interval>> bucketComm;
  std::map<int64_t, BucketRecord> buckets;
  std::map<int64_t, LayerRecord> layers;
  std::map<int64_t, std::vector<Interval>> layerComp, layerComm;
  std::vector<Interval> grad;
  // Gradient collectives carry a Bucket attribute (the job's buckets, or numbered by the
  // importer). A window with none of those takes its NCCL all-reduce and reduce-scatter kernels
  // instead (a trace of GPU kernels only: an Nsight export, a trimmed Kineto trace), numbered in
  // start order among those that start inside the window, as the importers number DDP's.
  bool marked = false;
  for (const WinEvent& e : we.events) marked = marked || (e.kind == EventKind::Collective && e.bucket >= 0);
  int64_t nextKernelBucket = 0;
  for (WinEvent e : we.events) {
    if (!marked && e.gradKernel && e.bucket < 0 && e.start >= we.window.start) e.bucket = nextKernelBucket++;
    const Interval clipped{std::max(e.start, we.window.start), std::min(e.end, we.window.end)};
    if (e.kind == EventKind::Bucket && e.bucket >= 0) {
      BucketRecord& b = buckets[e.bucket];
      b.bucket = e.bucket;
      if (b.readyRel < 0) b.readyRel = e.start - we.window.start;
    } else if (e.kind == EventKind::Collective && e.bucket >= 0) {
      BucketRecord& b = buckets[e.bucket];
      b.bucket = e.bucket;
      b.bytes += e.bytes;
      b.refs.push_back(e.ref);
      bucketComm[e.bucket].push_back(clipped);
      grad.push_back(clipped);
    }
    if (e.discoExchange) {
      LayerRecord& l = layers[e.layer];
      l.layer = e.layer;
      l.bytes += e.bytes;
      l.refs.push_back(e.ref);
      layerComm[e.layer].push_back(clipped);
    } else if (e.kind == EventKind::Kernel && e.layer >= 0 && !e.calibration) {
      layerComp[e.layer].push_back(clipped);
    }
  }
  const IntervalList gradU = unionOf(std::move(grad));
  r.gradComm = totalLength(gradU);
  r.gradHidden = totalLength(intersect(gradU, we.compute));
  for (auto& [k, b] : buckets) {
    const IntervalList u = unionOf(std::move(bucketComm[k]));
    if (u.empty()) continue;  // ready but never communicated in this window
    b.comm = totalLength(u);
    b.hidden = totalLength(intersect(u, we.compute));
    b.commStartRel = u.front().start - we.window.start;
    b.commEndRel = u.back().end - we.window.start;
    b.intervals = u;
    r.buckets.push_back(std::move(b));
  }
  for (auto& [k, l] : layers) {
    const IntervalList commU = unionOf(std::move(layerComm[k]));
    const IntervalList compU = unionOf(std::move(layerComp[k]));
    l.comm = totalLength(commU);
    l.comp = totalLength(compU);
    l.overlap = totalLength(intersect(commU, compU));
    r.layers.push_back(std::move(l));
  }
  return r;
}

}  // namespace trainscope::core
