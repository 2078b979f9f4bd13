#pragma once
// `starzero trace DIR`: finds the traced run (or the traced ranks) in DIR, reads its files,
// prints the report and draws the chart. apps/trace.cpp parses the flags and calls this.
#include <filesystem>
#include <optional>
#include <ostream>
#include <utility>
#include <vector>

#include "sim/step_bound.hpp"

namespace starzero::profile {

struct TraceCommandOptions {
  std::filesystem::path dir;                 // DIR: tasks.rec etc., or rank<r>/ folders holding them
  bool json = false;                         // JSON instead of markdown
  std::optional<std::filesystem::path> svg;  // also draw the Gantt chart there
  std::optional<std::filesystem::path> perfetto;  // also write the Chrome trace-event JSON there
  std::optional<long> steady_from;           // first steady step (default: the second step)
};

// The trace folders of DIR: DIR itself when it holds tasks.rec, else its rank<r>/ folders that
// do, by rank. Throws FileFormatError when DIR is missing or holds neither.
std::vector<std::pair<std::optional<int>, std::filesystem::path>> find_trace_folders(const std::filesystem::path& dir);

// The figures a traced run left in `folder` for the bound (sim::kRunBoundFile); unset when it left
// none. FileFormatError for a file that cannot be read or is malformed.
std::optional<sim::RunBoundFigures> read_run_bound(const std::filesystem::path& folder);

// Reads every rank's files, writes the chart and the Perfetto JSON when asked, then prints the
// report to `out`.
// Bad input (missing or malformed files, a --steady-from beyond the last step) throws
// FileFormatError or std::invalid_argument (so does a --perfetto file that cannot be written);
// a missing or failing gnuplot std::runtime_error.
void print_trace_report(const TraceCommandOptions& options, std::ostream& out);

}  // namespace starzero::profile
