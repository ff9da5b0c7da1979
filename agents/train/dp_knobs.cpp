#include "dp_knobs.h"

#include <cstdint>
#include <cstdio>

namespace trainscope::train {
namespace {

const int* g_rank = nullptr;
int64_t g_step = -1;

void printApplied(ts_knob_t k, void* ctx) {
  char v[64];
  switch (reinterpret_cast<intptr_t>(ctx)) {
    case 0:
      std::snprintf(v, sizeof v, "%lld", static_cast<long long>(ts_knob_get_int(k)));
      break;
    case 1:
      std::snprintf(v, sizeof v, "%s", kAlgorithmNames[ts_knob_get_enum(k)]);
      break;
    case 2:
      std::snprintf(v, sizeof v, "%s", kCompressionNames[ts_knob_get_enum(k)]);
      break;
    default:
      std::snprintf(v, sizeof v, "%g", ts_knob_get_float(k));
      break;
  }
  std::printf("rank %d applied %s=%s at step %lld\n", g_rank ? *g_rank : -1, ts_knob_name(k), v,
              static_cast<long long>(g_step));
  std::fflush(stdout);
}

}  // namespace

DpConfig DpKnobs::read() const {
  DpConfig c;
  c.bucketBytes = ts_knob_get_int(bucketBytes);
  c.algorithm = static_cast<Algorithm>(ts_knob_get_enum(algorithm));
  c.codec.kind = static_cast<Compression>(ts_knob_get_enum(compression));
  c.codec.topkRatio = ts_knob_get_float(topkRatio);
  return c;
}

void DpKnobs::noteStep(int64_t step) {
  g_step = step;
}

DpKnobs registerDpKnobs(const Options& o, const int* rank) {
  g_rank = rank;
  DpKnobs k;
  k.bucketBytes = ts_knob_int("dp.bucket_bytes", 1, int64_t{1} << 30, o.bucketBytes,
                              "gradient bucket size in bytes (re-bucketing at the step boundary)", 0);
  k.algorithm =
      ts_knob_enum("dp.algorithm", kAlgorithmNames, 5, static_cast<int>(*parseAlgorithm(o.algorithm)),
                   "gradient reduction algorithm (decentralized averages with ring neighbours only)",
                   TS_KNOB_CHANGES_MATH);
  k.compression =
      ts_knob_enum("dp.compression", kCompressionNames, 5, static_cast<int>(*parseCompression(o.compression)),
                   "gradient compression: compress, scatter-reduce, compress merged chunk, allgather",
                   TS_KNOB_CHANGES_MATH);
  k.topkRatio = ts_knob_float("dp.topk_ratio", 1e-4, 1.0, o.topkRatio, "fraction of values topk-ef keeps",
                              TS_KNOB_CHANGES_MATH);
  intptr_t kind = 0;
  for (ts_knob_t x : {k.bucketBytes, k.algorithm, k.compression, k.topkRatio})
    ts_knob_on_change(x, printApplied, reinterpret_cast<void*>(kind++));
  return k;
}

}  // namespace trainscope::train
