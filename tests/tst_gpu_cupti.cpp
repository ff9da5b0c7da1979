// CUPTI activity records -> agent events, without a GPU: real CUpti_Activity* structs (the
// CUDA 13 layouts from cupti_activity.h) filled in here and fed to the translator; the bounded
// buffer pool; CUPTI start on a machine without a driver (reported, the agent keeps recording);
// translated events through the agent's external queue and drain to the flight recorder.
#include <QtTest>

#include <unistd.h>

#include "agent_test_support.h"
#include "gpu_test_support.h"
#include "trainscope/agent.h"
#include "trainscope/profiler/buffer_pool.h"
#include "trainscope/profiler/gpu_probe.h"

#if TRAINSCOPE_HAVE_GPU
#include <cupti.h>

#include "external.h"
#include "trainscope/profiler/cupti_source.h"
#include "trainscope/profiler/cupti_translate.h"

extern "C" int InitializeInjection(void);
#endif

using gpu_test::CollectingSink;
using trainscope::core::AttrKey;
using trainscope::core::EventKind;
using trainscope::core::TrackKind;
namespace prof = trainscope::profiler;

#if TRAINSCOPE_HAVE_GPU
namespace {
CUpti_ActivityKernel10 kernelRecord(uint32_t corr, uint64_t start, uint64_t end) {
  CUpti_ActivityKernel10 k{};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.start = start;
  k.end = end;
  k.deviceId = 1;
  k.streamId = 7;
  k.correlationId = corr;
  k.name = "ampere_sgemm_128x64_nn";
  return k;
}
CUpti_ActivityAPI launchRecord(uint32_t corr, uint64_t start, uint64_t end) {
  CUpti_ActivityAPI a{};
  a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  a.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
  a.start = start;
  a.end = end;
  a.processId = 100;
  a.threadId = 4242;
  a.correlationId = corr;
  return a;
}
const CUpti_Activity* asRecord(const void* p) {
  return static_cast<const CUpti_Activity*>(p);
}
}  // namespace
#endif

class TstGpuCupti : public QObject {
  Q_OBJECT
 private slots:
#if !TRAINSCOPE_HAVE_GPU
  void cuptiTranslation() {
    QSKIP("built without GPU support (TRAINSCOPE_GPU=OFF or no CUDA toolkit)");
  }
#else
  void kernelOnItsStreamWithCorrelation() {
    CollectingSink sink;
    prof::CuptiTranslator t(sink);
    const auto k = kernelRecord(42, 1'000'000, 1'250'000);
    QCOMPARE(t.translate(asRecord(&k)), 1);
    QCOMPARE(sink.events.size(), size_t{1});
    const auto& e = sink.events[0];
    QCOMPARE(e.kind, EventKind::Kernel);
    QCOMPARE(e.startNs, int64_t{1'000'000});
    QCOMPARE(e.endNs, int64_t{1'250'000});
    QCOMPARE(sink.text(e.name), std::string("ampere_sgemm_128x64_nn"));
    QCOMPARE(e.trackKind, TrackKind::CudaStream);
    QCOMPARE(e.trackId, (int64_t{1} << 32) | 7);
    QCOMPARE(sink.text(e.trackName), std::string("GPU 1 stream 7"));
    QCOMPARE(sink.attr(e, AttrKey::Stream), int64_t{7});
    QCOMPARE(sink.attr(e, AttrKey::Device), int64_t{1});
    QCOMPARE(sink.attr(e, AttrKey::CorrelationId), int64_t{42});
    QCOMPARE(sink.attr(e, AttrKey::FlowId), prof::cudaFlowId(42));
  }

  // The launch and its kernel share a flow id; calls that are neither launches nor syncs go.
  void launchSharesTheKernelsFlowAndOtherCallsAreFiltered() {
    CollectingSink sink;
    prof::CuptiTranslator t(sink);
    const auto a = launchRecord(42, 990'000, 995'000);
    const auto k = kernelRecord(42, 1'000'000, 1'250'000);
    QCOMPARE(t.translate(asRecord(&a)), 1);
    QCOMPARE(t.translate(asRecord(&k)), 1);
    const auto& launch = sink.events[0];
    QCOMPARE(launch.kind, EventKind::Range);
    QCOMPARE(sink.text(launch.name), std::string("cudaLaunchKernel"));
    QCOMPARE(launch.trackKind, TrackKind::CpuThread);
    QCOMPARE(launch.trackId, int64_t{4242});
    QCOMPARE(sink.text(launch.trackName), std::string("cuda (4242)"));
    QCOMPARE(sink.attr(launch, AttrKey::FlowId), sink.attr(sink.events[1], AttrKey::FlowId));
    QCOMPARE(sink.attr(launch, AttrKey::CorrelationId), int64_t{42});

    CUpti_ActivityAPI other = launchRecord(43, 1, 2);
    other.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020;
    QCOMPARE(t.translate(asRecord(&other)), 0);
    CUpti_ActivityAPI sync = launchRecord(44, 3, 9);
    sync.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020;
    QCOMPARE(t.translate(asRecord(&sync)), 1);
    QCOMPARE(sink.text(sink.events.back().name), std::string("cudaStreamSynchronize"));
    QCOMPARE(sink.events.size(), size_t{3});
  }

  // cuBLAS (and cuDNN, Triton, NCCL) launch with the driver API: seen on an H100 with PyTorch
  // 2.11, where the sgemm kernels had no runtime record. A driver launch pairs with its kernel
  // like a runtime one; other driver calls are filtered out.
  void driverLaunchSharesTheKernelsFlow() {
    CollectingSink sink;
    prof::CuptiTranslator t(sink);
    CUpti_ActivityAPI a = launchRecord(77, 990'000, 995'000);
    a.kind = CUPTI_ACTIVITY_KIND_DRIVER;
    a.cbid = CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel;
    const auto k = kernelRecord(77, 1'000'000, 1'250'000);
    QCOMPARE(t.translate(asRecord(&a)), 1);
    QCOMPARE(t.translate(asRecord(&k)), 1);
    QCOMPARE(sink.text(sink.events[0].name), std::string("cuLaunchKernel"));
    QCOMPARE(sink.events[0].trackId, int64_t{4242});
    QCOMPARE(sink.attr(sink.events[0], AttrKey::FlowId), sink.attr(sink.events[1], AttrKey::FlowId));
    CUpti_ActivityAPI ex = a;
    ex.cbid = CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz;
    QCOMPARE(t.translate(asRecord(&ex)), 1);
    QCOMPARE(sink.text(sink.events.back().name), std::string("cuLaunchKernelEx"));
    // Callback ids are per domain: cudaLaunchKernel's runtime id (211) in a DRIVER record is
    // cuD3D10GetDevices there, not a launch, so it is dropped (the names do not mix).
    CUpti_ActivityAPI mixed = a;
    mixed.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
    QCOMPARE(t.translate(asRecord(&mixed)), 0);
    CUpti_ActivityAPI other = a;
    other.cbid = CUPTI_DRIVER_TRACE_CBID_cuCtxGetCurrent;
    QCOMPARE(t.translate(asRecord(&other)), 0);
  }

  void memcpyAndMemsetCarryBytes() {
    CollectingSink sink;
    prof::CuptiTranslator t(sink);
    CUpti_ActivityMemcpy6 m{};
    m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
    m.bytes = 64ull << 20;
    m.start = 10;
    m.end = 5'010;
    m.deviceId = 0;
    m.streamId = 13;
    m.correlationId = 9;
    CUpti_ActivityMemset4 s{};
    s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
    s.bytes = 4096;
    s.start = 6'000;
    s.end = 6'100;
    s.streamId = 13;
    s.correlationId = 10;
    QCOMPARE(t.translate(asRecord(&m)), 1);
    QCOMPARE(t.translate(asRecord(&s)), 1);
    QCOMPARE(sink.events[0].kind, EventKind::Memcpy);
    QCOMPARE(sink.text(sink.events[0].name), std::string("memcpy HtoD"));
    QCOMPARE(sink.attr(sink.events[0], AttrKey::Bytes), int64_t{64} << 20);
    QCOMPARE(sink.attr(sink.events[0], AttrKey::Stream), int64_t{13});
    QCOMPARE(sink.events[1].kind, EventKind::Memset);
    QCOMPARE(sink.attr(sink.events[1], AttrKey::Bytes), int64_t{4096});
    QCOMPARE(sink.events[1].trackId, sink.events[0].trackId);  // same stream, same track
  }

  void synchronizationRecords() {
    CollectingSink sink;
    prof::CuptiTranslator t(sink);
    CUpti_ActivitySynchronization2 s{};
    s.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
    s.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
    s.start = 100;
    s.end = 900;
    s.contextId = 1;
    s.streamId = 7;
    s.correlationId = 44;
    s.cudaEventId = CUPTI_SYNCHRONIZATION_INVALID_VALUE;
    QCOMPARE(t.translate(asRecord(&s)), 1);
    s.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE;
    s.streamId = CUPTI_SYNCHRONIZATION_INVALID_VALUE;
    QCOMPARE(t.translate(asRecord(&s)), 1);
    QCOMPARE(sink.text(sink.events[0].name), std::string("stream synchronize"));
    QCOMPARE(sink.attr(sink.events[0], AttrKey::Stream), int64_t{7});
    QCOMPARE(sink.events[0].endNs - sink.events[0].startNs, int64_t{800});
    QCOMPARE(sink.text(sink.events[1].name), std::string("context synchronize"));
    QCOMPARE(sink.attr(sink.events[1], AttrKey::Stream), INT64_MIN);  // not applicable
    QCOMPARE(sink.text(sink.events[1].trackName), std::string("GPU ctx 1 sync"));
  }

  // NVTX start/end pair into one range on the starting thread; instants become markers.
  void nvtxMarkersPairById() {
    CollectingSink sink;
    prof::CuptiTranslator t(sink);
    CUpti_ActivityMarker2 m{};
    m.kind = CUPTI_ACTIVITY_KIND_MARKER;
    m.flags = CUPTI_ACTIVITY_FLAG_MARKER_START;
    m.timestamp = 1'000;
    m.id = 5;
    m.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
    m.objectId.pt.threadId = 4242;
    m.name = "forward";
    QCOMPARE(t.translate(asRecord(&m)), 0);  // waits for its end
    m.flags = CUPTI_ACTIVITY_FLAG_MARKER_END;
    m.timestamp = 3'500;
    m.name = nullptr;
    QCOMPARE(t.translate(asRecord(&m)), 1);
    QCOMPARE(t.translate(asRecord(&m)), 0);  // a second end has nothing to pair with
    m.flags = CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS;
    m.id = 6;
    m.timestamp = 4'000;
    m.name = "checkpoint";
    QCOMPARE(t.translate(asRecord(&m)), 1);
    QCOMPARE(sink.events.size(), size_t{2});
    QCOMPARE(sink.events[0].kind, EventKind::Range);
    QCOMPARE(sink.text(sink.events[0].name), std::string("forward"));
    QCOMPARE(sink.events[0].startNs, int64_t{1'000});
    QCOMPARE(sink.events[0].endNs, int64_t{3'500});
    QCOMPARE(sink.events[0].trackId, int64_t{4242});
    QCOMPARE(sink.events[1].kind, EventKind::Marker);
    QCOMPARE(sink.events[1].startNs, sink.events[1].endNs);
  }

  // C++ kernel names are demangled (as Nsight and Kineto show them); C names stay as they are.
  void kernelNamesAreDemangled() {
    CollectingSink sink;
    prof::CuptiTranslator t(sink);
    auto k = kernelRecord(1, 10, 20);
    k.name = "_Z10iotaKernelPii";
    QCOMPARE(t.translate(asRecord(&k)), 1);
    QCOMPARE(t.translate(asRecord(&k)), 1);  // cached
    QCOMPARE(sink.text(sink.events[0].name), std::string("iotaKernel(int*, int)"));
    QCOMPARE(sink.events[1].name, sink.events[0].name);
    k.name = "_Znot a mangled name";
    QCOMPARE(t.translate(asRecord(&k)), 1);
    QCOMPARE(sink.text(sink.events[2].name), std::string("_Znot a mangled name"));
  }

  // CUDA calls InitializeInjection in a process where the preload did not start the agent
  // (CUDA_INJECTION64_PATH alone): it starts the agent from the environment.
  void injectionStartsTheAgent() {
    QVERIFY(!ts_is_active());
    qputenv("TRAINSCOPE_LISTEN", QByteArray("none"));
    qputenv("TRAINSCOPE_JOB_ID", QByteArray("tst-injection"));
    QCOMPARE(InitializeInjection(), 1);
    QCOMPARE(ts_is_active(), 1);
    ts_shutdown();
    QCOMPARE(ts_is_active(), 0);
    qunsetenv("TRAINSCOPE_LISTEN");
    qunsetenv("TRAINSCOPE_JOB_ID");
  }

  void unknownRecordsAreCountedNotTranslated() {
    CollectingSink sink;
    prof::CuptiTranslator t(sink);
    CUpti_ActivityContext3 c{};
    c.kind = CUPTI_ACTIVITY_KIND_CONTEXT;
    QCOMPARE(t.translate(asRecord(&c)), 0);
    QCOMPARE(t.translate(nullptr), 0);
    QCOMPARE(t.unknownRecords(), uint64_t{1});
    QVERIFY(sink.events.empty());
  }

  // No driver here: CUPTI start reports why and leaves the agent recording; InitializeInjection
  // (what CUDA would call) returns success and changes nothing else. On a GPU machine CUPTI runs.
  void cuptiWithoutDriverFallsBackCleanly() {
    agent_test::ScopedAgent agent(agent_test::Env{{"TRAINSCOPE_LISTEN", "none"}});
    QCOMPARE(agent.rc(), TS_OK);
    auto& src = prof::CuptiSource::instance();
    const auto env = prof::probeGpuEnvironment();
    const prof::CuptiState st = src.start(trainscope::agent::ExternalQueue::instance(), prof::CuptiConfig{});
    qInfo("CUPTI: %s: %s", prof::cuptiStateName(st), src.message().c_str());
    if (env.deviceCount == 0) {
      QVERIFY(st == prof::CuptiState::Unavailable || st == prof::CuptiState::HeldByOther);
      QVERIFY(!src.message().empty());
    } else {
      QCOMPARE(st, prof::CuptiState::Running);
    }
    QCOMPARE(InitializeInjection(), 1);
    src.stop();
    ts_marker(ts_name("still-recording"));
    const auto rec = agent_test::recorded();
    QCOMPARE(rec.named("still-recording").size(), size_t{1});
    if (env.deviceCount == 0) {  // the reason is in the trace too
      bool noted = false;
      for (const auto& e : rec.events)
        noted |= e.kind == EventKind::Marker && rec.name(e.name).rfind("CUPTI unavailable: ", 0) == 0;
      QVERIFY(noted);
    }
  }

  // Translated records reach the flight recorder on their own tracks, attributes intact, and
  // nothing is queued while the agent is off.
  void eventsFlowThroughTheAgent() {
    auto& q = trainscope::agent::ExternalQueue::instance();
    QVERIFY(!q.push(prof::ExternalEvent{}));  // agent off: refused
    agent_test::ScopedAgent agent(agent_test::Env{{"TRAINSCOPE_LISTEN", "none"}});
    prof::CuptiTranslator t(q);
    ts_marker(ts_name("before-launch"));  // this thread's own track exists
    const int64_t now = q.nowNs();
    auto a = launchRecord(77, static_cast<uint64_t>(now), static_cast<uint64_t>(now + 5'000));
    a.threadId = static_cast<uint32_t>(::gettid());
    const auto k = kernelRecord(77, static_cast<uint64_t>(now + 8'000), static_cast<uint64_t>(now + 90'000));
    QCOMPARE(q.device(), -1);  // no kernel yet (Runtime::jobInfo reports it as the rank's device)
    QCOMPARE(t.translate(asRecord(&a)), 1);
    QCOMPARE(t.translate(asRecord(&k)), 1);
    QCOMPARE(q.device(), 1);  // the rank's GPU: its first kernel's
    const auto rec = agent_test::recorded();
    const auto kernels = rec.named("ampere_sgemm_128x64_nn");
    QCOMPARE(kernels.size(), size_t{1});
    const auto& track = rec.tracks.at(kernels[0].track);
    QCOMPARE(track.kind, TrackKind::CudaStream);
    QCOMPARE(track.name, std::string("GPU 1 stream 7"));
    QCOMPARE(kernels[0].endNs - kernels[0].startNs, int64_t{82'000});
    const auto launches = rec.named("cudaLaunchKernel");
    QCOMPARE(launches.size(), size_t{1});
    int64_t f1 = 0, f2 = 0;
    for (const auto& at : kernels[0].attrs)
      if (at.key == static_cast<uint32_t>(AttrKey::FlowId)) f1 = at.bits;
    for (const auto& at : launches[0].attrs)
      if (at.key == static_cast<uint32_t>(AttrKey::FlowId)) f2 = at.bits;
    QVERIFY(f1 != 0);
    QCOMPARE(f1, f2);
    // The launch joined the thread's track (CUPTI thread ids are gettid()).
    QCOMPARE(launches[0].track, rec.named("before-launch").at(0).track);
  }
#endif

  // Bounded: at most maxBuffers exist; refusals counted; released buffers come back.
  void bufferPoolIsBounded() {
    prof::BufferPool pool(1000, 2);
    uint8_t* a = pool.acquire();
    uint8_t* b = pool.acquire();
    QVERIFY(a && b && a != b);
    QCOMPARE(reinterpret_cast<uintptr_t>(a) % 8, uintptr_t{0});
    QVERIFY(pool.acquire() == nullptr);
    QCOMPARE(pool.refusals(), uint64_t{1});
    pool.release(a);
    QCOMPARE(pool.inUse(), size_t{1});
    QCOMPARE(pool.acquire(), a);
    QCOMPARE(pool.allocated(), size_t{2});
  }
};

QTEST_GUILESS_MAIN(TstGpuCupti)
#include "tst_gpu_cupti.moc"
