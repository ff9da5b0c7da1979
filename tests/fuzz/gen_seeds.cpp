// Writes the generated part of the fuzz seed corpora (tests/fuzz/corpus/<target>/gen-*):
//   fuzz_seeds SOURCE_DIR OUT_DIR
// wire: one frame of every message type; agent_server: client sessions in each of the target's
// three modes; knobs: descriptors of each type with good and bad values; tsdb: small sessions
// saved from traces in tests/data. Files from tests/data themselves are copied by the Makefile
// (`make fuzz-seeds`).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "trainscope/core/interop/chrome_trace.h"
#include "trainscope/core/session/tsdb.h"
#include "trainscope/core/wire/protocol.h"

namespace fs = std::filesystem;
using namespace trainscope::core;
namespace wire = trainscope::core::wire;

namespace {

void writeFile(const fs::path& p, const std::vector<uint8_t>& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> frames(std::initializer_list<wire::Message> ms) {
  std::vector<uint8_t> out;
  for (const auto& m : ms) wire::encode(m, out);
  return out;
}

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}

void putText(std::vector<uint8_t>& out, const std::string& s) { out.insert(out.end(), s.begin(), s.end()); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fuzz_seeds SOURCE_DIR OUT_DIR\n");
    return 2;
  }
  const fs::path src = argv[1], out = argv[2];

  // --- wire: every message type, as the decoder meets them.
  wire::EventBatch batch;
  batch.firstSeq = 1;
  batch.strings = {{1, "forward"}, {2, "allreduce"}};
  wire::WireTrack track;
  track.id = 1;
  track.name = "main";
  batch.tracks = {track};
  wire::WireEvent e;
  e.track = 1;
  e.startNs = 1000;
  e.endNs = 2000;
  e.name = 1;
  batch.events = {e, e};
  wire::KnobList kl;
  kl.knobs.push_back({"dp.algorithm", wire::KnobType::Enum, 0, 1, {"ring", "tree"}, "ring", "ring", "algo", false});
  kl.pending.push_back({3, "dp.algorithm", "tree"});
  const std::vector<wire::Message> all = {
      wire::Hello{1, 1, "cli"}, wire::Challenge{{1, 2, 3}, true}, wire::Auth{{4, 5}, {6, 7}},
      wire::JobInfo{"job", 0, 4, 0, "host", 42, 1000, -1, "0.1.0", "monotonic"}, wire::ErrorMsg{3, "bad"},
      wire::Subscribe{true}, batch, wire::KnobListRequest{}, kl, wire::SetKnob{1, "dp.algorithm", "tree"},
      wire::KnobAck{1, true, true, 10, ""}, wire::Ping{123}, wire::Pong{123, 456}, wire::StatsRequest{},
      wire::Stats{1, 2, 3, 4, 5, 6, 7, 8, 9}, wire::Bye{}, wire::Unsubscribe{}, wire::InspectRequest{},
      wire::Inspect{1, 2, {{3, EventKind::Collective, "c", 4, 5, 6, 7, 8}}, {{9, "t", "S", "futex_wait", "futex"}}}};
  for (size_t i = 0; i < all.size(); ++i)
    writeFile(out / "wire" / ("gen-" + std::to_string(static_cast<int>(wire::typeOf(all[i])))), frames({all[i]}));

  // --- agent_server: mode byte, then what the client sends.
  const wire::Message hello = wire::Hello{1, 1, "fuzz"};
  auto session = [&](uint8_t mode, std::initializer_list<wire::Message> ms) {
    std::vector<uint8_t> b{mode};
    auto f = frames(ms);
    b.insert(b.end(), f.begin(), f.end());
    return b;
  };
  writeFile(out / "agent_server" / "gen-unix-hello",
            session(0, {hello, wire::KnobListRequest{}, wire::StatsRequest{}, wire::InspectRequest{}, wire::Ping{1}, wire::Bye{}}));
  writeFile(out / "agent_server" / "gen-unix-set",
            session(1, {wire::SetKnob{1, "dp.algorithm", "tree"}, wire::SetKnob{2, "dp.bucket_bytes", "4096"},
                        wire::SetKnob{3, "opt.lr_scale", "0.5"}, wire::SetKnob{4, "dp.overlap", "false"},
                        wire::KnobListRequest{}}));
  writeFile(out / "agent_server" / "gen-unix-set-bad",
            session(1, {wire::SetKnob{5000, "dp.algorithm", "tree"}, wire::SetKnob{1, "dp.bucket_bytes", "-1"},
                        wire::SetKnob{1, "nope", "1"}, wire::SetKnob{2, "", ""}, wire::KnobListRequest{}}));
  writeFile(out / "agent_server" / "gen-unix-subscribe",
            session(1, {wire::Subscribe{true}, wire::Ping{5}, wire::Unsubscribe{}, wire::Subscribe{false},
                        wire::ErrorMsg{1, "bye"}}));
  writeFile(out / "agent_server" / "gen-unix-unexpected", session(1, {wire::Pong{1, 2}}));
  writeFile(out / "agent_server" / "gen-tcp-auth", session(2, {hello, wire::Auth{{1}, {2}}, wire::StatsRequest{}}));
  writeFile(out / "agent_server" / "gen-tcp-noauth", session(2, {hello, wire::KnobListRequest{}}));

  // --- knobs: type byte, descriptor, values one per line.
  {
    std::vector<uint8_t> b{0};
    put<int64_t>(b, 1024);
    put<int64_t>(b, 1 << 30);
    put<int64_t>(b, 1 << 20);
    putText(b, "4096\n-1\n1e3\n2147483648\n0x10\n 5\n");
    writeFile(out / "knobs" / "gen-int", b);
    b = {0};
    put<int64_t>(b, INT64_MIN);
    put<int64_t>(b, INT64_MAX);
    put<int64_t>(b, 0);
    putText(b, "9223372036854775807\n-9223372036854775808\n9223372036854775808\n");
    writeFile(out / "knobs" / "gen-int-wide", b);
    b = {1};
    put<double>(b, 0.0);
    put<double>(b, 10.0);
    put<double>(b, 1.0);
    putText(b, "0.5\n1e1\n10.000001\nnan\ninf\n-0\n1e-320\n");
    writeFile(out / "knobs" / "gen-float", b);
    b = {2, 1};
    putText(b, "true\noff\nyes\nmaybe\n");
    writeFile(out / "knobs" / "gen-bool", b);
    b = {3, 0};
    putText(b, "ring,recursive-doubling,tree\ntree\nring\nRING\n\n");
    writeFile(out / "knobs" / "gen-enum", b);
  }

  // --- tsdb: small sessions saved from traces in tests/data.
  for (const char* name : {"kineto_steps", "missing_end", "straggler"}) {
    auto store = importChromeTraceFile(src / "tests/data" / name / "trace.json");
    if (!store) {
      std::fprintf(stderr, "%s: %s\n", name, store.status().toString().c_str());
      return 1;
    }
    const fs::path p = fs::temp_directory_path() / (std::string("fuzz_seed_") + name + ".tsdb");
    if (Status s = saveSession(store.value(), p); !s) {
      std::fprintf(stderr, "%s: %s\n", p.c_str(), s.toString().c_str());
      return 1;
    }
    std::ifstream in(p, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    writeFile(out / "tsdb" / (std::string("gen-") + name), bytes);
    fs::remove(p);
  }
  return 0;
}
