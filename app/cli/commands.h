// trainscope-cli subcommands. Each add*Command registers itself on the app and sets `run` to
// the function that executes it; main() calls the chosen one and returns its exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "trainscope/core/base/status.h"

namespace trainscope::cli {

// Exit codes: 0 success, 1 the operation failed (bad file, refused), 2 usage error.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;

using Runner = std::function<int()>;

void addInfoCommand(CLI::App& app, Runner& run);
void addExportCommand(CLI::App& app, Runner& run);
void addImportCommand(CLI::App& app, Runner& run);
void addSynthCommand(CLI::App& app, Runner& run);
void addEnvCommand(CLI::App& app, Runner& run);
// Pipeline schedule preview (docs/SCHEDULES.md).
void addScheduleCommand(CLI::App& app, Runner& run);
void addAnalyzeCommand(CLI::App& app, Runner& run);
// Live jobs (docs/ARCHITECTURE.md, "Protocol").
void addJobsCommand(CLI::App& app, Runner& run);
void addRecordCommand(CLI::App& app, Runner& run);
void addKnobsCommand(CLI::App& app, Runner& run);
void addSetCommand(CLI::App& app, Runner& run);
// Stragglers and hangs of a running job (core/analysis/stragglers.h, core/live/hang.h).
void addDoctorCommand(CLI::App& app, Runner& run);
void addLaunchCommand(CLI::App& app, Runner& run);
void addDemoCommand(CLI::App& app, Runner& run);
// What-if, autotune (docs/TUNING.md).
void addWhatIfCommand(CLI::App& app, Runner& run);
void addTuneCommand(CLI::App& app, Runner& run);
// Two step windows side by side (core/tune/compare.h).
void addCompareCommand(CLI::App& app, Runner& run);

// Prints "trainscope-cli: <code>: <message>" to stderr and returns kExitFailed.
int fail(const core::Status& status);
// "12,345,678"
std::string withThousands(uint64_t n);

}  // namespace trainscope::cli
