#include "dp_knobs.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

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

DpKnobs g_knobs;  // for the checks (the agent calls them with the knob only)

void copyReason(char* out, size_t size, const std::string& why) {
  if (size == 0) return;
  const size_t n = std::min(size - 1, why.size());
  std::memcpy(out, why.data(), n);
  out[n] = 0;
}

// Server thread of the agent: reads the other knobs (atomic loads) and says why a combination
// cannot run.
int checkAlgorithm(ts_knob_t, const char* value, char* reason, size_t size, void*) {
  const auto a = parseAlgorithm(value);
  const auto c = static_cast<Compression>(ts_knob_get_enum(g_knobs.compression));
  if (!a) return 0;
  const std::string why = unsupportedCombination(*a, c);
  copyReason(reason, size, why);
  return why.empty() ? 0 : 1;
}

int checkCompression(ts_knob_t, const char* value, char* reason, size_t size, void*) {
  const auto c = parseCompression(value);
  const auto a = static_cast<Algorithm>(ts_knob_get_enum(g_knobs.algorithm));
  if (!c) return 0;
  const std::string why = unsupportedCombination(a, *c);
  copyReason(reason, size, why);
  return why.empty() ? 0 : 1;
}

int checkTopkRatio(ts_knob_t, const char*, char* reason, size_t size, void*) {
  const auto c = static_cast<Compression>(ts_knob_get_enum(g_knobs.compression));
  if (c == Compression::TopkEf) return 0;
  copyReason(reason, size,
             std::string("dp.topk_ratio acts only under dp.compression=topk-ef (now ") +
                 kCompressionNames[static_cast<int>(c)] +
                 "), where it sets the fraction of values sent; set dp.compression=topk-ef first");
  return 1;
}

}  // namespace

void DpKnobs::restore(const DpConfig& c) const {
  if (!registered()) return;
  const DpConfig now = read();
  if (now.algorithm != c.algorithm) ts_knob_restore(algorithm, kAlgorithmNames[static_cast<int>(c.algorithm)]);
  if (now.codec.kind != c.codec.kind)
    ts_knob_restore(compression, kCompressionNames[static_cast<int>(c.codec.kind)]);
}

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
                   "gradient compression, in the algorithm that runs (allreduce: Bagua's scatter-reduce; "
                   "ring, recursive-doubling, decentralized: their own messages encoded; not hierarchical)",
                   TS_KNOB_CHANGES_MATH);
  k.topkRatio = ts_knob_float("dp.topk_ratio", 1e-4, 1.0, o.topkRatio,
                              "fraction of values topk-ef keeps (set only under dp.compression=topk-ef)",
                              TS_KNOB_CHANGES_MATH);
  intptr_t kind = 0;
  for (ts_knob_t x : {k.bucketBytes, k.algorithm, k.compression, k.topkRatio})
    ts_knob_on_change(x, printApplied, reinterpret_cast<void*>(kind++));
  g_knobs = k;
  ts_knob_set_check(k.algorithm, checkAlgorithm, nullptr);
  ts_knob_set_check(k.compression, checkCompression, nullptr);
  ts_knob_set_check(k.topkRatio, checkTopkRatio, nullptr);
  return k;
}

}  // namespace trainscope::train
