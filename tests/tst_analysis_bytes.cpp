// `analyze` on events as trainscope-train records them since issue 18, against hand-computed
// values: bucket collectives carry the payload as Bytes and the transport's counts as
// bytes_sent / bytes_received, so algbw = payload / time, busbw = algbw x 2(n-1)/n applied once,
// by_size[] reports payload_bytes and bytes_sent (null where MPI's own reduction was not
// counted); pipeline hand-offs (a receive posted before the matching send) per stage.
#include <QtTest>
#include <cmath>
#include <span>
#include <vector>

#include "trainscope/core/analysis/analysis.h"

using namespace trainscope::core;

class TstAnalysisBytes : public QObject {
  Q_OBJECT

 private slots:
  // 4 ranks, one 1 ms ring bucket of 4 MB payload each (bytes_sent = 2(p-1)/p x payload = 6 MB)
  // and one 1 ms MPI allreduce of 1 KB (nothing counted): algbw = 4e6 B / 1e6 ns = 4 GB/s,
  // busbw = 4 x 2*3/4 = 6 GB/s (the factor once), wire = 6e6 / 1e6 = 6 GB/s.
  void analysisCountsTheFactorOnce() {
    TraceStore s;
    const StringId bucketComm = s.intern("bucket allreduce"), ring = s.intern("ring"),
                   mpi = s.intern("allreduce"), sentKey = s.intern("bytes_sent"),
                   recvKey = s.intern("bytes_received"), step = s.intern("step");
    for (int r = 0; r < 4; ++r) {
      RankInfo ri;
      ri.rank = r;
      s.setRank(ri);
      const TrackId cpu = s.addTrack({r, TrackKind::CpuThread, "main", 1});
      const TrackId comm = s.addTrack({r, TrackKind::Communicator, "comm", 2});
      const Attr stepAttr = Attr::ofInt(AttrKey::Step, 0);
      s.append(cpu, {0, 10'000'000, step, EventKind::Step}, std::span(&stepAttr, 1));
      const std::vector<Attr> a{Attr::ofInt(AttrKey::Bucket, 0), Attr::ofInt(AttrKey::Bytes, 4'000'000),
                                Attr::ofString(AttrKey::Algorithm, ring),
                                Attr::custom(sentKey, AttrType::Int, 6'000'000),
                                Attr::custom(recvKey, AttrType::Int, 6'000'000)};
      s.append(comm, {1'000'000, 2'000'000, bucketComm, EventKind::Collective}, a);
      const std::vector<Attr> b{Attr::ofInt(AttrKey::Bucket, 1), Attr::ofInt(AttrKey::Bytes, 1024),
                                Attr::ofString(AttrKey::Algorithm, mpi)};
      s.append(comm, {3'000'000, 4'000'000, bucketComm, EventKind::Collective}, b);
    }
    const AnalysisResult res = analyzeStore(s);
    QCOMPARE(res.collectives.size(), size_t{2});
    const BandwidthClass* big = nullptr;
    const BandwidthClass* small = nullptr;
    for (const auto& c : res.collectives) (c.sizeClassBytes == 2097152 ? big : small) = &c;
    QVERIFY(big && small);
    QCOMPARE(big->collective, std::string("allreduce"));
    QCOMPARE(big->ranks, 4);
    QCOMPARE(big->count, uint64_t{4});
    QCOMPARE(big->payloadBytes, 4e6);
    QCOMPARE(big->bytesSent, 6e6);
    QCOMPARE(big->bytesReceived, 6e6);
    QVERIFY(std::fabs(big->algbwGBps - 4.0) < 1e-9);
    QVERIFY(std::fabs(big->busbwGBps - 6.0) < 1e-9);
    QVERIFY(std::fabs(big->wireGBps - 6.0) < 1e-9);
    QCOMPARE(small->payloadBytes, 1024.0);
    QVERIFY(std::isnan(small->bytesSent));  // MPI's own allreduce: not counted, not claimed
    QVERIFY(std::isnan(small->wireGBps));
    const std::string json = analysisToJson(res);
    QVERIFY(json.find("\"payload_bytes\"") != std::string::npos);
    QVERIFY(json.find("\"bytes_sent\"") != std::string::npos);
  }

  // Two stages: stage 1 waits for two activations. First: receive posted at 3 ms, send starts at
  // 5 ms, receive ends 5.3 ms -> a 0.3 ms hand-off. Second: receive posted at 8 ms, send 8.5 ms,
  // receive ends 8.6 ms -> 0.1 ms. A third message was sent before its receive started (nobody
  // waited): not a hand-off. handoff_ms = 0.4 per step, 2 per step, 200 us each.
  void analysisHandoffs() {
    TraceStore s;
    const StringId step = s.intern("step"), f = s.intern("F"), b = s.intern("B"), send = s.intern("send"),
                   recv = s.intern("recv");
    auto op = [&](TrackId t, EventKind k, int64_t a, int64_t e, int stage, int mb) {
      const std::vector<Attr> at{Attr::ofInt(AttrKey::MicroBatch, mb), Attr::ofInt(AttrKey::Stage, stage),
                                 Attr::ofInt(AttrKey::Chunk, 0)};
      s.append(t, {a * 1000, e * 1000, k == EventKind::MicroBatchF ? f : b, k}, at);
    };
    auto p2p = [&](TrackId t, EventKind k, int64_t a, int64_t e, int peer) {
      const std::vector<Attr> at{Attr::ofInt(AttrKey::Peer, peer), Attr::ofInt(AttrKey::Bytes, 1024)};
      s.append(t, {a * 1000, e * 1000, k == EventKind::P2PSend ? send : recv, k}, at);
    };
    TrackId cpu[2], comm[2];
    for (int r = 0; r < 2; ++r) {
      RankInfo ri;
      ri.rank = r;
      s.setRank(ri);
      cpu[r] = s.addTrack({r, TrackKind::CpuThread, "main", 1});
      comm[r] = s.addTrack({r, TrackKind::Communicator, "p2p", 2});
      const Attr st = Attr::ofInt(AttrKey::Step, 0);
      s.append(cpu[r], {0, 20'000'000, step, EventKind::Step}, std::span(&st, 1));
    }
    op(cpu[0], EventKind::MicroBatchF, 1000, 5000, 0, 0);
    p2p(comm[0], EventKind::P2PSend, 5000, 5100, 1);
    op(cpu[0], EventKind::MicroBatchF, 5100, 8500, 0, 1);
    p2p(comm[0], EventKind::P2PSend, 8500, 8550, 1);
    p2p(comm[0], EventKind::P2PSend, 9000, 9050, 1);
    p2p(comm[1], EventKind::P2PRecv, 3000, 5300, 0);
    op(cpu[1], EventKind::MicroBatchF, 5300, 8000, 1, 0);
    p2p(comm[1], EventKind::P2PRecv, 8000, 8600, 0);
    op(cpu[1], EventKind::MicroBatchF, 8600, 9500, 1, 1);
    p2p(comm[1], EventKind::P2PRecv, 9600, 9700, 0);
    op(cpu[1], EventKind::MicroBatchB, 9700, 12000, 1, 0);
    op(cpu[0], EventKind::MicroBatchB, 12100, 15000, 0, 0);
    const AnalysisResult res = analyzeStore(s);
    QVERIFY(res.pipeline.present);
    QCOMPARE(res.pipeline.perStage.size(), size_t{2});
    const StageResult& st1 = res.pipeline.perStage[1];
    QVERIFY2(std::fabs(st1.handoffMs - 0.4) < 1e-9, qPrintable(QString::number(st1.handoffMs)));
    QCOMPARE(st1.handoffsPerStep, 2.0);
    QVERIFY(std::fabs(st1.handoffLatencyUs - 200.0) < 1e-6);
    QCOMPARE(res.pipeline.perStage[0].handoffMs, 0.0);  // stage 0 received nothing
    QVERIFY(analysisToJson(res).find("\"handoff_ms\"") != std::string::npos);
  }
};

QTEST_GUILESS_MAIN(TstAnalysisBytes)
#include "tst_analysis_bytes.moc"
