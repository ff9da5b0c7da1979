// The fast Chrome trace reader (issue 37; core/src/interop/chrome/fast_reader.h) against the
// reference reader (nlohmann's SAX parser, ChromeImportOptions::referenceReader): the same
// events, tracks, attributes and metadata for hand-built traces -- plain and .gz, unicode
// escapes, numbers as strings, nested args, the window boundary anywhere -- and, for input it
// leaves to the reference reader (malformed, over a limit, duplicate keys), the same error or
// --partial result. Correctness only: the speed is in docs/BENCHMARKS.md.
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "trainscope/core/interop/chrome_trace.h"

using namespace trainscope::core;

namespace {

// One event of a Kineto-like trace, varied by i so that events differ in length and content.
std::string kinetoEvent(int i) {
  const int64_t ts = 1682725898236567 + int64_t{i} * 37;
  std::string e;
  switch (i % 8) {
    case 0:
      e = R"({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 4037, "tid": 23695, "ts": )" +
          std::to_string(ts) + R"(.123, "dur": 68.0, "args": {"External id": )" + std::to_string(41506 + i) +
          R"(, "Input Dims": [[2048, 1], [], [3]], "Input type": ["float", "Scalar"], "Fwd thread id": 1,
          "Sequence number": 1096588, "Concrete Inputs": ["", "1e-05", "\"q\""]}})";
      break;
    case 1:  // a GPU kernel with a float ts and dur, correlation, grid
      e = R"j({"ph":"X","cat":"kernel","name":"void at::native::vectorized_elementwise_kernel<4, float>(int)",)j"
          R"("pid":0,"tid":7,"ts":)" +
          std::to_string(ts) +
          R"(.5,"dur":1.25,"args":{"queued":0,"device":0,"context":1,"stream":7,)"
          R"("correlation":)" +
          std::to_string(100 + i) +
          R"(,"registers per thread":32,"grid":[1,1,1],"block":[128,1,1],)"
          R"("est. achieved occupancy %":12.5,"blocks per SM":0.0125}})";
      break;
    case 2:  // unicode: escapes (BMP, surrogate pair, controls, slash), raw UTF-8
      e = "{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"caf\\u00e9 \\ud83d\\ude00 tab\\there "
          "\\\"q\\\" "
          "a\\/b \\\\ na\xc3\xafve \xe2\x82\xac \xf0\x9f\x98\x80\",\"pid\":4037,\"tid\":23695,\"ts\":" +
          std::to_string(ts) + ",\"dur\":3,\"args\":{\"k\\u00ebey\":\"v\\n\\r\\b\\f\\u0001\"}}";
      break;
    case 3:  // numbers as strings, string pid/tid, big and negative numbers, booleans, null
      e = R"({"ph":"X","cat":"cpu_op","name":"aten::add_","pid":"4037","tid":"thread 2","ts":")" +
          std::to_string(ts) +
          R"(.25","dur":"7","args":{"big":18446744073709551615,"huge":100000000000000000000,)"
          R"("neg":-42,"min":-9223372036854775808,"e":1.5e3,"E":-2E-2,"zero":-0,"t":true,"f":false,)"
          R"("n":null,"bytes":"4096","stream":"7"}})";
      break;
    case 4:  // nested args
      e = R"({"ph":"X","cat":"cpu_op","name":"nccl:all_reduce","pid":4037,"tid":23695,"ts":)" +
          std::to_string(ts) +
          R"(,"dur":12,"args":{"Collective name":"allreduce","In msg nelems":1048576,)"
          R"("Process Group Ranks":[0,1],"nested":{"a":{"b":[1,{"c":"d"},[]],"e":{}},"x":1.0}}})";
      break;
    case 5:  // flows and an instant
      e = R"({"ph":"s","id":)" + std::to_string(i) + R"(,"pid":4037,"tid":23695,"ts":)" + std::to_string(ts) +
          R"(,"cat":"ac2g","name":"ac2g"}, {"ph":"f","id":)" + std::to_string(i) +
          R"(,"pid":0,"tid":7,"ts":)" + std::to_string(ts + 1) + R"(,"cat":"ac2g","name":"ac2g","bp":"e"},)" +
          R"({"ph":"i","s":"t","name":"mark","pid":4037,"tid":23695,"ts":)" + std::to_string(ts + 2) + "}";
      break;
    case 6:  // B/E, counters with numeric strings
      e = R"({"ph":"B","name":"ProfilerStep#)" + std::to_string(i) +
          R"(","cat":"cpu_op","pid":4037,"tid":23695,"ts":)" + std::to_string(ts) +
          R"(},{"ph":"E","pid":4037,"tid":23695,"ts":)" + std::to_string(ts + 30) +
          R"(,"args":{"extra":1}},{"ph":"C","name":"mem","pid":4037,"ts":)" + std::to_string(ts + 5) +
          R"(,"args":{"bytes":"12.5","count":3,"x":"no"}})";
      break;
    default:  // whitespace everywhere, an unknown phase
      e = " \n\t{ \"ph\" : \"X\" ,\r\n \"name\" : \"ws\" , \"pid\" : 4037 , \"tid\" : 23695 , \"ts\" : " +
          std::to_string(ts) +
          " , \"dur\" : 1.5e0 , \"args\" : { } } \n,{\"ph\":\"b\",\"id\":1,\"ts\":" + std::to_string(ts) +
          ",\"pid\":1}";
      break;
  }
  return e;
}

std::string kinetoTrace(int events, bool objectForm = true) {
  std::string s;
  if (objectForm)
    s = "{\n  \"schemaVersion\": 1, \"record_shapes\": 1,\n  \"distributedInfo\": {\"backend\": \"nccl\", "
        "\"rank\": 1, "
        "\"world_size\": 2},\n  \"deviceProperties\": [{\"id\": 0, \"name\": \"NVIDIA H100 \\u00e9\", "
        "\"totalGlobalMem\": 85029158912, \"computeMajor\": 9}],\n  \"traceEvents\": [\n";
  else
    s = "[\n";
  s +=
      R"({"name":"process_name","ph":"M","ts":1682725898236000,"pid":4037,"tid":0,"args":{"name":"python3"}},)"
      R"j({"name":"thread_name","ph":"M","ts":1682725898236000,"pid":4037,"tid":23695,"args":{"name":"thread 23695 (python3)"}},)j"
      R"({"name":"process_name","ph":"M","ts":1682725898236000,"pid":0,"tid":0,"args":{"name":"GPU 0"}},)"
      R"({"name":"thread_name","ph":"M","pid":0,"tid":7,"args":{"name":"stream 7"}},)"
      R"({"name":"thread_sort_index","ph":"M","pid":0,"tid":7,"args":{"sort_index":7}})";
  for (int i = 0; i < events; ++i) s += ",\n" + kinetoEvent(i);
  if (objectForm)
    s += "\n  ],\n  \"traceName\": \"rank-1.json\", \"baseTimeNanoseconds\": 1682725898000000000,\n"
         "  \"otherData\": {\"note\": \"\\u2603\", \"n\": 1.5, \"list\": [1, \"two\"]}\n}\n";
  else
    s += "\n]\n";
  return s;
}

bool writeFile(const QString& path, const std::string& content) {
  std::ofstream f(path.toStdString(), std::ios::binary);
  f << content;
  return static_cast<bool>(f);
}

bool gzipFile(const QString& path) {
  return QProcess::execute("gzip", {"-kf", path}) == 0;
}

// Everything a store holds, as text: its export (ranks, tracks, events, attributes) and metadata.
std::string describe(const Result<TraceStore>& r) {
  if (!r) return "error " + std::to_string(int(r.status().code())) + ": " + r.status().message();
  std::ostringstream out;
  auto st = exportChromeTrace(r.value(), out);
  if (!st) return "export failed: " + st.status().message();
  out << "\nmetadata:";
  for (const auto& [k, v] : r.value().metadata()) out << "\n" << k << "=" << v;
  out << "\nevents:" << r.value().eventCount();
  return out.str();
}

struct Both {
  std::string fast, reference;
  bool fastUsedReference = true;
};

Both importBoth(const std::function<Result<TraceStore>(const ChromeImportOptions&)>& import,
                bool partial = false, size_t window = 0) {
  Both b;
  ChromeImportOptions fast{
      .partial = partial, .usedReferenceReader = &b.fastUsedReference, .readWindow = window};
  b.fast = describe(import(fast));
  ChromeImportOptions ref{.partial = partial, .referenceReader = true};
  b.reference = describe(import(ref));
  return b;
}

}  // namespace

class TstChromeFastReader : public QObject {
  Q_OBJECT

 private slots:
  void sameEventsAsTheReferenceReader_data() {
    QTest::addColumn<int>("events");
    QTest::addColumn<bool>("objectForm");
    QTest::newRow("object, 40 events") << 40 << true;
    QTest::newRow("bare array, 40 events") << 40 << false;
    QTest::newRow("object, no events") << 0 << true;
  }
  void sameEventsAsTheReferenceReader() {
    QFETCH(int, events);
    QFETCH(bool, objectForm);
    const std::string text = kinetoTrace(events, objectForm);
    QTemporaryDir dir;
    const QString path = dir.filePath("rank-1.json");
    QVERIFY(writeFile(path, text));
    QVERIFY(gzipFile(path));

    // In memory, from a file (plain and gzip), and with windows of a few bytes, so that every
    // token -- escapes, numbers, UTF-8 sequences, literals -- is cut by a refill somewhere.
    const Both mem = importBoth([&](const auto& o) { return importChromeTrace(text, "t.json", o); });
    QVERIFY2(!mem.fast.starts_with("error"), mem.fast.c_str());
    QCOMPARE(mem.fast, mem.reference);
    QVERIFY(!mem.fastUsedReference);
    for (const QString& p : {path, path + ".gz"}) {
      for (size_t window : {size_t{0}, size_t{1}, size_t{7}, size_t{64}, size_t{1000}}) {
        const Both f = importBoth([&](const auto& o) { return importChromeTraceFile(p.toStdString(), o); },
                                  false, window);
        QVERIFY2(!f.fast.starts_with("error"), f.fast.c_str());
        QCOMPARE(f.fast, f.reference);
        QVERIFY2(!f.fastUsedReference, qPrintable(p + " window " + QString::number(window)));
      }
    }
  }

  // Every trace in the repository (real Kineto traces from HTA's test data and torch.profiler,
  // our own exports, samples; non-traces too): the same store, or the same error.
  void sameResultForEveryTraceInTheRepository() {
    int traces = 0;
    for (const char* root : {"/tests/data", "/resources/samples"}) {
      for (const auto& e :
           std::filesystem::recursive_directory_iterator(std::string(TRAINSCOPE_SOURCE_DIR) + root)) {
        const std::string p = e.path().string();
        if (!e.is_regular_file() || !(p.ends_with(".json") || p.ends_with(".json.gz"))) continue;
        const Both f = importBoth([&](const auto& o) { return importChromeTraceFile(p, o); });
        QVERIFY2(f.fast == f.reference, p.c_str());
        if (!f.fast.starts_with("error")) {
          ++traces;
          QVERIFY2(!f.fastUsedReference, p.c_str());
        }
      }
    }
    QVERIFY(traces >= 20);
  }

  // What the fast reader leaves to the reference reader comes out as that reader says it: the
  // same error, or (duplicate keys, --partial) the same store.
  void leftToTheReferenceReader_data() {
    QTest::addColumn<QString>("content");
    QTest::addColumn<bool>("partial");
    const std::string ok = R"({"ph":"X","name":"a","pid":1,"tid":1,"ts":1,"dur":2})";
    auto row = [&](const char* name, const std::string& content, bool partial = false) {
      QTest::newRow(name) << QString::fromStdString(content) << partial;
    };
    row("truncated", "[" + ok + "," + ok.substr(0, 20));
    row("truncated, partial", "[" + ok + "," + ok + "," + ok.substr(0, 20), true);
    row("trailing garbage", "[" + ok + "] x");
    row("trailing comma", "[" + ok + ",]");
    row("byte-order mark", "\xef\xbb\xbf[" + ok + "]");
    row("invalid UTF-8", "[{\"ph\":\"X\",\"name\":\"\xc3\x28\",\"ts\":1,\"dur\":1}]");
    row("overlong UTF-8", "[{\"ph\":\"X\",\"name\":\"\xc0\xaf\",\"ts\":1,\"dur\":1}]");
    row("lone surrogate", R"([{"ph":"X","name":"\udc00","ts":1,"dur":1}])");
    row("control character", "[{\"ph\":\"X\",\"name\":\"a\x01\",\"ts\":1,\"dur\":1}]");
    row("bad escape", R"([{"ph":"X","name":"\x","ts":1,"dur":1}])");
    row("leading zero", R"([{"ph":"X","ts":01,"dur":1}])");
    row("number overflow", R"([{"ph":"X","ts":1,"dur":1e400}])");
    row("integer beyond 64 bits (an importer error, not the reader's)",
        R"([{"ph":"X","ts":100000000000000000000,"dur":1}])");
    row("duplicate key", R"([{"ph":"X","ts":1.5,"ts":2,"dur":1,"name":"a","name":"b"}])");
    row("duplicate traceEvents", "{\"traceEvents\":[" + ok + "],\"traceEvents\":[" + ok + "]}");
    row("scalar", "42");
    row("no traceEvents", R"({"otherData":{}})");
    row("traceEvents not an array", R"({"traceEvents":{}})");
    row("event not an object", "[" + ok + ",[1]]");
    row("depth 600",
        "[{\"ph\":\"i\",\"ts\":1,\"args\":" + std::string(600, '[') + std::string(600, ']') + "}]");
    std::string members = "[{\"ph\":\"i\",\"ts\":1,\"args\":{";
    for (int i = 0; i < 5000; ++i) members += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":1";
    row("5000 members", members + "}}]");
    std::string many = "[{\"ph\":\"i\",\"ts\":1,\"args\":{";
    for (int i = 0; i < 4000; ++i)
      many += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
    row("4000 members (within the limit)", many + "}}]");
    row("2 MiB string", "[{\"ph\":\"i\",\"ts\":1,\"name\":\"" + std::string(2u << 20, 'a') + "\"}]");
    row("bad event, partial", "[" + ok + R"(,{"ph":"X","ts":1},)" + ok + "]", true);
  }
  void leftToTheReferenceReader() {
    QFETCH(QString, content);
    QFETCH(bool, partial);
    const std::string text = content.toStdString();
    QTemporaryDir dir;
    const QString path = dir.filePath("input.json");
    QVERIFY(writeFile(path, text));
    QVERIFY(gzipFile(path));
    const Both mem =
        importBoth([&](const auto& o) { return importChromeTrace(text, "input.json", o); }, partial);
    QCOMPARE(mem.fast, mem.reference);
    for (const QString& p : {path, path + ".gz"}) {
      for (size_t window : {size_t{0}, size_t{5}}) {
        const Both f = importBoth([&](const auto& o) { return importChromeTraceFile(p.toStdString(), o); },
                                  partial, window);
        QCOMPARE(f.fast, f.reference);
      }
    }
  }

  // A damaged gzip stream after valid JSON has begun: the reference reader's message, naming
  // where the damage is.
  void damagedGzip() {
    QTemporaryDir dir;
    const QString path = dir.filePath("t.json");
    QVERIFY(writeFile(path, kinetoTrace(2000)));
    QVERIFY(gzipFile(path));
    std::ifstream in((path + ".gz").toStdString(), std::ios::binary);
    std::string gz((std::istreambuf_iterator<char>(in)), {});
    gz[gz.size() / 2] ^= 0x55;
    const QString cut = dir.filePath("cut.json.gz");
    QVERIFY(writeFile(cut, gz));
    for (bool partial : {false, true}) {
      const Both f =
          importBoth([&](const auto& o) { return importChromeTraceFile(cut.toStdString(), o); }, partial);
      QCOMPARE(f.fast, f.reference);
      QVERIFY(f.fastUsedReference);
    }
  }
};

QTEST_GUILESS_MAIN(TstChromeFastReader)
#include "tst_chrome_fast_reader.moc"
