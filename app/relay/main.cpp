// trainscope-relay: see relay.h and docs/RELAY.md.
#include <cstdlib>
#include <cstdio>

#include <CLI/CLI.hpp>

#include "relay.h"

int main(int argc, char** argv) {
  trainscope::relay::Options o;
  CLI::App app{"trainscope-relay: one per machine of a job; front ends reach every rank of the job through "
               "any relay's one TCP port (docs/RELAY.md)"};
  app.add_option("--job", o.jobId, "The job whose ranks to serve (default: the first job found on this machine)");
  app.add_option("--listen", o.listen, "ADDR:PORT to serve front ends and other relays on (port 0: any)")
      ->capture_default_str();
  app.add_option("--coordinator", o.coordinator,
                 "HOST:PORT of the coordinator relay to register with (default: $TRAINSCOPE_RELAY_COORDINATOR, "
                 "else torchrun's $MASTER_ADDR with this relay's port; none: this relay is the coordinator)");
  app.add_option("--advertise", o.advertise,
                 "ADDR:PORT other relays reach this one at (default: the listen address, or the address this "
                 "machine reaches the coordinator from)");
  app.add_option("--machine", o.machine, "This machine's name in rank lists (default: the host name)");
  app.add_option("--secret-file", o.secretFile, "The job's secret, mode 0600 (default: $TRAINSCOPE_SECRET_FILE)");
  app.add_option("--ready-file", o.readyFile, "Write tcp:ADDR:PORT here once listening");
  app.add_option("--exit-when-idle", o.exitWhenIdleS,
                 "Exit when no rank of the job was on this machine for this many seconds, once one was (0: never)");
  app.add_flag("!--no-metrics", o.metrics, "Do not answer GET /metrics (Prometheus text) on the port");
  CLI11_PARSE(app, argc, argv);
  if (o.secretFile.empty())
    if (const char* s = std::getenv("TRAINSCOPE_SECRET_FILE")) o.secretFile = s;
  return trainscope::relay::run(o);
}
