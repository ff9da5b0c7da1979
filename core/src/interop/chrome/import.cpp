// Chrome trace JSON import, part 1: the public functions and the intake of single events
// (chrome_importer.h explains the two phases). Our own exports come back as the same ranks,
// tracks and typed attributes; Kineto's categories and args are mapped in chrome_import_args.
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <streambuf>
#include <string>
#include <vector>

#include "interop/chrome/fast_reader.h"
#include "interop/chrome/format.h"
#include "interop/chrome/import_args.h"
#include "interop/chrome/importer.h"
#include "trainscope/core/interop/chrome_trace.h"

namespace trainscope::core::chrome {

constexpr int64_t kMaxAbsTimeNs = int64_t{1} << 62;  // see Importer's "ts" check

namespace {

std::optional<int64_t> timeNs(const JsonValue* v, std::string_view text) {
  if (!text.empty()) return microsTextToNs(text);
  if (!v) return std::nullopt;
  if (auto us = integer(v); us && !v->is_string() && !v->is_number_float()) {
    if (*us > INT64_MAX / 1000 || *us < INT64_MIN / 1000) return std::nullopt;
    return *us * 1000;
  }
  if (v->is_string()) return microsTextToNs(v->str());
  return std::nullopt;
}

// A counter value given as a string ("12.5"), as Perfetto accepts it.
std::optional<double> numericString(const JsonValue& v) {
  if (!v.is_string()) return std::nullopt;
  const std::string s(v.str());
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size()) return std::nullopt;
  return d;
}

// PyTorch host ops: Kineto's "cpu_op" category, or the legacy (non-Kineto) profiler's output,
// whose events have no "cat" and whose pid is "CPU functions". Communication ops are named
// gloo:*, c10d::* or record_param_comms; nccl:* on the host is a GPU collective's launch.
HostRole hostRole(std::string_view cat, std::string_view name, const JsonValue* ev) {
  if (isGpuCategory(cat) || name.starts_with("ProfilerStep#")) return HostRole::None;
  const bool legacy = cat.empty() && member(*ev, "cat") == nullptr;
  if (cat != "cpu_op" && cat != "user_annotation" && !legacy) return HostRole::None;
  if (name.starts_with("nccl:")) return HostRole::HostNccl;
  if (cat == "user_annotation" && parsePipeOp(name)) return HostRole::PipeOp;
  if (name.starts_with("gloo:") || name.starts_with("c10d::") || name == "record_param_comms")
    return HostRole::HostComm;
  if (cat == "user_annotation") return HostRole::None;
  if (legacy) {
    const JsonValue* pid = member(*ev, "pid");
    if (!pid || !pid->is_string() || pid->str() != "CPU functions") return HostRole::None;
  }
  return HostRole::CpuOp;
}

JsonId idOf(const JsonValue* v, const JsonId& fallback) {
  if (!v || v->is_null()) return fallback;
  if (v->is_string()) return std::string(v->str());
  if (auto n = integer(v)) return *n;
  return v->dump();
}

}  // namespace

Status Importer::bad(size_t index, const std::string& what) {
  std::string message = std::string(source_) + ": event #" + std::to_string(index) + ": " + what;
  if (partial_) {  // skip it, say so in the metadata
    ++invalid_;
    if (firstInvalid_.empty()) firstInvalid_ = std::move(message);
    return Status::ok();
  }
  return Status(ErrorCode::BadTrace, std::move(message));
}

uint32_t Importer::process(const JsonId& pid) {
  auto [it, added] = processIndex_.try_emplace(pid, static_cast<uint32_t>(processes_.size()));
  if (added) processes_.push_back(ProcessState{.key = pid});
  return it->second;
}

uint32_t Importer::thread(uint32_t process, const JsonId& tid) {
  auto [it, added] = threadIndex_.try_emplace({process, tid}, static_cast<uint32_t>(threads_.size()));
  if (added) threads_.push_back(ThreadState{.process = process, .key = tid, .firstSeen = threads_.size()});
  return it->second;
}

void Importer::addPending(uint32_t thread, int64_t start, int64_t end, StringId name, EventKind kind,
                          const std::vector<Attr>& attrs, bool counterSample, HostRole role) {
  pending_.push_back(Pending{thread, start, end, name, kind, counterSample, role,
                             static_cast<uint32_t>(attrs_.size()), static_cast<uint32_t>(attrs.size())});
  attrs_.insert(attrs_.end(), attrs.begin(), attrs.end());
  if (!counterSample) threads_[thread].hasSlices = true;
}

Status Importer::onEvent(const RawEvent& raw) {
  const JsonValue& ev = *raw.value;
  const JsonValue* ph = member(ev, "ph");
  if (!ph) return bad(raw.index, "has no \"ph\" (phase)");
  if (!ph->is_string() || ph->str().empty()) return bad(raw.index, "\"ph\" is not a phase letter");
  const char phase = ph->str()[0];

  const JsonId pid = idOf(member(ev, "pid"), JsonId(int64_t{0}));
  const uint32_t th = thread(process(pid), idOf(member(ev, "tid"), pid));
  if (!raw.tsText.empty() || !member(ev, "ts")) fractionalTs_ = true;
  if (phase == 'M') {
    metadataEvent(ev, th);
    return Status::ok();
  }
  static constexpr std::string_view kKnown = "XBEiInRCstf";
  if (kKnown.find(phase) == std::string_view::npos) {  // async, object, sample, ... events
    ++skipped_;
    return Status::ok();
  }
  const auto ts = timeNs(member(ev, "ts"), raw.tsText);
  if (!ts) {
    return bad(raw.index, member(ev, "ts") ? "\"ts\" is not a number of microseconds within range"
                                           : std::string("'") + phase + "' event has no \"ts\"");
  }
  // Times within ±2^62 ns (±146 years around 1970): then every difference of two times (a
  // duration, the export's offset from the session start, a summary's span) fits int64. Found by
  // fuzz_chrome_import: events at -9.2e15 µs and today overflowed `info` and `export`.
  if (*ts <= -kMaxAbsTimeNs || *ts >= kMaxAbsTimeNs)
    return bad(raw.index, "\"ts\" is not a number of microseconds within range (at most 146 years from 1970)");
  const std::string_view cat = textView(member(ev, "cat"), catScratch_);
  const std::string_view nameText = textView(member(ev, "name"), nameScratch_);
  const StringId name = store_.intern(nameText);
  const JsonValue* args = member(ev, "args");

  if (phase == 'C') {
    counterEvent(ev, th, *ts, name);
    return Status::ok();
  }
  if (phase == 's' || phase == 't' || phase == 'f') {
    const JsonValue* id = member(ev, "id");
    if (!id) {
      ++skipped_;
      return Status::ok();
    }
    auto key = std::make_tuple(std::string(cat), std::string(nameText), text(id));
    const auto group = flowGroups_.try_emplace(key, static_cast<uint32_t>(flowGroups_.size())).first->second;
    const bool enclosing = phase != 'f' || text(member(ev, "bp")) == "e";
    flowSteps_.push_back(FlowStep{th, *ts, group, enclosing});
    return Status::ok();
  }

  scratch_.clear();
  const auto argsKind = args ? appendArgs(*args, store_, scratch_) : std::nullopt;
  if (isGpuCategory(cat)) threads_[th].gpu = true;
  std::optional<int64_t> step;
  auto sliceKind = [&] { return argsKind ? *argsKind : classifySlice(cat, nameText, &step); };
  const HostRole role = argsKind ? HostRole::None : hostRole(cat, nameText, raw.value);
  if (role != HostRole::None) sawCpuOps_ = true;

  switch (phase) {
    case 'X': {
      const JsonValue* durJson = member(ev, "dur");
      if (!durJson) return bad(raw.index, "complete ('X') event has no \"dur\"");
      const auto dur = timeNs(durJson, raw.durText);
      if (!dur || *dur < 0 || *dur >= kMaxAbsTimeNs - *ts)
        return bad(raw.index, "\"dur\" is not a non-negative number of microseconds within range");
      const EventKind kind = sliceKind();
      if (step && kind == EventKind::Step) scratch_.push_back(Attr::ofInt(AttrKey::Step, *step));
      addPending(th, *ts, *ts + *dur, name, kind, scratch_, false, role);
      return Status::ok();
    }
    case 'B': {
      const EventKind kind = sliceKind();
      if (step && kind == EventKind::Step) scratch_.push_back(Attr::ofInt(AttrKey::Step, *step));
      threads_[th].open.push_back(OpenSlice{*ts, name, kind, role, scratch_});
      return Status::ok();
    }
    case 'E': {
      // Ends close the innermost open slice of their thread, in file order, as in Chrome.
      auto& open = threads_[th].open;
      if (open.empty() || open.back().start > *ts) {
        ++skipped_;
        return Status::ok();
      }
      OpenSlice b = std::move(open.back());
      open.pop_back();
      if (args) (void)appendArgs(*args, store_, b.attrs, /*skipExisting=*/true);
      addPending(th, b.start, *ts, b.name, b.kind, b.attrs, false, b.role);
      return Status::ok();
    }
    default:  // i, I, n, R: instants
      addPending(th, *ts, *ts, name, argsKind.value_or(EventKind::Marker), scratch_);
      return Status::ok();
  }
}

// "C": one Counter event per numeric series. Our exports keep the kind and the other attributes
// in an extra member (chrome_format.h); foreign counters carry only their series.
void Importer::counterEvent(const JsonValue& ev, uint32_t th, int64_t ts, StringId name) {
  const JsonValue* args = member(ev, "args");
  std::vector<std::pair<std::string, const JsonValue*>> series;
  if (args && args->is_object()) {
    const JsonValue* v = args->firstChild();
    for (uint32_t i = 0; i < args->size(); ++i, v = v->nextSibling())
      if (v->is_number() || numericString(*v)) series.emplace_back(std::string(v->key()), v);
  }
  if (series.empty()) {
    ++skipped_;
    return;
  }
  std::vector<Attr> extra;
  std::optional<EventKind> kind;
  if (const JsonValue* more = member(ev, kCounterExtraArgs)) kind = appendArgs(*more, store_, extra);
  const std::string base(store_.str(name));
  for (const auto& [key, value] : series) {
    std::vector<Attr> attrs;
    if (const auto n = integer(value);
        n && value->is_number_integer()) {  // unsigned too: 7 parses as unsigned
      attrs.push_back(Attr::ofInt(AttrKey::Value, *n));
    } else if (value->is_number()) {
      attrs.push_back(Attr::ofDouble(AttrKey::Value, value->number()));
    } else {
      attrs.push_back(Attr::ofDouble(AttrKey::Value, *numericString(*value)));
    }
    attrs.insert(attrs.end(), extra.begin(), extra.end());
    const StringId n = series.size() == 1 ? name : store_.intern(base + "." + key);
    addPending(th, ts, ts, n, kind.value_or(EventKind::Counter), attrs, /*counterSample=*/true);
  }
}

void Importer::metadataEvent(const JsonValue& ev, uint32_t th) {
  const std::string what = text(member(ev, "name"));
  const JsonValue* args = member(ev, "args");
  ThreadState& t = threads_[th];
  if (what == "process_name" && args) {
    // Our exports describe the rank completely; a foreign process name is only a label.
    if (auto rank = integer(member(*args, kRankArg))) {
      RankInfo info{.rank = static_cast<RankId>(*rank), .host = text(member(*args, kHostArg))};
      info.pid = integer(member(*args, kOsPidArg)).value_or(0);
      info.localRank = static_cast<int32_t>(integer(member(*args, kLocalRankArg)).value_or(0));
      info.device = static_cast<int32_t>(integer(member(*args, kDeviceArg)).value_or(-1));
      info.clockOffsetNs = integer(member(*args, kClockOffsetArg)).value_or(0);
      const JsonValue* dropped = member(*args, kDroppedArg);
      info.droppedEvents = dropped && dropped->is_number_unsigned()
                               ? dropped->uint64()
                               : static_cast<uint64_t>(integer(dropped).value_or(0));
      processes_[t.process].ours = std::move(info);
    }
  } else if (what == "thread_name" && args) {
    t.name = text(member(*args, "name"));
    const auto kind = trackKindFromName(text(member(*args, kTrackKindArg)));
    const auto ext = integer(member(*args, kTrackExternalIdArg));
    if (kind && ext) {
      const JsonValue* trackName = member(*args, kTrackNameArg);
      t.ours = OwnTrack{*kind, *ext, trackName ? text(trackName) : t.name};
    }
  } else if (what == "thread_sort_index" && args) {
    t.sortIndex = integer(member(*args, "sort_index"));
  }
  // process_sort_index, process_labels, ...: display hints only.
}

}  // namespace trainscope::core::chrome

namespace trainscope::core {

namespace {

Result<TraceStore> finishImport(chrome::Importer& importer, chrome::ReadResult& result, const Status& st,
                                const ChromeImportOptions& options) {
  if (!st) {
    // --partial keeps what a truncated or damaged file held before the damage.
    if (!options.partial || (st.code() != ErrorCode::MalformedJson && st.code() != ErrorCode::BadTrace) ||
        result.events == 0)
      return st;
    importer.noteTruncated(st.message());
  }
  return importer.finish(result);
}

// Reads with the fast reader (chrome/fast_reader.h); when it falls back, everything is read
// again from the start by the reference reader (slow), with a fresh importer, so that the result
// -- an error message, a refusal, what --partial keeps -- is that reader's. rewind() starts the
// input over for the second read.
template <typename Fast, typename Slow>
Result<TraceStore> importWith(std::string_view sourceName, const ChromeImportOptions& options, Fast&& fast,
                              Slow&& slow) {
  try {
    if (!options.referenceReader) {
      chrome::Importer importer(sourceName, options.partial);
      chrome::ReadResult result;
      chrome::FastRead read{true, Status::ok()};
      try {
        read = fast([&](const chrome::RawEvent& ev) { return importer.onEvent(ev); }, result);
      } catch (const std::bad_alloc&) {
        throw;
      } catch (const std::exception&) {  // whatever it was, the reference reader meets it again
        read.fallback = true;
      }
      if (!read.fallback) {
        if (options.usedReferenceReader) *options.usedReferenceReader = false;
        return finishImport(importer, result, read.status, options);
      }
    }
    if (options.usedReferenceReader) *options.usedReferenceReader = true;
    chrome::Importer importer(sourceName, options.partial);
    chrome::ReadResult result;
    const Status st = slow([&](const chrome::RawEvent& ev) { return importer.onEvent(ev); }, result);
    return finishImport(importer, result, st, options);
  } catch (const std::bad_alloc&) {
    return Status(ErrorCode::Io, std::string(sourceName) + ": out of memory while importing");
  } catch (const std::exception& e) {  // nlohmann type errors and the like: never out of core
    return Status(ErrorCode::BadTrace, std::string(sourceName) + ": " + e.what());
  }
}

// A read-only streambuf over zlib's gzFile: gzread inflates gzip files and passes anything else
// through unchanged, so plain and .gz traces take the same path, 1 MiB at a time.
class GzStreamBuf : public std::streambuf {
 public:
  GzStreamBuf(gzFile f, std::string path) : f_(f), path_(std::move(path)), buf_(1 << 20) {}
  const std::string& error() const { return error_; }
  uint64_t consumed() const { return consumed_; }

 protected:
  int_type underflow() override {
    if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
    if (!error_.empty()) return traits_type::eof();
    const int n = gzread(f_, buf_.data(), static_cast<unsigned>(buf_.size()));
    if (n < 0) {
      int code = 0;
      const char* msg = gzerror(f_, &code);
      error_ = code == Z_ERRNO ? std::strerror(errno) : reason(msg);
      return traits_type::eof();
    }
    if (n == 0) {
      int code = 0;
      const char* msg = gzerror(f_, &code);
      if (code != Z_OK && code != Z_STREAM_END) error_ = reason(msg);
      return traits_type::eof();
    }
    consumed_ += static_cast<uint64_t>(n);
    setg(buf_.data(), buf_.data(), buf_.data() + n);
    return traits_type::to_int_type(*gptr());
  }

 private:
  // zlib's message, without the "<path>: " it puts in front (our message names the file already).
  std::string reason(const char* msg) const {
    std::string m = msg ? msg : "read error";
    if (m.starts_with(path_ + ": ")) m.erase(0, path_.size() + 2);
    return m;
  }

  gzFile f_;
  std::string path_;
  std::vector<char> buf_;
  std::string error_;
  uint64_t consumed_ = 0;
};

}  // namespace

Result<TraceStore> importChromeTrace(std::string_view json, std::string_view sourceName,
                                     const ChromeImportOptions& options) {
  return importWith(
      sourceName, options,
      [&](const auto& onEvent, chrome::ReadResult& result) {
        return chrome::readChromeJsonFast(json, onEvent, result);
      },
      [&](const auto& onEvent, chrome::ReadResult& result) {
        return chrome::readChromeJson(json, sourceName, onEvent, result);
      });
}

Result<TraceStore> importChromeTraceFile(const std::filesystem::path& path,
                                         const ChromeImportOptions& options) {
  const std::string name = path.string();
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) return Status(ErrorCode::NotFound, name + ": no such file");
  if (std::filesystem::is_directory(status))
    return Status(ErrorCode::Io, name + ": is a directory, not a trace file");
  errno = 0;
  gzFile f = gzopen(name.c_str(), "rb");
  if (!f) return Status(ErrorCode::Io, name + ": cannot open: " + std::strerror(errno ? errno : ENOMEM));
  struct Closer {
    gzFile f;
    ~Closer() { gzclose(f); }
  } closer{f};
  gzbuffer(f, 1 << 18);
  const bool gzip = !gzdirect(f);
  std::optional<GzStreamBuf> buf;  // the reference reader's
  auto result = importWith(
      name, options,
      [&](const auto& onEvent, chrome::ReadResult& read) {
        const chrome::ReadBytes bytes = [&](char* dst, size_t n) -> long {
          return gzread(f, dst, static_cast<unsigned>(std::min<size_t>(n, 1u << 30)));
        };
        return chrome::readChromeJsonFast(bytes, onEvent, read,
                                          options.readWindow ? options.readWindow : size_t{4} << 20);
      },
      [&](const auto& onEvent, chrome::ReadResult& read) {
        gzclearerr(f);  // start over after the fast read
        if (gzrewind(f) != 0) return Status(ErrorCode::Io, name + ": cannot read the file again");
        buf.emplace(f, name);
        std::istream in(&*buf);
        return chrome::readChromeJson(in, name, onEvent, read);
      });
  if (!buf) buf.emplace(f, name);  // the fast reader read it all: no error
  if (!buf->error().empty()) {     // the JSON error it caused would be a misleading symptom
    Status st(gzip ? ErrorCode::Corrupt : ErrorCode::Io,
              name + (gzip ? ": damaged gzip data after " : ": read failed after ") +
                  std::to_string(buf->consumed()) + " bytes of JSON: " + buf->error());
    if (!options.partial || !result) return st;
    result->metadata()["import_invalid_events"] =
        std::to_string(std::stoull(result->metadata()["import_invalid_events"]) + 1);
  }
  if (result && gzip) result->metadata()["import_compression"] = "gzip";
  return result;
}

}  // namespace trainscope::core
