// `trainscope-cli export FILE --format chrome --out OUT`: a session as Chrome trace JSON
// (opens in Perfetto UI and chrome://tracing).
#include <cstdio>

#include "commands.h"
#include "load.h"
#include "trainscope/core/interop/chrome_trace.h"

namespace trainscope::cli {
namespace {

struct ExportOptions {
  std::string file;
  std::string format = "chrome";
  std::string out;
  std::optional<int64_t> fromNs, toNs;
};

int runExport(const ExportOptions& o) {
  if (o.format == "config") {
    return fail({core::ErrorCode::InvalidArgument,
                 o.file + ": no tuned configuration in this session (configurations are exported from "
                          "sessions recorded by `trainscope-cli tune`)"});
  }
  auto store = loadTrace(o.file);
  if (!store) return fail(store.status());
  core::ChromeExportOptions eo;
  eo.fromNs = o.fromNs;
  eo.toNs = o.toNs;
  auto stats = core::exportChromeTraceFile(store.value(), o.out, eo);
  if (!stats) return fail(stats.status());
  std::printf("wrote %s: %s events, %s flows, %s extra lanes\n", o.out.c_str(),
              withThousands(stats->events).c_str(), withThousands(stats->flows).c_str(),
              withThousands(stats->lanes).c_str());
  return kExitOk;
}

}  // namespace

void addExportCommand(CLI::App& app, Runner& run) {
  auto opts = std::make_shared<ExportOptions>();
  CLI::App* cmd = app.add_subcommand("export", "Export a session as Chrome trace JSON (Perfetto UI) or a tuned configuration");
  cmd->add_option("FILE", opts->file, "Session file (.tsdb, or a Chrome .json)")->required();
  cmd->add_option("--format", opts->format, "chrome | config")
      ->check(CLI::IsMember({"chrome", "config"}))
      ->capture_default_str();
  cmd->add_option("--out,-o", opts->out, "Output file")->required();
  cmd->add_option("--from-ns", opts->fromNs, "Only events overlapping [from, to) (session clock, ns)");
  cmd->add_option("--to-ns", opts->toNs, "End of the exported window (ns)");
  cmd->callback([opts, &run] { run = [opts] { return runExport(*opts); }; });
}

}  // namespace trainscope::cli
