// The exported C API. Every entry that can reach code that may throw catches everything: no
// exception may cross into the host process. Capture entries only touch the lock-free path.
#include <sys/prctl.h>

#include <bit>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "capture.h"
#include "knobs.h"
#include "log.h"
#include "outbox.h"
#include "runtime.h"
#include "string_table.h"
#include "trainscope/agent.h"

using namespace trainscope::agent;
using trainscope::core::wire::KnobType;

namespace {
// TRAINSCOPE_DISABLE=1 (anything but "" or "0") keeps the agent off even when the job calls
// ts_init: the library can stay linked/preloaded and cost nothing.
bool disabledByEnv() {
  const char* d = std::getenv("TRAINSCOPE_DISABLE");
  return d && *d && std::strcmp(d, "0") != 0;
}

thread_local std::string t_knobError;

ts_knob_t knobFails(std::string why) {
  t_knobError = std::move(why);
  return nullptr;
}

ts_knob_t addKnob(std::unique_ptr<ts_knob> k, const char* name, const char* desc, unsigned flags) {
  // Bounded (issue 40): a KnobList reply carries every knob; a 20 MB description once made it
  // larger than clients accept, and `knobs`, `set` and `record` failed for the job's life.
  if (!name || !*name) return knobFails("a knob needs a name");
  const size_t nameLen = std::strlen(name);
  if (nameLen > kMaxKnobName) return knobFails("knob name over " + std::to_string(kMaxKnobName) + " bytes");
  if (desc && std::strlen(desc) > kMaxKnobDescription)
    return knobFails(std::string(name) + ": description over " + std::to_string(kMaxKnobDescription) + " bytes");
  for (const std::string& c : k->choices)
    if (c.size() > kMaxKnobChoice)
      return knobFails(std::string(name) + ": a choice over " + std::to_string(kMaxKnobChoice) + " bytes");
  k->name = name;
  k->description = desc ? desc : "";
  k->flags = flags;
  std::string why;
  ts_knob* out = KnobRegistry::instance().add(std::move(k), &why);
  t_knobError = out ? std::string() : why;
  return out;
}
}  // namespace

extern "C" {

TS_AGENT_API int ts_init(const ts_init_params* params) {
  if (disabledByEnv()) return TS_DISABLED;
  try {
    return initRuntime(params);
  } catch (...) {
    logLine("initialization failed; the agent stays off");
    return TS_ERR_INTERNAL;
  }
}

TS_AGENT_API int ts_init_from_env(void) { return ts_init(nullptr); }

TS_AGENT_API void ts_shutdown(void) {
  try {
    shutdownRuntime();
  } catch (...) {
    logLine("shutdown failed");
  }
}

TS_AGENT_API int ts_is_active(void) { return Capture::instance().active() ? 1 : 0; }

TS_AGENT_API uint32_t ts_name(const char* name) {
  if (!name) return 0;
  try {
    return StringTable::instance().intern(name);
  } catch (...) {
    return 0;
  }
}

TS_AGENT_API void ts_range_push(uint32_t name) { pushRecord(RecordType::RangePush, 0, name, 0, 0); }
TS_AGENT_API void ts_range_pop(void) { pushRecord(RecordType::RangePop, 0, 0, 0, 0); }

TS_AGENT_API uint64_t ts_range_begin(uint32_t name) {
  if (!Capture::instance().active()) return 0;
  ThreadRing* r = currentRing();
  // Thread index in the high bits: ids are unique without a shared counter.
  const uint64_t id = r ? (static_cast<uint64_t>(r->index + 1) << 40) | (++r->nextRangeId & ((1ull << 40) - 1)) : 0;
  pushRecord(RecordType::RangeBegin, 0, name, id, 0);
  return id;
}
TS_AGENT_API void ts_range_end(uint64_t id) {
  if (id != 0) pushRecord(RecordType::RangeEnd, 0, 0, id, 0);
}

TS_AGENT_API void ts_marker(uint32_t name) { pushRecord(RecordType::Marker, 0, name, 0, 0); }
TS_AGENT_API void ts_counter(uint32_t name, double value) {
  pushRecord(RecordType::Counter, 0, name, std::bit_cast<uint64_t>(value), 0);
}

TS_AGENT_API void ts_step_begin(int64_t step) {
  globals().currentStep.store(step, std::memory_order_relaxed);
  try {
    KnobRegistry::instance().applyAtStepBegin(
        step, [](const trainscope::core::wire::KnobAck& a) { Outbox::instance().post(a); });
  } catch (...) {
    logLine("applying knob changes failed");
  }
  pushRecord(RecordType::StepBegin, 0, 0, static_cast<uint64_t>(step), 0);
}

TS_AGENT_API void ts_step_end(int64_t step) {
  pushRecord(RecordType::StepEnd, 0, 0, static_cast<uint64_t>(step), 0);
  // Every rank runs the agreement at every step end, so the collective always matches up.
  if (!Capture::instance().active()) return;
  Globals& g = globals();
  const ts_agree_fn fn = g.agreeFn.load();
  if (g.worldSize.load() > 1 && !fn) return;  // changes are refused in this configuration
  try {
    KnobRegistry::instance().agreeAtStepEnd(g.worldSize.load() > 1 ? fn : nullptr, g.agreeCtx.load());
  } catch (...) {
    logLine("knob agreement failed");
  }
}

TS_AGENT_API void ts_phase_begin(ts_phase phase) { pushRecord(RecordType::PhaseBegin, static_cast<uint8_t>(phase), 0, 0, 0); }
TS_AGENT_API void ts_phase_end(ts_phase phase) { pushRecord(RecordType::PhaseEnd, static_cast<uint8_t>(phase), 0, 0, 0); }

TS_AGENT_API void ts_mb_begin(ts_mb_op op, int32_t microbatch, int32_t stage, int32_t chunk) {
  pushRecord(RecordType::MbBegin, static_cast<uint8_t>(op), 0, static_cast<uint64_t>(microbatch),
       packPair(stage, static_cast<uint32_t>(chunk)));
}
TS_AGENT_API void ts_mb_begin_segment(ts_mb_op op, int32_t microbatch, int32_t stage, int32_t chunk,
                                      int32_t segment, int32_t offset, int32_t length) {
  // Bit 2 of the sub-type: a segment; a = offset << 32 | micro-batch, b = stage << 32 |
  // segment << 16 | chunk, name = length.
  pushRecord(RecordType::MbBegin, static_cast<uint8_t>(op | 4), static_cast<uint32_t>(length),
             packPair(offset, static_cast<uint32_t>(microbatch)),
             packPair(stage, (static_cast<uint32_t>(segment) & 0xffffu) << 16 |
                                 (static_cast<uint32_t>(chunk) & 0xffffu)));
}
TS_AGENT_API void ts_mb_end(void) { pushRecord(RecordType::MbEnd, 0, 0, 0, 0); }

TS_AGENT_API void ts_bucket_ready(int32_t bucket, uint64_t bytes) {
  pushRecord(RecordType::BucketReady, 0, 0, bytes, static_cast<uint32_t>(bucket));
}
TS_AGENT_API void ts_bucket_comm_begin(int32_t bucket, uint64_t bytes) {
  pushRecord(RecordType::BucketCommBegin, 0, 0, bytes, static_cast<uint32_t>(bucket));
}
TS_AGENT_API void ts_bucket_comm_begin2(int32_t bucket, uint64_t bytes, uint32_t algorithm) {
  pushRecord(RecordType::BucketCommBegin, 0, algorithm, bytes, static_cast<uint32_t>(bucket));
}
TS_AGENT_API void ts_kernel_begin(uint32_t name, int32_t layer) {
  pushRecord(RecordType::KernelBegin, 0, name, static_cast<uint64_t>(static_cast<int64_t>(layer)), 0);
}
TS_AGENT_API void ts_kernel_end(void) { pushRecord(RecordType::KernelEnd, 0, 0, 0, 0); }
TS_AGENT_API void ts_bucket_comm_end(int32_t bucket) {
  pushRecord(RecordType::BucketCommEnd, 0, 0, 0, static_cast<uint32_t>(bucket));
}
TS_AGENT_API void ts_bucket_comm_end2(int32_t bucket, uint64_t bytes_sent, uint64_t bytes_received, int counted) {
  if (counted) pushRecord(RecordType::BucketCommBytes, 0, static_cast<uint32_t>(bucket), bytes_sent, bytes_received);
  pushRecord(RecordType::BucketCommEnd, 0, 0, 0, static_cast<uint32_t>(bucket));
}

TS_AGENT_API void ts_comm_begin(ts_comm_kind kind, uint32_t name, uint64_t bytes, int32_t peer, uint32_t algorithm) {
  pushRecord(RecordType::CommBegin, static_cast<uint8_t>(kind), name, bytes, packPair(peer, algorithm));
}
TS_AGENT_API void ts_comm_begin_layer(ts_comm_kind kind, uint32_t name, uint64_t bytes, int32_t peer,
                                      int32_t layer) {
  // Bit 2 of the sub-type: the low half of b is a layer, not an algorithm name.
  pushRecord(RecordType::CommBegin, static_cast<uint8_t>(kind | 4), name, bytes,
             packPair(peer, static_cast<uint32_t>(layer)));
}
TS_AGENT_API void ts_comm_end(void) { pushRecord(RecordType::CommEnd, 0, 0, 0, 0); }

TS_AGENT_API uint64_t ts_dropped_events(void) { return Capture::instance().dropped(); }
TS_AGENT_API uint64_t ts_names_refused(void) { return StringTable::instance().refused(); }
TS_AGENT_API const char* ts_knob_error(void) { return t_knobError.c_str(); }

// ---- knobs ----------------------------------------------------------------------------------

TS_AGENT_API ts_knob_t ts_knob_int(const char* name, int64_t min, int64_t max, int64_t def, const char* desc,
                                   unsigned flags) {
  if (min > max) return knobFails(std::string(name ? name : "?") + ": min > max");
  if (def < min || def > max) return knobFails(std::string(name ? name : "?") + ": the default is outside [min, max]");
  try {
    auto k = std::make_unique<ts_knob>();
    k->type = KnobType::Int;
    k->min = static_cast<double>(min);
    k->max = static_cast<double>(max);
    k->intMin = min;
    k->intMax = max;
    k->defaultBits = std::bit_cast<uint64_t>(def);
    return addKnob(std::move(k), name, desc, flags);
  } catch (...) {
    return nullptr;
  }
}

TS_AGENT_API ts_knob_t ts_knob_float(const char* name, double min, double max, double def, const char* desc,
                                     unsigned flags) {
  if (!(min <= max)) return knobFails(std::string(name ? name : "?") + ": min > max (or not a number)");
  if (!(def >= min) || !(def <= max))
    return knobFails(std::string(name ? name : "?") + ": the default is outside [min, max]");
  try {
    auto k = std::make_unique<ts_knob>();
    k->type = KnobType::Float;
    k->min = min;
    k->max = max;
    k->defaultBits = std::bit_cast<uint64_t>(def);
    return addKnob(std::move(k), name, desc, flags);
  } catch (...) {
    return nullptr;
  }
}

TS_AGENT_API ts_knob_t ts_knob_bool(const char* name, int def, const char* desc, unsigned flags) {
  try {
    auto k = std::make_unique<ts_knob>();
    k->type = KnobType::Bool;
    k->min = 0;
    k->max = 1;
    k->defaultBits = def ? 1 : 0;
    return addKnob(std::move(k), name, desc, flags);
  } catch (...) {
    return nullptr;
  }
}

TS_AGENT_API ts_knob_t ts_knob_enum(const char* name, const char* const* choices, int n, int def, const char* desc,
                                    unsigned flags) {
  if (!choices || n <= 0) return knobFails(std::string(name ? name : "?") + ": an enum needs choices");
  if (n > static_cast<int>(kMaxKnobChoices))
    return knobFails(std::string(name ? name : "?") + ": more than " + std::to_string(kMaxKnobChoices) + " choices");
  if (def < 0 || def >= n) return knobFails(std::string(name ? name : "?") + ": the default is not one of the choices");
  try {
    auto k = std::make_unique<ts_knob>();
    k->type = KnobType::Enum;
    for (int i = 0; i < n; ++i) {
      if (!choices[i]) return knobFails(std::string(name ? name : "?") + ": a choice is NULL");
      k->choices.emplace_back(choices[i]);
    }
    k->min = 0;
    k->max = n - 1;
    k->defaultBits = static_cast<uint64_t>(def);
    return addKnob(std::move(k), name, desc, flags);
  } catch (...) {
    return nullptr;
  }
}

TS_AGENT_API int64_t ts_knob_get_int(ts_knob_t k) {
  return k ? std::bit_cast<int64_t>(k->bits.load(std::memory_order_acquire)) : 0;
}
TS_AGENT_API double ts_knob_get_float(ts_knob_t k) {
  return k ? std::bit_cast<double>(k->bits.load(std::memory_order_acquire)) : 0.0;
}
TS_AGENT_API int ts_knob_get_bool(ts_knob_t k) { return k && k->bits.load(std::memory_order_acquire) ? 1 : 0; }
TS_AGENT_API int ts_knob_get_enum(ts_knob_t k) {
  return k ? static_cast<int>(k->bits.load(std::memory_order_acquire)) : 0;
}
TS_AGENT_API const char* ts_knob_name(ts_knob_t k) { return k ? k->name.c_str() : ""; }

TS_AGENT_API int ts_knob_restore(ts_knob_t k, const char* value) {
  if (!k || !value) return -1;
  try {
    const int64_t step = globals().currentStep.load(std::memory_order_relaxed);
    return KnobRegistry::instance().restore(k, value, step < 0 ? 0 : step) ? 0 : -1;
  } catch (...) {
    return -1;
  }
}

TS_AGENT_API int ts_knob_on_change(ts_knob_t k, ts_knob_callback cb, void* ctx) {
  try {
    return KnobRegistry::instance().onChange(k, cb, ctx) ? 0 : -1;
  } catch (...) {
    return -1;
  }
}

TS_AGENT_API int ts_knob_set_check(ts_knob_t k, ts_knob_check_fn fn, void* ctx) {
  try {
    return KnobRegistry::instance().setCheck(k, fn, ctx) ? 0 : -1;
  } catch (...) {
    return -1;
  }
}

TS_AGENT_API void ts_set_agree_fn(ts_agree_fn fn, void* ctx) {
  globals().agreeCtx.store(ctx);
  globals().agreeFn.store(fn);
}

}  // extern "C"

// LD_PRELOAD alone must work: start at load time when the job id is in the environment. The
// launchers themselves (mpirun, orted, ...) inherit the same environment and are skipped (also
// by InitializeInjection: a CUDA-aware mpirun/orted calls cuInit too).
bool trainscope::agent::isLauncherProcess() {
  char comm[32] = {};
  if (prctl(PR_GET_NAME, comm) != 0) return false;
  // Launchers and the shells/wrappers that commonly sit between them and the job: they would
  // otherwise claim the job's <job>.<rank> socket before the real rank process does.
  static const char* const kLaunchers[] = {"mpirun", "mpiexec", "orterun", "orted", "prterun", "prted",
                                           "srun", "torchrun", "hydra_pmi_proxy", "sh", "bash", "dash",
                                           "zsh", "env", "timeout", "nohup", "stdbuf", "numactl", "taskset",
                                           // Our own tools link the agent too (for `env`); they are clients.
                                           "trainscope-cli", "trainscope"};
  for (const char* l : kLaunchers)
    if (std::strcmp(comm, l) == 0) return true;
  return false;
}

namespace {

__attribute__((constructor)) void autoInit() {
  const char* job = std::getenv("TRAINSCOPE_JOB_ID");
  const char* off = std::getenv("TRAINSCOPE_AUTOSTART");
  if (!job || !*job || (off && std::strcmp(off, "0") == 0) || disabledByEnv() || isLauncherProcess()) return;
  ts_init_from_env();
}
}  // namespace
