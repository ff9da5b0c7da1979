/* Compiled as C99 in every build: the public header must stay valid C (jobs written in C, and
 * FFI generators, include it), with and without the tracing macros enabled. */
#include "trainscope/agent.h"

static void use_macros(void) {
  TS_RANGE_PUSH("c-range");
  TS_MARKER("c-marker");
  TS_COUNTER("c-counter", 1.0);
  TS_RANGE_POP();
  ts_comm_begin(TS_COMM_SEND, TS_NAME_ID("send"), 64, 1, 0);
  ts_comm_end();
  ts_kernel_begin(TS_NAME_ID("c-kernel"), 0);
  ts_kernel_end();
  ts_bucket_comm_begin2(0, 64, TS_NAME_ID("ring"));
  ts_bucket_comm_end(0);
}

void trainscope_agent_c_header_check(void);
void trainscope_agent_c_header_check(void) {
  ts_init_params p = TS_INIT_PARAMS_DEFAULT;
  (void)p;
  use_macros();
}
