// GPU sources off the GPU: what translating one CUPTI kernel record costs (CuptiTranslator with
// a sink that only counts), one NCCL collective through the exported profiler table
// (startEvent + stopEvent, then 8 kernel-channel children that end it: 9 events), one tuner getCollInfo on a
// 7x3 cost table, and one complete event through the agent's ExternalQueue with the drain running (pushes
// from one thread, counted as recorded by the drain). Runs on machines without a GPU: the records
// and descriptors are filled in here.
#include <benchmark/benchmark.h>
#include <cupti.h>

#include <string>
#include <vector>

#include "external.h"
#include "runtime.h"
#include "trainscope/agent.h"
#include "trainscope/profiler/cupti_translate.h"
#include "trainscope/profiler/nccl_plugins.h"

namespace nccl = trainscope::nccl_abi;
namespace prof = trainscope::profiler;
extern "C" const nccl::Profiler_v5 ncclProfiler_v5;
extern "C" const nccl::Tuner_v5 ncclTunerPlugin_v5;

namespace {

class CountingSink final : public prof::EventSink {
 public:
  uint32_t intern(std::string_view s) override {
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == s) return static_cast<uint32_t>(i);
    names.emplace_back(s);
    return static_cast<uint32_t>(names.size() - 1);
  }
  bool push(const prof::ExternalEvent& e) noexcept override {
    benchmark::DoNotOptimize(e.attrCount);
    ++pushed;
    return true;
  }
  void countDropped(uint64_t) noexcept override {}
  int64_t nowNs() noexcept override { return ++clock; }
  void log(const char*) noexcept override {}
  std::vector<std::string> names;
  uint64_t pushed = 0;
  int64_t clock = 0;
};

void BM_CuptiKernelRecord(benchmark::State& state) {
  CountingSink sink;
  prof::CuptiTranslator t(sink);
  CUpti_ActivityKernel10 k{};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.name = "_ZN7cutlass6KernelINS_4gemm6kernel4GemmEEEvNT_6ParamsE";
  k.streamId = 7;
  uint32_t corr = 0;
  for (auto _ : state) {
    k.correlationId = ++corr;
    k.start = corr * 1000ull;
    k.end = k.start + 500;
    benchmark::DoNotOptimize(t.translate(reinterpret_cast<const CUpti_Activity*>(&k)));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CuptiKernelRecord);

void BM_NcclCollectiveStartStop(benchmark::State& state) {
  CountingSink sink;
  prof::NcclProfiler::setSink(&sink);
  int mask = 0;
  void* ctx = nullptr;
  ncclProfiler_v5.init(&ctx, 0x1234, &mask, "bench", 1, 8, 0, nullptr);
  nccl::ProfilerEventDescr_v5 d{};
  d.type = nccl::ProfileColl;
  d.coll.func = "AllReduce";
  d.coll.count = 1 << 20;
  d.coll.datatype = "ncclBfloat16";
  d.coll.algo = "RING";
  d.coll.proto = "SIMPLE";
  d.coll.nChannels = 8;
  nccl::ProfilerEventDescr_v5 k{};
  k.type = nccl::ProfileKernelCh;
  for (auto _ : state) {
    ++d.coll.seqNumber;
    void* h = nullptr;
    ncclProfiler_v5.startEvent(ctx, &h, &d);
    ncclProfiler_v5.stopEvent(h);  // enqueued
    k.parentObj = h;
    for (uint8_t c = 0; c < 8; ++c) {  // the proxy thread reports each channel; the last ends it
      void* kh = nullptr;
      k.kernelCh.channelId = c;
      ncclProfiler_v5.startEvent(ctx, &kh, &k);
      ncclProfiler_v5.stopEvent(kh);
    }
  }
  ncclProfiler_v5.finalize(ctx);
  prof::NcclProfiler::setSink(nullptr);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_NcclCollectiveStartStop);

void BM_TunerGetCollInfo(benchmark::State& state) {
  void* ctx = nullptr;
  ncclTunerPlugin_v5.init(&ctx, 0x1234, 8, 1, nullptr, nullptr, nullptr);
  prof::NcclTuner::publish({1, 2, 8, 10});
  float cost[7][3];
  float* rows[7];
  for (int a = 0; a < 7; ++a) rows[a] = cost[a];
  for (auto _ : state) {
    for (int a = 0; a < 7; ++a)
      for (int p = 0; p < 3; ++p) cost[a][p] = a < 2 ? static_cast<float>(10 + a + p) : -1.0f;
    int ch = 0;
    ncclTunerPlugin_v5.getCollInfo(ctx, nccl::FuncAllReduce, 1 << 20, 1, rows, 7, 3, 0, &ch);
    benchmark::DoNotOptimize(ch);
  }
  prof::NcclTuner::publish({});
  ncclTunerPlugin_v5.finalize(ctx);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TunerGetCollInfo);

// Pushes pause every 4096 events until the drain has taken them, so every event is recorded
// (the queue bound is 65536); the drain's work runs concurrently on the other core.
void BM_ExternalQueueThroughAgent(benchmark::State& state) {
  ::setenv("TRAINSCOPE_LISTEN", "none", 1);
  ts_init_params p = TS_INIT_PARAMS_DEFAULT;
  p.job_id = "bench-gpu";
  trainscope::agent::initRuntime(&p);
  auto& q = trainscope::agent::ExternalQueue::instance();
  prof::ExternalEvent e;
  e.trackKind = trainscope::core::TrackKind::CudaStream;
  e.trackId = 7;
  e.trackName = q.intern("GPU 0 stream 7");
  e.kind = trainscope::core::EventKind::Kernel;
  e.name = q.intern("kernel");
  for (int i = 0; i < 4; ++i) e.add(trainscope::core::Attr::ofInt(trainscope::core::AttrKey::Stream, 7));
  const uint64_t before = trainscope::agent::runtime()->drain().eventsRecorded();
  int64_t n = 0;
  for (auto _ : state) {
    e.startNs = ++n;
    e.endNs = n + 10;
    q.push(e);
    if ((n & 4095) == 0) {
      state.PauseTiming();
      trainscope::agent::runtime()->drain().flushNow();
      state.ResumeTiming();
    }
  }
  trainscope::agent::runtime()->drain().flushNow();
  state.counters["recorded"] =
      static_cast<double>(trainscope::agent::runtime()->drain().eventsRecorded() - before) /
      static_cast<double>(n);
  trainscope::agent::shutdownRuntime();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ExternalQueueThroughAgent);

}  // namespace

BENCHMARK_MAIN();
