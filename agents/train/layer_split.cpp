#include "layer_split.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>

#include "model.h"
#include "models.h"
#include "task.h"
#include "trainscope/agent.h"
#include "trainscope/core/sched/partition.h"

namespace trainscope::train {

LayerBounds evenSplit(int layers, int parts) {
  LayerBounds b(static_cast<size_t>(parts) + 1, 0);
  for (int i = 0; i <= parts; ++i) b[static_cast<size_t>(i)] = static_cast<int>(int64_t{layers} * i / parts);
  return b;
}

LayerBounds profiledSplit(Compute& compute, Communicator& world, const Options& o, int stages, int replicas,
                          int samples) {
  TS_RANGE("profile layers");
  Model m(makeLayers(compute, o), o.seed);
  const auto task = o.model == "transformer" ? makeSequenceTask(o.seed, o.seqLen, o.vocab)
                                             : makeTeacherTask(o.seed, o.inputDim, o.classes);
  const int L = m.layerCount();
  std::vector<Mat> act(static_cast<size_t>(L) + 1), grad(static_cast<size_t>(L) + 1);
  std::vector<double> best(static_cast<size_t>(L), std::numeric_limits<double>::max());
  using clock = std::chrono::steady_clock;
  for (int rep = 0; rep < 3; ++rep) {
    Batch b = task->train(0, samples);
    act[0] = std::move(b.x);
    std::vector<double> t(static_cast<size_t>(L), 0);
    for (int l = 0; l < L; ++l) {
      const auto t0 = clock::now();
      m.layer(l).forward(0, act[static_cast<size_t>(l)], act[static_cast<size_t>(l) + 1]);
      t[static_cast<size_t>(l)] = std::chrono::duration<double>(clock::now() - t0).count();
    }
    softmaxCrossEntropy(act[static_cast<size_t>(L)], b.labels, &grad[static_cast<size_t>(L)], nullptr);
    for (int l = L - 1; l >= 0; --l) {
      const auto i = static_cast<size_t>(l);
      const auto t0 = clock::now();
      m.layer(l).backwardInput(0, grad[i + 1], grad[i]);
      m.layer(l).backwardWeight(0, grad[i + 1]);
      t[i] += std::chrono::duration<double>(clock::now() - t0).count();
      best[i] = std::min(best[i], t[i]);
    }
  }
  std::vector<core::LayerProfile> prof(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l) {
    const auto i = static_cast<size_t>(l);
    prof[i].computeSec = world.allreduceMaxDouble(best[i]);
    prof[i].activationBytes = 4.0 * static_cast<double>(act[i + 1].size());
    prof[i].weightBytes = 4.0 * static_cast<double>(m.countOf(l));
  }
  const auto part = core::partitionStages(prof, stages, replicas);
  if (!part) {  // cannot happen for valid options (stages <= layers); fall back, say so
    if (world.rank() == 0) std::printf("partition auto: %s; using even\n", part.status().message().c_str());
    return evenSplit(L, stages);
  }
  LayerBounds b{0};
  for (const auto& s : part->stages) b.push_back(s.lastLayer + 1);
  if (world.rank() == 0) {
    std::printf("partition auto (PipeDream DP on profiled times):");
    for (size_t s = 0; s + 1 < b.size(); ++s) std::printf(" stage %zu = layers %d..%d", s, b[s], b[s + 1] - 1);
    std::printf(" (slowest %.3f ms)\n", part->slowest * 1e3);
    std::fflush(stdout);
  }
  return b;
}

}  // namespace trainscope::train
