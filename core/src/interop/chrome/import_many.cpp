// Several Chrome/Kineto trace files (one per rank, as torch.profiler writes them) into one
// TraceStore: which rank each file is, how their clocks relate, and the merge. docs/FORMATS.md
// ("Several files").
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>

#include "trainscope/core/interop/chrome_trace.h"

namespace trainscope::core {
namespace {

namespace fs = std::filesystem;

bool isTraceFileName(const std::string& n) {
  return n.ends_with(".json") || n.ends_with(".json.gz");
}

// rank3, rank-3, rank_3 anywhere; else a number right before .json: worker_3.json, x-3.pt.trace.json
std::optional<RankId> rankFromFileName(const std::string& name) {
  static const std::regex kRank(R"(rank[-_]?(\d+))", std::regex::icase);
  static const std::regex kTail(R"([_-](\d+)(\.pt\.trace)?\.json(\.gz)?$)", std::regex::icase);
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

std::optional<RankId> rankFromDistributedInfo(const TraceStore& s) {
  auto it = s.metadata().find("distributedInfo");
  if (it == s.metadata().end()) return std::nullopt;
  auto j = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("rank") || !j["rank"].is_number_integer()) return std::nullopt;
  const int64_t r = j["rank"].get<int64_t>();
  if (r < 0 || r >= (1 << 20)) return std::nullopt;
  return static_cast<RankId>(r);
}

struct Loaded {
  std::string path;
  TraceStore store;
  RankId rank = 0;
  std::string rankFrom;  // distributedInfo, file name, order
  bool hasBase = false;
  int64_t shift = 0;  // alignment, ns added
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

void appendFile(TraceStore& out, Loaded& f) {
  TraceStore& in = f.store;
  RankInfo info{.rank = f.rank};
  if (!in.ranks().empty()) info = in.ranks().begin()->second;
  info.rank = f.rank;
  info.clockOffsetNs += f.shift;
  out.setRank(info);
  std::vector<Attr> attrs;
  for (TrackId t = 0; t < in.trackCount(); ++t) {
    const TrackInfo& ti = in.track(t);
    const TrackId nt = out.findOrAddTrack(f.rank, ti.kind, ti.externalId, ti.name);
    const TrackEvents& ev = in.events(t);
    for (size_t i = 0; i < ev.size(); ++i) {
      attrs.clear();
      for (const Attr& a : ev.attrs(i)) {
        Attr b = a;
        if (a.isCustom()) b.key = kCustomAttrBase + out.intern(in.str(a.key - kCustomAttrBase));
        if (a.type == AttrType::String) b.bits = out.intern(in.str(a.asString()));
        attrs.push_back(b);
      }
      out.append(
          nt,
          EventRecord{ev.start(i) + f.shift, ev.end(i) + f.shift, out.intern(in.str(ev.name(i))), ev.kind(i)},
          attrs);
    }
  }
}

}  // namespace

Result<std::vector<fs::path>> expandTraceInputs(const std::vector<fs::path>& inputs) {
  std::vector<fs::path> files;
  for (const fs::path& p : inputs) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<fs::path> found;
      for (const auto& e : fs::directory_iterator(p, ec))
        if (e.is_regular_file() && isTraceFileName(e.path().filename().string())) found.push_back(e.path());
      if (ec) return Status(ErrorCode::Io, p.string() + ": cannot list: " + ec.message());
      if (found.empty())
        return Status(ErrorCode::NotFound,
                      p.string() + ": no trace files (*.json, *.json.gz) in this directory");
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      files.push_back(p);
    }
  }
  return files;
}

Result<MultiImport> importChromeTraceFiles(const std::vector<fs::path>& inputs,
                                           const ChromeImportOptions& options) {
  auto expanded = expandTraceInputs(inputs);
  if (!expanded) return expanded.status();
  const std::vector<fs::path>& files = expanded.value();
  if (files.empty()) return Status(ErrorCode::InvalidArgument, "no input files");
  MultiImport result;
  std::vector<Loaded> loaded;
  for (const fs::path& p : files) {
    auto s = importChromeTraceFile(p, options);
    if (!s) {
      if (!options.partial) return s.status();
      result.skippedFiles.push_back(s.status().message());
      continue;
    }
    Loaded l{.path = p.string(), .store = std::move(s.value())};
    loaded.push_back(std::move(l));
  }
  if (loaded.empty())
    return Status(ErrorCode::BadTrace, "no input file could be imported: " + result.skippedFiles.front());

  if (loaded.size() == 1 && files.size() == 1) {  // one file: as it is (our exports hold every rank)
    Loaded& l = loaded.front();
    l.store.metadata()["clock_alignment"] =
        l.store.metadata().count("baseTimeNanoseconds") ? "baseTimeNanoseconds" : "single_file";
    result.files.push_back(
        {l.path, l.store.ranks().empty() ? 0 : l.store.ranks().begin()->first, "file", l.store.eventCount()});
    result.store = std::move(l.store);
    return result;
  }

  // Ranks: distributedInfo.rank, else the file name, else the lowest free number in the order given.
  std::set<RankId> used;
  std::map<RankId, std::string> owner;
  std::vector<Loaded*> byOrder;
  for (Loaded& l : loaded) {
    if (l.store.ranks().size() > 1)
      return Status(ErrorCode::BadTrace,
                    l.path + ": holds " + std::to_string(l.store.ranks().size()) +
                        " ranks; only single-rank files (one per rank, as torch.profiler "
                        "writes them) can be combined");
    std::optional<RankId> r = rankFromDistributedInfo(l.store);
    l.rankFrom = "distributedInfo";
    if (!r) {
      r = rankFromFileName(fs::path(l.path).filename().string());
      l.rankFrom = "file name";
    }
    if (!r) {
      byOrder.push_back(&l);
      continue;
    }
    if (auto it = owner.find(*r); it != owner.end())
      return Status(ErrorCode::BadTrace, l.path + ": rank " + std::to_string(*r) + " again (" + it->second +
                                             " is rank " + std::to_string(*r) + " too)");
    owner[*r] = l.path;
    l.rank = *r;
    used.insert(*r);
  }
  RankId next = 0;
  for (Loaded* l : byOrder) {
    while (used.count(next)) ++next;
    l->rank = next;
    l->rankFrom = "order";
    used.insert(next);
  }
  std::sort(loaded.begin(), loaded.end(), [](const Loaded& a, const Loaded& b) { return a.rank < b.rank; });

  // Clocks: Kineto's baseTimeNanoseconds puts every file on the hosts' clock (the importer added
  // it); without it on every file, the first collective of the lowest rank is matched by name
  // on every other rank and their ends are made equal (a collective completes together).
  bool allBase = true;
  for (Loaded& l : loaded) {
    l.hasBase = l.store.metadata().count("baseTimeNanoseconds") > 0;
    allBase = allBase && l.hasBase;
  }
  std::string alignment = "baseTimeNanoseconds";
  if (!allBase) {
    alignment = "first_collective";
    // Undo any partial base so all files are in their own file time first.
    for (Loaded& l : loaded)
      if (l.hasBase) {
        const auto& md = l.store.metadata();
        auto it = md.find("baseTimeNanoseconds");
        try {
          l.shift = -std::stoll(it->second);
        } catch (...) {
        }
      }
    auto ref = firstCollective(loaded.front().store);
    for (size_t i = 1; i < loaded.size(); ++i) {
      Loaded& l = loaded[i];
      auto mine = ref ? firstCollective(l.store, ref->first) : std::nullopt;
      if (!mine) {
        alignment = "first_collective (not found on every rank; some ranks unaligned)";
        continue;
      }
      l.shift = (ref->second + loaded.front().shift) - mine->second;
    }
    if (!ref) alignment = "none (no collective to align on)";
  }

  TraceStore& out = result.store;
  uint64_t skippedEvents = 0, invalidEvents = 0;
  std::string firstError;
  for (Loaded& l : loaded) {
    appendFile(out, l);
    const auto& md = l.store.metadata();
    auto num = [&](const std::string& k) -> uint64_t {
      auto it = md.find(k);
      if (it == md.end()) return 0;
      try {
        return std::stoull(it->second);
      } catch (...) {
        return 0;
      }
    };
    skippedEvents += num("import_skipped_events");
    invalidEvents += num("import_invalid_events");
    if (firstError.empty() && md.count("import_first_error")) firstError = md.at("import_first_error");
    const RankId old = l.store.ranks().empty() ? 0 : l.store.ranks().begin()->first;
    const std::string r = std::to_string(l.rank);
    auto it = md.find("import_time_shift_ns." + std::to_string(old));
    int64_t base = 0;
    if (it != md.end()) base = std::stoll(it->second);
    out.metadata()["import_time_shift_ns." + r] = std::to_string(base + l.shift);
    it = md.find("import_fractional_ts." + std::to_string(old));
    out.metadata()["import_fractional_ts." + r] = it != md.end() ? it->second : "0";
    out.metadata()["import_file." + r] = l.path;
    out.metadata()["import_rank_from." + r] = l.rankFrom;
    out.metadata()["clock_alignment_shift_ns." + r] = std::to_string(l.shift);
    for (const char* k : {"import_format", "schemaVersion", "displayTimeUnit"})
      if (md.count(k) && !out.metadata().count(k)) out.metadata()[k] = md.at(k);
    result.files.push_back({l.path, l.rank, l.rankFrom, l.store.eventCount()});
    l.store = TraceStore();  // give the file's memory back before the next
  }
  out.metadata()["clock_alignment"] = alignment;
  out.metadata()["import_skipped_events"] = std::to_string(skippedEvents);
  out.metadata()["import_invalid_events"] = std::to_string(invalidEvents);
  out.metadata()["import_skipped_files"] = std::to_string(result.skippedFiles.size());
  if (!firstError.empty()) out.metadata()["import_first_error"] = firstError;
  out.flush();
  return result;
}

}  // namespace trainscope::core
