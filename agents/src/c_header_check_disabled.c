/* The same header with TRAINSCOPE_DISABLE_TRACING: the macros compile to nothing. */
#define TRAINSCOPE_DISABLE_TRACING 1
#include "trainscope/agent.h"

void trainscope_agent_c_header_check_disabled(void);
void trainscope_agent_c_header_check_disabled(void) {
  TS_RANGE_PUSH("c-range");
  TS_MARKER("c-marker");
  TS_COUNTER("c-counter", 1.0);
  TS_RANGE_POP();
}
