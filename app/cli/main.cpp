// trainscope-cli: the headless front end. Everything the GUI does with sessions, the CLI does
// without a display, for clusters and scripts.
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "trainscope/core/live/live_session.h"

namespace trainscope::cli {

int fail(const core::Status& status) {
  std::fprintf(stderr, "trainscope-cli: %s\n", status.toString().c_str());
  return kExitFailed;
}

std::string withThousands(uint64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

}  // namespace trainscope::cli

int main(int argc, char** argv) {
  using namespace trainscope::cli;
  CLI::App app{"Trainscope: see and tune distributed training while it runs.\n"
               "Sessions are .tsdb files (SQLite); see docs/FORMATS.md.",
               "trainscope-cli"};
  app.set_version_flag("--version", std::string("trainscope-cli ") + TRAINSCOPE_VERSION);
  app.require_subcommand(1);
  app.fallthrough(false);

  Runner run;
  addInfoCommand(app, run);
  addExportCommand(app, run);
  addImportCommand(app, run);
  addSynthCommand(app, run);
  addEnvCommand(app, run);
  addScheduleCommand(app, run);
  addAnalyzeCommand(app, run);
  addLaunchCommand(app, run);
  addDemoCommand(app, run);
  addJobsCommand(app, run);
  addRecordCommand(app, run);
  addKnobsCommand(app, run);
  addSetCommand(app, run);
  addDoctorCommand(app, run);
  addWhatIfCommand(app, run);
  addTuneCommand(app, run);
  addCompareCommand(app, run);

  // Front ends of a job on many machines reach it through one relay (docs/RELAY.md).
  std::string relayHost, relaySecret;
  for (const char* name : {"jobs", "record", "knobs", "set", "tune", "doctor"}) {
    CLI::App* sub = app.get_subcommand(name);
    sub->add_option("--host", relayHost,
                    "HOST:PORT of a trainscope-relay of the job (any one: it reaches every machine's ranks); "
                    "default: this machine's runtime directory");
    sub->add_option("--secret-file", relaySecret,
                    "With --host: the job's secret (default: $TRAINSCOPE_SECRET_FILE, else the runtime "
                    "directory's <job>.secret)");
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  if (!relayHost.empty()) trainscope::core::LiveSession::useRelay(relayHost, relaySecret);
  try {
    return run ? run() : kExitUsage;
  } catch (const std::exception& e) {  // a bug, not an expected failure: say so plainly
    std::fprintf(stderr, "trainscope-cli: internal error: %s\n", e.what());
    return kExitFailed;
  }
}
