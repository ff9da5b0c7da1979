/* Trainscope agent C API (C99). This header is what training jobs include; the library is
 * injected into other people's processes, so everything here is plain C, returns error codes,
 * never throws and never blocks. The capture API (ranges, steps, knobs) arrives with the agent
 * runtime; this is its versioned entry point. */
#ifndef TRAINSCOPE_AGENT_H
#define TRAINSCOPE_AGENT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TRAINSCOPE_AGENT_ABI_VERSION 1

#if defined(__GNUC__)
#define TS_AGENT_API __attribute__((visibility("default")))
#else
#define TS_AGENT_API
#endif

/* The ABI version the loaded library implements (compare with TRAINSCOPE_AGENT_ABI_VERSION). */
TS_AGENT_API int ts_agent_abi_version(void);

/* A one-line description of the build ("trainscope-agent 0.1.0 gpu=1 cuda=13000 nccl=22809").
 * Writes at most len bytes including the terminating NUL; returns the length it needed. */
TS_AGENT_API size_t ts_agent_build_info(char* buf, size_t len);

/* Runs a tiny CUDA kernel on device 0 and checks its result. Returns 0 on success, a negative
 * number when the build has no GPU support, a positive CUDA error code otherwise; msg (may be
 * NULL) receives a human-readable reason. */
TS_AGENT_API int ts_agent_cuda_selftest(char* msg, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* TRAINSCOPE_AGENT_H */
