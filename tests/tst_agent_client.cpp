// AgentClient, BatchIngestor and JobSession against a small in-test agent that speaks the real
// protocol over a real Unix socket (a thread per fake rank): handshake, authentication,
// knob list/set/apply, clock-offset estimation against a known shift, event ingestion with the
// offset applied, events arriving while a reply is awaited, and the multi-rank knob protocol.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QtTest>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "trainscope/core/live/live_session.h"
#include "trainscope/core/session/tsdb.h"

using namespace trainscope::core;
using namespace trainscope::core::wire;
namespace fs = std::filesystem;

namespace {

struct FakeConfig {
  int32_t rank = 0;
  int32_t worldSize = 1;
  bool authRequired = false;
  std::string secret;
  int64_t shiftNs = 0;  // agent clock = client clock + shift
  uint64_t lastChangeSeq = 0;
  bool refuseAll = false;       // refuse every SetKnob
  bool ignoreStats = false;     // never answer StatsRequest (timeout test)
  bool batchBeforeAck = false;  // stream a batch between SetKnob and its KnobAck
  bool impostor = false;        // accept any Auth and seal with its own (wrong) secret
  bool tamper = false;          // after the Welcome, flip one payload byte of every sealed frame
};

// One fake agent: listens on a Unix socket and serves connections one after another.
class FakeAgent {
 public:
  FakeAgent(const fs::path& dir, FakeConfig cfg) : cfg_(std::move(cfg)) {
    path_ = (dir / ("agent" + std::to_string(cfg_.rank) + ".sock")).string();
    listenFd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path_.c_str(), sizeof a.sun_path - 1);
    if (::bind(listenFd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listenFd_, 4) != 0)
      qFatal("fake agent: cannot listen on %s", path_.c_str());
    knobs_.lastChangeSeq = cfg_.lastChangeSeq;
    knobs_.currentStep = 16;
    knobs_.knobs.push_back(
        {"dp.bucket_bytes", KnobType::Int, 1, 1e12, {}, "25000000", "25000000", "bucket", false});
    knobs_.knobs.push_back(
        {"dp.compression", KnobType::Enum, 0, 0, {"none", "fp16"}, "none", "none", "comp", true});
    thread_ = std::thread([this] { run(); });
  }
  ~FakeAgent() {
    stop_ = true;
    thread_.join();
    ::close(listenFd_);
    ::unlink(path_.c_str());
  }
  std::string endpoint() const { return "unix:" + path_; }
  std::string value(const std::string& knob) {
    std::lock_guard<std::mutex> g(mu_);
    for (const auto& k : knobs_.knobs)
      if (k.name == knob) return k.currentValue;
    return {};
  }
  std::vector<uint64_t> receivedSeqs() {
    std::lock_guard<std::mutex> g(mu_);
    return received_;
  }
  int authFailures() const { return authFailures_; }
  int frameErrors() const { return frameErrors_; }

  // The batches the agent streams on Subscribe (agent clock timestamps).
  static std::vector<EventBatch> batches(int32_t rank) {
    EventBatch h;
    h.rank = rank;
    h.history = true;
    h.droppedTotal = 5;
    h.strings = {{1, "fwd"}, {2, "allreduce"}, {3, "ring"}, {4, "my_key"}};
    h.tracks = {{10, TrackKind::CpuThread, 111, "main"}, {11, TrackKind::Communicator, 222, "comm"}};
    h.events.push_back({10, EventKind::Kernel, 1'000'000, 2'000'000, 1, {}});
    h.events.push_back({11,
                        EventKind::Collective,
                        1'500'000,
                        3'000'000,
                        2,
                        {Attr::ofString(AttrKey::Algorithm, 3), Attr::custom(4, AttrType::Int, 9),
                         Attr::ofInt(AttrKey::Bytes, 4096)}});
    EventBatch live;
    live.rank = rank;
    live.firstSeq = 2;
    live.droppedTotal = 7;
    live.strings = {{5, "bwd"}};
    live.events.push_back({10, EventKind::Kernel, 4'000'000, 5'000'000, 5, {}});
    live.events.push_back({99, EventKind::Kernel, 4'000'000, 5'000'000, 5, {}});  // unknown track
    return {h, live};
  }

 private:
  static int64_t now() { return monotonicNowNs(); }

  void run() {
    while (!stop_) {
      pollfd p{listenFd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      serve(fd);
      ::close(fd);
    }
  }

  void send(int fd, const Message& m) {
    std::vector<uint8_t> out;
    encode(m, out);
    if (sealer_.active()) {
      sealer_.seal(out);
      if (cfg_.tamper && std::holds_alternative<KnobList>(m)) out[kHeaderSize] ^= 1;
    }
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::send(fd, out.data() + done, out.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return;
      done += static_cast<size_t>(n);
    }
  }

  JobInfo jobInfo() const {
    return {"fakejob",  cfg_.rank,        cfg_.worldSize,       cfg_.rank,
            "fakehost", 4000 + cfg_.rank, now() + cfg_.shiftNs, -1,
            "test",     "monotonic"};
  }

  void serve(int fd) {
    FrameDecoder d;
    sealer_ = FrameSealer{};
    Nonce nonce{};
    (void)randomBytes(nonce);
    bool subscribed = false;
    uint8_t buf[4096];
    while (!stop_) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return;
      d.feed({buf, static_cast<size_t>(n)});
      for (;;) {
        auto r = d.next();
        if (!r) {
          ++frameErrors_;
          return;
        }
        if (!r.value()) break;
        const Message& m = *r.value();
        if (std::holds_alternative<Hello>(m)) {
          send(fd, Challenge{nonce, cfg_.authRequired});
          if (!cfg_.authRequired) send(fd, jobInfo());
        } else if (const auto* au = std::get_if<Auth>(&m)) {
          const std::span<const uint8_t> key(reinterpret_cast<const uint8_t*>(cfg_.secret.data()),
                                             cfg_.secret.size());
          const Mac want = authMac(key, nonce, au->clientNonce);
          if (!cfg_.impostor && !constantTimeEqual(want, au->mac)) {
            ++authFailures_;
            send(fd, ErrorMsg{1, "authentication failed"});
            return;
          }
          const SessionKey sk = sessionKey(key, nonce, au->clientNonce);
          sealer_.start(sk, MacDirection::AgentToClient);
          d.requireMac(sk, MacDirection::ClientToAgent);
          send(fd, jobInfo());
        } else if (std::holds_alternative<KnobListRequest>(m)) {
          std::lock_guard<std::mutex> g(mu_);
          send(fd, knobs_);
        } else if (const auto* sk = std::get_if<SetKnob>(&m)) {
          setKnob(fd, *sk, subscribed);
        } else if (const auto* ping = std::get_if<Ping>(&m)) {
          send(fd, Pong{ping->clientSendNs, now() + cfg_.shiftNs});
        } else if (std::holds_alternative<StatsRequest>(m)) {
          if (!cfg_.ignoreStats) send(fd, Stats{10, 1, 0, 1 << 20, 100, 4096, 1, 0, 16});
        } else if (std::holds_alternative<Subscribe>(m)) {
          subscribed = true;
          for (auto& b : batches(cfg_.rank)) send(fd, b);
        } else if (std::holds_alternative<Bye>(m)) {
          return;
        }
      }
    }
  }

  void setKnob(int fd, const SetKnob& sk, bool subscribed) {
    std::lock_guard<std::mutex> g(mu_);
    received_.push_back(sk.changeSeq);
    KnobAck ack;
    ack.changeSeq = sk.changeSeq;
    auto it = std::find_if(knobs_.knobs.begin(), knobs_.knobs.end(),
                           [&](const auto& k) { return k.name == sk.name; });
    if (cfg_.refuseAll || it == knobs_.knobs.end()) {
      ack.reason = cfg_.refuseAll ? "not allowed now" : "unknown knob";
      send(fd, ack);
      return;
    }
    ack.accepted = true;
    send(fd, ack);  // validated and queued ...
    if (subscribed && cfg_.batchBeforeAck) {
      EventBatch b;
      b.rank = cfg_.rank;
      b.events.push_back({10, EventKind::Marker, 7'000'000, 7'000'000, 0, {}});
      send(fd, b);
    }
    it->currentValue = sk.value;
    knobs_.lastChangeSeq = sk.changeSeq;
    ack.applied = true;  // ... and applied at the next step boundary
    ack.appliedStep = 17;
    send(fd, ack);
  }

  FakeConfig cfg_;
  std::string path_;
  int listenFd_ = -1;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> authFailures_{0};
  std::atomic<int> frameErrors_{0};
  FrameSealer sealer_;
  std::mutex mu_;
  KnobList knobs_;
  std::vector<uint64_t> received_;  // the change numbers of every SetKnob, in arrival order
};

// The last two of a fake agent's received change numbers (before them come the gap filling's).
std::vector<uint64_t> lastTwo(const std::vector<uint64_t>& v) {
  return std::vector<uint64_t>(v.end() - static_cast<std::ptrdiff_t>(std::min<size_t>(2, v.size())), v.end());
}

AgentClient::Options opts(const std::string& secretFile = {}, int timeoutMs = 3000) {
  AgentClient::Options o;
  o.timeoutMs = timeoutMs;
  o.clientName = "tst_agent_client";
  o.secretFile = secretFile;
  return o;
}

}  // namespace

class TstAgentClient : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  fs::path dir() const { return tmp_.path().toStdString(); }
  std::string writeSecret(const std::string& name, const std::string& s) {
    const fs::path p = dir() / name;
    std::ofstream(p, std::ios::binary) << s;
    return p.string();
  }

 private slots:
  void handshakeWithoutAuth() {
    FakeAgent agent(dir(), {.rank = 2, .worldSize = 4});
    auto c = AgentClient::connect(agent.endpoint(), opts());
    QVERIFY2(c.isOk(), c.status().toString().c_str());
    QCOMPARE(c.value()->job().jobId, std::string("fakejob"));
    QCOMPARE(c.value()->job().rank, 2);
    QCOMPARE(c.value()->job().worldSize, 4);
    auto st = c.value()->stats();
    QVERIFY2(st.isOk(), st.status().toString().c_str());
    QCOMPARE(st->currentStep, int64_t{16});
    c.value()->close();
    QVERIFY(c.value()->closed());
  }

  void authSucceedsWithTheSecret() {
    const std::string secret = "5f1c0e8a9b7d6c4e3f2a1b0c9d8e7f6a5f1c0e8a9b7d6c4e3f2a1b0c9d8e7f6a";
    FakeAgent agent(dir(), {.authRequired = true, .secret = secret});
    auto c = AgentClient::connect(agent.endpoint(), opts(writeSecret("good", secret)));
    QVERIFY2(c.isOk(), c.status().toString().c_str());
    QCOMPARE(agent.authFailures(), 0);
  }

  void authFailsWithAWrongSecret() {
    FakeAgent agent(dir(), {.authRequired = true, .secret = "right"});
    auto c = AgentClient::connect(agent.endpoint(), opts(writeSecret("bad", "wrong")));
    QVERIFY(!c.isOk());
    QVERIFY2(c.status().message().find("authentication failed") != std::string::npos,
             c.status().toString().c_str());
    QCOMPARE(agent.authFailures(), 1);
    // No secret at all: refused on our side, with a clear reason.
    auto none = AgentClient::connect(agent.endpoint(), opts());
    QVERIFY(!none.isOk());
    QVERIFY2(none.status().message().find("secret") != std::string::npos, none.status().toString().c_str());
  }

  // Mutual authentication: the Welcome must carry a MAC under the session key, which only a
  // holder of the secret can derive; every later frame too.
  void authenticatedSessionCarriesMacsBothWays() {
    const std::string secret = "0123456789abcdef0123456789abcdef";
    FakeAgent agent(dir(), {.authRequired = true, .secret = secret, .lastChangeSeq = 3});
    auto c = AgentClient::connect(agent.endpoint(), opts(writeSecret("mutual", secret)));
    QVERIFY2(c.isOk(), c.status().toString().c_str());
    auto list = c.value()->knobList();  // a sealed request, a sealed reply
    QVERIFY2(list.isOk(), list.status().toString().c_str());
    QCOMPARE(list->lastChangeSeq, uint64_t{3});
    QCOMPARE(agent.frameErrors(), 0);
  }

  void anImpostorAgentIsDetected() {
    // Listens where the agent should be, accepts any Auth, but does not know the secret.
    FakeAgent impostor(dir(), {.authRequired = true, .secret = "not the job's secret", .impostor = true});
    auto c = AgentClient::connect(impostor.endpoint(), opts(writeSecret("real", "the job's secret")));
    QVERIFY(!c.isOk());
    QVERIFY2(c.status().message().find("did not prove that it knows the job's secret") != std::string::npos,
             c.status().toString().c_str());
    // Over TCP, a peer that does not even ask for authentication is refused by the client.
  }

  void aTamperedFrameFromTheAgentClosesTheConnection() {
    const std::string secret = "fedcba9876543210fedcba9876543210";
    FakeAgent agent(dir(), {.authRequired = true, .secret = secret, .tamper = true});
    auto c = AgentClient::connect(agent.endpoint(), opts(writeSecret("tamper", secret)));
    QVERIFY2(c.isOk(), c.status().toString().c_str());
    auto list = c.value()->knobList();  // the reply has one payload bit flipped after sealing
    QVERIFY(!list.isOk());
    QVERIFY2(list.status().message().find("wrong MAC") != std::string::npos,
             list.status().toString().c_str());
    QVERIFY(c.value()->closed());
  }

  void connectFailures() {
    auto c = AgentClient::connect("unix:" + (dir() / "nobody.sock").string(), opts());
    QVERIFY(!c.isOk());
    QVERIFY(!AgentClient::connect("http://x", opts()).isOk());
    QVERIFY(!AgentClient::connect("tcp:nohostport", opts()).isOk());
  }

  void requestTimesOut() {
    FakeAgent agent(dir(), {.ignoreStats = true});
    auto c = AgentClient::connect(agent.endpoint(), opts({}, 300));
    QVERIFY(c.isOk());
    QElapsedTimer t;
    t.start();
    auto st = c.value()->stats();
    QVERIFY(!st.isOk());
    QVERIFY2(st.status().message().find("timed out") != std::string::npos, st.status().toString().c_str());
    QVERIFY(t.elapsed() < 2000);
  }

  void knobListSetApply() {
    FakeAgent agent(dir(), {.lastChangeSeq = 4});
    auto c = AgentClient::connect(agent.endpoint(), opts());
    QVERIFY(c.isOk());
    auto list = c.value()->knobList();
    QVERIFY2(list.isOk(), list.status().toString().c_str());
    QCOMPARE(list->lastChangeSeq, uint64_t{4});
    QCOMPARE(list->knobs.size(), size_t{2});
    auto ack = c.value()->setKnob(5, "dp.bucket_bytes", "8388608");
    QVERIFY(ack.isOk());
    QVERIFY(ack->accepted);
    QVERIFY(!ack->applied);
    auto applied = c.value()->waitForApplied(5, 2000);
    QVERIFY2(applied.isOk(), applied.status().toString().c_str());
    QCOMPARE(applied->appliedStep, int64_t{17});
    QCOMPARE(agent.value("dp.bucket_bytes"), std::string("8388608"));
    auto refused = c.value()->setKnob(6, "no.such", "1");
    QVERIFY(refused.isOk());
    QVERIFY(!refused->accepted);
    QCOMPARE(refused->reason, std::string("unknown knob"));
  }

  void clockOffsetWithinBound() {
    for (const int64_t shift : {int64_t{3'700'000'123}, int64_t{-12'345'678'901}, int64_t{0}}) {
      FakeAgent agent(dir(), {.shiftNs = shift});
      auto c = AgentClient::connect(agent.endpoint(), opts());
      QVERIFY(c.isOk());
      auto sync = c.value()->estimateClockOffset(32);
      QVERIFY2(sync.isOk(), sync.status().toString().c_str());
      QCOMPARE(sync->samples, 32);
      QVERIFY(sync->errorBoundNs >= 0);
      QCOMPARE(sync->errorBoundNs, (sync->minRttNs + 1) / 2);
      const int64_t err = std::llabs(sync->agentMinusClientNs - shift);
      qInfo("shift %lld ns: estimate off by %lld ns, bound %lld ns, min rtt %lld ns",
            static_cast<long long>(shift), static_cast<long long>(err),
            static_cast<long long>(sync->errorBoundNs), static_cast<long long>(sync->minRttNs));
      QVERIFY2(err <= sync->errorBoundNs + 1'000'000, qPrintable(QString::number(err)));
      QCOMPARE(rankInfoFor(c.value()->job(), sync.value()).clockOffsetNs, -sync->agentMinusClientNs);
    }
  }

  void eventsIngestedOnTheClientClock() {
    const int64_t shift = 5'000'000'000;
    FakeAgent agent(dir(), {.rank = 1, .worldSize = 2, .shiftNs = shift});
    auto c = AgentClient::connect(agent.endpoint(), opts());
    QVERIFY(c.isOk());
    auto sync = c.value()->estimateClockOffset(8);
    QVERIFY(sync.isOk());
    TraceStore store;
    BatchIngestor ing(store, rankInfoFor(c.value()->job(), sync.value()));
    QVERIFY(c.value()->subscribe(true).isOk());
    int batches = 0;
    bool sawHistoryFirst = false;
    for (int tries = 0; tries < 50 && batches < 2; ++tries) {
      auto n = c.value()->pollEvents(100, [&](const EventBatch& b) {
        if (batches == 0) sawHistoryFirst = b.history;
        QVERIFY(ing.ingest(b).isOk());
        ++batches;
      });
      QVERIFY2(n.isOk(), n.status().toString().c_str());
    }
    QCOMPARE(batches, 2);
    QVERIFY(sawHistoryFirst);
    QVERIFY(ing.sawLive());
    QCOMPARE(ing.eventsIngested(), uint64_t{3});
    QCOMPARE(ing.unknownTrackEvents(), uint64_t{1});
    const RankInfo* r = store.rank(1);
    QVERIFY(r);
    QCOMPARE(r->host, std::string("fakehost"));
    QCOMPARE(r->pid, int64_t{4001});
    QCOMPARE(r->droppedEvents, uint64_t{7});
    QCOMPARE(r->clockOffsetNs, -sync->agentMinusClientNs);
    QCOMPARE(store.trackCount(), size_t{2});
    const TrackId main = store.findOrAddTrack(1, TrackKind::CpuThread, 111, "main");
    const TrackId comm = store.findOrAddTrack(1, TrackKind::Communicator, 222, "comm");
    QCOMPARE(store.trackCount(), size_t{2});
    const TrackEvents& ev = store.events(main);
    QCOMPARE(ev.size(), size_t{2});
    const int64_t tol = sync->errorBoundNs + 1'000'000;
    // Agent time 1 ms is client time 1 ms - shift.
    QVERIFY(std::llabs(ev.start(0) - (1'000'000 - shift)) <= tol);
    QCOMPARE(ev.start(0) - (1'000'000 - shift), ev.start(1) - (4'000'000 - shift));  // one offset per rank
    QCOMPARE(ev.end(0) - ev.start(0), int64_t{1'000'000});
    QCOMPARE(store.str(ev.name(0)), std::string_view("fwd"));
    QCOMPARE(store.str(ev.name(1)), std::string_view("bwd"));
    const TrackEvents& ce = store.events(comm);
    QCOMPARE(ce.size(), size_t{1});
    QCOMPARE(ce.kind(0), EventKind::Collective);
    const Attr* alg = ce.findAttr(0, AttrKey::Algorithm);
    QVERIFY(alg);
    QCOMPARE(store.str(alg->asString()), std::string_view("ring"));
    QCOMPARE(ce.findAttr(0, AttrKey::Bytes)->asInt(), int64_t{4096});
    const auto attrs = ce.attrs(0);
    QVERIFY(attrs[1].isCustom());
    QCOMPARE(store.str(attrs[1].key - kCustomAttrBase), std::string_view("my_key"));
    QCOMPARE(attrs[1].asInt(), int64_t{9});
  }

  // A batch that arrives while the client waits for a KnobAck is kept for pollEvents.
  void eventsWhileWaitingAreKept() {
    FakeAgent agent(dir(), {.batchBeforeAck = true});
    auto c = AgentClient::connect(agent.endpoint(), opts());
    QVERIFY(c.isOk());
    QVERIFY(c.value()->subscribe(false).isOk());
    auto ack = c.value()->setKnob(1, "dp.compression", "fp16");
    QVERIFY(ack.isOk() && ack->accepted);
    QVERIFY(c.value()->waitForApplied(1, 2000).isOk());
    int markers = 0, batches = 0;
    for (int tries = 0; tries < 20 && batches < 3; ++tries) {
      auto n = c.value()->pollEvents(50, [&](const EventBatch& b) {
        ++batches;
        for (const auto& e : b.events) markers += e.kind == EventKind::Marker;
      });
      QVERIFY(n.isOk());
    }
    QCOMPARE(batches, 3);
    QCOMPARE(markers, 1);
  }

  void connectionCloseIsReported() {
    auto agent = std::make_unique<FakeAgent>(dir(), FakeConfig{});
    auto c = AgentClient::connect(agent->endpoint(), opts());
    QVERIFY(c.isOk());
    agent.reset();  // the agent goes away
    Result<int> n = 0;
    for (int tries = 0; tries < 20; ++tries) {
      n = c.value()->pollEvents(50, [](const EventBatch&) {});
      if (!n.isOk()) break;
    }
    QVERIFY(!n.isOk());
    QVERIFY(c.value()->closed());
  }

  void jobSessionKnobProtocol() {
    FakeAgent a0(dir(), {.rank = 0, .worldSize = 2, .lastChangeSeq = 5});
    FakeAgent a1(dir(), {.rank = 1, .worldSize = 2, .lastChangeSeq = 3});
    std::vector<discovery::Entry> entries(2);
    entries[0].rank = 0;
    entries[0].endpoint = a0.endpoint();
    entries[1].rank = 1;
    entries[1].endpoint = a1.endpoint();
    auto js = LiveSession::connect(entries, opts());
    QVERIFY2(js.isOk(), js.status().toString().c_str());
    QCOMPARE(js.value()->worldSize(), 2);
    auto res = js.value()->setKnobs({{"dp.bucket_bytes", "8388608"}, {"dp.compression", "fp16"}}, 3000);
    QVERIFY2(res.isOk(), res.status().toString().c_str());
    QCOMPARE(res->size(), size_t{2});
    QCOMPARE((*res)[0].changeSeq, uint64_t{6});  // max(5, 3) + 1
    QCOMPARE((*res)[1].changeSeq, uint64_t{7});
    QCOMPARE((*res)[0].stepPerRank.size(), size_t{2});
    QCOMPARE((*res)[0].stepPerRank[1], (std::pair<int32_t, int64_t>(1, 17)));
    QCOMPARE(a0.value("dp.compression"), std::string("fp16"));
    QCOMPARE(a1.value("dp.bucket_bytes"), std::string("8388608"));
    // One command, one step: every rank got both numbers highest first (the authority, rank 0,
    // before the other), so its contiguous sequence crossed both at once.
    // (before them, the numbers the gap filling sent)
    QCOMPARE(lastTwo(a0.receivedSeqs()), (std::vector<uint64_t>{7, 6}));
    QCOMPARE(lastTwo(a1.receivedSeqs()), (std::vector<uint64_t>{7, 6}));
    // Refused on the client before anything is sent.
    auto unknown = js.value()->setKnobs({{"dp.nope", "1"}}, 1000);
    QVERIFY(!unknown.isOk());
    QVERIFY2(unknown.status().message().find("unknown knob") != std::string::npos,
             unknown.status().message().c_str());
    auto wrongType = js.value()->setKnobs({{"dp.bucket_bytes", "big"}}, 1000);
    QVERIFY(!wrongType.isOk());
    QVERIFY(wrongType.status().message().find("integer") != std::string::npos);
    auto range = js.value()->setKnobs({{"dp.bucket_bytes", "0"}}, 1000);
    QVERIFY(!range.isOk());
    QVERIFY(range.status().message().find("out of range") != std::string::npos);
    auto choice = js.value()->setKnobs({{"dp.compression", "zip"}}, 1000);
    QVERIFY(!choice.isOk());
    QVERIFY(choice.status().message().find("one of") != std::string::npos);
  }

  void jobSessionReportsRefusals() {
    FakeAgent a0(dir(), {.rank = 0, .worldSize = 2});
    FakeAgent a1(dir(), {.rank = 1, .worldSize = 2, .refuseAll = true});
    std::vector<discovery::Entry> entries(2);
    entries[0].endpoint = a0.endpoint();
    entries[1].rank = 1;
    entries[1].endpoint = a1.endpoint();
    auto js = LiveSession::connect(entries, opts());
    QVERIFY(js.isOk());
    auto res = js.value()->setKnobs({{"dp.compression", "fp16"}}, 1000);
    QVERIFY(!res.isOk());
    QVERIFY2(res.status().message().find("rank 1 refused dp.compression=fp16: not allowed now") !=
                 std::string::npos,
             res.status().message().c_str());
  }

  // trainscope-cli jobs / knobs / set / record against two fake ranks found through discovery.
  void cliAgainstFakeAgents() {
    const fs::path rt = dir() / "rt";
    qputenv("TRAINSCOPE_RUNTIME_DIR", QByteArray::fromStdString(rt.string()));
    const int64_t shift = 2'000'000'000;
    FakeAgent a0(dir(), {.rank = 0, .worldSize = 2, .shiftNs = shift, .lastChangeSeq = 2});
    FakeAgent a1(dir(), {.rank = 1, .worldSize = 2, .shiftNs = shift});
    for (int r = 0; r < 2; ++r) {
      discovery::Entry e;
      e.jobId = "fakejob";
      e.rank = r;
      e.worldSize = 2;
      e.localRank = r;
      e.host = "fakehost";
      e.pid = ::getpid();
      e.endpoint = (r == 0 ? a0 : a1).endpoint();
      QVERIFY(discovery::writeEntry(e).isOk());
    }
    auto cli = [](const QStringList& args, QString* out = nullptr, QString* err = nullptr) {
      QProcess p;
      p.start(QString(TRAINSCOPE_BIN_DIR) + "/trainscope-cli", args);
      if (!p.waitForFinished(60000)) return -1;
      if (out) *out = QString::fromUtf8(p.readAllStandardOutput());
      if (err) *err = QString::fromUtf8(p.readAllStandardError());
      return p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2;
    };
    QString out, err;
    QCOMPARE(cli({"jobs", "--json"}, &out, &err), 0);
    const QJsonObject jobs = QJsonDocument::fromJson(out.toUtf8()).object();
    QCOMPARE(jobs["jobs"].toArray().size(), 1);
    QCOMPARE(jobs["jobs"].toArray()[0].toObject()["ranks_found"].toInt(), 2);
    QCOMPARE(jobs["jobs"].toArray()[0].toObject()["complete"].toBool(), true);

    QCOMPARE(cli({"knobs", "--job", "fakejob", "--json"}, &out, &err), 0);
    const QJsonObject knobs = QJsonDocument::fromJson(out.toUtf8()).object();
    QCOMPARE(knobs["knobs"].toArray().size(), 2);
    QCOMPARE(knobs["knobs"].toArray()[1].toObject()["choices"].toArray().size(), 2);

    QCOMPARE(cli({"set", "--job", "fakejob", "dp.bucket_bytes=8388608"}, &out, &err), 0);
    QVERIFY2(out.contains("dp.bucket_bytes = 8388608 applied at step 17 on all 2 ranks"),
             qPrintable(out + err));
    QCOMPARE(a1.value("dp.bucket_bytes"), std::string("8388608"));
    QCOMPARE(cli({"set", "--job", "fakejob", "dp.compression=zip"}, &out, &err), 1);
    QVERIFY2(err.contains("one of {none, fp16}"), qPrintable(err));
    QCOMPARE(cli({"set", "--job", "nosuchjob", "a=1"}, &out, &err), 1);
    QVERIFY(err.contains("no running job"));
    // After the change, ranks agree again (knobs checks every rank).
    QCOMPARE(cli({"knobs", "--job", "fakejob"}, &out, &err), 0);
    QVERIFY2(!err.contains("disagree"), qPrintable(err));

    const QString file = QString::fromStdString((dir() / "rec.tsdb").string());
    QCOMPARE(cli({"record", "--job", "fakejob", "--seconds", "1", "--out", file}, &out, &err), 0);
    auto store = loadSession(file.toStdString());
    QVERIFY2(store.isOk(), store.status().toString().c_str());
    QCOMPARE(store->eventCount(), size_t{6});  // 3 per rank; the unknown-track event is skipped
    QCOMPARE(store->ranks().size(), size_t{2});
    const RankInfo* r1 = store->rank(1);
    QCOMPARE(r1->droppedEvents, uint64_t{7});
    QVERIFY(std::llabs(r1->clockOffsetNs + shift) < 1'000'000);
    QCOMPARE(store->metadata().at("job_id"), std::string("fakejob"));
    QVERIFY(std::stoll(store->metadata().at("clock_sync_error_ns.1")) > 0);
    QCOMPARE(store->metadata().at("unknown_track_events.0"), std::string("1"));
    // Agent time 1 ms became client time 1 ms - shift.
    const auto [t0, t1] = store->timeSpan();
    QVERIFY(std::llabs(t0 - (1'000'000 - shift)) < 1'000'000);
    QVERIFY(t1 < 0);
    qunsetenv("TRAINSCOPE_RUNTIME_DIR");
  }

  // A one-rank job gets a command's changes highest number first as well (its agreement is its
  // own contiguous sequence), each under the number it was meant to have.
  void setKnobsSendsASetHighestFirst() {
    FakeAgent a0(dir(), {.rank = 0, .worldSize = 1, .lastChangeSeq = 2});
    std::vector<discovery::Entry> entries(1);
    entries[0].rank = 0;
    entries[0].endpoint = a0.endpoint();
    auto js = LiveSession::connect(entries, opts());
    QVERIFY2(js.isOk(), js.status().toString().c_str());
    auto res = js.value()->setKnobs({{"dp.bucket_bytes", "4096"}, {"dp.compression", "fp16"}}, 3000);
    QVERIFY2(res.isOk(), res.status().toString().c_str());
    QCOMPARE((*res)[0].changeSeq, uint64_t{3});
    QCOMPARE((*res)[1].changeSeq, uint64_t{4});
    QCOMPARE(lastTwo(a0.receivedSeqs()), (std::vector<uint64_t>{4, 3}));  // after the gap filling's 1, 2
    QCOMPARE(a0.value("dp.bucket_bytes"), std::string("4096"));
    QCOMPARE(a0.value("dp.compression"), std::string("fp16"));
  }

  void validateKnobValues() {
    KnobDescriptor f{"dp.topk_ratio", KnobType::Float, 0.001, 1.0, {}, "", "", "", false};
    QVERIFY(validateKnobValue(f, "0.5").empty());
    QVERIFY(!validateKnobValue(f, "1.5").empty());
    QVERIFY(!validateKnobValue(f, "abc").empty());
    QVERIFY(!validateKnobValue(f, "nan").empty());
    KnobDescriptor b{"x", KnobType::Bool, 0, 0, {}, "", "", "", false};
    QVERIFY(validateKnobValue(b, "true").empty());
    QVERIFY(!validateKnobValue(b, "yes please").empty());
    KnobDescriptor i{"n", KnobType::Int, 0, 0, {}, "", "", "", false};  // no range given
    QVERIFY(validateKnobValue(i, "-5").empty());
    QVERIFY(!validateKnobValue(i, "5x").empty());
  }
};

QTEST_GUILESS_MAIN(TstAgentClient)
#include "tst_agent_client.moc"
