// Rows into events: NVTX, CUDA runtime, kernels, copies and sets, then bucket numbering and
// ranks in pid order (reader.h; the rules in nsys_import.h).
#include <algorithm>
#include <iterator>

#include "interop/merge/rank_merge.h"
#include "interop/nsys/names.h"
#include "interop/nsys/reader.h"
#include "trainscope/core/interop/nsys/nsys_import.h"

namespace trainscope::core {

namespace fs = std::filesystem;
namespace nsys {

RankId Reader::rankFor(int64_t pid) {
  auto [it, added] = rankOfPid_.try_emplace(pid, static_cast<RankId>(rankOfPid_.size()));
  if (added) store_.setRank(RankInfo{.rank = it->second, .host = host_, .pid = pid});
  return it->second;
}

TrackId Reader::cpuTrack(int64_t globalTid) {
  const int64_t key = pidOf(globalTid) << 24 | tidOf(globalTid);
  if (auto it = cpuTracks_.find(key); it != cpuTracks_.end()) return it->second;
  const RankId rank = rankFor(pidOf(globalTid));
  auto n = threadNames_.find(key);
  std::string name = n != threadNames_.end() && !n->second.empty()
                         ? n->second
                         : "thread " + std::to_string(tidOf(globalTid));
  const TrackId t = store_.findOrAddTrack(rank, TrackKind::CpuThread, tidOf(globalTid), name);
  cpuTracks_[key] = t;
  return t;
}

TrackId Reader::gpuTrack(int64_t pid, int64_t device, int64_t stream) {
  const auto key = std::make_tuple(pid, device, stream);
  if (key == lastGpuKey_) return lastGpuTrack_;
  auto it = gpuTracks_.find(key);
  if (it == gpuTracks_.end()) {
    const RankId rank = rankFor(pid);
    if (RankInfo* r = store_.rank(rank); r && r->device < 0 && device >= 0 && device < (1 << 20))
      r->device = static_cast<int32_t>(device);
    const int64_t ext = (device & 0xFFFF) << 32 | (stream & 0xFFFFFFFF);
    it = gpuTracks_
             .emplace(key, store_.findOrAddTrack(
                               rank, TrackKind::CudaStream, ext,
                               "GPU " + std::to_string(device) + " stream " + std::to_string(stream)))
             .first;
  }
  lastGpuKey_ = key;
  lastGpuTrack_ = it->second;
  return it->second;
}

// Timestamps are kept within +-2^62 ns (146 years) so that adding the time base (< 2^62) cannot
// overflow.
static bool timeOk(int64_t t) {
  return t > -(int64_t{1} << 62) && t < (int64_t{1} << 62);
}

// A bad row: an error, or under --partial skipped and counted.
#define NSYS_ROW_CHECK(table, cond)                                     \
  if (!(cond)) {                                                        \
    if (Status st = rowError(table, tsdb::col64(s, 0)); !st) return st; \
    continue;                                                           \
  }

Status Reader::readNvtx() {
  if (!tables_.count(kNvtx)) return Status::ok();
  auto q = select(kNvtx, {"start", "globalTid"}, {"end", "eventType", "textId", "text"});
  if (!q) return q.status();
  sqlite3_stmt* s = q->stmt.get();
  const int64_t base = base_.value_or(0);
  const StringId unnamed = store_.intern("(unnamed NVTX range)");
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    int64_t start = 0, tid = 0, end = 0, type = 0, textId = 0;
    bool hasEnd = false, hasType = false, hasTextId = false, p = false;
    NSYS_ROW_CHECK(kNvtx, intAt(s, 0, *q, true, start, p) && intAt(s, 1, *q, true, tid, p) &&
                              intAt(s, 2, *q, false, end, hasEnd) && intAt(s, 3, *q, false, type, hasType) &&
                              intAt(s, 4, *q, false, textId, hasTextId));
    NSYS_ROW_CHECK(kNvtx,
                   (timeOk(start) && (!hasEnd || timeOk(end))) || (err_ = "timestamp out of range", false));
    const bool mark = hasType ? type == kNvtxMark : !hasEnd;
    if (hasType && type != kNvtxMark && type != kNvtxPushPop && type != kNvtxStartEnd) {
      ++skipped_;  // domain / category registrations, payload-only events
      continue;
    }
    if (!mark && (!hasEnd || end < start)) {  // a range that never ended (capture stopped inside it)
      ++skipped_;
      continue;
    }
    StringId name = unnamed;
    const int textType = sqlite3_column_type(s, 6);
    if (textType == SQLITE_TEXT) {
      name = store_.intern(tsdb::columnText(s, 6));
    } else if (hasTextId) {
      NSYS_ROW_CHECK(kNvtx, nameOf(textId, name));
    } else if (textType != SQLITE_NULL) {
      err_ = std::string("column text holds ") + typeName(textType) + ", expected text";
      NSYS_ROW_CHECK(kNvtx, false);
    }
    const TrackId track = cpuTrack(tid);
    EventKind kind = mark ? EventKind::Marker : EventKind::Range;
    Attr stepAttr;
    const auto step = mark ? std::nullopt : nsys::parseStepName(store_.str(name));
    if (step) {
      kind = EventKind::Step;
      stepAttr = Attr::ofInt(AttrKey::Step, *step);
      steps_[store_.track(track).rank].push_back({start + base, end + base});
    }
    store_.append(track, EventRecord{start + base, (mark ? start : end) + base, name, kind},
                  step ? std::span<const Attr>(&stepAttr, 1) : std::span<const Attr>());
  }
  if (rc != SQLITE_DONE) return tableError(kNvtx, rc);
  return Status::ok();
}

Status Reader::readRuntime() {
  if (!tables_.count(kRuntime)) return Status::ok();
  auto q = select(kRuntime, {"start", "end", "globalTid", "nameId"}, {"correlationId"});
  if (!q) return q.status();
  sqlite3_stmt* s = q->stmt.get();
  const int64_t base = base_.value_or(0);
  Attr attrs[2];
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    int64_t start = 0, end = 0, tid = 0, nameId = 0, corr = 0;
    bool p = false, hasCorr = false;
    StringId name = kEmptyString;
    NSYS_ROW_CHECK(kRuntime, intAt(s, 0, *q, true, start, p) && intAt(s, 1, *q, true, end, p) &&
                                 intAt(s, 2, *q, true, tid, p) && intAt(s, 3, *q, true, nameId, p) &&
                                 intAt(s, 4, *q, false, corr, hasCorr) && nameOf(nameId, name));
    NSYS_ROW_CHECK(kRuntime, (timeOk(start) && timeOk(end)) || (err_ = "timestamp out of range", false));
    NSYS_ROW_CHECK(kRuntime, end >= start || (err_ = "end before start", false));
    size_t n = 0;
    if (hasCorr && corr != 0) {
      attrs[n++] = Attr::ofInt(AttrKey::CorrelationId, corr);
      attrs[n++] = Attr::ofInt(AttrKey::FlowId, pidOf(tid) << 32 | (corr & 0xFFFFFFFF));
    }
    store_.append(cpuTrack(tid), EventRecord{start + base, end + base, name, EventKind::Range},
                  std::span<const Attr>(attrs, n));
  }
  if (rc != SQLITE_DONE) return tableError(kRuntime, rc);
  return Status::ok();
}

Status Reader::readKernels() {
  if (!tables_.count(kKernel)) return Status::ok();
  auto cols = columns(kKernel);
  if (!cols) return cols.status();
  const std::string nameCol = cols->count("demangledName") ? "demangledName" : "shortName";
  auto q = select(kKernel, {"start", "end", "deviceId", "streamId", nameCol}, {"correlationId", "globalPid"});
  if (!q) return q.status();
  sqlite3_stmt* s = q->stmt.get();
  const int64_t base = base_.value_or(0);
  const StringId collectiveKey = store_.intern("collective");
  std::unordered_map<StringId, std::optional<nsys::NcclKernel>> nccl;  // per kernel name, parsed once
  std::vector<Attr> attrs;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    int64_t start = 0, end = 0, dev = 0, stream = 0, nameId = 0, corr = 0, gpid = 0;
    bool p = false, hasCorr = false, hasPid = false;
    StringId name = kEmptyString;
    NSYS_ROW_CHECK(kKernel, intAt(s, 0, *q, true, start, p) && intAt(s, 1, *q, true, end, p) &&
                                intAt(s, 2, *q, true, dev, p) && intAt(s, 3, *q, true, stream, p) &&
                                intAt(s, 4, *q, true, nameId, p) && intAt(s, 5, *q, false, corr, hasCorr) &&
                                intAt(s, 6, *q, false, gpid, hasPid) && nameOf(nameId, name));
    NSYS_ROW_CHECK(kKernel, (timeOk(start) && timeOk(end)) || (err_ = "timestamp out of range", false));
    NSYS_ROW_CHECK(kKernel, end >= start || (err_ = "end before start", false));
    const int64_t pid = hasPid ? pidOf(gpid) : onlyPid_.value_or(0);
    const TrackId track = gpuTrack(pid, dev, stream);
    attrs.clear();
    attrs.push_back(Attr::ofInt(AttrKey::Device, dev));
    attrs.push_back(Attr::ofInt(AttrKey::Stream, stream));
    if (hasCorr && corr != 0) {
      attrs.push_back(Attr::ofInt(AttrKey::CorrelationId, corr));
      attrs.push_back(Attr::ofInt(AttrKey::FlowId, pid << 32 | (corr & 0xFFFFFFFF)));
    }
    auto [it, added] = nccl.try_emplace(name);
    if (added) it->second = nsys::parseNcclKernel(store_.str(name));
    const EventRecord rec{start + base, end + base, name,
                          it->second ? EventKind::Collective : EventKind::Kernel};
    if (!it->second) {
      store_.append(track, rec, attrs);
      continue;
    }
    const nsys::NcclKernel& k = *it->second;
    attrs.push_back(Attr::custom(collectiveKey, AttrType::String, store_.intern(k.collective)));
    if (!k.algorithm.empty()) attrs.push_back(Attr::ofString(AttrKey::Algorithm, store_.intern(k.algorithm)));
    if (!k.protocol.empty()) attrs.push_back(Attr::ofString(AttrKey::Protocol, store_.intern(k.protocol)));
    collectives_.push_back({track, store_.track(track).rank, rec, attrs, k.collective == "AllReduce" || k.collective == "ReduceScatter"});
  }
  if (rc != SQLITE_DONE) return tableError(kKernel, rc);
  return Status::ok();
}

Status Reader::readCopies(bool memset) {
  const char* table = memset ? kMemset : kMemcpy;
  if (!tables_.count(table)) return Status::ok();
  std::vector<std::string> required = {"start", "end", "deviceId", "streamId", "bytes"};
  if (!memset) required.push_back("copyKind");
  auto q = select(table, required, {"correlationId", "globalPid"});
  if (!q) return q.status();
  sqlite3_stmt* s = q->stmt.get();
  const int64_t base = base_.value_or(0);
  const int c0 = memset ? 5 : 6;  // first optional column
  const StringId memsetName = store_.intern("Memset");
  std::unordered_map<int64_t, std::pair<StringId, StringId>> copyNames;  // kind -> (name, label)
  const StringId copyKindKey = store_.intern("copy_kind");
  std::vector<Attr> attrs;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    int64_t start = 0, end = 0, dev = 0, stream = 0, bytes = 0, kind = 0, corr = 0, gpid = 0;
    bool p = false, hasCorr = false, hasPid = false;
    NSYS_ROW_CHECK(table, intAt(s, 0, *q, true, start, p) && intAt(s, 1, *q, true, end, p) &&
                              intAt(s, 2, *q, true, dev, p) && intAt(s, 3, *q, true, stream, p) &&
                              intAt(s, 4, *q, true, bytes, p) && (memset || intAt(s, 5, *q, true, kind, p)) &&
                              intAt(s, c0, *q, false, corr, hasCorr) &&
                              intAt(s, c0 + 1, *q, false, gpid, hasPid));
    NSYS_ROW_CHECK(table, (timeOk(start) && timeOk(end)) || (err_ = "timestamp out of range", false));
    NSYS_ROW_CHECK(table, end >= start || (err_ = "end before start", false));
    const int64_t pid = hasPid ? pidOf(gpid) : onlyPid_.value_or(0);
    StringId name = memsetName, label = kEmptyString;
    if (!memset) {
      auto [it, added] = copyNames.try_emplace(kind);
      if (added) {
        auto e = copyKinds_.find(kind);  // the export's enum, else the documented ids 0..13
        const std::string shortName =
            e != copyKinds_.end() ? e->second.first : std::string(nsys::memcpyKindShort(kind));
        it->second = {store_.intern("Memcpy " + shortName),
                      e != copyKinds_.end() ? store_.intern(e->second.second) : kEmptyString};
      }
      std::tie(name, label) = it->second;
    }
    attrs.clear();
    if (label != kEmptyString) attrs.push_back(Attr::custom(copyKindKey, AttrType::String, label));
    attrs.push_back(Attr::ofInt(AttrKey::Bytes, bytes));
    attrs.push_back(Attr::ofInt(AttrKey::Device, dev));
    attrs.push_back(Attr::ofInt(AttrKey::Stream, stream));
    if (hasCorr && corr != 0) {
      attrs.push_back(Attr::ofInt(AttrKey::CorrelationId, corr));
      attrs.push_back(Attr::ofInt(AttrKey::FlowId, pid << 32 | (corr & 0xFFFFFFFF)));
    }
    store_.append(gpuTrack(pid, dev, stream),
                  EventRecord{start + base, end + base, name, memset ? EventKind::Memset : EventKind::Memcpy},
                  attrs);
  }
  if (rc != SQLITE_DONE) return tableError(table, rc);
  return Status::ok();
}

#undef NSYS_ROW_CHECK

// NCCL all-reduces and reduce-scatters (FSDP's gradients) inside a step window are that step's
// gradient buckets, numbered in start
// order per rank and step (as the Kineto importer numbers DDP's), so data_parallel sees them.
void Reader::appendCollectives() {
  for (auto& [r, w] : steps_) std::sort(w.begin(), w.end());
  std::stable_sort(collectives_.begin(), collectives_.end(),
                   [](const Coll& a, const Coll& b) { return a.rec.startNs < b.rec.startNs; });
  std::map<std::pair<RankId, size_t>, int64_t> next;
  for (Coll& c : collectives_) {
    auto sw = steps_.find(c.rank);
    if (c.gradient && sw != steps_.end()) {
      const auto& w = sw->second;
      auto it = std::upper_bound(w.begin(), w.end(), std::make_pair(c.rec.startNs, INT64_MAX));
      if (it != w.begin() && c.rec.startNs < std::prev(it)->second)
        c.attrs.push_back(
            Attr::ofInt(AttrKey::Bucket, next[{c.rank, static_cast<size_t>(it - w.begin() - 1)}]++));
    }
    store_.append(c.track, c.rec, c.attrs);
  }
  collectives_.clear();
}

// Ranks were numbered as processes appeared; the session numbers them in pid order.
void Reader::finish() {
  bool ordered = true;
  RankId expect = 0;
  for (const auto& [pid, rank] : rankOfPid_) ordered = ordered && rank == expect++;
  if (!ordered) {
    TraceStore sorted;
    RankId r = 0;
    for (const auto& [pid, rank] : rankOfPid_) interop::appendStoreAs(sorted, store_, rank, r++, 0);
    sorted.metadata() = store_.metadata();
    store_ = std::move(sorted);
  }
  auto& md = store_.metadata();
  md["import_format"] = "nsys";
  md["nsys_export_schema_version"] = schemaVersion_;
  if (!productVersion_.empty()) md["nsys_product_version"] = productVersion_;
  if (base_) md["utcEpochNs"] = std::to_string(*base_);
  md["import_skipped_events"] = std::to_string(skipped_);
  md["import_invalid_events"] = std::to_string(invalid_);
  if (!firstInvalid_.empty()) md["import_first_error"] = firstInvalid_;
  for (const auto& [r, info] : store_.ranks()) {
    md["import_time_shift_ns." + std::to_string(r)] = std::to_string(base_.value_or(0));
    md["import_fractional_ts." + std::to_string(r)] = "0";
    md["import_process." + std::to_string(r)] = "pid " + std::to_string(info.pid);
  }
  store_.flush();
}

Result<TraceStore> Reader::run() {
  if (Status st = openFile(); !st) return st;
  if (Status st = readVersion(); !st) return st;
  const bool any = tables_.count(kKernel) || tables_.count(kMemcpy) || tables_.count(kMemset) ||
                   tables_.count(kRuntime) || tables_.count(kNvtx);
  if (!any && tables_.count("meta") && tables_.count("events") && tables_.count("tracks"))
    return Status(ErrorCode::BadTrace, name_ +
                                           ": a Trainscope session (.tsdb), not an Nsight Systems export: "
                                           "open it directly (trainscope-cli info/analyze, the GUI)");
  if (!any)
    return Status(ErrorCode::BadTrace, name_ +
                                           ": no Nsight Systems activity tables (CUPTI_ACTIVITY_KIND_KERNEL, "
                                           "_MEMCPY, _MEMSET, _RUNTIME, NVTX_EVENTS): not an nsys export, or "
                                           "a capture without CUDA or NVTX tracing");
  if (Status st = readStrings(); !st) return st;
  readThreadNames();
  readSessionInfo();
  if (Status st = readNvtx(); !st) return st;
  if (Status st = readRuntime(); !st) return st;
  if (rankOfPid_.size() == 1) onlyPid_ = rankOfPid_.begin()->first;  // GPU rows without globalPid
  if (Status st = readKernels(); !st) return st;
  if (Status st = readCopies(false); !st) return st;
  if (Status st = readCopies(true); !st) return st;
  appendCollectives();
  finish();
  return std::move(store_);
}

}  // namespace nsys

Result<TraceStore> importNsysSqlite(const fs::path& path, const NsysImportOptions& options) {
  try {
    return nsys::Reader(path, options.partial).run();
  } catch (const std::bad_alloc&) {
    return Status(ErrorCode::Io, path.string() + ": out of memory while importing");
  } catch (const std::exception& e) {
    return Status(ErrorCode::BadTrace, path.string() + ": " + e.what());
  }
}

}  // namespace trainscope::core
