// Deterministic synthetic traces shaped like a data-parallel training job: per rank a CPU thread
// (steps, phases, markers, a knob change), a compute stream (kernels correlated to launches), a
// communication stream (bucketed allreduce), pipeline-style send/recv pairs between neighbour
// ranks and a loss counter. Used by `trainscope-cli synth`, tests and benchmarks -- never passed
// off as a measurement of a real job.
#pragma once

#include <cstdint>

#include "trainscope/core/model/trace_store.h"

namespace trainscope::core {

struct SynthOptions {
  int ranks = 4;
  int steps = 10;
  int kernelsPerStep = 64;  // kernels per phase (forward/backward) per step
  int buckets = 4;
  uint64_t seed = 1;
  int64_t startNs = 1'000'000'000;  // session clock origin of the first step
};

// Appends the synthetic job to store (which may already hold other data). Returns the number
// of events appended.
size_t synthesizeTrace(TraceStore& store, const SynthOptions& options);

}  // namespace trainscope::core
