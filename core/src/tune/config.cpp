#include "trainscope/core/tune/config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <ctime>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>

#include "trainscope/core/analysis/analysis.h"
#include "trainscope/core/base/json_depth.h"

namespace trainscope::core {
namespace {

using nlohmann::ordered_json;

std::string nowIso() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string valueText(const nlohmann::json& v);

// A knob value typed for JSON: integers and floats as numbers, everything else as text. Only a
// number's own text becomes a number ("1048576", "0.01"): any other spelling (" 5", "0x10",
// "1e5", "1.0") stays text, so that reading the file back gives the same knob text and a
// configuration written twice is the same file (found by fuzz_config: "0x0" became 0.0, then 0).
ordered_json typedValue(const std::string& v) {
  if (v.empty()) return v;
  char* end = nullptr;
  errno = 0;
  const long long i = std::strtoll(v.c_str(), &end, 10);
  if (end && *end == 0 && errno == 0 && std::to_string(i) == v) return i;
  const double d = std::strtod(v.c_str(), &end);
  if (end && *end == 0 && std::isfinite(d) && valueText(nlohmann::json(d)) == v) return d;
  return v;
}

std::string valueText(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "1" : "0";
  if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number()) {
    std::ostringstream s;
    s.precision(17);
    s << v.get<double>();
    // Shortest text that reads back the same double.
    for (int p = 1; p <= 17; ++p) {
      std::ostringstream t;
      t.precision(p);
      t << v.get<double>();
      if (std::strtod(t.str().c_str(), nullptr) == v.get<double>()) return t.str();
    }
    return s.str();
  }
  return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

double finiteOr(double v, double fallback) {
  return std::isfinite(v) ? v : fallback;
}

struct KnobEv {
  int64_t step;
  int64_t time;
  std::string knob, value;
  RankId rank = 0;
};

// Gradient bytes per step (after compression) and bucket payloads, from the bucket events of the
// steps `inSteps` accepts, into m.
void gradientBytes(const TraceStore& store, const AnalysisResult& a, const std::function<bool(int64_t)>& inSteps,
                   TunedMeasurements& m) {
  std::map<std::pair<RankId, int64_t>, double> wire;
  std::map<RankId, std::vector<std::pair<int64_t, int64_t>>> stepStarts;  // rank -> (start, step)
  for (const RankBreakdown& b : a.breakdown)
    for (const BreakdownStep& s : b.perStep) stepStarts[b.rank].push_back({s.startNs, s.step});
  for (auto& [r, v] : stepStarts) std::sort(v.begin(), v.end());
  for (TrackId t = 0; t < store.trackCount(); ++t) {
    const RankId r = store.track(t).rank;
    const TrackEvents& ev = store.events(t);
    for (size_t i = 0; i < ev.size(); ++i) {
      const EventKind k = ev.kind(i);
      if (k != EventKind::Collective && k != EventKind::Bucket) continue;
      if (!ev.findAttr(i, AttrKey::Bucket)) continue;
      const Attr* b = ev.findAttr(i, AttrKey::Bytes);
      if (!b) continue;
      // The step this event belongs to: the last step started at or before it on its rank.
      int64_t step = -1;
      if (auto sw = stepStarts.find(r); sw != stepStarts.end()) {
        auto it = std::upper_bound(sw->second.begin(), sw->second.end(), std::pair{ev.start(i), INT64_MAX});
        if (it != sw->second.begin()) step = std::prev(it)->second;
      }
      if (step < 0 || !inSteps(step)) continue;
      if (k == EventKind::Collective) {
        wire[{r, step}] += static_cast<double>(b->asInt());
      } else {
        m.bucketPayloadMin = m.bucketPayloadMin < 0 ? b->asInt() : std::min(m.bucketPayloadMin, b->asInt());
        m.bucketPayloadMax = std::max(m.bucketPayloadMax, b->asInt());
      }
    }
  }
  if (!wire.empty()) {
    double sum = 0;
    for (const auto& [k, v] : wire) sum += v;
    m.wireBytesPerStep = sum / static_cast<double>(wire.size());
  }
}

}  // namespace

std::string trainOptionForKnob(std::string_view knob) {
  static const std::map<std::string, std::string, std::less<>> m = {
      {"dp.bucket_bytes", "--bucket-bytes"},
      {"dp.algorithm", "--algorithm"},
      {"dp.compression", "--compression"},
      {"dp.topk_ratio", "--topk-ratio"},
      {"pp.schedule", "--schedule"},
      {"pp.microbatches", "--microbatches"},
      {"pp.virtual_stages", "--virtual-stages"},
      {"pp.segments", "--segments"},
      {"disco.sparsity", "--sparsity"},
      {"disco.mode", "--disco-mode"},
  };
  auto it = m.find(knob);
  return it == m.end() ? std::string() : it->second;
}

Result<TunedConfig> configFromSession(const TraceStore& store, const std::string& source) {
  TunedConfig c;
  c.source = source;
  c.createdAt = nowIso();
  const auto& md = store.metadata();
  for (const auto& [k, v] : md)
    if (k.rfind("knob.", 0) == 0) c.knobs[k.substr(5)] = v;
  // KnobChange events of every rank, in (step, time) order; the same change seen on several
  // ranks is applied once per rank, which leaves the same value.
  std::vector<KnobEv> evs;
  for (TrackId t = 0; t < store.trackCount(); ++t) {
    const TrackEvents& ev = store.events(t);
    for (size_t i = 0; i < ev.size(); ++i) {
      if (ev.kind(i) != EventKind::KnobChange) continue;
      const Attr* name = ev.findAttr(i, AttrKey::Knob);
      const Attr* value = ev.findAttr(i, AttrKey::KnobValue);
      const Attr* step = ev.findAttr(i, AttrKey::Step);
      if (!name || !value) continue;
      evs.push_back({step ? step->asInt() : -1, ev.start(i), std::string(store.str(name->asString())),
                     std::string(store.str(value->asString())), store.track(t).rank});
    }
  }
  std::stable_sort(evs.begin(), evs.end(), [](const KnobEv& a, const KnobEv& b) {
    return std::tie(a.step, a.time) < std::tie(b.step, b.time);
  });
  // The last step whose changes left a different value (a refused change and its restore at
  // the same step change nothing: the knob is written twice there). A knob written once at a
  // step is a change even when its value is the one the metadata holds: a recording started
  // after a change holds the new value in its metadata, and the flight recorder's history
  // before it the steps of the old one (they were mixed into the measurements before Nov 24).
  int64_t lastChange = -1;
  for (size_t i = 0; i < evs.size();) {
    const std::map<std::string, std::string> before = c.knobs;
    std::map<std::pair<RankId, std::string>, int> writes;  // per rank: every rank records the change
    size_t j = i;
    for (; j < evs.size() && evs[j].step == evs[i].step; ++j) {
      c.knobs[evs[j].knob] = evs[j].value;
      ++writes[{evs[j].rank, evs[j].knob}];
    }
    bool changed = c.knobs != before;
    for (const auto& [k, n] : writes) changed |= n == 1;
    if (changed) lastChange = std::max(lastChange, evs[i].step);
    i = j;
  }
  if (c.knobs.empty())
    return Status(ErrorCode::InvalidArgument,
                  source +
                      ": no knob values in this session (no knob.<name> metadata and no knob changes): "
                      "record it from a job with knobs (trainscope-cli record)");

  // The job.
  if (auto it = md.find("job_id"); it != md.end()) c.job.jobId = it->second;
  if (auto it = md.find("world_size"); it != md.end()) c.job.worldSize = std::atoi(it->second.c_str());
  if (c.job.worldSize <= 0) c.job.worldSize = static_cast<int>(store.ranks().size());
  bool dp = false, pp = false, disco = false;
  for (const auto& [k, v] : c.knobs) {
    dp |= k.rfind("dp.", 0) == 0;
    pp |= k.rfind("pp.", 0) == 0;
    disco |= k.rfind("disco.", 0) == 0;
  }
  c.job.mode = disco ? "disco" : pp ? (dp ? "hybrid" : "pp") : dp ? "dp" : "";
  // Layers: per rank, the distinct (chunk, layer) pairs of its forward kernels; the model is
  // the sum over one rank per stage.
  std::map<RankId, std::set<int64_t>> layersOf;
  std::map<RankId, int64_t> stageOf;
  for (TrackId t = 0; t < store.trackCount(); ++t) {
    const RankId r = store.track(t).rank;
    const TrackEvents& ev = store.events(t);
    for (size_t i = 0; i < ev.size(); ++i) {
      const EventKind k = ev.kind(i);
      if (k == EventKind::MicroBatchF) {
        if (const Attr* s = ev.findAttr(i, AttrKey::Stage)) stageOf[r] = s->asInt();
      } else if (k == EventKind::Kernel) {
        const std::string_view n = store.str(ev.name(i));
        if (!n.starts_with("F ")) continue;
        const Attr* l = ev.findAttr(i, AttrKey::Layer);
        if (!l) continue;
        const Attr* ch = ev.findAttr(i, AttrKey::Chunk);
        layersOf[r].insert((ch ? ch->asInt() : 0) * 100000 + l->asInt());
      }
    }
  }
  std::map<int64_t, int> layersPerStage;
  for (const auto& [r, ls] : layersOf) {
    const int64_t s = stageOf.count(r) ? stageOf[r] : 0;
    layersPerStage[s] = std::max(layersPerStage[s], static_cast<int>(ls.size()));
  }
  c.job.ppStages = std::max<int>(1, static_cast<int>(layersPerStage.size()));
  if (!stageOf.empty()) {
    std::set<int64_t> stages;
    for (const auto& [r, s] : stageOf) stages.insert(s);
    c.job.ppStages = static_cast<int>(stages.size());
  }
  for (const auto& [s, n] : layersPerStage) c.job.modelLayers += n;
  // trainscope-train registers the dp.* knobs in pp mode too: with one replica it is pp.
  if (c.job.mode == "hybrid" && c.job.ppStages > 1 && c.job.worldSize > 0 &&
      c.job.worldSize <= c.job.ppStages)
    c.job.mode = "pp";

  // Measurements: steps from the last change on (a change acknowledged at step s is in force
  // from step s).
  AnalysisResult a = analyzeStore(store);
  TunedMeasurements& m = c.measured;
  m.method = "analysis of " + source;
  std::vector<double> times;
  for (const StepStat& s : a.steps.perStep) {
    if (s.step < lastChange) continue;
    times.push_back(s.timeMs);
    if (m.fromStep < 0 || s.step < m.fromStep) m.fromStep = s.step;
    m.toStep = std::max(m.toStep, s.step);
  }
  m.steps = static_cast<int>(times.size());
  if (!times.empty()) {
    double sum = 0;
    for (double t : times) sum += t;
    m.stepTimeMs = sum / static_cast<double>(times.size());
    std::sort(times.begin(), times.end());
    m.stepTimeP50Ms = times.size() % 2 ? times[times.size() / 2]
                                       : (times[times.size() / 2 - 1] + times[times.size() / 2]) / 2;
  }
  if (a.dataParallel.present) {
    double sum = 0;
    int n = 0;
    for (const DpStep& s : a.dataParallel.perStep)
      if (s.step >= lastChange) sum += s.exposedCommMs, ++n;
    if (n > 0) m.exposedCommMs = sum / n;
    m.overlapRatio = finiteOr(a.dataParallel.overlapRatio, -1);
  }
  if (a.pipeline.present) m.bubbleFraction = finiteOr(a.pipeline.bubbleFraction, -1);
  gradientBytes(store, a, [&](int64_t step) { return step >= lastChange && step >= 0; }, m);
  return c;
}

TunedMeasurements measurementsOfSteps(const TraceStore& store, const AnalysisResult& a,
                                      const std::set<int64_t>& steps) {
  TunedMeasurements m;
  auto in = [&](int64_t step) { return steps.count(step) > 0; };
  std::vector<double> times;
  for (const StepStat& s : a.steps.perStep) {
    if (!in(s.step)) continue;
    times.push_back(s.timeMs);
    if (m.fromStep < 0 || s.step < m.fromStep) m.fromStep = s.step;
    m.toStep = std::max(m.toStep, s.step);
  }
  m.steps = static_cast<int>(times.size());
  if (!times.empty()) {
    double sum = 0;
    for (double t : times) sum += t;
    m.stepTimeMs = sum / static_cast<double>(times.size());
    std::sort(times.begin(), times.end());
    m.stepTimeP50Ms = times.size() % 2 ? times[times.size() / 2]
                                       : (times[times.size() / 2 - 1] + times[times.size() / 2]) / 2;
  } else {
    m.unavailable["step_time_ms"] = "the analysis has none of the chosen steps complete on every rank";
  }
  // Data parallel: per step (mean over ranks) exposed gradient communication and its overlap.
  double exposed = 0, overlap = 0;
  int nExposed = 0, nOverlap = 0;
  for (const DpStep& s : a.dataParallel.perStep) {
    if (!in(s.step)) continue;
    exposed += s.exposedCommMs, ++nExposed;
    if (s.commMs > 0) overlap += std::clamp((s.commMs - s.exposedCommMs) / s.commMs, 0.0, 1.0), ++nOverlap;
  }
  if (nExposed > 0) m.exposedCommMs = exposed / nExposed;
  if (nOverlap > 0) m.overlapRatio = overlap / nOverlap;
  const char* noDp = a.dataParallel.present
                         ? "no gradient communication in the chosen steps"
                         : "the job has no data-parallel gradient communication (no bucket collectives traced)";
  if (nExposed == 0) m.unavailable["exposed_comm_ms"] = noDp;
  if (nOverlap == 0) m.unavailable["overlap_ratio"] = noDp;
  // Pipelines: per step the mean over stages of each stage's bubble.
  std::map<int64_t, std::pair<double, int>> bubble;
  for (const StageResult& st : a.pipeline.perStage) {
    std::map<int64_t, std::pair<double, int>> perStage;
    for (const StageStep& x : st.perStep)
      if (in(x.step) && std::isfinite(x.bubbleFraction)) perStage[x.step].first += x.bubbleFraction, ++perStage[x.step].second;
    for (const auto& [step, v] : perStage) bubble[step].first += v.first / v.second, ++bubble[step].second;
  }
  if (!bubble.empty()) {
    double sum = 0;
    for (const auto& [step, v] : bubble) sum += v.first / v.second;
    m.bubbleFraction = sum / static_cast<double>(bubble.size());
  } else {
    m.unavailable["bubble_fraction"] = a.pipeline.present ? "no pipeline stage has the chosen steps"
                                                          : "not a pipeline job (no micro-batch events)";
  }
  gradientBytes(store, a, in, m);
  if (m.wireBytesPerStep < 0)
    m.unavailable["wire_bytes_per_step"] = "no gradient bucket collective with a byte count in the chosen steps";
  if (m.bucketPayloadMin < 0) {
    m.unavailable["bucket_payload_bytes_min"] = "no gradient bucket event with a byte count in the chosen steps";
    m.unavailable["bucket_payload_bytes_max"] = m.unavailable["bucket_payload_bytes_min"];
  }
  return m;
}

std::string configToJson(const TunedConfig& c) {
  ordered_json j;
  j["schema"] = kTunedConfigSchema;
  j["schema_version"] = kTunedConfigVersion;
  ordered_json knobs = ordered_json::object();
  for (const auto& [k, v] : c.knobs) knobs[k] = typedValue(v);
  j["knobs"] = knobs;
  ordered_json job = ordered_json::object();
  job["job_id"] = c.job.jobId;
  job["world_size"] = c.job.worldSize;
  job["mode"] = c.job.mode;
  job["pp_stages"] = c.job.ppStages;
  job["model_layers"] = c.job.modelLayers;
  j["job"] = job;
  ordered_json m = ordered_json::object();
  const TunedMeasurements& x = c.measured;
  m["method"] = x.method;
  m["steps"] = x.steps;
  m["from_step"] = x.fromStep;
  m["to_step"] = x.toStep;
  auto num = [&](const char* key, double v) { m[key] = v < 0 ? ordered_json(nullptr) : ordered_json(v); };
  num("step_time_ms", x.stepTimeMs);
  num("step_time_p50_ms", x.stepTimeP50Ms);
  num("exposed_comm_ms", x.exposedCommMs);
  num("overlap_ratio", x.overlapRatio);
  num("bubble_fraction", x.bubbleFraction);
  num("wire_bytes_per_step", x.wireBytesPerStep);
  m["bucket_payload_bytes_min"] =
      x.bucketPayloadMin < 0 ? ordered_json(nullptr) : ordered_json(x.bucketPayloadMin);
  m["bucket_payload_bytes_max"] =
      x.bucketPayloadMax < 0 ? ordered_json(nullptr) : ordered_json(x.bucketPayloadMax);
  // The tuner's (only when measured so: configurations from a session keep their old shape).
  if (x.stepTimeStderrMs >= 0) m["step_time_stderr_ms"] = x.stepTimeStderrMs;
  if (x.stepTimeCi95LowMs >= 0 && x.stepTimeCi95HighMs >= 0)
    m["step_time_ci95_ms"] = ordered_json::array({x.stepTimeCi95LowMs, x.stepTimeCi95HighMs});
  if (!x.unavailable.empty()) {
    ordered_json u = ordered_json::object();
    for (const auto& [k, why] : x.unavailable) u[k] = why;
    m["unavailable"] = u;
  }
  j["measurements"] = m;
  j["source"] = c.source;
  if (!c.notes.empty()) {
    ordered_json n = ordered_json::object();
    for (const auto& [k, v] : c.notes) n[k] = v;
    j["notes"] = n;
  }
  ordered_json ver = ordered_json::object();
  ver["created_by"] = c.createdBy;
  ver["created_at"] = c.createdAt;
  ver["trainscope"] =
      c.createdBy.substr(c.createdBy.rfind(' ') == std::string::npos ? 0 : c.createdBy.rfind(' ') + 1);
  ver["tsdb_schema"] = 2;
  j["versions"] = ver;
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

Result<TunedConfig> configFromJson(const std::string& text, const std::string& what) {
  // Before the parser: walking a document recurses once per level (json_depth.h).
  if (Status st = checkJsonNesting(text, what); !st) return st;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    return Status(ErrorCode::InvalidArgument, what + ": not valid JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("schema") || j["schema"] != std::string(kTunedConfigSchema))
    return Status(ErrorCode::InvalidArgument, what + ": not a tuned configuration (\"schema\" must be \"" +
                                                  std::string(kTunedConfigSchema) + "\")");
  if (!j.contains("schema_version") || !j["schema_version"].is_number_integer() ||
      j["schema_version"].get<int>() > kTunedConfigVersion || j["schema_version"].get<int>() < 1)
    return Status(ErrorCode::InvalidArgument,
                  what + ": schema_version must be 1 to " + std::to_string(kTunedConfigVersion));
  if (!j.contains("knobs") || !j["knobs"].is_object())
    return Status(ErrorCode::InvalidArgument, what + ": \"knobs\" must be an object of knob names to values");
  TunedConfig c;
  for (const auto& [k, v] : j["knobs"].items()) {
    if (!v.is_string() && !v.is_number() && !v.is_boolean())
      return Status(ErrorCode::InvalidArgument, what + ": knob \"" + k + "\" must be a number or a string");
    c.knobs[k] = valueText(v);
  }
  auto str = [](const nlohmann::json& o, const char* k) {
    return o.contains(k) && o[k].is_string() ? o[k].get<std::string>() : std::string();
  };
  auto integer = [](const nlohmann::json& o, const char* k, int64_t d) {
    if (!o.contains(k) || !o[k].is_number()) return d;
    if (o[k].is_number_integer()) return o[k].get<int64_t>();
    const double x = o[k].get<double>();  // a float outside int64 would be undefined to convert
    return std::isfinite(x) && std::fabs(x) < 9.2e18 ? static_cast<int64_t>(x) : d;
  };
  auto number = [](const nlohmann::json& o, const char* k) {
    return o.contains(k) && o[k].is_number() ? o[k].get<double>() : -1.0;
  };
  if (j.contains("job") && j["job"].is_object()) {
    const auto& o = j["job"];
    c.job.jobId = str(o, "job_id");
    c.job.worldSize = static_cast<int>(integer(o, "world_size", 0));
    c.job.mode = str(o, "mode");
    c.job.ppStages = static_cast<int>(integer(o, "pp_stages", 0));
    c.job.modelLayers = static_cast<int>(integer(o, "model_layers", 0));
  }
  if (j.contains("measurements") && j["measurements"].is_object()) {
    const auto& o = j["measurements"];
    TunedMeasurements& m = c.measured;
    m.method = str(o, "method");
    m.steps = static_cast<int>(integer(o, "steps", 0));
    m.fromStep = integer(o, "from_step", -1);
    m.toStep = integer(o, "to_step", -1);
    m.stepTimeMs = number(o, "step_time_ms");
    m.stepTimeP50Ms = number(o, "step_time_p50_ms");
    m.exposedCommMs = number(o, "exposed_comm_ms");
    m.overlapRatio = number(o, "overlap_ratio");
    m.bubbleFraction = number(o, "bubble_fraction");
    m.wireBytesPerStep = number(o, "wire_bytes_per_step");
    m.bucketPayloadMin = integer(o, "bucket_payload_bytes_min", -1);
    m.bucketPayloadMax = integer(o, "bucket_payload_bytes_max", -1);
    m.stepTimeStderrMs = number(o, "step_time_stderr_ms");
    if (o.contains("step_time_ci95_ms") && o["step_time_ci95_ms"].is_array() && o["step_time_ci95_ms"].size() == 2 &&
        o["step_time_ci95_ms"][0].is_number() && o["step_time_ci95_ms"][1].is_number()) {
      m.stepTimeCi95LowMs = o["step_time_ci95_ms"][0].get<double>();
      m.stepTimeCi95HighMs = o["step_time_ci95_ms"][1].get<double>();
    }
    if (o.contains("unavailable") && o["unavailable"].is_object())
      for (const auto& [k, v] : o["unavailable"].items())
        if (v.is_string()) m.unavailable[k] = v.get<std::string>();
  }
  c.source = str(j, "source");
  if (j.contains("notes") && j["notes"].is_object())
    for (const auto& [k, v] : j["notes"].items())
      c.notes[k] = v.is_string() ? v.get<std::string>() : v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (j.contains("versions") && j["versions"].is_object()) {
    c.createdBy = str(j["versions"], "created_by");
    c.createdAt = str(j["versions"], "created_at");
  }
  return c;
}

Result<TunedConfig> readConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status(ErrorCode::NotFound, path + ": cannot read the file");
  std::stringstream ss;
  ss << in.rdbuf();
  return configFromJson(ss.str(), path);
}

}  // namespace trainscope::core
