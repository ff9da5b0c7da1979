#include "trainscope/core/synth/synth.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace trainscope::core {

size_t synthesizeTrace(TraceStore& s, const SynthOptions& o) {
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int64_t> jitter(0, 20'000);
  const size_t before = s.eventCount();

  const StringId nStep = s.intern("step");
  const StringId nFwd = s.intern("forward"), nBwd = s.intern("backward"), nOpt = s.intern("optimizer");
  const StringId nGemm = s.intern("gemm_kernel"), nAct = s.intern("gelu_kernel");
  const StringId nAdam = s.intern("adam_kernel"), nH2D = s.intern("memcpy_h2d");
  const StringId nAllreduce = s.intern("allreduce"), nRing = s.intern("ring"), nSimple = s.intern("simple");
  const StringId nSend = s.intern("send_activations"), nRecv = s.intern("recv_activations");
  const StringId nLoss = s.intern("loss"), nKnob = s.intern("dp.bucket_bytes");
  const StringId nBucket = s.intern("bucket"), nMarker = s.intern("step_begin");
  const StringId nFloat = s.intern("float32");
  const StringId vOld = s.intern("26214400"), vNew = s.intern("8388608");

  int64_t flow = 1;
  int64_t corr = 1;
  for (int r = 0; r < o.ranks; ++r) {
    s.setRank(RankInfo{.rank = r, .host = "node" + std::to_string(r / 8), .pid = 10000 + r,
                       .localRank = r % 8, .device = r % 8});
  }
  std::vector<TrackId> cpu(o.ranks), compute(o.ranks), comm(o.ranks), counters(o.ranks);
  for (int r = 0; r < o.ranks; ++r) {
    cpu[r] = s.findOrAddTrack(r, TrackKind::CpuThread, 1000 + r, "main thread");
    compute[r] = s.findOrAddTrack(r, TrackKind::CudaStream, 7, "compute stream 7");
    comm[r] = s.findOrAddTrack(r, TrackKind::CudaStream, 13, "comm stream 13");
    counters[r] = s.findOrAddTrack(r, TrackKind::Counter, 0, "counters");
  }

  const int64_t kernelNs = 50'000;
  int64_t t = o.startNs;
  for (int step = 0; step < o.steps; ++step) {
    int64_t stepEnd = t;
    for (int r = 0; r < o.ranks; ++r) {
      int64_t c = t + jitter(rng);
      const int64_t stepStart = c;
      const Attr stepAttr[] = {Attr::ofInt(AttrKey::Step, step)};
      s.append(cpu[r], {stepStart, stepStart, nMarker, EventKind::Marker}, stepAttr);
      if (step == o.steps / 2) {
        const Attr k[] = {Attr::ofString(AttrKey::Knob, nKnob), Attr::ofString(AttrKey::KnobValue, vNew),
                          Attr::ofInt(AttrKey::Step, step)};
        s.append(cpu[r], {stepStart, stepStart, nKnob, EventKind::KnobChange}, k);
        (void)vOld;
      }
      // Forward and backward: one launch range on the CPU per kernel, kernel on the compute stream.
      int64_t gpu = c + 5'000;
      const int64_t fwdStart = c;
      for (int phase = 0; phase < 2; ++phase) {
        const int64_t phaseStart = c;
        for (int k = 0; k < o.kernelsPerStep; ++k) {
          const Attr ka[] = {Attr::ofInt(AttrKey::CorrelationId, corr), Attr::ofInt(AttrKey::Stream, 7),
                             Attr::ofInt(AttrKey::Device, r % 8), Attr::ofInt(AttrKey::Layer, k % 12)};
          s.append(cpu[r], {c, c + 3'000, s.intern("cudaLaunchKernel"), EventKind::Range},
                   std::span(ka, 2));
          gpu = std::max(gpu, c + 4'000);
          const int64_t dur = kernelNs + jitter(rng) / 4;
          s.append(compute[r], {gpu, gpu + dur, k % 3 ? nGemm : nAct, EventKind::Kernel}, ka);
          gpu += dur;
          c += 4'000;
          ++corr;
          // Buckets become ready during backward; their allreduce overlaps the remaining kernels.
          if (phase == 1 && o.buckets > 0 && (k + 1) % std::max(1, o.kernelsPerStep / o.buckets) == 0) {
            const int b = (k + 1) / std::max(1, o.kernelsPerStep / o.buckets) - 1;
            const Attr ca[] = {Attr::ofInt(AttrKey::Bytes, 25 << 20), Attr::ofString(AttrKey::Algorithm, nRing),
                               Attr::ofString(AttrKey::Protocol, nSimple), Attr::ofInt(AttrKey::Bucket, b),
                               Attr::ofInt(AttrKey::Seq, step * o.buckets + b),
                               Attr::ofInt(AttrKey::CommHash, 0x5eed), Attr::ofString(AttrKey::Datatype, nFloat),
                               Attr::ofInt(AttrKey::Channels, 8)};
            const int64_t cs = gpu + 2'000;
            s.append(comm[r], {cs, cs + 400'000, nAllreduce, EventKind::Collective}, ca);
            const Attr ba[] = {Attr::ofInt(AttrKey::Bucket, b), Attr::ofInt(AttrKey::Bytes, 25 << 20)};
            s.append(cpu[r], {c, c, nBucket, EventKind::Marker}, ba);
          }
        }
        // Phase ranges enclose their launches.
        s.append(cpu[r], {phaseStart, c, phase == 0 ? nFwd : nBwd, EventKind::Phase});
        if (phase == 0 && o.ranks > 1) {
          // Activations to the next rank, matched by flow id with the receive there.
          const int peer = (r + 1) % o.ranks;
          const Attr sa[] = {Attr::ofInt(AttrKey::Peer, peer), Attr::ofInt(AttrKey::Bytes, 4 << 20),
                             Attr::ofInt(AttrKey::FlowId, flow + r)};
          s.append(comm[r], {gpu, gpu + 80'000, nSend, EventKind::P2PSend}, sa);
          const Attr ra[] = {Attr::ofInt(AttrKey::Peer, r), Attr::ofInt(AttrKey::Bytes, 4 << 20),
                             Attr::ofInt(AttrKey::FlowId, flow + r)};
          s.append(comm[peer], {gpu + 10'000, gpu + 90'000, nRecv, EventKind::P2PRecv}, ra);
        }
      }
      (void)fwdStart;
      const int64_t optStart = std::max(c, gpu) + 450'000;
      s.append(compute[r], {optStart, optStart + 120'000, nAdam, EventKind::Kernel});
      s.append(compute[r], {optStart + 125'000, optStart + 135'000, nH2D, EventKind::Memcpy},
               std::array{Attr::ofInt(AttrKey::Bytes, 1 << 20)});
      s.append(cpu[r], {optStart, optStart + 140'000, nOpt, EventKind::Phase});
      const int64_t end = optStart + 150'000;
      s.append(cpu[r], {stepStart, end, nStep, EventKind::Step}, stepAttr);
      const Attr la[] = {Attr::ofDouble(AttrKey::Value, 2.5 / (1.0 + step) + 0.01 * r),
                         Attr::ofInt(AttrKey::Step, step)};
      s.append(counters[r], {end, end, nLoss, EventKind::Counter}, la);
      stepEnd = std::max(stepEnd, end);
    }
    flow += o.ranks;
    t = stepEnd + 100'000;
  }
  s.metadata()["clock_domain"] = "synthetic";
  s.metadata()["generator"] = "trainscope synth";
  s.flush();
  return s.eventCount() - before;
}

}  // namespace trainscope::core
