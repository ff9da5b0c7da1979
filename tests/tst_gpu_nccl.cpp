// The NCCL profiler and tuner plugins, called the way NCCL calls them -- through the tables the
// agent library exports (ncclProfiler_v5/_v6, ncclTunerPlugin_v5/_v6) -- with descriptor structs
// and cost tables laid out as the declared ABI says. Events go through the agent's pipeline to
// the flight recorder; knob changes go through the registry and apply at the agreed step.
#include <QtTest>
#include <algorithm>
#include <cstdlib>

#include "agent_test_support.h"
#include "trainscope/agent.h"

#if TRAINSCOPE_HAVE_GPU
#include "knobs.h"
#include "trainscope/profiler/nccl_plugins.h"

namespace nccl = trainscope::nccl_abi;
extern "C" const nccl::Profiler_v5 ncclProfiler_v5;
extern "C" const nccl::Profiler_v6 ncclProfiler_v6;
extern "C" const nccl::Tuner_v5 ncclTunerPlugin_v5;
extern "C" const nccl::Tuner_v6 ncclTunerPlugin_v6;
#endif

using trainscope::core::AttrKey;
using trainscope::core::EventKind;
using trainscope::core::TrackKind;
namespace wire = trainscope::core::wire;

#if TRAINSCOPE_HAVE_GPU
namespace {
constexpr uint64_t kHash = 0x1234abcd5678ef01ull;

int64_t attr(const wire::WireEvent& e, AttrKey k) {
  for (const auto& a : e.attrs)
    if (a.key == static_cast<uint32_t>(k)) return a.bits;
  return INT64_MIN;
}
std::string attrText(const agent_test::Recorded& r, const wire::WireEvent& e, AttrKey k) {
  const int64_t v = attr(e, k);
  return v == INT64_MIN ? std::string("<none>") : r.name(static_cast<uint32_t>(v));
}

// A knob change the way the server delivers it, applied at the next step boundary.
uint64_t g_seq = 0;
void changeKnob(const char* name, const char* value) {
  const auto ack = trainscope::agent::KnobRegistry::instance().receive({++g_seq, name, value}, 1, false);
  QVERIFY2(ack.accepted, ack.reason.c_str());
}
int64_t g_step = 100;
void stepBoundary() {
  ts_step_end(g_step);
  ts_step_begin(++g_step);
}

nccl::ProfilerEventDescr_v5 collDescr(uint64_t seq, void* parent) {
  nccl::ProfilerEventDescr_v5 d{};
  d.type = nccl::ProfileColl;
  d.parentObj = parent;
  d.rank = 0;
  d.coll.seqNumber = seq;
  d.coll.func = "AllReduce";
  d.coll.count = 1024;
  d.coll.datatype = "ncclFloat32";
  d.coll.nChannels = 4;
  d.coll.nWarps = 16;
  d.coll.algo = "RING";
  d.coll.proto = "SIMPLE";
  return d;
}

// NCCL's cost table for one collective: [algorithm][protocol] in microseconds, -1 = ignored.
struct CostTable {
  float cost[nccl::kNumAlgorithms][nccl::kNumProtocols] = {
      {10.f, 8.f, 12.f},   // tree: ll, ll128, simple
      {9.f, 7.f, 5.f},     // ring
      {-1.f, -1.f, -1.f},  // collnet direct
      {-1.f, -1.f, -1.f},  // collnet chain
      {-1.f, -1.f, -1.f},  // nvls
      {-1.f, -1.f, -1.f},  // nvls tree
      {20.f, -1.f, 30.f},  // pat
  };
  float* rows[nccl::kNumAlgorithms];
  CostTable() {
    for (int a = 0; a < nccl::kNumAlgorithms; ++a) rows[a] = cost[a];
  }
  // What NCCL would pick: the cheapest usable entry.
  std::pair<int, int> argmin() const {
    int ba = -1, bp = -1;
    for (int a = 0; a < nccl::kNumAlgorithms; ++a)
      for (int p = 0; p < nccl::kNumProtocols; ++p)
        if (cost[a][p] >= 0 && (ba < 0 || cost[a][p] < cost[ba][bp])) {
          ba = a;
          bp = p;
        }
    return {ba, bp};
  }
};

std::pair<std::pair<int, int>, int> ask(void* ctx) {
  CostTable t;
  int channels = 0;
  const auto rc = ncclTunerPlugin_v5.getCollInfo(ctx, nccl::FuncAllReduce, 1 << 20, 1, t.rows,
                                                 nccl::kNumAlgorithms, nccl::kNumProtocols, 0, &channels);
  if (rc != nccl::Success) return {{-2, -2}, -2};
  return {t.argmin(), channels};
}
}  // namespace
#endif

class TstGpuNccl : public QObject {
  Q_OBJECT
 private slots:
#if !TRAINSCOPE_HAVE_GPU
  void ncclPlugins() {
    QSKIP("built without GPU support (TRAINSCOPE_GPU=OFF or no CUDA toolkit)");
  }
#else
  void initTestCase() {
    trainscope::agent::KnobRegistry::instance().resetChangesForTest();
  }

  void tablesAreNamed() {
    QCOMPARE(std::string(ncclProfiler_v5.name), std::string("trainscope"));
    QCOMPARE(std::string(ncclTunerPlugin_v5.name), std::string("trainscope"));
    QVERIFY(ncclProfiler_v6.startEvent && ncclTunerPlugin_v6.getCollInfo);
    QVERIFY(ncclTunerPlugin_v6.getChunkSize == nullptr);  // optional: NCCL keeps its own
  }

  // Group > collective, and a send: the events, their track and the attributes NCCL gave. The
  // collective ends when its last kernel channel does (NCCL's stop only means "enqueued").
  void collectiveAndP2pEvents() {
    agent_test::ScopedAgent agent(agent_test::Env{{"TRAINSCOPE_LISTEN", "none"}});
    int mask = 0;
    void* ctx = nullptr;
    QCOMPARE(ncclProfiler_v5.init(&ctx, kHash, &mask, "world", 1, 2, 0, nullptr), nccl::Success);
    QVERIFY(ctx);
    QCOMPARE(mask, int{nccl::ProfileGroup | nccl::ProfileColl | nccl::ProfileP2p | nccl::ProfileKernelCh});

    nccl::ProfilerEventDescr_v5 g{};
    g.type = nccl::ProfileGroup;
    void* group = nullptr;
    QCOMPARE(ncclProfiler_v5.startEvent(ctx, &group, &g), nccl::Success);
    QVERIFY(group);
    auto c = collDescr(17, group);
    void* coll = nullptr;
    QCOMPARE(ncclProfiler_v5.startEvent(ctx, &coll, &c), nccl::Success);
    nccl::ProfilerEventDescr_v5 p{};
    p.type = nccl::ProfileP2p;
    p.parentObj = group;
    p.p2p.func = "Send";
    p.p2p.count = 256;
    p.p2p.datatype = "ncclBfloat16";
    p.p2p.peer = 1;
    p.p2p.nChannels = 2;
    void* send = nullptr;
    QCOMPARE(ncclProfiler_v5.startEvent(ctx, &send, &p), nccl::Success);
    QCOMPARE(ncclProfiler_v5.stopEvent(coll), nccl::Success);  // enqueued
    QCOMPARE(ncclProfiler_v5.stopEvent(send), nccl::Success);
    QCOMPARE(ncclProfiler_v5.stopEvent(group), nccl::Success);
    QCOMPARE(ncclProfiler_v5.stopEvent(nullptr), nccl::Success);  // a handle NCCL got as null

    // The proxy thread reports the collective's 4 channels.
    void* ch[4] = {};
    for (int i = 0; i < 4; ++i) {
      nccl::ProfilerEventDescr_v5 k{};
      k.type = nccl::ProfileKernelCh;
      k.parentObj = coll;
      k.kernelCh.channelId = static_cast<uint8_t>(i);
      QCOMPARE(ncclProfiler_v5.startEvent(ctx, &ch[i], &k), nccl::Success);
      QVERIFY(ch[i]);
    }
    nccl::ProfilerEventStateArgs_v5 args{};
    args.kernelCh.pTimer = 12345;
    for (int i = 0; i < 3; ++i) {
      QCOMPARE(ncclProfiler_v5.recordEventState(ch[i], nccl::KernelChStop, &args), nccl::Success);
      QCOMPARE(ncclProfiler_v5.stopEvent(ch[i]), nccl::Success);
    }
    QCOMPARE(agent_test::recorded().named("AllReduce").size(), size_t{0});  // one channel still running
    QCOMPARE(ncclProfiler_v5.stopEvent(ch[3]), nccl::Success);
    QCOMPARE(ncclProfiler_v5.finalize(ctx), nccl::Success);  // the send never reported channels

    const auto rec = agent_test::recorded();
    const auto colls = rec.named("AllReduce");
    QCOMPARE(colls.size(), size_t{1});
    const auto& e = colls[0];
    QCOMPARE(e.kind, EventKind::Collective);
    QCOMPARE(attr(e, AttrKey::Bytes), int64_t{4096});
    QCOMPARE(attr(e, AttrKey::Seq), int64_t{17});
    QCOMPARE(static_cast<uint64_t>(attr(e, AttrKey::CommHash)), kHash);
    QCOMPARE(attr(e, AttrKey::Channels), int64_t{4});
    QCOMPARE(attrText(rec, e, AttrKey::Algorithm), std::string("RING"));
    QCOMPARE(attrText(rec, e, AttrKey::Protocol), std::string("SIMPLE"));
    QCOMPARE(attrText(rec, e, AttrKey::Datatype), std::string("ncclFloat32"));
    const auto& track = rec.tracks.at(e.track);
    QCOMPARE(track.kind, TrackKind::Communicator);
    QCOMPARE(static_cast<uint64_t>(track.externalId), kHash);
    QCOMPARE(track.name, std::string("nccl world"));
    const auto channels = rec.named("kernel channel");
    QCOMPARE(channels.size(), size_t{4});
    int64_t lastChannelEnd = 0;
    for (const auto& k : channels) lastChannelEnd = std::max(lastChannelEnd, k.endNs);
    QCOMPARE(e.endNs, lastChannelEnd);

    const auto sends = rec.named("Send");
    QCOMPARE(sends.size(), size_t{1});
    QCOMPARE(sends[0].kind, EventKind::P2PSend);
    QCOMPARE(attr(sends[0], AttrKey::Peer), int64_t{1});
    QCOMPARE(attr(sends[0], AttrKey::Bytes), int64_t{512});
    QCOMPARE(sends[0].track, e.track);

    const auto groups = rec.named("nccl group");
    QCOMPARE(groups.size(), size_t{1});
    QVERIFY(groups[0].startNs <= e.startNs);
    QVERIFY(e.endNs > e.startNs);
  }

  // Collectives of a communicator complete in order: one whose channel never reports is finished
  // when a later one is, with what is known of it.
  void olderCollectivesFinishInOrder() {
    agent_test::ScopedAgent agent(agent_test::Env{{"TRAINSCOPE_LISTEN", "none"}});
    int mask = 0;
    void* ctx = nullptr;
    QCOMPARE(ncclProfiler_v5.init(&ctx, kHash + 3, &mask, "order", 1, 2, 0, nullptr), nccl::Success);
    auto d1 = collDescr(1, nullptr);
    d1.coll.nChannels = 2;
    auto d2 = collDescr(2, nullptr);
    d2.coll.nChannels = 1;
    d2.coll.func = "AllGather";
    void *c1 = nullptr, *c2 = nullptr, *k1 = nullptr, *k2 = nullptr;
    QCOMPARE(ncclProfiler_v5.startEvent(ctx, &c1, &d1), nccl::Success);
    QCOMPARE(ncclProfiler_v5.stopEvent(c1), nccl::Success);
    QCOMPARE(ncclProfiler_v5.startEvent(ctx, &c2, &d2), nccl::Success);
    QCOMPARE(ncclProfiler_v5.stopEvent(c2), nccl::Success);
    nccl::ProfilerEventDescr_v5 k{};
    k.type = nccl::ProfileKernelCh;
    k.parentObj = c1;
    QCOMPARE(ncclProfiler_v5.startEvent(ctx, &k1, &k), nccl::Success);
    QCOMPARE(ncclProfiler_v5.stopEvent(k1), nccl::Success);  // c1's second channel never comes
    k.parentObj = c2;
    QCOMPARE(ncclProfiler_v5.startEvent(ctx, &k2, &k), nccl::Success);
    QCOMPARE(ncclProfiler_v5.stopEvent(k2), nccl::Success);
    const auto rec = agent_test::recorded();  // before finalize: finished by c2
    QCOMPARE(rec.named("AllReduce").size(), size_t{1});
    QCOMPARE(rec.named("AllGather").size(), size_t{1});
    QVERIFY(rec.named("AllReduce")[0].endNs <= rec.named("AllGather")[0].endNs);
    QCOMPARE(ncclProfiler_v5.finalize(ctx), nccl::Success);
  }

  // nccl.profile_mask: proxy events are off by default; a knob change turns them on at the
  // agreed step and is written into NCCL's own mask.
  void maskSwitchesLive() {
    agent_test::ScopedAgent agent(agent_test::Env{{"TRAINSCOPE_LISTEN", "none"}});
    int mask = 0;
    void* ctx = nullptr;
    QCOMPARE(ncclProfiler_v5.init(&ctx, kHash + 1, &mask, "", 1, 1, 0, nullptr), nccl::Success);
    nccl::ProfilerEventDescr_v5 op{};
    op.type = nccl::ProfileProxyOp;
    op.proxyOp.channelId = 3;
    op.proxyOp.peer = 5;
    op.proxyOp.isSend = 1;
    void* h = reinterpret_cast<void*>(1);
    QCOMPARE(ncclProfiler_v5.startEvent(ctx, &h, &op), nccl::Success);
    QVERIFY(h == nullptr);  // not in the mask: no handle
    ts_step_begin(g_step);
    changeKnob("nccl.profile_mask", "95");  // default 71 + proxy op (8) + proxy step (16)
    QCOMPARE(mask, 71);                     // not before the step boundary
    stepBoundary();
    QCOMPARE(mask, 95);
    QCOMPARE(ncclProfiler_v5.startEvent(ctx, &h, &op), nccl::Success);
    QVERIFY(h != nullptr);
    nccl::ProfilerEventDescr_v5 st{};  // a proxy step of that op: same channel track, bytes from its state
    st.type = nccl::ProfileProxyStep;
    st.parentObj = h;
    st.proxyStep.step = 2;
    void* sh = nullptr;
    QCOMPARE(ncclProfiler_v5.startEvent(ctx, &sh, &st), nccl::Success);
    nccl::ProfilerEventStateArgs_v5 args{};
    args.proxyStep.transSize = 65536;
    QCOMPARE(ncclProfiler_v5.recordEventState(sh, nccl::ProxyStepSendWait, &args), nccl::Success);
    QCOMPARE(ncclProfiler_v5.stopEvent(sh), nccl::Success);
    QCOMPARE(ncclProfiler_v5.stopEvent(h), nccl::Success);
    changeKnob("nccl.profile_mask", "71");
    stepBoundary();
    QCOMPARE(mask, 71);
    QCOMPARE(ncclProfiler_v5.finalize(ctx), nccl::Success);
    const auto rec = agent_test::recorded();
    const auto ops = rec.named("proxy send");
    QCOMPARE(ops.size(), size_t{1});
    QCOMPARE(attr(ops[0], AttrKey::Peer), int64_t{5});
    QCOMPARE(rec.tracks.at(ops[0].track).name.substr(0, 5), std::string("nccl "));
    QVERIFY(rec.tracks.at(ops[0].track).name.find("ch 3") != std::string::npos);
    const auto steps = rec.named("proxy step");
    QCOMPARE(steps.size(), size_t{1});
    QCOMPARE(steps[0].track, ops[0].track);
    QCOMPARE(attr(steps[0], AttrKey::Bytes), int64_t{65536});
    QVERIFY(steps[0].startNs >= ops[0].startNs && steps[0].endNs <= ops[0].endNs);
  }

  void v6TableReadsTheSameCollFields() {
    agent_test::ScopedAgent agent(agent_test::Env{{"TRAINSCOPE_LISTEN", "none"}});
    int mask = 0;
    void* ctx = nullptr;
    QCOMPARE(ncclProfiler_v6.init(&ctx, kHash + 2, &mask, "v6", 1, 1, 0, nullptr), nccl::Success);
    nccl::ProfilerEventDescr_v6 d{};
    d.type = nccl::ProfileColl;
    d.coll.seqNumber = 99;
    d.coll.func = "ReduceScatter";
    d.coll.count = 10;
    d.coll.datatype = "ncclFloat64";
    d.coll.algo = "PAT";
    d.coll.proto = "LL";
    void* h = nullptr;
    QCOMPARE(ncclProfiler_v6.startEvent(ctx, &h, &d), nccl::Success);
    QCOMPARE(ncclProfiler_v6.stopEvent(h), nccl::Success);
    nccl::ProfilerEventDescr_v6 ce{};
    ce.type = nccl::ProfileCeColl;  // CE events: not recorded, still success
    QCOMPARE(ncclProfiler_v6.startEvent(ctx, &h, &ce), nccl::Success);
    QCOMPARE(ncclProfiler_v6.finalize(ctx), nccl::Success);
    const auto rec = agent_test::recorded();
    const auto rs = rec.named("ReduceScatter");
    QCOMPARE(rs.size(), size_t{1});
    QCOMPARE(attr(rs[0], AttrKey::Seq), int64_t{99});
    QCOMPARE(attr(rs[0], AttrKey::Bytes), int64_t{80});
    QCOMPARE(attrText(rec, rs[0], AttrKey::Algorithm), std::string("PAT"));
  }

  // Only init may fail: with the agent disabled NCCL is told to go on without the plugin.
  void initRefusesWhenTheAgentIsDisabled() {
    qputenv("TRAINSCOPE_DISABLE", QByteArray("1"));
    int mask = 0;
    void* ctx = reinterpret_cast<void*>(1);
    QVERIFY(ncclProfiler_v5.init(&ctx, kHash, &mask, "x", 1, 1, 0, nullptr) != nccl::Success);
    QVERIFY(ctx == nullptr);
    void* tctx = reinterpret_cast<void*>(1);
    QVERIFY(ncclTunerPlugin_v5.init(&tctx, kHash, 1, 1, nullptr, nullptr, nullptr) != nccl::Success);
    qunsetenv("TRAINSCOPE_DISABLE");
  }

  // The tuner answers the cost table as the knobs say -- from the agreed step on, not before.
  void tunerFollowsTheKnobsAtTheAgreedStep() {
    agent_test::ScopedAgent agent(agent_test::Env{{"TRAINSCOPE_LISTEN", "none"}});
    void* ctx = nullptr;
    QCOMPARE(ncclTunerPlugin_v5.init(&ctx, kHash, 2, 1, nullptr, nullptr, nullptr), nccl::Success);
    QVERIFY(ctx);
    ts_step_begin(g_step);
    // auto: the table is left alone, NCCL's minimum (ring/simple, 5 us) stands; channels unset.
    auto r = ask(ctx);
    QCOMPARE(r.first, std::make_pair(1, 2));
    QCOMPARE(r.second, 0);

    changeKnob("nccl.algorithm", "tree");
    changeKnob("nccl.channels", "8");
    QCOMPARE(ask(ctx).first, std::make_pair(1, 2));  // queued, not applied: same answer
    stepBoundary();
    r = ask(ctx);
    QCOMPARE(r.first, std::make_pair(0, 1));  // tree, its cheapest protocol (ll128, 8 us)
    QCOMPARE(r.second, 8);

    changeKnob("nccl.algorithm", "ring");
    changeKnob("nccl.protocol", "ll");
    stepBoundary();
    QCOMPARE(ask(ctx).first, std::make_pair(1, 0));  // ring/ll although it costs 9 us

    changeKnob("nccl.algorithm", "auto");
    changeKnob("nccl.protocol", "simple");
    stepBoundary();
    QCOMPARE(ask(ctx).first, std::make_pair(1, 2));  // protocol only: cheapest algorithm with it

    // An algorithm NCCL cannot run here (ignored entries): NCCL's own choice, on every rank.
    changeKnob("nccl.algorithm", "nvls");
    changeKnob("nccl.protocol", "auto");
    changeKnob("nccl.channels", "0");
    stepBoundary();
    r = ask(ctx);
    QCOMPARE(r.first, std::make_pair(1, 2));
    QCOMPARE(r.second, 0);
    changeKnob("nccl.algorithm", "auto");
    stepBoundary();
    QCOMPARE(ncclTunerPlugin_v5.finalize(ctx), nccl::Success);

    // The knobs are in the registry like any other (what `trainscope-cli knobs` lists).
    const auto list = trainscope::agent::KnobRegistry::instance().list(0);
    int found = 0;
    for (const auto& k : list.knobs)
      if (k.name == "nccl.algorithm" || k.name == "nccl.protocol" || k.name == "nccl.channels" ||
          k.name == "nccl.profile_mask")
        ++found;
    QCOMPARE(found, 4);
  }

  // Two communicators (two "ranks" of one job in this process) asked after the same step give
  // the same answer: the decision depends on the published snapshot and the table only.
  void communicatorsAgree() {
    agent_test::ScopedAgent agent(agent_test::Env{{"TRAINSCOPE_LISTEN", "none"}});
    void *a = nullptr, *b = nullptr;
    QCOMPARE(ncclTunerPlugin_v5.init(&a, kHash, 2, 1, nullptr, nullptr, nullptr), nccl::Success);
    QCOMPARE(ncclTunerPlugin_v5.init(&b, kHash, 2, 1, nullptr, nullptr, nullptr), nccl::Success);
    ts_step_begin(g_step);
    changeKnob("nccl.algorithm", "pat");
    stepBoundary();
    QCOMPARE(ask(a), ask(b));
    QCOMPARE(ask(a).first, std::make_pair(6, 0));
    changeKnob("nccl.algorithm", "auto");
    stepBoundary();
    ncclTunerPlugin_v5.finalize(a);
    ncclTunerPlugin_v5.finalize(b);
  }
#endif
};

QTEST_GUILESS_MAIN(TstGpuNccl)
#include "tst_gpu_nccl.moc"
