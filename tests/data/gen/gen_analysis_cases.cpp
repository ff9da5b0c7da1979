// Writes the constructed traces that tests/tst_analysis.cpp checks against hand-computed
// answers: one folder per case under the directory given (tests/data), each with trace.json
// (Chrome trace JSON in Trainscope's own flavour, or Kineto's for the PyTorch case).
//   build/bin/gen_analysis_cases tests/data
// Times are written in milliseconds here (ms(x)); every case starts its first step at 1 s.
// The pipeline cases are not hand-placed: a tiny list scheduler runs each stage's op order with
// the data dependencies of a pipeline (F after the previous stage's F, B after the next stage's
// B) and writes the ops and, where a stage had to wait, the receive it waited on.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "trainscope/core/interop/chrome_trace.h"
#include "trainscope/core/model/trace_store.h"

using namespace trainscope::core;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kOrigin = 1'000'000'000;
int64_t ms(double x) {
  return kOrigin + std::llround(x * 1e6);
}

struct Case {
  TraceStore s;
  std::map<int, TrackId> cpu, gpu, comm, comm2, counters;
  explicit Case(int ranks) {
    for (int r = 0; r < ranks; ++r) {
      s.setRank(RankInfo{.rank = r, .host = "node0", .pid = 100 + r});
      cpu[r] = s.findOrAddTrack(r, TrackKind::CpuThread, 1, "main thread");
      gpu[r] = s.findOrAddTrack(r, TrackKind::CudaStream, 7, "compute stream 7");
      comm[r] = s.findOrAddTrack(r, TrackKind::CudaStream, 13, "comm stream 13");
    }
    s.metadata()["generator"] = "tests/data/gen/gen_analysis_cases.cpp";
  }
  void ev(TrackId t, EventKind k, const std::string& name, double a, double b, std::vector<Attr> attrs = {}) {
    s.append(t, {ms(a), ms(b), s.intern(name), k}, attrs);
  }
  void step(int r, int64_t n, double a, double b) {
    ev(cpu[r], EventKind::Step, "step", a, b, {Attr::ofInt(AttrKey::Step, n)});
  }
  void knob(int r, int64_t step, double t, const std::string& name, const std::string& value) {
    ev(cpu[r], EventKind::KnobChange, name, t, t,
       {Attr::ofString(AttrKey::Knob, s.intern(name)), Attr::ofString(AttrKey::KnobValue, s.intern(value)),
        Attr::ofInt(AttrKey::Step, step)});
  }
  TrackId secondComm(int r) {
    if (!comm2.count(r)) comm2[r] = s.findOrAddTrack(r, TrackKind::CudaStream, 14, "comm stream 14");
    return comm2[r];
  }
  TrackId counterTrack(int r) {
    if (!counters.count(r)) counters[r] = s.findOrAddTrack(r, TrackKind::Counter, 0, "counters");
    return counters[r];
  }
  void write(const fs::path& dir, const std::string& name) {
    fs::create_directories(dir / name);
    auto st = exportChromeTraceFile(s, dir / name / "trace.json");
    if (!st)
      std::fprintf(stderr, "%s: %s\n", name.c_str(), st.status().toString().c_str());
    else
      std::printf("wrote %s/trace.json (%zu events)\n", (dir / name).c_str(), s.eventCount());
  }
};

// ---- pipeline list scheduler --------------------------------------------------------------
struct Op {
  char kind;  // 'F', 'B', 'W'
  int mb;
  int chunk;
};

// Ranks 0..p-1 hold stage = rank; virtual stage of (rank, chunk) = chunk * p + rank, or with
// vShape (zbv, v = 2) chunk 1 of rank r is virtual stage 2p-1-r.
// slow[r] scales rank r's op times (unbalanced stages); empty = balanced.
void runPipeline(Case& c, int p, int v, const std::vector<std::vector<Op>>& order, double tf, double tb,
                 double tw, int64_t stepNo, double t0, double windowEnd,
                 const std::vector<double>& slow = {}, bool vShape = false, double latency = -1) {
  // latency >= 0 (not with vShape): every hand-off to another rank arrives `latency` after the
  // producer's op ends; the producer posts a 1 us "pp send" on its own time and the consumer
  // records a receive per hand-off (1 us when it did not wait), as trainscope-train traces them
  // (the analysis takes no interval from a zero-length event).
  const int vs = p * v;
  std::map<std::tuple<char, int, int>, std::pair<double, int>> done;  // (kind, mb, vstage) -> end, rank
  std::vector<size_t> next(p, 0);
  std::vector<double> free(p, t0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      if (next[r] >= order[r].size()) continue;
      const Op op = order[r][next[r]];
      const int vstage = vShape && op.chunk == 1 ? 2 * p - 1 - r : op.chunk * p + r;
      std::tuple<char, int, int> dep{' ', 0, 0};
      if (op.kind == 'F' && vstage > 0) dep = {'F', op.mb, vstage - 1};
      if (op.kind == 'B')
        dep = vstage == vs - 1 ? std::tuple<char, int, int>{'F', op.mb, vstage}
                               : std::tuple<char, int, int>{'B', op.mb, vstage + 1};
      if (op.kind == 'W') dep = {'B', op.mb, vstage};
      double ready = free[r];
      int peer = -1;
      if (std::get<0>(dep) != ' ') {
        auto it = done.find(dep);
        if (it == done.end()) continue;  // not yet produced
        const bool remote = it->second.second != r;
        const double arrival = it->second.first + (latency >= 0 && remote ? latency : 0.0);
        const double posted = 0.001;
        if (latency >= 0 && remote) {
          const double end = std::max(free[r] + posted, arrival);
          c.ev(c.comm[r], EventKind::P2PRecv, "pp recv", free[r], end,
               {Attr::ofInt(AttrKey::Peer, it->second.second), Attr::ofInt(AttrKey::MicroBatch, op.mb)});
          ready = std::max(ready, end);
        }
        if (arrival > ready) {
          ready = arrival;
          peer = it->second.second;
        }
      }
      if (latency < 0 && peer >= 0 && peer != r)  // the stage waited for a peer's data: the receive it sat in
        c.ev(c.comm[r], EventKind::P2PRecv, "recv", free[r], ready,
             {Attr::ofInt(AttrKey::Peer, peer), Attr::ofInt(AttrKey::MicroBatch, op.mb),
              Attr::ofInt(AttrKey::Bytes, 1 << 20)});
      const double dur = (op.kind == 'F' ? tf : op.kind == 'B' ? tb : tw) * (slow.empty() ? 1.0 : slow[r]);
      const EventKind k = op.kind == 'F'   ? EventKind::MicroBatchF
                          : op.kind == 'B' ? EventKind::MicroBatchB
                                           : EventKind::MicroBatchW;
      c.ev(c.gpu[r], k, std::string(1, op.kind) + std::to_string(op.mb), ready, ready + dur,
           {Attr::ofInt(AttrKey::MicroBatch, op.mb), Attr::ofInt(AttrKey::Stage, r),
            Attr::ofInt(AttrKey::Chunk, op.chunk)});
      done[{op.kind, op.mb, vstage}] = {ready + dur, r};
      const int to = op.kind == 'F' && vstage < vs - 1 ? (vstage + 1) % p : op.kind == 'B' && vstage > 0 ? (vstage - 1) % p : r;
      if (latency >= 0 && to != r) {
        c.ev(c.comm[r], EventKind::P2PSend, "pp send", ready + dur, ready + dur + 0.001,
             {Attr::ofInt(AttrKey::Peer, to), Attr::ofInt(AttrKey::MicroBatch, op.mb)});
        free[r] += 0.001;
      }
      free[r] = ready + dur;
      ++next[r];
      progress = true;
    }
  }
  for (int r = 0; r < p; ++r) c.step(r, stepNo, t0, windowEnd);
}

std::vector<std::vector<Op>> order1f1b(int p, int m) {
  std::vector<std::vector<Op>> o(p);
  for (int s = 0; s < p; ++s) {
    const int warm = std::min(m, p - 1 - s);
    int f = 0, b = 0;
    for (; f < warm; ++f) o[s].push_back({'F', f, 0});
    while (f < m) {
      o[s].push_back({'F', f++, 0});
      o[s].push_back({'B', b++, 0});
    }
    while (b < m) o[s].push_back({'B', b++, 0});
  }
  return o;
}

std::vector<std::vector<Op>> orderGpipe(int p, int m) {
  std::vector<std::vector<Op>> o(p);
  for (int s = 0; s < p; ++s) {
    for (int f = 0; f < m; ++f) o[s].push_back({'F', f, 0});
    for (int b = 0; b < m; ++b) o[s].push_back({'B', b, 0});
  }
  return o;
}

void pipeline1f1b(const fs::path& dir) {
  Case c(4);
  c.s.metadata()["knob.pp.schedule"] = "1f1b";
  c.s.metadata()["knob.pp.microbatches"] = "4";
  runPipeline(c, 4, 1, order1f1b(4, 4), 1, 2, 0, 0, 0, 21);
  runPipeline(c, 4, 1, order1f1b(4, 4), 1, 2, 0, 1, 25, 46);
  c.write(dir, "pp_1f1b_balanced");
}

// Two settings in one recording (the what-if's grid benchmark records this way): steps 0-1 run
// 1F1B with m = 4 (F 1 ms, B 2 ms), then pp.microbatches = 8 from step 2 with micro-batches half
// the size (F 0.5, B 1): a model of either window must take that window's op times only.
void pipeline1f1bTwoSettings(const fs::path& dir) {
  Case c(4);
  c.s.metadata()["knob.pp.schedule"] = "1f1b";
  c.s.metadata()["knob.pp.microbatches"] = "4";
  runPipeline(c, 4, 1, order1f1b(4, 4), 1, 2, 0, 0, 0, 21);
  runPipeline(c, 4, 1, order1f1b(4, 4), 1, 2, 0, 1, 25, 46);
  for (int r = 0; r < 4; ++r) c.knob(r, 2, 49, "pp.microbatches", "8");
  runPipeline(c, 4, 1, order1f1b(4, 8), 0.5, 1, 0, 2, 50, 66.5);
  runPipeline(c, 4, 1, order1f1b(4, 8), 0.5, 1, 0, 3, 70, 86.5);
  c.write(dir, "pp_1f1b_two_settings");
}

// Hand-offs that take time: p = 2, m = 4, 1F1B, F 1 ms, B 2 ms, every hand-off arriving 0.5 ms
// after its producer ends (sends and receives of 1 us aside). By hand: 1F1B's critical path
// alternates stages at every op and pays 0.5 ms each time (makespan 17 ms, 15 without the
// latency); GPipe's forwards run ahead and pay it on the first forward and each backward only
// (16 ms).
void pipeline1f1bHandoff(const fs::path& dir) {
  Case c(2);
  c.s.metadata()["knob.pp.schedule"] = "1f1b";
  c.s.metadata()["knob.pp.microbatches"] = "4";
  runPipeline(c, 2, 1, order1f1b(2, 4), 1, 2, 0, 0, 0, 17.001, {}, false, 0.5);
  runPipeline(c, 2, 1, order1f1b(2, 4), 1, 2, 0, 1, 20, 37.001, {}, false, 0.5);
  c.write(dir, "pp_1f1b_handoff");
}

// An unsplit 1F1B backward whose kernels name their halves, as trainscope-train's do: p = 2, m = 4,
// F 1 ms, B 2 ms of which the "B 0" kernel takes 1.5 and the "W 0" kernel 0.5 (a weight-gradient
// share of 1/4), on a kernel track of each rank. The forward's "F 0" kernel takes 0.6 of its 1 ms
// (the other 0.4 a fixed cost per op).
void pipeline1f1bKernels(const fs::path& dir) {
  Case c(2);
  c.s.metadata()["knob.pp.schedule"] = "1f1b";
  c.s.metadata()["knob.pp.microbatches"] = "4";
  runPipeline(c, 2, 1, order1f1b(2, 4), 1, 2, 0, 0, 0, 15);
  runPipeline(c, 2, 1, order1f1b(2, 4), 1, 2, 0, 1, 20, 35);
  for (int r = 0; r < 2; ++r) {
    const TrackId kernels = c.s.findOrAddTrack(r, TrackKind::CudaStream, 8, "kernels");
    std::vector<double> starts, fStarts;
    const TrackEvents& ev = c.s.events(c.gpu[r]);
    for (size_t i = 0; i < ev.size(); ++i) {
      if (ev.kind(i) == EventKind::MicroBatchB) starts.push_back(static_cast<double>(ev.start(i) - kOrigin) / 1e6);
      if (ev.kind(i) == EventKind::MicroBatchF) fStarts.push_back(static_cast<double>(ev.start(i) - kOrigin) / 1e6);
    }
    for (double t : fStarts) c.ev(kernels, EventKind::Kernel, "F 0", t + 0.2, t + 0.8, {Attr::ofInt(AttrKey::Layer, 0)});
    for (double t : starts) {
      c.ev(kernels, EventKind::Kernel, "B 0", t, t + 1.5, {Attr::ofInt(AttrKey::Layer, 0)});
      c.ev(kernels, EventKind::Kernel, "W 0", t + 1.5, t + 2, {Attr::ofInt(AttrKey::Layer, 0)});
    }
  }
  c.write(dir, "pp_1f1b_kernels");
}

// A step with work outside the pipeline ops: p = 2, m = 4, 1F1B, F 1, B 2 ms (makespan 15), then a
// 4 ms optimizer phase on every rank (the step window is 19 ms). The analysis counts the phase as
// busy: bubble 3/19 per stage.
void pipeline1f1bOptimizer(const fs::path& dir) {
  Case c(2);
  c.s.metadata()["knob.pp.schedule"] = "1f1b";
  c.s.metadata()["knob.pp.microbatches"] = "4";
  for (int n = 0; n < 2; ++n) {
    const double t0 = 25.0 * n;
    runPipeline(c, 2, 1, order1f1b(2, 4), 1, 2, 0, n, t0, t0 + 19);
    for (int r = 0; r < 2; ++r) c.ev(c.cpu[r], EventKind::Phase, "optimizer", t0 + 15, t0 + 19);
  }
  c.write(dir, "pp_1f1b_optimizer");
}

void pipeline1f1bUnbalanced(const fs::path& dir) {
  Case c(2);
  c.s.metadata()["knob.pp.schedule"] = "1f1b";
  runPipeline(c, 2, 1, order1f1b(2, 4), 1, 1, 0, 0, 0, 18, {1, 2});  // stage 1 twice as slow
  c.write(dir, "pp_1f1b_unbalanced");
}

void pipelineGpipeUnbalanced(const fs::path& dir) {
  Case c(2);  // inferred schedule
  runPipeline(c, 2, 1, orderGpipe(2, 2), 1, 1, 0, 0, 0, 10, {1, 2});  // stage 1 twice as slow
  c.write(dir, "pp_gpipe_unbalanced");
}

// Seq1F1B: one micro-batch cut into 2 sequence segments, pipelined 1F1B-style (the segments are
// the pipelined units: forward ops 0 and 1 of the same micro-batch).
void pipelineSeq1f1b(const fs::path& dir) {
  Case c(2);
  c.s.metadata()["knob.pp.schedule"] = "seq1f1b";
  c.s.metadata()["knob.pp.microbatches"] = "1";
  runPipeline(c, 2, 1, order1f1b(2, 2), 1, 1, 0, 0, 0, 6);
  c.write(dir, "pp_seq1f1b");
}

void pipelineGpipe(const fs::path& dir) {
  Case c(4);  // no schedule knob: inferred from the op order
  runPipeline(c, 4, 1, orderGpipe(4, 4), 1, 2, 0, 0, 0, 21);
  c.write(dir, "pp_gpipe");
}

// Megatron's interleaved order for p = 2, v = 2, m = 2 (warm-up 4 and 2 units).
std::vector<std::vector<Op>> interleavedOrderP2M2() {
  return {{{'F', 0, 0}, {'F', 1, 0}, {'F', 0, 1}, {'F', 1, 1}, {'B', 0, 1}, {'B', 1, 1}, {'B', 0, 0}, {'B', 1, 0}},
          {{'F', 0, 0}, {'F', 1, 0}, {'F', 0, 1}, {'B', 0, 1}, {'F', 1, 1}, {'B', 1, 1}, {'B', 0, 0}, {'B', 1, 0}}};
}

void pipelineInterleaved(const fs::path& dir) {
  Case c(2);
  c.s.metadata()["knob.pp.schedule"] = "interleaved-1f1b";
  c.s.metadata()["knob.pp.microbatches"] = "2";
  c.s.metadata()["knob.pp.virtual_stages"] = "2";
  runPipeline(c, 2, 2, interleavedOrderP2M2(), 1, 1, 0, 0, 0, 10);
  c.write(dir, "pp_interleaved");
}

// The same interleaved order with rank 1 twice as slow (F = B = 2 ms there).
void pipelineInterleavedUnbalanced(const fs::path& dir) {
  Case c(2);
  c.s.metadata()["knob.pp.schedule"] = "interleaved-1f1b";
  c.s.metadata()["knob.pp.microbatches"] = "2";
  c.s.metadata()["knob.pp.virtual_stages"] = "2";
  runPipeline(c, 2, 2, interleavedOrderP2M2(), 1, 1, 0, 0, 0, 18, {1, 2});
  c.write(dir, "pp_interleaved_unbalanced");
}

void pipelineZbh1(const fs::path& dir) {
  Case c(2);
  c.s.metadata()["knob.pp.schedule"] = "1f1b";
  c.knob(0, 0, -0.5, "pp.schedule", "zb-h1");  // changed live before step 0
  c.knob(1, 0, -0.5, "pp.schedule", "zb-h1");
  std::vector<std::vector<Op>> o = {
      {{'F', 0, 0}, {'F', 1, 0}, {'B', 0, 0}, {'W', 0, 0}, {'B', 1, 0}, {'W', 1, 0}},
      {{'F', 0, 0}, {'B', 0, 0}, {'F', 1, 0}, {'B', 1, 0}, {'W', 0, 0}, {'W', 1, 0}}};
  runPipeline(c, 2, 1, o, 1, 1, 1, 0, 0, 7);
  c.write(dir, "pp_zbh1");
}

// PyTorch's zero-bubble schedules, as `trainscope.attach_pipeline` records them (pp.schedule knob,
// Chunk = the index of the stage among the rank's stages). Orders: ScheduleZBVZeroBubble and
// ScheduleInterleavedZeroBubble for p = 2 (tst_schedule's hand cases), every op 1 ms.
std::vector<Op> ops(const std::string& text) {  // "F0 F0c1 B2c1 W1" -> ops
  std::vector<Op> out;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ' ') {
      ++i;
      continue;
    }
    Op op{text[i++], 0, 0};
    size_t n = 0;
    op.mb = std::stoi(text.substr(i), &n);
    i += n;
    if (i < text.size() && text[i] == 'c') {
      op.chunk = std::stoi(text.substr(i + 1), &n);
      i += 1 + n;
    }
    out.push_back(op);
  }
  return out;
}

void pipelineZbv(const fs::path& dir) {
  Case c(2);
  c.s.metadata()["knob.pp.schedule"] = "zbv";
  c.s.metadata()["knob.pp.microbatches"] = "3";
  std::vector<std::vector<Op>> o = {
      ops("F0 F1 F2 F0c1 B0c1 W0c1 F1c1 B1c1 W1c1 B0 W0 F2c1 B2c1 W2c1 B1 W1 B2 W2"),
      ops("F0 F0c1 F1 F1c1 B0c1 W0c1 F2 B0 W0 F2c1 B1c1 W1c1 B1 B2c1 B2 W1 W2c1 W2")};
  runPipeline(c, 2, 2, o, 1, 1, 1, 0, 0, 19, {}, true);
  c.write(dir, "pp_zbv");
}

void pipelineInterleavedZb(const fs::path& dir) {
  Case c(2);
  c.s.metadata()["knob.pp.schedule"] = "interleaved-zb";
  c.s.metadata()["knob.pp.microbatches"] = "2";
  std::vector<std::vector<Op>> o = {ops("F0 F1 F0c1 F1c1 B0c1 W0c1 B1c1 W1c1 B0 W0 B1 W1"),
                                    ops("F0 F1 F0c1 B0c1 F1c1 B1c1 W0c1 B0 W1c1 B1 W0 W1")};
  runPipeline(c, 2, 2, o, 1, 1, 1, 0, 0, 13);
  c.write(dir, "pp_interleaved_zb");
}

// ---- data parallel ------------------------------------------------------------------------
void dataParallel(const fs::path& dir) {
  Case c(3);  // rank 2: registered, no events at all
  for (int r = 0; r < 2; ++r) {
    const double o = r == 0 ? 0 : 0.3;  // rank 1 runs 0.3 ms later on the session clock
    const double bwdEnd = r == 0 ? 6 : 5;
    c.step(r, 0, o + 0, o + 10);
    c.ev(c.gpu[r], EventKind::Kernel, "backward_kernel", o + 0, o + bwdEnd);
    c.ev(c.gpu[r], EventKind::Kernel, "adam_kernel", o + 9, o + 9.5);
    auto coll = [&](TrackId t, const char* name, double a, double b, int64_t bucket, int64_t bytes,
                    int64_t seq) {
      std::vector<Attr> at = {Attr::ofInt(AttrKey::Bytes, bytes), Attr::ofInt(AttrKey::CommHash, 7),
                              Attr::ofInt(AttrKey::Seq, seq)};
      if (bucket >= 0) at.push_back(Attr::ofInt(AttrKey::Bucket, bucket));
      c.ev(t, EventKind::Collective, name, o + a, o + b, at);
    };
    coll(c.comm[r], "allgather", 0.5, 1.5, -1, 8 << 20, 4);     // not a gradient collective
    coll(c.comm[r], "allreduce", 2, 4, 0, 4 << 20, 0);          // hidden
    coll(c.comm[r], "allreduce", 5, 7, 1, 4 << 20, 1);          // partly hidden on rank 0
    coll(c.comm[r], "allreduce", 6, 8, 2, 1 << 20, 2);          // exposed ...
    coll(c.secondComm(r), "allreduce", 7, 8.5, 2, 1 << 20, 3);  // ... on two streams at once
    for (int b = 0; b < 3; ++b)
      c.ev(c.cpu[r], EventKind::Bucket, "bucket", o + 2.0 * (b + 1), o + 2.0 * (b + 1) + 3,
           {Attr::ofInt(AttrKey::Bucket, b)});
  }
  c.ev(c.gpu[0], EventKind::Kernel, "warmup_kernel", -2, -1);  // outside steps
  c.ev(c.comm[0], EventKind::Collective, "barrier", 10.5, 11,
       {Attr::ofInt(AttrKey::CommHash, 9)});  // outside
  c.write(dir, "dp_buckets");
}

void straggler(const fs::path& dir) {
  Case c(3);
  const double compute[2][3] = {{4, 5, 8}, {4, 7, 6}};
  const double t0[2] = {0, 12}, end[2] = {10, 21}, sync[2] = {9, 20};
  for (int n = 0; n < 2; ++n)
    for (int r = 0; r < 3; ++r) {
      c.step(r, n, t0[n], end[n]);
      c.ev(c.gpu[r], EventKind::Kernel, "gemm", t0[n], t0[n] + compute[n][r]);
      c.ev(c.comm[r], EventKind::Collective, "ncclAllReduce", t0[n] + compute[n][r], sync[n],
           {Attr::ofInt(AttrKey::Bytes, 3'000'000), Attr::ofInt(AttrKey::CommHash, 5),
            Attr::ofInt(AttrKey::Seq, n)});
    }
  c.write(dir, "straggler");
}

void disco(const fs::path& dir) {
  Case c(2);
  c.s.metadata()["knob.disco.sparsity"] = "0";
  c.s.metadata()["knob.disco.sparsity.1"] = "0.25";
  c.s.metadata()["knob.disco.mode"] = "pipelined";
  const double acc[4] = {0.9, 0.92, 0.88, 0.86};
  for (int n = 0; n < 4; ++n) {
    const double t = 12.0 * n, sp = n < 2 ? 0 : 0.5;
    for (int r = 0; r < 2; ++r) {
      if (n == 2) {  // disco.sparsity sets every layer's knob, as trainscope-train does
        c.knob(r, 2, t - 1, "disco.sparsity", "0.5");
        c.knob(r, 2, t - 1, "disco.sparsity.1", "0.5");
      }
      if (n == 3) c.knob(r, 3, t - 1, "disco.sparsity.1", "0.25");  // one layer back below the global
      c.step(r, n, t, t + 10);
      // Layer 0: dense L_comp 2 ms, L_comm 4 ms, 8 MB; at S the model of background.md 1. Its
      // exchange runs beside its kernel (a comm stream: pipelined hides all of the shorter one);
      // layer 1's follows its kernel (nothing hidden).
      const double comp0 = 2 * (1 - 0.5 * sp), comm0 = 4 * (1 - sp);
      c.ev(c.gpu[r], EventKind::Kernel, "conv0", t, t + comp0, {Attr::ofInt(AttrKey::Layer, 0)});
      c.ev(c.comm[r], EventKind::Collective, "disco exchange", t, t + comm0,
           {Attr::ofInt(AttrKey::Layer, 0), Attr::ofInt(AttrKey::Bytes, std::llround(8e6 * (1 - sp)))});
      // Layer 1 at its own sparsity 0.25: L_comp 3 ms, L_comm 1 ms, 1 MB.
      c.ev(c.gpu[r], EventKind::Kernel, "conv1", t + 6, t + 9, {Attr::ofInt(AttrKey::Layer, 1)});
      c.ev(c.comm[r], EventKind::Collective, "disco exchange", t + 9, t + 10,
           {Attr::ofInt(AttrKey::Layer, 1), Attr::ofInt(AttrKey::Bytes, 1'000'000)});
      c.ev(c.counterTrack(r), EventKind::Counter, "accuracy", t + 10, t + 10,
           {Attr::ofDouble(AttrKey::Value, acc[n]), Attr::ofInt(AttrKey::Step, n)});
    }
  }
  // The inference benchmark's table as trainscope-train --disco-bench emits it (rank 0, one
  // counter per column, disco_bench_sparsity first): S = 0, 0.5, then independent branches.
  const double rows[3][6] = {{0, 0, 3072, 0.3, 0.4, 0.9}, {0.5, 0, 1536, 0.2, 0.3, 0.88}, {1, 1, 0, 0.05, 0.06, 0.8}};
  const char* const cols[6] = {"disco_bench_sparsity",         "disco_bench_independent",     "disco_bench_bytes",
                               "disco_bench_latency_pipelined_ms", "disco_bench_latency_wait_ms", "disco_bench_accuracy"};
  for (int row = 0; row < 3; ++row)
    for (int col = 0; col < 6; ++col) {
      const double t = 50 + row + 0.001 * col;
      c.ev(c.counterTrack(0), EventKind::Counter, cols[col], t, t, {Attr::ofDouble(AttrKey::Value, rows[row][col])});
    }
  c.write(dir, "disco");
}

void missingEnd(const fs::path& dir) {
  Case c(1);
  c.step(0, 0, 0, 10);
  c.step(0, 1, 10, 20);
  c.step(0, 2, 20, 20);  // the end never came
  c.ev(c.gpu[0], EventKind::Kernel, "k", 1, 4);
  c.ev(c.gpu[0], EventKind::Kernel, "k", 12, 14);
  c.ev(c.gpu[0], EventKind::Kernel, "k_without_end", 15, 15);
  c.ev(c.gpu[0], EventKind::Kernel, "k", 21, 25);
  c.write(dir, "missing_end");
}

// PyTorch profiler (Kineto) JSON: ProfilerStep#N windows on the CPU thread, kernels and an NCCL
// kernel on a GPU stream; microsecond timestamps.
void kineto(const fs::path& dir) {
  fs::create_directories(dir / "kineto_steps");
  std::ofstream f(dir / "kineto_steps" / "trace.json");
  auto x = [&](const char* cat, const char* name, int pid, int tid, double tsMs, double durMs,
               bool comma = true) {
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "  {\"ph\": \"X\", \"cat\": \"%s\", \"name\": \"%s\", \"pid\": %d, \"tid\": %d, \"ts\": "
                  "%.3f, \"dur\": %.3f, \"args\": {}}%s\n",
                  cat, name, pid, tid, 1718000000000000.0 + tsMs * 1000, durMs * 1000, comma ? "," : "");
    f << buf;
  };
  f << "{\n \"schemaVersion\": 1,\n \"distributedInfo\": {\"backend\": \"nccl\", \"rank\": 0, "
       "\"world_size\": 1},\n"
       " \"traceEvents\": [\n";
  x("user_annotation", "ProfilerStep#5", 4242, 4242, 0, 10);
  x("user_annotation", "ProfilerStep#6", 4242, 4242, 10, 8);
  x("cpu_op", "aten::mm", 4242, 4242, 0.5, 2);
  x("gpu_user_annotation", "ProfilerStep#5", 0, 7, 0.5, 9);
  x("kernel", "sm90_xmma_gemm", 0, 7, 1, 4);
  x("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 0, 8, 4, 3);
  x("kernel", "sm90_xmma_gemm", 0, 7, 11, 4);
  x("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 0, 8, 15, 1);
  x("kernel", "sm90_xmma_gemm", 0, 7, 19, 1, false);
  f << " ]\n}\n";
  std::printf("wrote %s/trace.json\n", (dir / "kineto_steps").c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gen_analysis_cases DIR   (writes DIR/<case>/trace.json)\n");
    return 2;
  }
  const fs::path dir = argv[1];
  pipeline1f1b(dir);
  pipeline1f1bUnbalanced(dir);
  pipeline1f1bTwoSettings(dir);
  pipeline1f1bHandoff(dir);
  pipeline1f1bKernels(dir);
  pipeline1f1bOptimizer(dir);
  pipelineGpipe(dir);
  pipelineSeq1f1b(dir);
  pipelineGpipeUnbalanced(dir);
  pipelineInterleaved(dir);
  pipelineInterleavedUnbalanced(dir);
  pipelineZbh1(dir);
  pipelineZbv(dir);
  pipelineInterleavedZb(dir);
  dataParallel(dir);
  straggler(dir);
  disco(dir);
  missingEnd(dir);
  kineto(dir);
  return 0;
}
