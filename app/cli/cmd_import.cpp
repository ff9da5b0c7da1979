// `trainscope-cli import IN... --out FILE.tsdb [--partial]`: Chrome trace / Kineto (PyTorch
// profiler) JSON, plain or .gz, or Nsight Systems SQLite exports, one file per rank or a
// directory of them, into one session file.
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "out_path.h"
#include "trainscope/core/interop/trace_import.h"
#include "trainscope/core/session/tsdb.h"

namespace trainscope::cli {
namespace {

struct ImportOptions {
  std::vector<std::string> in;
  std::string out;
  bool partial = false;
  bool force = false;
};

int runImport(const ImportOptions& o) {
  // Refused before reading: --out may not be an input (import X.json --out X.json replaced its
  // input) nor any existing session, without --force.
  auto output = OutputFile::create(o.out, o.in, o.force, {.session = true});
  if (!output) return fail(output.status());
  std::vector<std::filesystem::path> inputs(o.in.begin(), o.in.end());
  auto imported = core::importTraceFiles(inputs, core::TraceImportOptions{.partial = o.partial});
  if (!imported) return fail(imported.status());
  core::TraceStore& store = imported->store;
  std::string from;
  for (const auto& s : o.in) from += (from.empty() ? "" : " ") + s;
  store.metadata()["imported_from"] = from;
  // Written beside the target and renamed into place: a failed save leaves nothing half written
  // (OutputFile removes the temporary file on the way out).
  if (auto st = core::saveSession(store, output->writePath()); !st) return fail(st);
  if (auto st = output->commit(); !st) return fail(st);
  for (const auto& f : imported->files)
    std::printf("  %s -> rank %u (from %s), %s events\n", f.path.c_str(), f.rank, f.rankFrom.c_str(),
                withThousands(f.events).c_str());
  for (const auto& s : imported->skippedFiles) std::printf("  skipped file: %s\n", s.c_str());
  const auto& md = store.metadata();
  auto get = [&](const char* k) { return md.count(k) ? md.at(k) : std::string("0"); };
  if (get("import_invalid_events") != "0")
    std::printf("  skipped %s invalid events (--partial); first: %s\n", get("import_invalid_events").c_str(),
                get("import_first_error").c_str());
  std::printf("wrote %s: %s events, %zu ranks, %zu tracks, clock alignment: %s\n", o.out.c_str(),
              withThousands(store.eventCount()).c_str(), store.ranks().size(), store.trackCount(),
              get("clock_alignment").c_str());
  return kExitOk;
}

}  // namespace

void addImportCommand(CLI::App& app, Runner& run) {
  auto opts = std::make_shared<ImportOptions>();
  CLI::App* cmd = app.add_subcommand("import",
                                     "Import Chrome trace / PyTorch profiler (Kineto) JSON files (plain or "
                                     ".gz) or Nsight Systems SQLite exports (nsys export --type sqlite; "
                                     "one per rank, or a directory) into one .tsdb session");
  cmd->add_option("IN", opts->in,
                  "Trace files (.json, .json.gz, nsys .sqlite) or directories of them; a .nsys-rep "
                  "must be exported first (nsys export --type sqlite)")
      ->required();
  cmd->add_option("--out,-o", opts->out, "Session file to write (.tsdb; not an existing file, unless --force)")
      ->required();
  cmd->add_flag("--force", opts->force, "Replace --out when it exists (also when it is one of the inputs)");
  cmd->add_flag("--partial", opts->partial,
                "Import what is valid: skip events (nsys: rows) that break the format, the damaged tail "
                "of a file, and files that cannot be read; say what was skipped");
  cmd->callback([opts, &run] { run = [opts] { return runImport(*opts); }; });
}

}  // namespace trainscope::cli
