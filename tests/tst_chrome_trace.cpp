// Chrome trace JSON export and import: the file layout Perfetto needs (processes per rank,
// nesting lanes, flows, exact timestamps), a lossless round trip of our own exports, Kineto and
// plain Chrome samples from resources/samples, and the errors for bad input.
#include <QtTest>
#include <algorithm>
#include <bit>
#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "trainscope/core/analysis/analysis.h"
#include "trainscope/core/interop/chrome_trace.h"
#include "trainscope/core/session/summary.h"
#include "trainscope/core/synth/synth.h"

using namespace trainscope::core;
using nlohmann::json;

namespace {

const std::string kSamples = std::string(TRAINSCOPE_SOURCE_DIR) + "/resources/samples/";

// An event in store-independent form: strings resolved, attributes sorted (a counter's Value
// may come back in another position among its attributes; see docs/FORMATS.md).
struct Canon {
  int64_t start, end;
  std::string name;
  int kind;
  std::vector<std::tuple<std::string, int, std::string>> attrs;
  auto operator<=>(const Canon&) const = default;
};

std::string attrKeyName(const TraceStore& s, const Attr& a) {
  return a.isCustom() ? "custom:" + std::string(s.str(a.key - kCustomAttrBase))
                      : "builtin:" + std::string(builtinAttrName(static_cast<AttrKey>(a.key)));
}

std::string attrValue(const TraceStore& s, const Attr& a) {
  switch (a.type) {
    case AttrType::Int:
      return std::to_string(a.asInt());
    case AttrType::Double:
      return "bits:" + std::to_string(a.bits);  // exact, not printed
    case AttrType::String:
      return std::string(s.str(a.asString()));
  }
  return {};
}

std::vector<Canon> canonEvents(TraceStore& s, TrackId t) {
  std::vector<Canon> out;
  const TrackEvents& ev = s.events(t);
  for (size_t i = 0; i < ev.size(); ++i) {
    Canon c{ev.start(i), ev.end(i), std::string(s.str(ev.name(i))), static_cast<int>(ev.kind(i)), {}};
    for (const Attr& a : ev.attrs(i))
      c.attrs.emplace_back(attrKeyName(s, a), static_cast<int>(a.type), attrValue(s, a));
    std::sort(c.attrs.begin(), c.attrs.end());
    out.push_back(std::move(c));
  }
  std::sort(out.begin(), out.end());
  return out;
}

using TrackKey = std::tuple<RankId, TrackKind, int64_t>;
std::map<TrackKey, TrackId> tracksByKey(const TraceStore& s) {
  std::map<TrackKey, TrackId> m;
  for (TrackId t = 0; t < s.trackCount(); ++t)
    m[{s.track(t).rank, s.track(t).kind, s.track(t).externalId}] = t;
  return m;
}

const Attr* attrOf(const TraceStore& s, const TrackEvents& ev, size_t i, std::string_view customKey) {
  for (const Attr& a : ev.attrs(i))
    if (a.isCustom() && s.str(a.key - kCustomAttrBase) == customKey) return &a;
  return nullptr;
}

// The first event named `name` (optionally on a track of this kind).
std::pair<TrackId, size_t> findEvent(TraceStore& s, std::string_view name,
                                     std::optional<TrackKind> kind = {}) {
  for (TrackId t = 0; t < s.trackCount(); ++t) {
    if (kind && s.track(t).kind != *kind) continue;
    const TrackEvents& ev = s.events(t);
    for (size_t i = 0; i < ev.size(); ++i)
      if (s.str(ev.name(i)) == name) return {t, i};
  }
  return {kInvalidTrack, 0};
}

int64_t usToNs(const json& v) {
  return std::llround(v.get<double>() * 1000.0);
}  // small relative values only

// A store with everything the exporter has to get right.
TraceStore makeStore() {
  TraceStore s;
  SynthOptions o;
  o.ranks = 3;
  o.steps = 3;
  o.kernelsPerStep = 8;
  o.buckets = 2;
  synthesizeTrace(s, o);
  s.metadata()["job_id"] = "j1";
  s.rank(1)->clockOffsetNs = 42;
  s.rank(1)->droppedEvents = 9;
  s.setRank(RankInfo{.rank = 7,
                     .host = "lonely host",
                     .pid = 777,
                     .localRank = 3,
                     .device = -1,
                     .clockOffsetNs = -123,
                     .droppedEvents = 5});

  const int64_t b = 1'000'000'123;
  const TrackId ov = s.findOrAddTrack(0, TrackKind::CpuThread, 555, "overlap \"thread\"");
  s.append(ov, {b, b + 1000, s.intern("A"), EventKind::Range});
  s.append(ov, {b + 500, b + 1500, s.intern("B"), EventKind::Range});  // overlaps A without nesting
  s.append(ov, {b + 600, b + 700, s.intern("C"), EventKind::Range});
  s.append(ov, {b + 500, b + 1500, s.intern("B"), EventKind::Range});  // an identical twin
  s.append(ov, {b + 1400, b + 2000, s.intern("D"), EventKind::Range});
  s.append(ov, {b + 800, b + 800, s.intern("mark"), EventKind::Marker},
           std::array{Attr::ofInt(AttrKey::Step, 4)});
  s.append(ov, {b + 900, b + 900, s.intern("zero length range"), EventKind::Range});
  s.append(ov, {b + 950, b + 950, s.intern("pp.schedule"), EventKind::KnobChange},
           std::array{Attr::ofString(AttrKey::Knob, s.intern("pp.schedule")),
                      Attr::ofString(AttrKey::KnobValue, s.intern("1f1b"))});
  const Attr custom[] = {
      Attr::custom(s.intern("my_int"), AttrType::Int, -42),
      Attr::custom(s.intern("my_double"), AttrType::Double, std::bit_cast<int64_t>(0.1)),
      Attr::custom(s.intern("whole double"), AttrType::Double, std::bit_cast<int64_t>(2.0)),
      Attr::custom(s.intern("my_str"), AttrType::String,
                   s.intern("q\" b\\ nl\n tab\t \xC3\xA9 \xE4\xB8\xAD \x01 \x7F")),
      Attr::ofInt(AttrKey::Bytes, int64_t{1} << 40),
      Attr::ofString(AttrKey::Algorithm, s.intern("ring")),
  };
  s.append(ov, {b + 2000, b + 3001, s.intern("with \"attrs\""), EventKind::Range}, custom);

  const TrackId ctr = s.findOrAddTrack(1, TrackKind::Counter, 0, "counters");
  s.append(ctr, {b + 10, b + 10, s.intern("lr"), EventKind::Counter},
           std::array{Attr::ofInt(AttrKey::Step, 2), Attr::ofDouble(AttrKey::Value, 0.25),
                      Attr::custom(s.intern("unit"), AttrType::String, s.intern("1/s"))});
  s.append(ctr, {b + 20, b + 20, s.intern("tokens"), EventKind::Counter},
           std::array{Attr::ofInt(AttrKey::Value, 7)});
  s.append(ctr, {b + 30, b + 30, s.intern("no value"), EventKind::Counter},
           std::array{Attr::ofInt(AttrKey::Step, 1)});

  // Point-to-point without flow ids: matched in order, rank 0 -> rank 1.
  const TrackId p0 = s.findOrAddTrack(0, TrackKind::Communicator, 99, "p2p");
  const TrackId p1 = s.findOrAddTrack(1, TrackKind::Communicator, 99, "p2p");
  for (int n = 0; n < 2; ++n) {
    const int64_t t = b + 10'000 + n * 5'000;
    s.append(p0, {t, t + 2'000, s.intern("hand_send"), EventKind::P2PSend},
             std::array{Attr::ofInt(AttrKey::Peer, 1), Attr::ofInt(AttrKey::Seq, n)});
    s.append(p1, {t + 500, t + 2'500, s.intern("hand_recv"), EventKind::P2PRecv},
             std::array{Attr::ofInt(AttrKey::Peer, 0), Attr::ofInt(AttrKey::Seq, n)});
  }
  s.append(p0, {b + 30'000, b + 31'000, s.intern("unmatched"), EventKind::P2PSend},
           std::array{Attr::ofInt(AttrKey::Peer, 2)});
  s.findOrAddTrack(2, TrackKind::PipelineStage, 3, "stage 3");  // stays empty
  return s;
}

std::string exportToString(TraceStore& s, ChromeExportStats* stats = nullptr,
                           const ChromeExportOptions& o = {}) {
  s.flush();  // a hand-built store: its writer (this test) sorts it before export reads it
  std::ostringstream out;
  auto r = exportChromeTrace(s, out, o);
  if (!r) qFatal("export failed: %s", r.status().toString().c_str());
  if (stats) *stats = r.value();
  return out.str();
}

bool writeFile(const QString& path, const std::string& data) {
  std::ofstream f(path.toStdString(), std::ios::binary);
  f << data;
  return bool(f);
}

struct Slice {
  int64_t start, end;
  std::string kind;
  json args;
};

// X events per (pid, tid), from an exported file.
std::map<std::pair<int64_t, int64_t>, std::vector<Slice>> slicesByThread(const json& doc) {
  std::map<std::pair<int64_t, int64_t>, std::vector<Slice>> m;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "X") {
      const int64_t start = usToNs(e["ts"]);
      m[{e["pid"].get<int64_t>(), e["tid"].get<int64_t>()}].push_back(
          {start, start + usToNs(e["dur"]), e["args"]["kind"].get<std::string>(), e["args"]});
    }
  return m;
}

class CountingBuf : public std::streambuf {
 public:
  size_t bytes = 0;

 protected:
  int overflow(int c) override {
    ++bytes;
    return c;
  }
  std::streamsize xsputn(const char*, std::streamsize n) override {
    bytes += static_cast<size_t>(n);
    return n;
  }
};

}  // namespace

class TstChromeTrace : public QObject {
  Q_OBJECT

 private slots:
  void exportHasPerfettoLayout() {
    TraceStore s = makeStore();
    const json doc = json::parse(exportToString(s));
    QCOMPARE(doc["displayTimeUnit"].get<std::string>(), std::string("ns"));
    QVERIFY(doc["traceEvents"].is_array());
    QVERIFY(doc["otherData"]["trainscope_origin_ns"].is_string());
    QCOMPARE(doc["otherData"]["trainscope_origin_ns"].get<std::string>(), std::to_string(s.timeSpan().first));
    QCOMPARE(doc["otherData"]["trainscope_metadata"]["job_id"].get<std::string>(), std::string("j1"));

    std::map<int64_t, std::string> processNames;
    std::set<std::string> threadNames;
    int counters = 0, instants = 0;
    for (const auto& e : doc["traceEvents"]) {
      const std::string ph = e["ph"];
      if (ph == "M" && e["name"] == "process_name")
        processNames[e["pid"].get<int64_t>()] = e["args"]["name"].get<std::string>();
      if (ph == "M" && e["name"] == "thread_name") threadNames.insert(e["args"]["name"].get<std::string>());
      if (ph == "C") {
        ++counters;
        QCOMPARE(e["args"].size(), size_t{1});  // only the series: Perfetto plots every arg
        QVERIFY(e["args"].contains("value"));
        QCOMPARE(e["cat"].get<std::string>(), std::string("counter"));
      }
      if (ph == "i") {
        ++instants;
        QCOMPARE(e["s"].get<std::string>(), std::string("t"));
      }
      if (ph == "X") {
        QCOMPARE(e["cat"], e["args"]["kind"]);
        QVERIFY(e["dur"].get<double>() > 0);
      }
    }
    QCOMPARE(processNames.size(), size_t{4});
    QCOMPARE(processNames[0], std::string("rank 0 (node0)"));
    QCOMPARE(processNames[7], std::string("rank 7 (lonely host)"));
    QVERIFY(threadNames.count("main thread"));
    QVERIFY(threadNames.count("stage 3"));  // the empty track is still declared
    QCOMPARE(counters, 3 * 3 + 2);          // synth losses + lr + tokens ("no value" is an instant)
    QVERIFY(instants > 0);
  }

  void timestampsAreExactNanoseconds() {
    TraceStore s;
    const int64_t origin = 1'000'000'000'000'000'007;  // beyond 2^53 ns: no double survives this
    const TrackId t = s.findOrAddTrack(0, TrackKind::CpuThread, 1, "t");
    s.append(t, {origin, origin + 1, s.intern("one ns"), EventKind::Range});
    s.append(t, {origin + 1'234'567, origin + 1'235'566, s.intern("odd"), EventKind::Range});
    s.append(t, {origin + 5'000'000, origin + 6'000'000, s.intern("round"), EventKind::Range});
    const std::string text = exportToString(s);
    QVERIFY(text.find("\"ts\":0,\"dur\":0.001,") != std::string::npos);
    QVERIFY2(text.find("\"ts\":1234.567,\"dur\":0.999,") != std::string::npos, text.c_str());
    QVERIFY(text.find("\"ts\":5000,\"dur\":1000,") != std::string::npos);
    QVERIFY(text.find("\"trainscope_origin_ns\":\"1000000000000000007\"") != std::string::npos);

    auto back = importChromeTrace(text, "exact.json");
    QVERIFY2(back.isOk(), back.status().toString().c_str());
    const TrackEvents& ev = back->events(0);
    QCOMPARE(ev.size(), size_t{3});
    QCOMPARE(ev.start(0), origin);
    QCOMPARE(ev.end(0), origin + 1);
    QCOMPARE(ev.start(1), origin + 1'234'567);
    QCOMPARE(ev.end(1), origin + 1'235'566);
    QCOMPARE(ev.end(2), origin + 6'000'000);
  }

  void foreignTimestampsParseFromTheirDigits() {
    const char* text = R"([
      {"ph":"X","name":"epoch","pid":1,"tid":1,"ts":1718000000123456.789,"dur":0.001},
      {"ph":"X","name":"exponent","pid":1,"tid":2,"ts":1.5e3,"dur":2E-3},
      {"ph":"X","name":"string","pid":1,"tid":3,"ts":"12.3456","dur":"1"},
      {"ph":"i","name":"negative","pid":1,"tid":4,"ts":-0.5}
    ])";
    auto r = importChromeTrace(text, "digits.json");
    QVERIFY2(r.isOk(), r.status().toString().c_str());
    auto [t0, i0] = findEvent(*r, "epoch");
    QCOMPARE(r->events(t0).start(i0), int64_t{1'718'000'000'123'456'789});
    QCOMPARE(r->events(t0).end(i0), int64_t{1'718'000'000'123'456'790});
    auto [t1, i1] = findEvent(*r, "exponent");
    QCOMPARE(r->events(t1).start(i1), int64_t{1'500'000});
    QCOMPARE(r->events(t1).end(i1), int64_t{1'500'002});
    auto [t2, i2] = findEvent(*r, "string");
    QCOMPARE(r->events(t2).start(i2), int64_t{12'346});  // 12.3456 us rounds to the nearest ns
    auto [t3, i3] = findEvent(*r, "negative");
    QCOMPARE(r->events(t3).start(i3), int64_t{-500});
  }

  void overlappingEventsGoToLanesThatNest() {
    TraceStore s = makeStore();
    ChromeExportStats stats;
    const json doc = json::parse(exportToString(s, &stats));
    QVERIFY(stats.lanes >= 1);
    std::set<std::string> names;
    for (const auto& e : doc["traceEvents"])
      if (e["ph"] == "M" && e["name"] == "thread_name") names.insert(e["args"]["name"].get<std::string>());
    QVERIFY(names.count("overlap \"thread\" #2"));
    QVERIFY(!names.count("overlap \"thread\" #3"));  // A|B overlap; the twin of B and C, D nest
    size_t slices = 0;
    for (auto& [thread, list] : slicesByThread(doc)) {
      std::sort(list.begin(), list.end(), [](const Slice& a, const Slice& b) {
        return a.start != b.start ? a.start < b.start : a.end > b.end;
      });
      std::vector<int64_t> open;
      for (const Slice& e : list) {
        while (!open.empty() && open.back() <= e.start) open.pop_back();
        QVERIFY2(open.empty() || e.end <= open.back(),
                 qPrintable(QString("pid %1 tid %2: a slice at %3 crosses its parent's end")
                                .arg(thread.first)
                                .arg(thread.second)
                                .arg(e.start)));
        open.push_back(e.end);
        ++slices;
      }
    }
    QVERIFY(slices > 100);
  }

  void flowsLinkMatchedSendsAndReceives() {
    TraceStore s = makeStore();
    ChromeExportStats stats;
    const json doc = json::parse(exportToString(s, &stats));
    const auto slices = slicesByThread(doc);
    // The innermost slice of a thread around ts.
    auto enclosing = [&](const json& e) -> const Slice* {
      auto it = slices.find({e["pid"].get<int64_t>(), e["tid"].get<int64_t>()});
      if (it == slices.end()) return nullptr;
      const int64_t ts = usToNs(e["ts"]);
      const Slice* best = nullptr;
      for (const Slice& sl : it->second)
        if (sl.start <= ts && ts <= sl.end && (!best || sl.end - sl.start < best->end - best->start))
          best = &sl;
      return best;
    };
    std::map<int64_t, std::pair<json, json>> flows;  // id -> (start, finish)
    for (const auto& e : doc["traceEvents"]) {
      if (e["ph"] == "s") flows[e["id"].get<int64_t>()].first = e;
      if (e["ph"] == "f") flows[e["id"].get<int64_t>()].second = e;
      QVERIFY(e["ph"] != "t");  // all chains here are pairs
    }
    // Synth: one send per rank and step with a flow id; plus the two hand-made pairs.
    QCOMPARE(flows.size(), size_t{3 * 3 + 2});
    QCOMPARE(stats.flows, uint64_t{3 * 3 + 2});
    int handPairs = 0;
    for (const auto& [id, pair] : flows) {
      const auto& [start, finish] = pair;
      QVERIFY(!start.is_null() && !finish.is_null());
      QCOMPARE(start["cat"], finish["cat"]);
      QCOMPARE(start["name"], finish["name"]);
      QCOMPARE(finish["bp"].get<std::string>(), std::string("e"));
      const Slice* send = enclosing(start);
      const Slice* recv = enclosing(finish);
      QVERIFY(send && recv);
      QCOMPARE(send->kind, std::string("p2p_send"));
      QCOMPARE(recv->kind, std::string("p2p_recv"));
      QVERIFY(usToNs(start["ts"]) <= usToNs(finish["ts"]));
      if (send->args.contains("flow_id")) {
        QCOMPARE(send->args["flow_id"], recv->args["flow_id"]);
      } else {
        ++handPairs;  // matched by order: n-th send with n-th receive
        QCOMPARE(send->args["seq"], recv->args["seq"]);
        QCOMPARE(send->args["peer"].get<int>(), 1);
        QCOMPARE(recv->args["peer"].get<int>(), 0);
      }
    }
    QCOMPARE(handPairs, 2);
  }

  void roundTripKeepsRanksTracksAndEvents() {
    TraceStore a = makeStore();
    const std::string text = exportToString(a);
    auto b = importChromeTrace(text, "roundtrip.json");
    QVERIFY2(b.isOk(), b.status().toString().c_str());

    QCOMPARE(b->ranks().size(), a.ranks().size());
    for (const auto& [r, info] : a.ranks()) {
      const RankInfo* got = b->rank(r);
      QVERIFY(got);
      QCOMPARE(got->host, info.host);
      QCOMPARE(got->pid, info.pid);
      QCOMPARE(got->localRank, info.localRank);
      QCOMPARE(got->device, info.device);
      QCOMPARE(got->clockOffsetNs, info.clockOffsetNs);
      QCOMPARE(got->droppedEvents, info.droppedEvents);
    }
    QCOMPARE(b->trackCount(), a.trackCount());
    const auto ka = tracksByKey(a), kb = tracksByKey(*b);
    QCOMPARE(kb.size(), ka.size());
    size_t events = 0;
    for (const auto& [key, ta] : ka) {
      auto it = kb.find(key);
      QVERIFY2(it != kb.end(), a.track(ta).name.c_str());
      QCOMPARE(b->track(it->second).name, a.track(ta).name);
      const auto ea = canonEvents(a, ta), eb = canonEvents(*b, it->second);
      QCOMPARE(eb.size(), ea.size());
      for (size_t i = 0; i < ea.size(); ++i)
        QVERIFY2(ea[i] == eb[i], qPrintable(QString("track %1, event %2 (%3) differs")
                                                .arg(a.track(ta).name.c_str())
                                                .arg(i)
                                                .arg(ea[i].name.c_str())));
      events += ea.size();
    }
    QCOMPARE(events, a.eventCount());
    QCOMPARE(b->eventCount(), a.eventCount());
    // Tracks come back in their original order (thread_sort_index).
    for (TrackId t = 0; t < a.trackCount(); ++t) QCOMPARE(b->track(t), a.track(t));
    QCOMPARE(b->metadata().at("job_id"), std::string("j1"));
    QCOMPARE(b->metadata().at("import_format"), std::string("trainscope"));
    QCOMPARE(b->metadata().at("import_skipped_events"), std::string("0"));

    // Export of the import is the same file: nothing was lost or invented on the way.
    TraceStore copy = std::move(b.value());
    copy.metadata() = a.metadata();
    QCOMPARE(exportToString(copy), text);
  }

  void exportRangeKeepsOverlappingEvents() {
    TraceStore s;
    const TrackId t = s.findOrAddTrack(0, TrackKind::CpuThread, 1, "t");
    s.append(t, {0, 10, s.intern("before"), EventKind::Range});
    s.append(t, {12, 30, s.intern("crosses start"), EventKind::Range});
    s.append(t, {20, 20, s.intern("inside"), EventKind::Marker});
    s.append(t, {40, 50, s.intern("after"), EventKind::Range});
    ChromeExportStats stats;
    const std::string text = exportToString(s, &stats, {.fromNs = 15, .toNs = 35});
    QCOMPARE(stats.events, uint64_t{2});
    QVERIFY(text.find("crosses start") != std::string::npos && text.find("after") == std::string::npos);

    std::ostringstream out;
    auto bad = exportChromeTrace(s, out, {.fromNs = 35, .toNs = 15});
    QCOMPARE(bad.status().code(), ErrorCode::InvalidArgument);
    std::ostringstream broken;
    broken.setstate(std::ios::badbit);
    QCOMPARE(exportChromeTrace(s, broken).status().code(), ErrorCode::Io);
  }

  void exportFileAndItsErrors() {
    QTemporaryDir dir;
    TraceStore s = makeStore();
    const QString path = dir.filePath("out.json");
    auto r = exportChromeTraceFile(s, path.toStdString());
    QVERIFY2(r.isOk(), r.status().toString().c_str());
    QCOMPARE(r->events, uint64_t(s.eventCount()));
    auto back = importChromeTraceFile(path.toStdString());
    QVERIFY2(back.isOk(), back.status().toString().c_str());
    QCOMPARE(back->eventCount(), s.eventCount());
    const QString noDir = dir.filePath("missing/out.json");
    auto fail = exportChromeTraceFile(s, noDir.toStdString());
    QCOMPARE(fail.status().code(), ErrorCode::Io);
    QVERIFY(fail.status().message().find(noDir.toStdString()) != std::string::npos);
  }

  void importErrorsNameTheFileAndEvent_data() {
    QTest::addColumn<QString>("content");
    QTest::addColumn<int>("code");
    QTest::addColumn<QString>("mentions");
    QTest::newRow("truncated") << R"({"traceEvents": [ {"ph": "X", )" << int(ErrorCode::MalformedJson)
                               << "malformed JSON at byte ";
    QTest::newRow("garbage") << "not json" << int(ErrorCode::MalformedJson) << "malformed JSON at byte ";
    QTest::newRow("empty") << "" << int(ErrorCode::MalformedJson) << "byte";
    QTest::newRow("number") << "42" << int(ErrorCode::BadTrace) << "top-level value is a number";
    QTest::newRow("no traceEvents") << R"({"foo": 1})" << int(ErrorCode::BadTrace) << "no \"traceEvents\"";
    QTest::newRow("traceEvents not array")
        << R"({"traceEvents": {}})" << int(ErrorCode::BadTrace) << "not an array";
    QTest::newRow("event not object")
        << R"([{"ph":"i","ts":1}, 7])" << int(ErrorCode::BadTrace) << "event #1 is a number";
    QTest::newRow("no ph") << R"({"traceEvents":[{"ph":"X","ts":1,"dur":1},{"ts":1}]})"
                           << int(ErrorCode::BadTrace) << "event #1: has no \"ph\"";
    QTest::newRow("X without dur") << R"([{"ph":"i","ts":1},{"ph":"i","ts":1},{"ph":"X","ts":2}])"
                                   << int(ErrorCode::BadTrace)
                                   << "event #2: complete ('X') event has no \"dur\"";
    QTest::newRow("no ts") << R"([{"ph":"B","name":"x"}])" << int(ErrorCode::BadTrace)
                           << "event #0: 'B' event has no \"ts\"";
    QTest::newRow("bad ts") << R"([{"ph":"X","ts":"soon","dur":1}])" << int(ErrorCode::BadTrace)
                            << "event #0: \"ts\"";
    QTest::newRow("negative dur") << R"([{"ph":"X","ts":1,"dur":-1}])" << int(ErrorCode::BadTrace)
                                  << "event #0: \"dur\"";
  }
  void importErrorsNameTheFileAndEvent() {
    QFETCH(QString, content);
    QFETCH(int, code);
    QFETCH(QString, mentions);
    QTemporaryDir dir;
    const QString path = dir.filePath("input.json");
    QVERIFY(writeFile(path, content.toStdString()));
    auto r = importChromeTraceFile(path.toStdString());
    QVERIFY(!r.isOk());
    const std::string msg = r.status().message();
    QCOMPARE(int(r.status().code()), code);
    QVERIFY2(msg.find(path.toStdString()) != std::string::npos, msg.c_str());
    QVERIFY2(msg.find(mentions.toStdString()) != std::string::npos, msg.c_str());
  }

  void importErrorsForFiles() {
    QTemporaryDir dir;
    const QString missing = dir.filePath("nope.json");
    auto r = importChromeTraceFile(missing.toStdString());
    QCOMPARE(r.status().code(), ErrorCode::NotFound);
    QVERIFY(r.status().message().find(missing.toStdString()) != std::string::npos);
    r = importChromeTraceFile(dir.path().toStdString());
    QCOMPARE(r.status().code(), ErrorCode::Io);
    QVERIFY(r.status().message().find(dir.path().toStdString()) != std::string::npos);
    const QString gz = dir.filePath("trace.json.gz");
    QVERIFY(writeFile(gz, std::string("\x1f\x8b\x08\x00", 4)));
    r = importChromeTraceFile(gz.toStdString());  // a gzip header cut short: damaged, named so
    QCOMPARE(r.status().code(), ErrorCode::Corrupt);
    QVERIFY2(r.status().message().find(gz.toStdString() + ": damaged gzip data") != std::string::npos,
             r.status().message().c_str());
  }

  // Found by fuzz_chrome_import: a partial import of a file with invalid UTF-8 after its last
  // good event keeps the parser's message (with those bytes) in import_first_error, and
  // summaryToJson (`info --json`) threw nlohmann's type_error 316 on it: the CLI terminated.
  void summaryOfPartialImportWithInvalidUtf8() {
    const std::string text = "{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"a\", \"ts\": 1, \"dur\": 2, "
                             "\"pid\": 0, \"tid\": 0}, {\"ph\": \"X\", \"grid\": [1,\xe0\xce\xa2\xca 0}]}";
    ChromeImportOptions partial;
    partial.partial = true;
    auto store = importChromeTrace(text, "bad-utf8.json", partial);
    QVERIFY2(store.isOk(), store.status().message().c_str());
    std::string text2;
    try {
      text2 = summaryToJson(summarizeStore(store.value()));
    } catch (const std::exception& e) {
      QFAIL(e.what());
    }
    const auto doc = nlohmann::json::parse(text2);
    QCOMPARE(doc["event_count"].get<int>(), 1);
  }

  // Found by fuzz_analysis: an integer attribute given as a double beyond int64 ("chunk":
  // -9.2e19, "micro_batch": 1e300) was converted with undefined behaviour in the analysis's
  // window pass (UBSan, `make asan`); such a value now reads as 0.
  void analysisOfAttributesBeyondInt64() {
    const std::string text = R"({"traceEvents": [
      {"ph": "X", "name": "F0", "cat": "mb_forward", "ts": 1, "dur": 2, "pid": 0, "tid": 0,
       "args": {"kind": "mb_forward", "micro_batch": 0, "stage": 0, "chunk": -92233720368547758080}},
      {"ph": "X", "name": "B0", "cat": "mb_backward", "ts": 4, "dur": 2, "pid": 0, "tid": 0,
       "args": {"kind": "mb_backward", "micro_batch": 1e300, "stage": 0, "chunk": 0}},
      {"ph": "X", "name": "step", "cat": "step", "ts": 0, "dur": 10, "pid": 0, "tid": 0,
       "args": {"kind": "step", "step": 1}}]})";
    auto store = importChromeTrace(text, "beyond.json");
    QVERIFY2(store.isOk(), store.status().message().c_str());
    const AnalysisResult a = analyzeStore(store.value());
    QCOMPARE(a.ranks.size(), size_t{1});
  }

  // Found by fuzz_analysis (a 1 M-execution run): a collective of 9223372036854775807 bytes put
  // its size class past INT64_MAX (2^62 doubled; signed overflow, UBSan). Every count from 2^62
  // on is now in the 2^62 class.
  void analysisOfAByteCountNearInt64Max() {
    const std::string text = R"({"traceEvents": [
      {"ph": "X", "name": "allreduce", "cat": "collective", "ts": 1, "dur": 2, "pid": 0, "tid": 0,
       "args": {"kind": "collective", "bytes": 9223372036854775807}},
      {"ph": "X", "name": "step", "cat": "step", "ts": 0, "dur": 10, "pid": 0, "tid": 0,
       "args": {"kind": "step", "step": 1}}]})";
    auto store = importChromeTrace(text, "huge-bytes.json");
    QVERIFY2(store.isOk(), store.status().message().c_str());
    const AnalysisResult a = analyzeStore(store.value());
    bool found = false;
    for (const auto& b : a.collectives) found |= b.sizeClassBytes == (int64_t{1} << 62);
    QVERIFY(found);
  }

  // Found by fuzz_chrome_import: events from -9.2e15 µs to today span more than INT64_MAX ns;
  // summaryToJson (`info --json`) and the export computed end - start with signed overflow
  // (undefined). Times are now refused beyond ±2^62 ns (146 years), so every span fits; the
  // summary saturates anyway (a .tsdb is not checked the same way).
  void timesBeyond146YearsAreRefused() {
    const std::string text = R"({"traceEvents": [
      {"ph": "X", "name": "early", "ts": -9.2e15, "dur": 1, "pid": 0, "tid": 0},
      {"ph": "X", "name": "late", "ts": 1682725898232995, "dur": 1, "pid": 0, "tid": 0}]})";
    auto strict = importChromeTrace(text, "span.json");
    QVERIFY(!strict.isOk());
    QVERIFY2(strict.status().message().find("within range") != std::string::npos, strict.status().message().c_str());
    ChromeImportOptions partial;
    partial.partial = true;
    auto store = importChromeTrace(text, "span.json", partial);
    QVERIFY2(store.isOk(), store.status().message().c_str());
    QCOMPARE(store->eventCount(), uint64_t{1});
    std::ostringstream out;
    QVERIFY(exportChromeTrace(store.value(), out).isOk());
    // Just inside the limit at both ends: the span is below INT64_MAX and exports.
    const std::string edge = R"({"traceEvents": [
      {"ph": "X", "name": "early", "ts": -4611686018427387, "dur": 1, "pid": 0, "tid": 0},
      {"ph": "X", "name": "late", "ts": 4611686018427386, "dur": 1, "pid": 0, "tid": 0}]})";
    auto wide = importChromeTrace(edge, "edge.json");
    QVERIFY2(wide.isOk(), wide.status().message().c_str());
    const auto doc = nlohmann::json::parse(summaryToJson(summarizeStore(wide.value())));
    QCOMPARE(doc["event_count"].get<int>(), 2);
    QVERIFY(doc["duration_ns"].get<int64_t>() > 0);
    std::ostringstream out2;
    QVERIFY(exportChromeTrace(wide.value(), out2).isOk());
    QVERIFY(!importChromeTrace(R"({"traceEvents": [{"ph": "X", "name": "a", "ts": 4611686018427388, "dur": 1,
      "pid": 0, "tid": 0}]})", "over.json").isOk());
  }

  void importsKinetoSample() {
    auto r = importChromeTraceFile(kSamples + "kineto_tiny.pt.trace.json");
    QVERIFY2(r.isOk(), r.status().toString().c_str());
    TraceStore& s = *r;
    // distributedInfo.rank names the rank of every pid (CPU process, GPU device, "Traces").
    QCOMPARE(s.ranks().size(), size_t{1});
    QVERIFY(s.rank(1));
    QCOMPARE(s.rank(1)->pid, int64_t{4242});
    QCOMPARE(s.rank(1)->device, 0);
    QCOMPARE(s.metadata().at("import_format"), std::string("kineto"));
    QCOMPARE(s.metadata().at("import_skipped_events"), std::string("0"));

    auto [stepT, stepI] = findEvent(s, "ProfilerStep#3", TrackKind::CpuThread);
    QVERIFY(stepT != kInvalidTrack);
    QCOMPARE(s.events(stepT).kind(stepI), EventKind::Step);
    QCOMPARE(s.events(stepT).findAttr(stepI, AttrKey::Step)->asInt(), int64_t{3});
    QCOMPARE(s.track(stepT).externalId, int64_t{4242});
    auto [gpuStepT, gpuStepI] = findEvent(s, "ProfilerStep#3", TrackKind::CudaStream);
    QCOMPARE(s.events(gpuStepT).kind(gpuStepI), EventKind::Range);

    auto [linT, linI] = findEvent(s, "aten::linear");
    QCOMPARE(s.events(linT).kind(linI), EventKind::Range);
    QCOMPARE(s.str(attrOf(s, s.events(linT), linI, "Input Dims")->asString()),
             std::string_view("[[64,1024],[4096,1024],[4096]]"));
    QCOMPARE(attrOf(s, s.events(linT), linI, "Sequence number")->asInt(), int64_t{17});
    QCOMPARE(attrOf(s, s.events(linT), linI, "Sequence number")->type, AttrType::Int);

    const std::string gemm =
        "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_"
        "kernel__5x_cublas";
    auto [kT, kI] = findEvent(s, gemm);
    QVERIFY(kT != kInvalidTrack);
    const TrackEvents& k = s.events(kT);
    QCOMPARE(k.kind(kI), EventKind::Kernel);
    QCOMPARE(s.track(kT).kind, TrackKind::CudaStream);
    QCOMPARE(s.track(kT).externalId, int64_t{7});
    QCOMPARE(s.track(kT).name, std::string("stream 7 "));
    QCOMPARE(k.start(kI), int64_t{1'718'000'000'123'456'789});  // beyond 2^53: parsed from the digits
    QCOMPARE(k.end(kI) - k.start(kI), int64_t{42'001});
    QCOMPARE(k.findAttr(kI, AttrKey::Stream)->asInt(), int64_t{7});
    QCOMPARE(k.findAttr(kI, AttrKey::Device)->asInt(), int64_t{0});
    QCOMPARE(k.findAttr(kI, AttrKey::CorrelationId)->asInt(), int64_t{311});
    QCOMPARE(attrOf(s, k, kI, "blocks per SM")->type, AttrType::Double);
    QCOMPARE(attrOf(s, k, kI, "blocks per SM")->asDouble(), 0.484848);
    QCOMPARE(attrOf(s, k, kI, "External id")->asInt(), int64_t{3});
    QCOMPARE(s.str(attrOf(s, k, kI, "grid")->asString()), std::string_view("[64,1,1]"));

    // ac2g flows: the launch and its kernel share a FlowId, the other launch/kernel another.
    auto [lT, lI] = findEvent(s, "cudaLaunchKernel");
    QCOMPARE(s.track(lT).kind, TrackKind::CpuThread);
    const Attr* launchFlow = s.events(lT).findAttr(lI, AttrKey::FlowId);
    QVERIFY(launchFlow && k.findAttr(kI, AttrKey::FlowId));
    QCOMPARE(k.findAttr(kI, AttrKey::FlowId)->asInt(), launchFlow->asInt());
    auto [l2T, l2I] = findEvent(s, "cudaLaunchKernelExC");
    auto [ncclT, ncclI] =
        findEvent(s, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
    QCOMPARE(s.events(ncclT).findAttr(ncclI, AttrKey::FlowId)->asInt(),
             s.events(l2T).findAttr(l2I, AttrKey::FlowId)->asInt());
    QVERIFY(s.events(ncclT).findAttr(ncclI, AttrKey::FlowId)->asInt() != launchFlow->asInt());

    QCOMPARE(s.events(ncclT).kind(ncclI), EventKind::Collective);
    QCOMPARE(s.track(ncclT).kind, TrackKind::CudaStream);
    QCOMPARE(s.track(ncclT).externalId, int64_t{20});
    // On a GPU trace the host-side nccl:* annotation is the launch, not communication time.
    auto [arT, arI] = findEvent(s, "nccl:all_reduce");
    QCOMPARE(s.events(arT).kind(arI), EventKind::Range);
    QCOMPARE(s.str(attrOf(s, s.events(arT), arI, "Collective name")->asString()),
             std::string_view("allreduce"));
    auto [mcT, mcI] = findEvent(s, "Memcpy HtoD (Pageable -> Device)");
    QCOMPARE(s.events(mcT).kind(mcI), EventKind::Memcpy);
    QCOMPARE(s.events(mcT).findAttr(mcI, AttrKey::Bytes)->asInt(), int64_t{4096});
    auto [msT, msI] = findEvent(s, "Memset (Device)");
    QCOMPARE(s.events(msT).kind(msI), EventKind::Memset);
    auto [memT, memI] = findEvent(s, "[memory]");
    QCOMPARE(s.events(memT).kind(memI), EventKind::Marker);
    auto [itT, itI] = findEvent(s, "Iteration Start: PyTorch Profiler");
    QCOMPARE(s.track(itT).rank, RankId{1});
    QCOMPARE(s.track(itT).name, std::string("Trace PyTorch Profiler"));  // a string tid names itself
    QCOMPARE(s.eventCount(), size_t{15});
  }

  void importsPlainChromeSample() {
    auto r = importChromeTraceFile(kSamples + "chrome_basic.json");
    QVERIFY2(r.isOk(), r.status().toString().c_str());
    TraceStore& s = *r;
    // pid 3 is small: rank 3; the string pid "browser" gets the lowest free rank.
    QCOMPARE(s.ranks().size(), size_t{2});
    QVERIFY(s.rank(0) && s.rank(3));
    QCOMPARE(s.rank(3)->pid, int64_t{3});
    QCOMPARE(s.metadata().at("import_format"), std::string("chrome"));
    QCOMPARE(s.metadata().at("import_skipped_events"), std::string("2"));  // a lone "E" and a "b"

    const auto keys = tracksByKey(s);
    const TrackId main = keys.at({0, TrackKind::CpuThread, 1});
    QCOMPARE(s.track(main).name, std::string("CrBrowserMain"));
    auto [loadT, loadI] = findEvent(s, "load");
    QCOMPARE(loadT, main);
    const TrackEvents& m = s.events(main);
    QCOMPARE(m.start(loadI), int64_t{100'000});
    QCOMPARE(m.end(loadI), int64_t{200'000});
    QCOMPARE(m.kind(loadI), EventKind::Range);
    QCOMPARE(s.str(attrOf(s, m, loadI, "url")->asString()), std::string_view("a.html"));
    QCOMPARE(s.str(attrOf(s, m, loadI, "status")->asString()), std::string_view("ok"));  // from its "E"
    auto [parseT, parseI] = findEvent(s, "parse");
    QCOMPARE(m.start(parseI), int64_t{110'500});
    QCOMPARE(m.end(parseI), int64_t{150'250});
    QCOMPARE(m.findAttr(parseI, AttrKey::Bytes)->asInt(), int64_t{2048});

    const TrackId worker = keys.at({3, TrackKind::CpuThread, 30});
    auto [hT, hI] = findEvent(s, "handle");
    QCOMPARE(hT, worker);
    QCOMPARE(s.events(worker).end(hI), int64_t{200'001});
    auto [vT, vI] = findEvent(s, "vsync");
    QCOMPARE(s.events(vT).kind(vI), EventKind::Marker);
    // The flow's "f" has no binding point: it binds to the next slice on its thread.
    auto [sendT, sendI] = findEvent(s, "send");
    QVERIFY(s.events(sendT).findAttr(sendI, AttrKey::FlowId));
    QCOMPARE(s.events(worker).findAttr(hI, AttrKey::FlowId)->asInt(),
             s.events(sendT).findAttr(sendI, AttrKey::FlowId)->asInt());

    // Counters: one event per series, on the rank's counter track, typed.
    const TrackId ctr = keys.at({3, TrackKind::Counter, 0});
    auto [heapT, heapI] = findEvent(s, "memory.heap");
    QCOMPARE(heapT, ctr);
    QCOMPARE(s.events(ctr).kind(heapI), EventKind::Counter);
    QCOMPARE(s.events(ctr).findAttr(heapI, AttrKey::Value)->asInt(), int64_t{1024});
    auto [rssT, rssI] = findEvent(s, "memory.rss");
    QCOMPARE(s.events(rssT).findAttr(rssI, AttrKey::Value)->asDouble(), 4096.5);
    auto [fpsT, fpsI] = findEvent(s, "fps");
    QCOMPARE(s.events(fpsT).findAttr(fpsI, AttrKey::Value)->asInt(), int64_t{60});
    QCOMPARE(s.eventCount(), size_t{8});
  }

  // Not a pass/fail benchmark (the machine is shared); prints the rate for docs and reviews.
  void exportSpeed() {
    TraceStore s;
    SynthOptions o;
    o.ranks = 8;
    o.steps = 40;
    o.kernelsPerStep = 256;
    synthesizeTrace(s, o);
    s.flush();
    CountingBuf sink;
    std::ostream out(&sink);
    const auto t0 = std::chrono::steady_clock::now();
    auto r = exportChromeTrace(s, out);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    QVERIFY(r.isOk());
    QCOMPARE(r->events, uint64_t(s.eventCount()));
    qInfo("chrome export: %zu events, %.1f MB in %.3f s = %.2f M events/s", s.eventCount(),
          double(sink.bytes) / 1e6, sec, double(s.eventCount()) / sec / 1e6);
  }
};

QTEST_GUILESS_MAIN(TstChromeTrace)
#include "tst_chrome_trace.moc"
