#include "interop/merge/rank_merge.h"

#include <algorithm>
#include <map>
#include <regex>
#include <set>

namespace trainscope::core::interop {
namespace {

namespace fs = std::filesystem;

struct Entry {
  LoadedFile* file = nullptr;
  RankId rank = 0;
  std::string rankFrom;  // content label, "file name", "order"
  int64_t shift = 0;     // alignment, ns added
};

// The first collective of a file: (name, end). Collectives that carry the data -- NCCL kernels on
// a GPU stream, gloo:* ops -- are preferred: their ends agree across ranks, while a host-side
// launch (c10d::allreduce_, nccl:all_reduce) ends when it is enqueued.
std::optional<std::pair<std::string, int64_t>> firstCollective(TraceStore& s, const std::string& name = {}) {
  for (const bool carriersOnly : {true, false}) {
    std::optional<std::pair<int64_t, std::pair<std::string, int64_t>>> best;
    for (TrackId t = 0; t < s.trackCount(); ++t) {
      const bool gpu = s.track(t).kind == TrackKind::CudaStream;
      const TrackEvents& ev = s.events(t);
      for (size_t i = 0; i < ev.size(); ++i) {
        if (ev.kind(i) != EventKind::Collective || ev.end(i) <= ev.start(i)) continue;
        const std::string n(s.str(ev.name(i)));
        if (carriersOnly && !gpu && !n.starts_with("gloo:")) continue;
        if (!name.empty() && n != name) continue;
        if (!best || ev.start(i) < best->first) best = {ev.start(i), {n, ev.end(i)}};
        break;  // a track's events are in start order: its first match is its earliest
      }
    }
    if (best) return best->second;
  }
  return std::nullopt;
}

int64_t metaInt(const TraceStore& s, const std::string& key, int64_t fallback = 0) {
  auto it = s.metadata().find(key);
  if (it == s.metadata().end()) return fallback;
  try {
    return std::stoll(it->second);
  } catch (...) {
    return fallback;
  }
}

}  // namespace

std::optional<RankId> rankFromFileName(const std::string& name) {
  static const std::regex kRank(R"(rank[-_]?(\d+))", std::regex::icase);
  static const std::regex kTail(R"([_-](\d+)(\.pt\.trace)?\.(json(\.gz)?|sqlite)$)", std::regex::icase);
  std::smatch m;
  if (std::regex_search(name, m, kRank) || std::regex_search(name, m, kTail)) {
    try {
      const unsigned long v = std::stoul(m[1].str());
      if (v < (1u << 20)) return static_cast<RankId>(v);
    } catch (...) {
    }
  }
  return std::nullopt;
}

void appendStoreAs(TraceStore& out, const TraceStore& in, RankId fromRank, RankId rank, int64_t shift) {
  RankInfo info{.rank = rank};
  if (const RankInfo* r = in.rank(fromRank)) info = *r;
  info.rank = rank;
  info.clockOffsetNs += shift;
  out.setRank(info);
  std::vector<Attr> attrs;
  for (TrackId t = 0; t < in.trackCount(); ++t) {
    const TrackInfo& ti = in.track(t);
    if (ti.rank != fromRank) continue;
    const TrackId nt = out.findOrAddTrack(rank, ti.kind, ti.externalId, ti.name);
    const TrackEvents& ev = in.rawEvents(t);
    StringId lastIn = UINT32_MAX, lastOut = kEmptyString;  // names repeat: skip most lookups
    for (size_t i = 0; i < ev.size(); ++i) {
      attrs.clear();
      for (const Attr& a : ev.attrs(i)) {
        Attr b = a;
        if (a.isCustom()) b.key = kCustomAttrBase + out.intern(in.str(a.key - kCustomAttrBase));
        if (a.type == AttrType::String) b.bits = out.intern(in.str(a.asString()));
        attrs.push_back(b);
      }
      if (ev.name(i) != lastIn) {
        lastIn = ev.name(i);
        lastOut = out.intern(in.str(lastIn));
      }
      out.append(nt, EventRecord{ev.start(i) + shift, ev.end(i) + shift, lastOut, ev.kind(i)}, attrs);
    }
  }
}

Result<MultiImport> mergeRankFiles(std::vector<LoadedFile> loaded, std::vector<std::string> skipped,
                                   size_t fileCount, const MergeRules& rules) {
  MultiImport result;
  result.skippedFiles = std::move(skipped);
  if (loaded.empty())
    return Status(ErrorCode::BadTrace,
                  "no input file could be imported: " +
                      (result.skippedFiles.empty() ? std::string("no files") : result.skippedFiles.front()));

  if (loaded.size() == 1 && fileCount == 1) {  // one file: as it is (it may hold every rank)
    LoadedFile& l = loaded.front();
    auto& md = l.store.metadata();
    md["clock_alignment"] = md.count(rules.timeBaseKey) ? rules.timeBaseKey : "single_file";
    result.files.push_back(
        {l.path, l.store.ranks().empty() ? 0 : l.store.ranks().begin()->first, "file", l.store.eventCount()});
    result.store = std::move(l.store);
    return result;
  }

  // Ranks: the content's own (distributedInfo.rank), else the file name, else the lowest free
  // number in the order given.
  std::vector<Entry> entries;
  std::set<RankId> used;
  std::map<RankId, std::string> owner;
  std::vector<size_t> byOrder;
  for (LoadedFile& l : loaded) {
    if (l.store.ranks().size() > 1)
      return Status(ErrorCode::BadTrace,
                    l.path + ": holds " + std::to_string(l.store.ranks().size()) +
                        " ranks; only single-rank files (one per rank) can be combined with others");
    Entry e{.file = &l};
    std::optional<RankId> r = rules.rankFromContent ? rules.rankFromContent(l.store) : std::nullopt;
    e.rankFrom = rules.rankFromContentLabel;
    if (!r) {
      r = rankFromFileName(fs::path(l.path).filename().string());
      e.rankFrom = "file name";
    }
    entries.push_back(e);
    if (!r) {
      byOrder.push_back(entries.size() - 1);
      continue;
    }
    if (auto it = owner.find(*r); it != owner.end())
      return Status(ErrorCode::BadTrace, l.path + ": rank " + std::to_string(*r) + " again (" + it->second +
                                             " is rank " + std::to_string(*r) + " too)");
    owner[*r] = l.path;
    entries.back().rank = *r;
    used.insert(*r);
  }
  RankId next = 0;
  for (size_t i : byOrder) {
    while (used.count(next)) ++next;
    entries[i].rank = next;
    entries[i].rankFrom = "order";
    used.insert(next);
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.rank < b.rank; });

  // Clocks: the time base puts every file on its host's clock (the importer added it); without it
  // on every file, the first collective of the lowest rank is matched by name on every other rank
  // and their ends are made equal (a collective completes together).
  bool allBase = true;
  for (const Entry& e : entries) allBase = allBase && e.file->store.metadata().count(rules.timeBaseKey) > 0;
  std::string alignment = rules.timeBaseKey;
  if (!allBase) {
    alignment = "first_collective";
    for (Entry& e : entries)  // undo any partial base: every file in its own file time first
      e.shift = -metaInt(e.file->store, rules.timeBaseKey);
    auto ref = firstCollective(entries.front().file->store);
    for (size_t i = 1; i < entries.size(); ++i) {
      auto mine = ref ? firstCollective(entries[i].file->store, ref->first) : std::nullopt;
      if (!mine) {
        alignment = "first_collective (not found on every rank; some ranks unaligned)";
        continue;
      }
      entries[i].shift = (ref->second + entries.front().shift) - mine->second;
    }
    if (!ref) alignment = "none (no collective to align on)";
  }

  TraceStore& out = result.store;
  uint64_t skippedEvents = 0, invalidEvents = 0;
  std::string firstError;
  for (Entry& e : entries) {
    TraceStore& in = e.file->store;
    const RankId old = in.ranks().empty() ? 0 : in.ranks().begin()->first;
    appendStoreAs(out, in, old, e.rank, e.shift);
    const auto& md = in.metadata();
    skippedEvents += static_cast<uint64_t>(metaInt(in, "import_skipped_events"));
    invalidEvents += static_cast<uint64_t>(metaInt(in, "import_invalid_events"));
    if (firstError.empty() && md.count("import_first_error")) firstError = md.at("import_first_error");
    const std::string r = std::to_string(e.rank);
    const int64_t base = metaInt(in, "import_time_shift_ns." + std::to_string(old));
    out.metadata()["import_time_shift_ns." + r] = std::to_string(base + e.shift);
    auto it = md.find("import_fractional_ts." + std::to_string(old));
    out.metadata()["import_fractional_ts." + r] = it != md.end() ? it->second : "0";
    out.metadata()["import_file." + r] = e.file->path;
    out.metadata()["import_rank_from." + r] = e.rankFrom;
    out.metadata()["clock_alignment_shift_ns." + r] = std::to_string(e.shift);
    for (const std::string& k : rules.copyKeys)
      if (md.count(k) && !out.metadata().count(k)) out.metadata()[k] = md.at(k);
    result.files.push_back({e.file->path, e.rank, e.rankFrom, in.eventCount()});
    in = TraceStore();  // give the file's memory back before the next
  }
  out.metadata()["clock_alignment"] = alignment;
  out.metadata()["import_skipped_events"] = std::to_string(skippedEvents);
  out.metadata()["import_invalid_events"] = std::to_string(invalidEvents);
  out.metadata()["import_skipped_files"] = std::to_string(result.skippedFiles.size());
  if (!firstError.empty()) out.metadata()["import_first_error"] = firstError;
  out.flush();
  return result;
}

}  // namespace trainscope::core::interop
