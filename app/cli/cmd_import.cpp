// `trainscope-cli import IN --out FILE.tsdb`: Chrome trace / Kineto (PyTorch profiler) JSON
// into a session file.
#include <cstdio>

#include "commands.h"
#include "trainscope/core/interop/chrome_trace.h"
#include "trainscope/core/session/tsdb.h"

namespace trainscope::cli {
namespace {

struct ImportOptions {
  std::string in;
  std::string out;
};

int runImport(const ImportOptions& o) {
  auto store = core::importChromeTraceFile(o.in);
  if (!store) return fail(store.status());
  store->metadata()["imported_from"] = o.in;
  if (auto st = core::saveSession(store.value(), o.out); !st) return fail(st);
  std::printf("wrote %s: %s events, %zu ranks, %zu tracks\n", o.out.c_str(),
              withThousands(store->eventCount()).c_str(), store->ranks().size(), store->trackCount());
  return kExitOk;
}

}  // namespace

void addImportCommand(CLI::App& app, Runner& run) {
  auto opts = std::make_shared<ImportOptions>();
  CLI::App* cmd = app.add_subcommand("import", "Import a Chrome trace / PyTorch profiler (Kineto) JSON file into a .tsdb session");
  cmd->add_option("IN", opts->in, "Chrome trace JSON")->required();
  cmd->add_option("--out,-o", opts->out, "Session file to write (.tsdb)")->required();
  cmd->callback([opts, &run] { run = [opts] { return runImport(*opts); }; });
}

}  // namespace trainscope::cli
