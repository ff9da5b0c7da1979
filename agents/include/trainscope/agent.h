/* Trainscope agent C API (C99). This header is what training jobs include; the library is
 * injected into other people's processes, so everything here is plain C, returns error codes,
 * never throws and never blocks.
 *
 * Capture calls (ranges, steps, comm, ...) cost a clock read and one 32-byte store into a
 * per-thread ring; they are no-ops until the agent is initialized (ts_init / ts_init_from_env,
 * or automatically at load time when TRAINSCOPE_JOB_ID is set). Names are interned once with
 * ts_name() and the id is reused (the TS_* macros cache it in a static local).
 *
 * Define TRAINSCOPE_DISABLE_TRACING before including this header to compile the TS_* macros
 * to nothing. */
#ifndef TRAINSCOPE_AGENT_H
#define TRAINSCOPE_AGENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TRAINSCOPE_AGENT_ABI_VERSION 1

#if defined(__GNUC__)
#define TS_AGENT_EXPORT __attribute__((visibility("default")))
#else
#define TS_AGENT_EXPORT
#endif
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
/* noplt: callers reach the library through its GOT entry directly instead of a PLT stub (one
   jump less on every traced call; GCC only). Functions only. */
#define TS_AGENT_API TS_AGENT_EXPORT __attribute__((noplt))
#else
#define TS_AGENT_API TS_AGENT_EXPORT
#endif

/* ---- build information ------------------------------------------------------------------ */

/* The ABI version the loaded library implements (compare with TRAINSCOPE_AGENT_ABI_VERSION). */
TS_AGENT_API int ts_agent_abi_version(void);

/* A one-line description of the build ("trainscope-agent 0.1.0 gpu=1 cuda=13000 nccl=22809").
 * Writes at most len bytes including the terminating NUL; returns the length it needed. */
TS_AGENT_API size_t ts_agent_build_info(char* buf, size_t len);

/* Runs a tiny CUDA kernel on device 0 and checks its result. Returns 0 on success, a negative
 * number when the build has no GPU support, a positive CUDA error code otherwise; msg (may be
 * NULL) receives a human-readable reason. */
TS_AGENT_API int ts_agent_cuda_selftest(char* msg, size_t len);

/* ---- life cycle ------------------------------------------------------------------------- */

/* Return codes of ts_init*. */
#define TS_OK 0
#define TS_ALREADY_INITIALIZED 1
#define TS_DISABLED 2          /* TRAINSCOPE_DISABLE is set: the agent stays off */
#define TS_ERR_INTERNAL (-1)   /* unexpected failure; the agent stays off */
#define TS_ERR_LISTEN (-2)     /* the control server could not listen (capture still runs) */

/* Fields left at their TS_INIT_PARAMS_DEFAULT values are taken from the environment:
 * job id: TRAINSCOPE_JOB_ID, PMIX_NAMESPACE, SLURM_JOB_ID, TORCHELASTIC_RUN_ID, "job-<ppid>";
 * rank: TRAINSCOPE_RANK, OMPI_COMM_WORLD_RANK, PMIX_RANK, RANK, SLURM_PROCID, 0;
 * world size: TRAINSCOPE_WORLD_SIZE, OMPI_COMM_WORLD_SIZE, WORLD_SIZE, SLURM_NTASKS, 1;
 * local rank: TRAINSCOPE_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, LOCAL_RANK, SLURM_LOCALID, 0. */
typedef struct ts_init_params {
  size_t struct_size;   /* sizeof(ts_init_params): lets later versions add fields */
  const char* job_id;   /* NULL: environment */
  int32_t rank;         /* < 0: environment */
  int32_t world_size;   /* <= 0: environment */
  int32_t local_rank;   /* < 0: environment */
  const char* hostname; /* NULL: gethostname() */
} ts_init_params;

#define TS_INIT_PARAMS_DEFAULT {sizeof(ts_init_params), NULL, -1, 0, -1, NULL}

/* Starts the agent (capture, drain thread, control server, discovery file). */
TS_AGENT_API int ts_init(const ts_init_params* params);
TS_AGENT_API int ts_init_from_env(void);
/* Flushes, closes the server, removes the discovery file. Also runs at exit. */
TS_AGENT_API void ts_shutdown(void);
/* 1 while the agent is running. */
TS_AGENT_API int ts_is_active(void);

/* ---- capture ---------------------------------------------------------------------------- */

/* Interns a string once; may lock and allocate, so cache the id. 0 is the empty name. */
TS_AGENT_API uint32_t ts_name(const char* name);

/* Nested ranges on the calling thread (push/pop pair by nesting). */
TS_AGENT_API void ts_range_push(uint32_t name);
TS_AGENT_API void ts_range_pop(void);
/* Ranges identified by id: may end on another thread. */
TS_AGENT_API uint64_t ts_range_begin(uint32_t name);
TS_AGENT_API void ts_range_end(uint64_t id);

TS_AGENT_API void ts_marker(uint32_t name);
TS_AGENT_API void ts_counter(uint32_t name, double value);

/* Step windows. Knob changes agreed at ts_step_end(k) are applied inside ts_step_begin(k+1). */
TS_AGENT_API void ts_step_begin(int64_t step);
TS_AGENT_API void ts_step_end(int64_t step);

typedef enum ts_phase { TS_PHASE_FORWARD = 0, TS_PHASE_BACKWARD = 1, TS_PHASE_OPTIMIZER = 2 } ts_phase;
TS_AGENT_API void ts_phase_begin(ts_phase phase);
TS_AGENT_API void ts_phase_end(ts_phase phase);

/* Pipeline micro-batch operations: F (forward), B (input gradient), W (weight gradient). */
typedef enum ts_mb_op { TS_MB_F = 0, TS_MB_B = 1, TS_MB_W = 2 } ts_mb_op;
TS_AGENT_API void ts_mb_begin(ts_mb_op op, int32_t microbatch, int32_t stage, int32_t chunk);
/* As ts_mb_begin, for one sequence segment of the micro-batch (Seq1F1B): the event also carries
 * Segment, SegmentOffset (first position) and SegmentLength (positions). chunk and segment must
 * be in 0..65535. */
TS_AGENT_API void ts_mb_begin_segment(ts_mb_op op, int32_t microbatch, int32_t stage, int32_t chunk,
                                      int32_t segment, int32_t offset, int32_t length);
TS_AGENT_API void ts_mb_end(void);

/* Data-parallel gradient buckets: ready -> communication begin -> end (may be other threads). */
TS_AGENT_API void ts_bucket_ready(int32_t bucket, uint64_t bytes);
TS_AGENT_API void ts_bucket_comm_begin(int32_t bucket, uint64_t bytes);
TS_AGENT_API void ts_bucket_comm_end(int32_t bucket);
/* As ts_bucket_comm_begin, and names the algorithm (a ts_name id, 0: none) that reduces the
 * bucket: the Collective event carries it as its Algorithm attribute. */
TS_AGENT_API void ts_bucket_comm_begin2(int32_t bucket, uint64_t bytes, uint32_t algorithm);
/* As ts_bucket_comm_end, with what the transport counted for the bucket on this rank: bytes
 * sent and received by its completed operations. The Collective event then carries them as
 * the attributes bytes_sent and bytes_received (its Bytes stay the payload given to begin).
 * counted = 0: the library chose the messages itself (an MPI reduction): nothing is attached. */
TS_AGENT_API void ts_bucket_comm_end2(int32_t bucket, uint64_t bytes_sent, uint64_t bytes_received, int counted);

/* A compute kernel run on the calling thread's CPU (a GEMM, a layer's forward or backward):
 * Kernel event on the thread's track with attribute Layer (layer < 0: none). Pairs by nesting. */
TS_AGENT_API void ts_kernel_begin(uint32_t name, int32_t layer);
TS_AGENT_API void ts_kernel_end(void);

/* Communication on the calling thread; pairs by nesting. peer < 0: none; algorithm: a ts_name
 * id or 0. */
typedef enum ts_comm_kind { TS_COMM_COLLECTIVE = 0, TS_COMM_SEND = 1, TS_COMM_RECV = 2 } ts_comm_kind;
TS_AGENT_API void ts_comm_begin(ts_comm_kind kind, uint32_t name, uint64_t bytes, int32_t peer,
                                uint32_t algorithm);
TS_AGENT_API void ts_comm_end(void);
/* As ts_comm_begin, for communication that belongs to a model layer (DISCO's feature exchange):
 * the event carries Layer = layer (no Algorithm). Ends with ts_comm_end. */
TS_AGENT_API void ts_comm_begin_layer(ts_comm_kind kind, uint32_t name, uint64_t bytes, int32_t peer,
                                      int32_t layer);

/* ts_name: at most 1,048,576 distinct names and 8 MiB of text per process (each name cut at
 * 1,024 bytes), so that no job can make the agent's frames larger than clients accept; past the
 * limit every new name maps to "(name table full)" and ts_names_refused() counts it. */
TS_AGENT_API uint64_t ts_names_refused(void);

/* Records the agent had to drop (ring full, memory budget) since start. */
TS_AGENT_API uint64_t ts_dropped_events(void);

/* ---- knobs ------------------------------------------------------------------------------ */

typedef struct ts_knob* ts_knob_t;
#define TS_KNOB_CHANGES_MATH 1u

/* Registers a knob (or returns the existing one of that name and type); NULL on bad arguments,
 * with the reason in ts_knob_error(): min > max, a default outside [min, max], an empty name, a
 * name over 128 bytes, a description over 4096 bytes, more than 64 choices or a choice over 128
 * bytes, more than 256 knobs, or a name already declared with another type. Works before ts_init.
 * Reading a value is one atomic load. */
TS_AGENT_API ts_knob_t ts_knob_int(const char* name, int64_t min, int64_t max, int64_t def,
                                   const char* desc, unsigned flags);
TS_AGENT_API ts_knob_t ts_knob_float(const char* name, double min, double max, double def,
                                     const char* desc, unsigned flags);
TS_AGENT_API ts_knob_t ts_knob_bool(const char* name, int def, const char* desc, unsigned flags);
TS_AGENT_API ts_knob_t ts_knob_enum(const char* name, const char* const* choices, int n, int def,
                                    const char* desc, unsigned flags);
TS_AGENT_API int64_t ts_knob_get_int(ts_knob_t k);
TS_AGENT_API double ts_knob_get_float(ts_knob_t k);
TS_AGENT_API int ts_knob_get_bool(ts_knob_t k);
TS_AGENT_API int ts_knob_get_enum(ts_knob_t k); /* index into choices */
TS_AGENT_API const char* ts_knob_name(ts_knob_t k);
/* Why the last ts_knob_int/float/bool/enum call on this thread returned NULL ("" after a success). */
TS_AGENT_API const char* ts_knob_error(void);

/* The job sets one of its own knobs to `value` (text as `trainscope-cli set` takes it): back,
 * after refusing an agreed change it cannot run (a combination of pipeline knobs), or to follow
 * another knob (a global value that sets per-layer ones). Call it on every rank alike, at the
 * step boundary, on the thread that runs ts_step_begin. The knob then
 * reads and lists `value`, a KnobChange event at the current step records it, and change
 * callbacks run. 0 on success, -1 for a null knob or a value the knob does not accept. */
TS_AGENT_API int ts_knob_restore(ts_knob_t k, const char* value);

/* Called on the thread that runs ts_step_begin, after the new value is visible. */
typedef void (*ts_knob_callback)(ts_knob_t knob, void* ctx);
TS_AGENT_API int ts_knob_on_change(ts_knob_t k, ts_knob_callback cb, void* ctx);

/* A check the job runs on a proposed change before the agent accepts it: called on the agent's
 * server thread when `trainscope-cli set` sends a value that parsed, with the value as text.
 * Return 0 to accept; anything else refuses the change, and the NUL-terminated text written to
 * reason (at most reason_size bytes) travels back to the client in the refusal. It must not
 * block, and may only read knobs (ts_knob_get_*, ts_knob_name); it runs under the registry's
 * lock. Another change accepted but not yet applied is not seen by it: the job re-checks the
 * combination at the step boundary (and puts knobs back with ts_knob_restore). One check per
 * knob; a later call replaces it, fn = NULL removes it. 0 on success, -1 for a null knob. */
typedef int (*ts_knob_check_fn)(ts_knob_t knob, const char* value, char* reason, size_t reason_size, void* ctx);
TS_AGENT_API int ts_knob_set_check(ts_knob_t k, ts_knob_check_fn fn, void* ctx);

/* Agreement across ranks: an allreduce-MIN of local over all ranks (e.g. MPI_Allreduce with
 * MPI_MIN). Called by every rank inside every ts_step_end. Needed when world size > 1. */
typedef int64_t (*ts_agree_fn)(int64_t local, void* ctx);
TS_AGENT_API void ts_set_agree_fn(ts_agree_fn fn, void* ctx);

/* ---- macros ----------------------------------------------------------------------------- */

#define TS_CAT_INNER(a, b) a##b
#define TS_CAT(a, b) TS_CAT_INNER(a, b)

#if defined(TRAINSCOPE_DISABLE_TRACING)
#define TS_NAME_ID(str) ((uint32_t)0)
#define TS_RANGE_PUSH(str) ((void)0)
#define TS_RANGE_POP() ((void)0)
#define TS_MARKER(str) ((void)0)
#define TS_COUNTER(str, v) ((void)0)
#else
/* A statement expression caches the interned id in a function-local static (GNU C / C++). */
#define TS_NAME_ID(str) \
  (__extension__({ static uint32_t ts_id_ = 0; if (!ts_id_) ts_id_ = ts_name(str); ts_id_; }))
#define TS_RANGE_PUSH(str) ts_range_push(TS_NAME_ID(str))
#define TS_RANGE_POP() ts_range_pop()
#define TS_MARKER(str) ts_marker(TS_NAME_ID(str))
#define TS_COUNTER(str, v) ts_counter(TS_NAME_ID(str), (v))
#endif

#ifdef __cplusplus
}  /* extern "C" */

#if defined(TRAINSCOPE_DISABLE_TRACING)
#define TS_RANGE(str) ((void)0)
#else
namespace trainscope {
/* Scope guard behind TS_RANGE: pops on every exit path. */
struct ScopedRange {
  explicit ScopedRange(uint32_t id) { ts_range_push(id); }
  ~ScopedRange() { ts_range_pop(); }
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;
};
}  // namespace trainscope
#define TS_RANGE(str) ::trainscope::ScopedRange TS_CAT(ts_range_, __LINE__)(TS_NAME_ID(str))
#endif
#endif /* __cplusplus */

#endif /* TRAINSCOPE_AGENT_H */
