// Chrome trace JSON import, part 2: once the whole file is read, decide ranks and tracks, bind
// flow events to slices, and append everything to the store (see chrome_importer.h).
#include <algorithm>
#include <cctype>
#include <numeric>
#include <set>
#include <string>

#include "interop/chrome/format.h"
#include "interop/chrome/import_args.h"
#include "interop/chrome/importer.h"

namespace trainscope::core::chrome {

namespace {

std::string idText(const JsonId& id) {
  return std::holds_alternative<int64_t>(id) ? std::to_string(std::get<int64_t>(id))
                                             : std::get<std::string>(id);
}

// Kineto puts a whole rank in one file: its distributedInfo names the rank for every pid.
std::optional<int64_t> kinetoRank(const Json& top) {
  const Json* info = member(top, "distributedInfo");
  return info ? integer(member(*info, "rank")) : std::nullopt;
}

bool looksLikeKineto(const Json& top) {
  return member(top, "schemaVersion") || member(top, "distributedInfo") || member(top, "deviceProperties");
}

}  // namespace

Result<TraceStore> Importer::finish(const ReadResult& read) {
  const Json& top = read.topLevel;
  const Json* other = member(top, "otherData");
  const bool ours = other && member(*other, kFormatKey);
  for (const auto& t : threads_) skipped_ += t.open.size();  // a "B" that never ended

  // Our exports are relative to the session's first event; newer Kineto writes ts relative to
  // baseTimeNanoseconds. Either way the store gets absolute nanoseconds back.
  int64_t base = 0;
  if (ours)
    base = integer(member(*other, kOriginKey)).value_or(0);
  else if (auto b = integer(member(top, "baseTimeNanoseconds")))
    base = *b;
  if (Status st = shiftTimes(base); !st) return st;

  resolveRanks(top);
  resolveTracks();
  // Flows in our own files only restate what the events' flow_id args and the send/recv order
  // already say; re-binding them would add FlowId attributes the original store did not have.
  if (!ours) bindFlows();
  if (!ours && sawCpuOps_) {
    classifyPyTorch();
    assignBuckets();
  }
  appendEvents();
  setMetadata(top, ours);
  store_.flush();  // the importer owns the store until it returns: readers get it sorted
  return std::move(store_);
}

Status Importer::shiftTimes(int64_t base) {
  timeShift_ = base;
  if (base == 0) return Status::ok();
  auto shift = [&](int64_t& t) { return !__builtin_add_overflow(t, base, &t); };
  for (auto& p : pending_)
    if (!shift(p.start) || !shift(p.end))
      return Status(ErrorCode::BadTrace, std::string(source_) +
                                             ": timestamps overflow after adding the time base " +
                                             std::to_string(base) + " ns");
  for (auto& f : flowSteps_) (void)shift(f.ts);
  return Status::ok();
}

// pid -> rank: our own process metadata if present; else Kineto's distributedInfo.rank; else a
// numeric pid below 2^20 is the rank; remaining pids (large or strings) get the lowest free
// rank numbers in first-seen order.
void Importer::resolveRanks(const Json& top) {
  for (const auto& t : threads_)
    if (t.gpu) processes_[t.process].gpu = true;
  const auto kineto = kinetoRank(top);
  std::set<RankId> used;
  std::vector<uint32_t> dense;
  for (uint32_t p = 0; p < processes_.size(); ++p) {
    ProcessState& ps = processes_[p];
    const int64_t* num = std::get_if<int64_t>(&ps.key);
    if (ps.ours)
      ps.rank = ps.ours->rank;
    else if (kineto)
      ps.rank = static_cast<RankId>(*kineto);
    else if (num && *num >= 0 && *num < (int64_t{1} << 20))
      ps.rank = static_cast<RankId>(*num);
    else {
      dense.push_back(p);
      continue;
    }
    used.insert(ps.rank);
  }
  RankId next = 0;
  for (uint32_t p : dense) {
    while (used.count(next)) ++next;
    processes_[p].rank = next;
    used.insert(next);
  }
  // Rank descriptions. A foreign pid says little: the CPU process's pid becomes RankInfo::pid,
  // a GPU-only "process" (Kineto's device pid) the device number.
  for (const ProcessState& ps : processes_) {
    if (ps.ours) {
      store_.setRank(*ps.ours);
      continue;
    }
    const int64_t* num = std::get_if<int64_t>(&ps.key);
    RankInfo* info = store_.rank(ps.rank);
    if (!info) {
      store_.setRank(RankInfo{.rank = ps.rank});
      info = store_.rank(ps.rank);
    }
    if (!num) continue;
    if (ps.gpu && info->device < 0 && *num >= 0 && *num < 1024) info->device = static_cast<int32_t>(*num);
    if (!ps.gpu && info->pid == 0) info->pid = *num;
  }
}

// tid -> track. Our lanes ("<track> #2") carry the track's identity and fold back into it;
// foreign threads become CudaStream tracks when Kineto's GPU categories are on them, CpuThread
// tracks otherwise, with the tid as external id (made unique per rank if two pids share it).
void Importer::resolveTracks() {
  std::vector<uint32_t> order(threads_.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return threads_[a].sortIndex.value_or(INT64_MAX) < threads_[b].sortIndex.value_or(INT64_MAX);
  });
  std::set<std::tuple<RankId, TrackKind, int64_t>> taken;
  for (uint32_t th : order) {
    ThreadState& t = threads_[th];
    const RankId rank = processes_[t.process].rank;
    if (t.ours) {
      t.track = store_.findOrAddTrack(rank, t.ours->kind, t.ours->externalId, t.ours->name);
      taken.insert({rank, t.ours->kind, t.ours->externalId});
      continue;
    }
    if (!t.hasSlices) continue;
    const TrackKind kind = t.gpu ? TrackKind::CudaStream : TrackKind::CpuThread;
    const int64_t* num = std::get_if<int64_t>(&t.key);
    int64_t ext = num ? *num : -static_cast<int64_t>(th) - 1;  // string tids: negative, unique
    if (taken.count({rank, kind, ext}))
      ext = ((static_cast<int64_t>(t.process) + 1) << 32) | static_cast<uint32_t>(ext);
    taken.insert({rank, kind, ext});
    std::string name = t.name;
    // Unnamed: a string tid is a name already (Perfetto reads it so too); a number is an id.
    if (name.empty()) name = num ? (t.gpu ? "stream " : "thread ") + idText(t.key) : idText(t.key);
    if (name.empty()) name = "unnamed thread";
    t.track = store_.addTrack(TrackInfo{rank, kind, std::move(name), ext});
  }
}

// Flow v1 steps: "s"/"t" (and "f" with "bp":"e") bind to the innermost slice around their ts on
// their thread, other "f" to the next slice that starts at or after ts. Each flow (cat, name, id)
// bound to two or more slices gives them one new FlowId; a slice keeps a FlowId it already has.
void Importer::bindFlows() {
  std::vector<std::vector<uint32_t>> byThread(threads_.size());
  std::vector<int64_t> maxDur(threads_.size(), 0);
  int64_t nextFlowId = 0;
  for (uint32_t i = 0; i < pending_.size(); ++i) {
    const Pending& p = pending_[i];
    if (p.counterSample) continue;
    byThread[p.thread].push_back(i);
    maxDur[p.thread] = std::max(maxDur[p.thread], p.end - p.start);
    for (uint32_t a = 0; a < p.attrCount; ++a)
      if (const Attr& at = attrs_[p.attrBegin + a]; at.key == static_cast<uint32_t>(AttrKey::FlowId))
        nextFlowId = std::max(nextFlowId, at.asInt());
  }
  for (auto& list : byThread)
    std::sort(list.begin(), list.end(), [&](uint32_t a, uint32_t b) {
      const Pending &x = pending_[a], &y = pending_[b];
      return x.start != y.start ? x.start < y.start : x.end > y.end;
    });

  std::vector<std::vector<uint32_t>> members(flowGroups_.size());
  for (const FlowStep& f : flowSteps_) {
    const auto& list = byThread[f.thread];
    std::optional<uint32_t> bound;
    if (f.enclosing) {
      auto it = std::upper_bound(list.begin(), list.end(), f.ts,
                                 [&](int64_t ts, uint32_t e) { return ts < pending_[e].start; });
      // Walk back over the slices that start at or before ts (innermost first); none longer
      // than the thread's longest slice can reach ts.
      for (auto j = it; j != list.begin();) {
        const Pending& p = pending_[*--j];
        if (p.start < f.ts - maxDur[f.thread]) break;
        if (p.end > f.ts || (p.end == f.ts && p.start == f.ts)) {
          bound = *j;
          break;
        }
      }
    } else {
      auto it = std::lower_bound(list.begin(), list.end(), f.ts,
                                 [&](uint32_t e, int64_t ts) { return pending_[e].start < ts; });
      if (it != list.end()) bound = *it;
    }
    if (bound)
      members[f.group].push_back(*bound);
    else
      ++skipped_;
  }
  for (auto& m : members) {
    std::sort(m.begin(), m.end());
    m.erase(std::unique(m.begin(), m.end()), m.end());
    if (m.size() < 2) {
      skipped_ += m.size();
      continue;
    }
    ++nextFlowId;
    for (uint32_t e : m) {
      const Pending& p = pending_[e];
      bool has = addedFlowId_.count(e) > 0;
      for (uint32_t a = 0; a < p.attrCount && !has; ++a)
        has = attrs_[p.attrBegin + a].key == static_cast<uint32_t>(AttrKey::FlowId);
      if (!has) addedFlowId_[e] = nextFlowId;
    }
  }
}

void Importer::appendEvents() {
  std::vector<Attr> withFlow;
  for (uint32_t i = 0; i < pending_.size(); ++i) {
    const Pending& p = pending_[i];
    const ThreadState& t = threads_[p.thread];
    TrackId track = t.track;
    if (p.counterSample && !t.ours) {
      const RankId rank = processes_[t.process].rank;
      auto [it, added] = counterTracks_.try_emplace(rank, kInvalidTrack);
      if (added) it->second = store_.findOrAddTrack(rank, TrackKind::Counter, 0, "counters");
      track = it->second;
    }
    if (track == kInvalidTrack) {
      ++skipped_;
      continue;
    }
    std::span<const Attr> attrs(attrs_.data() + p.attrBegin, p.attrCount);
    if (auto f = addedFlowId_.find(i); f != addedFlowId_.end()) {
      withFlow.assign(attrs.begin(), attrs.end());
      withFlow.push_back(Attr::ofInt(AttrKey::FlowId, f->second));
      attrs = withFlow;
    }
    store_.append(track, EventRecord{p.start, p.end, p.name, p.kind}, attrs);
  }
}

void Importer::setMetadata(const Json& top, bool ours) {
  auto& md = store_.metadata();
  const Json* other = member(top, "otherData");
  if (ours) {
    if (const Json* saved = member(*other, kMetadataKey); saved && saved->is_object())
      for (auto it = saved->begin(); it != saved->end(); ++it) md[it.key()] = text(&it.value());
  } else {
    // Whatever the producer said about the trace, as text (arrays such as Kineto's
    // deviceProperties are left out: they describe hardware, not this session's settings).
    for (auto it = top.begin(); it != top.end(); ++it)
      if (!it.value().is_array() && it.key() != "otherData") md[it.key()] = text(&it.value());
    if (other && other->is_object())
      for (auto it = other->begin(); it != other->end(); ++it) md[it.key()] = text(&it.value());
  }
  md[std::string(kImportFormatKey)] = ours ? "trainscope" : looksLikeKineto(top) ? "kineto" : "chrome";
  md[std::string(kSkippedEventsKey)] = std::to_string(skipped_);
  md["import_invalid_events"] = std::to_string(invalid_);
  // What HTA needs to see the file's own timestamps again (analysis/hta.cpp), per rank.
  for (const auto& [r, info] : store_.ranks()) {
    (void)info;
    md["import_time_shift_ns." + std::to_string(r)] = std::to_string(timeShift_);
    md["import_fractional_ts." + std::to_string(r)] = fractionalTs_ ? "1" : "0";
  }
  if (!firstInvalid_.empty()) md["import_first_error"] = firstInvalid_;
}

// PyTorch's host ops, once the whole file is known (docs/FORMATS.md, "PyTorch traces"). With GPU
// activity, kernels are the work: host ops, gloo/c10d ops and nccl:* annotations are launches
// (Range). Without it (CPU-only jobs, gloo), the main thread's ops -- the thread with the
// ProfilerStep#N windows, else the one with most ops -- are compute (Kernel) and gloo:*,
// c10d::*, record_param_comms communication (Collective; P2PSend/P2PRecv for send/recv).
void Importer::classifyPyTorch() {
  bool gpu = false;
  for (const auto& t : threads_) gpu = gpu || t.gpu;
  std::map<RankId, std::map<uint32_t, std::pair<size_t, size_t>>> perRank;  // thread -> (steps, ops)
  for (const Pending& p : pending_) {
    auto& c = perRank[processes_[threads_[p.thread].process].rank][p.thread];
    if (p.kind == EventKind::Step) ++c.first;
    if (p.role == HostRole::CpuOp) ++c.second;
  }
  std::set<uint32_t> mainThreads;
  for (const auto& [rank, counts] : perRank) {
    (void)rank;
    std::optional<uint32_t> best;
    for (const auto& [th, c] : counts)
      if (!best || c > counts.at(*best)) best = th;
    if (best) mainThreads.insert(*best);
  }
  for (Pending& p : pending_) {
    switch (p.role) {
      case HostRole::None:
        break;
      case HostRole::CpuOp:
        p.kind = !gpu && mainThreads.count(p.thread) ? EventKind::Kernel : EventKind::Range;
        break;
      case HostRole::HostNccl:
        if (gpu) p.kind = EventKind::Range;  // the kernel on the GPU stream is the collective
        break;
      case HostRole::HostComm: {
        if (gpu) {
          p.kind = EventKind::Range;
          break;
        }
        const std::string_view n = store_.str(p.name);
        const bool send =
            n.find("send") != std::string_view::npos && n.find("sendrecv") == std::string_view::npos;
        const bool recv = n.find("recv") != std::string_view::npos && !send;
        p.kind = send ? EventKind::P2PSend : recv ? EventKind::P2PRecv : EventKind::Collective;
        if (n == "record_param_comms") commBytes(p);
        break;
      }
      case HostRole::PipeOp:
        break;  // pipelineOps
    }
  }
  pyTorchGpu_ = gpu;
  pipelineOps(mainThreads);
}

// record_param_comms carries the message: Bytes = "In msg nelems" x the size of "dtype" (the
// rank's buffer, as nccl-tests counts it). Its "Collective name", "Process Group Name", ... stay
// as custom attributes.
void Importer::commBytes(Pending& p) {
  auto find = [&](std::string_view key) -> const Attr* {
    const auto id = store_.strings().find(key);
    if (!id) return nullptr;
    for (uint32_t a = 0; a < p.attrCount; ++a)
      if (attrs_[p.attrBegin + a].key == kCustomAttrBase + *id) return &attrs_[p.attrBegin + a];
    return nullptr;
  };
  const Attr* n = find("In msg nelems");
  const Attr* dt = find("dtype");
  if (!n || n->type != AttrType::Int || !dt || dt->type != AttrType::String) return;
  static const std::map<std::string, int64_t, std::less<>> kSize = {
      {"Float", 4}, {"Double", 8}, {"Half", 2}, {"BFloat16", 2}, {"Long", 8},          {"Int", 4},
      {"Short", 2}, {"Char", 1},   {"Byte", 1}, {"Bool", 1},     {"Float8_e4m3fn", 1}, {"Float8_e5m2", 1}};
  const auto it = kSize.find(store_.str(dt->asString()));
  if (it == kSize.end()) return;
  const uint32_t begin = static_cast<uint32_t>(attrs_.size());
  const int64_t bytes = n->asInt() * it->second;
  for (uint32_t a = 0; a < p.attrCount; ++a) {
    const Attr copy = attrs_[p.attrBegin + a];
    attrs_.push_back(copy);
  }
  attrs_.push_back(Attr::ofInt(AttrKey::Bytes, bytes));
  p.attrBegin = begin;
  ++p.attrCount;
}

// torch.distributed.pipelining's ops become MicroBatchF/B/W with MicroBatch and Stage (the rank
// for single-stage schedules; the stage index as Chunk for multi-stage ones), so the pipeline
// section sees them. An op's record_function also covers the wait for its input (the receive
// posted at its start), which is not compute: the op starts when the last receive that began
// inside it ended.
void Importer::pipelineOps(const std::set<uint32_t>& mainThreads) {
  std::map<uint32_t, std::vector<std::pair<int64_t, int64_t>>> recvs;  // thread -> receives
  for (const Pending& p : pending_)
    if (p.role == HostRole::HostComm && store_.str(p.name).find("recv") != std::string_view::npos)
      recvs[p.thread].push_back({p.start, p.end});
  for (auto& [th, v] : recvs) std::sort(v.begin(), v.end());
  for (uint32_t i = 0; i < pending_.size(); ++i) {
    Pending& p = pending_[i];
    if (p.role != HostRole::PipeOp) continue;
    const auto op = parsePipeOp(store_.str(p.name));
    if (!op || !mainThreads.count(p.thread)) continue;
    const auto& rv = recvs[p.thread];
    for (auto it = std::lower_bound(rv.begin(), rv.end(), std::make_pair(p.start, INT64_MIN));
         it != rv.end() && it->first < p.end; ++it)
      p.start = std::min(p.end, std::max(p.start, it->second));
    p.kind = op->kind;
    const RankId rank = processes_[threads_[p.thread].process].rank;
    const uint32_t begin = static_cast<uint32_t>(attrs_.size());
    for (uint32_t a = 0; a < p.attrCount; ++a) {
      const Attr copy = attrs_[p.attrBegin + a];
      attrs_.push_back(copy);
    }
    attrs_.push_back(Attr::ofInt(AttrKey::MicroBatch, op->microBatch));
    attrs_.push_back(Attr::ofInt(AttrKey::Stage, rank));
    if (op->stage >= 0) attrs_.push_back(Attr::ofInt(AttrKey::Chunk, op->stage));
    p.attrBegin = begin;
    p.attrCount += op->stage >= 0 ? 3 : 2;
  }
}

namespace {

// A gradient reduction: an all-reduce (DDP's buckets) or a reduce-scatter (FSDP's sharded
// gradients), whatever the spelling (gloo:all_reduce, c10d::_reduce_scatter_base_,
// ncclDevKernel_ReduceScatter_Sum_f32_RING_LL). All-gathers carry parameters, not gradients.
bool isGradientReductionName(std::string_view n) {
  std::string s;
  for (char c : n)
    if (c != '_') s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s.find("allreduce") != std::string::npos || s.find("reducescatter") != std::string::npos;
}

}  // namespace

// DDP's gradient all-reduces (and FSDP's reduce-scatters) get a Bucket attribute (the
// data_parallel section): per rank and ProfilerStep window, the reductions that carry the data
// -- NCCL kernels on GPU traces, gloo:* ops on CPU traces (else c10d::/record_param_comms) --
// numbered in start order. DDP reduces
// its buckets last layers first, so bucket 0 holds the last layers, as in TRACE_CONVENTIONS.md.
void Importer::assignBuckets() {
  std::map<RankId, std::vector<std::pair<int64_t, int64_t>>> steps;
  std::map<RankId, bool> hasGloo;
  for (const Pending& p : pending_) {
    const RankId r = processes_[threads_[p.thread].process].rank;
    if (p.kind == EventKind::Step) steps[r].push_back({p.start, p.end});
    if (p.kind == EventKind::Collective && store_.str(p.name).starts_with("gloo:")) hasGloo[r] = true;
  }
  for (auto& [r, w] : steps) std::sort(w.begin(), w.end());
  std::vector<uint32_t> grad;
  for (uint32_t i = 0; i < pending_.size(); ++i) {
    const Pending& p = pending_[i];
    if (p.kind != EventKind::Collective || !isGradientReductionName(store_.str(p.name))) continue;
    const RankId r = processes_[threads_[p.thread].process].rank;
    const bool onGpu = threads_[p.thread].gpu;
    const std::string_view n = store_.str(p.name);
    const bool carrier = pyTorchGpu_ ? onGpu : hasGloo[r] ? n.starts_with("gloo:") : true;
    if (carrier) grad.push_back(i);
  }
  std::sort(grad.begin(), grad.end(),
            [&](uint32_t a, uint32_t b) { return pending_[a].start < pending_[b].start; });
  std::map<std::pair<RankId, size_t>, int64_t> next;
  std::vector<std::pair<uint32_t, int64_t>> bucketOf;
  for (uint32_t i : grad) {
    const Pending& p = pending_[i];
    const RankId r = processes_[threads_[p.thread].process].rank;
    const auto& w = steps[r];
    auto it = std::upper_bound(w.begin(), w.end(), std::make_pair(p.start, INT64_MAX));
    if (it == w.begin()) continue;
    --it;
    if (p.start >= it->second) continue;  // outside every step window
    bucketOf.push_back({i, next[{r, static_cast<size_t>(it - w.begin())}]++});
  }
  // Pending attributes are back to back: re-home each bucket event's attributes at the end.
  for (const auto& [i, bucket] : bucketOf) {
    Pending& p = pending_[i];
    const uint32_t begin = static_cast<uint32_t>(attrs_.size());
    for (uint32_t a = 0; a < p.attrCount; ++a) {
      const Attr copy = attrs_[p.attrBegin + a];
      attrs_.push_back(copy);
    }
    attrs_.push_back(Attr::ofInt(AttrKey::Bucket, bucket));
    p.attrBegin = begin;
    ++p.attrCount;
  }
}

}  // namespace trainscope::core::chrome
