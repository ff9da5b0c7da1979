// The reference trainer's synthetic data (agents/train/task.h): milliseconds to make one
// micro-batch piece, as the pipeline's first and last stages (or the data loader thread) do every
// micro-batch. Beside it, the anchor: writing the same number of floats from the same random
// generator with no teacher (what any data at all costs). docs/BENCHMARKS.md, pipeline bubble.
//
//   bench_train_data [--samples 128] [--dim 512] [--classes 512] [--pieces 200]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "task.h"
#include "tensor.h"

using namespace trainscope::train;

int main(int argc, char** argv) {
  int samples = 128, dim = 512, classes = 512, pieces = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    int* v = !std::strcmp(argv[i], "--samples") ? &samples
             : !std::strcmp(argv[i], "--dim")   ? &dim
             : !std::strcmp(argv[i], "--classes") ? &classes
             : !std::strcmp(argv[i], "--pieces")  ? &pieces
                                                  : nullptr;
    if (!v || (*v = std::atoi(argv[i + 1])) < 1) {
      std::fprintf(stderr, "usage: bench_train_data [--samples N] [--dim N] [--classes N] [--pieces N]\n");
      return 2;
    }
  }
  using Clock = std::chrono::steady_clock;
  const auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  const auto task = makeTeacherTask(1, dim, classes);
  int sink = 0;
  auto t0 = Clock::now();
  for (int p = 0; p < pieces; ++p) sink += task->train(int64_t{p} * samples, samples).labels[0];
  const double teacher = ms(Clock::now() - t0) / pieces;
  std::vector<float> x(static_cast<size_t>(samples) * static_cast<size_t>(dim));
  t0 = Clock::now();
  for (int p = 0; p < pieces; ++p) {
    for (int r = 0; r < samples; ++r) {
      Rng rng(hashOf(1, 1, static_cast<uint64_t>(p) * samples + r));
      for (int j = 0; j < dim; ++j) x[static_cast<size_t>(r) * dim + j] = static_cast<float>(rng.next() >> 40);
    }
    sink += static_cast<int>(x[static_cast<size_t>(p) % x.size()]);
  }
  const double anchor = ms(Clock::now() - t0) / pieces;
  std::printf("{\"samples\": %d, \"dim\": %d, \"classes\": %d, \"pieces\": %d, \"teacher_piece_ms\": %.3f, "
              "\"anchor_random_floats_piece_ms\": %.3f, \"sink\": %d}\n",
              samples, dim, classes, pieces, teacher, anchor, sink & 1);
  return 0;
}
