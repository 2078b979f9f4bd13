// `starzero trace DIR`: the report of a `starzero train --trace DIR` run (profile/trace_command.hpp):
// per-step wall time and critical path, worker busy/overhead/idle time, task kinds, transfers
// and overlap, as markdown or JSON, a Gantt chart drawn by gnuplot, and the trace as Chrome
// trace-event JSON for Perfetto.
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "apps/cli.hpp"
#include "apps/command.hpp"
#include "apps/commands.hpp"
#include "profile/trace_command.hpp"

namespace starzero {

namespace {

const CommandHelp kHelp = {
    "starzero trace", "starzero trace DIR [--json] [--svg FILE] [--perfetto FILE] [--steady-from N]",
    "Reads the files `starzero train --trace DIR` leaves in DIR (or in DIR/rank<r>/ for each rank\n"
    "of mpirun) and reports: wall time per step and its critical path; per worker busy, overhead\n"
    "and idle time, over the run and over the steady steps; time per task kind; data transfers per\n"
    "link and how much of them compute hides; how much AdamW and collective time runs beside\n"
    "forward/backward compute on other workers. --perfetto also writes the tasks, transfers and\n"
    "steps as Chrome trace-event JSON (open it in ui.perfetto.dev or chrome://tracing).\n"
    "Definitions: docs/trace-report.md.\n",
    "  starzero trace /tmp/tr\n"
    "  starzero trace /tmp/tr --json > report.json\n"
    "  starzero trace /tmp/tr --svg gantt.svg --steady-from 3\n"
    "  starzero trace /tmp/tr --perfetto trace.json > /dev/null\n"};

}  // namespace

int trace_main(int argc, char** argv) {
  cli::ArgParser parser("starzero trace");
  parser.flag("json", "print JSON (keys in docs/trace-report.md) instead of markdown")
      .option("svg", "FILE", "also draw a Gantt chart (workers, transfer links, critical path) with gnuplot")
      .option("perfetto", "FILE", "also write Chrome trace-event JSON (Perfetto, chrome://tracing) there")
      .option("steady-from", "N", "steady steps are the steps >= N (default: all but the first)")
      .flag("help", "show this help");
  // DIR is the one argument that is neither a flag nor the value of --svg, --perfetto or
  // --steady-from.
  cli::Positionals args = cli::split_positionals(argc, argv, {"--svg", "--perfetto", "--steady-from"});
  return run_command(kHelp, parser, int(args.flags.size()), args.flags.data(), [&](const cli::ArgParser& p) {
    profile::TraceCommandOptions options;
    options.dir = args.single("DIR", kHelp.usage);
    options.json = p.flag_set("json");
    if (p.given("svg")) options.svg = *p.value("svg");
    if (p.given("perfetto")) options.perfetto = *p.value("perfetto");
    if (p.given("steady-from")) options.steady_from = cli::int_option(p, "steady-from", 0, 0);
    profile::print_trace_report(options, std::cout);
    return std::cout ? 0 : 1;
  });
}

}  // namespace starzero
