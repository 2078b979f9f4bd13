// `starzero sweep`: one training under each scheduling policy x priority scheme x placement of
// model tasks (--cpu-compute), repeated,
// summarised from the runs' traces (profile/sweep.hpp); flags before `--`, the training after.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "apps/cli.hpp"
#include "apps/command.hpp"
#include "apps/commands.hpp"
#include "profile/sweep.hpp"
#include "runtime/session.hpp"
#include "runtime/sim.hpp"

namespace starzero {

namespace {

std::vector<std::string> names_option(const cli::ArgParser& p, const char* name, const char* fallback) {
  const std::string text = p.value(name).value_or(fallback);
  std::vector<std::string> names;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    if (end == begin) throw UsageError(std::string("--") + name + ": an empty name in '" + text + "'");
    names.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return names;
}

}  // namespace

int sweep_main(int argc, char** argv) {
  // Everything after `--` is the training: `train` and its flags. starzero-sim never sees the
  // `--` (SimGrid takes it off the command line before main), so a bare `train` also starts it.
  int split = argc, training_from = argc;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--" || (sim::predicts_times && arg == "train")) {
      split = i;
      training_from = arg == "--" ? i + 1 : i;
      break;
    }
  }
  std::vector<std::string> training(argv + training_from, argv + argc);

  cli::ArgParser parser("starzero sweep");
  parser
      .option("sched", "LIST",
              "scheduling policies, comma-separated (default lws,dmdas,prio); `--sched help` lists them")
      .option("priorities", "LIST", "priority schemes, comma-separated (default none,critical-path)")
      .option("cpu-compute", "LIST",
              "with a GPU, whether CPU workers may run model tasks: off, on or off,on (default off)")
      .option("repeat", "N", "runs per combination, the order reversed on every other repeat (default 3)")
      .option("ranks", "N", "run each training under `mpirun -np N` (default 1); rank 0's trace reports")
      .option("out", "DIR", "runs/ (traces and logs), sweep.json and sweep.svg (default sweep-out)")
      .flag("help", "show this help");
  const CommandHelp help{
      "starzero sweep", "starzero sweep [options] -- train [train options]",
      "Runs the training once per scheduling policy, priority scheme and --cpu-compute value (and\n"
      "repeat), each traced, and prints per combination the median steady step time (min-max),\n"
      "tokens/s, the workers' steady busy fraction, AdamW and collective overlap and GPU transfer\n"
      "bytes, from `starzero trace --json` of each run. Writes the same as JSON (DIR/sweep.json)\n"
      "and a chart (DIR/sweep.svg, gnuplot). The sweep sets --sched, --priorities, --cpu-compute,\n"
      "--trace and --quiet itself.\n",
      "  starzero sweep --sched lws,dmdas,prio --priorities none,critical-path --repeat 3 -- \\\n"
      "      train --preset gpt2-124M --batch 4 --seq 64 --precision fp32 --steps 4 --val-every 0\n"};
  return run_command(help, parser, split, argv, [&](const cli::ArgParser& p) {
    if (training.empty() || training.front() != "train")
      throw UsageError("give the training after `--`, starting with `train` (starzero sweep ... -- train ...)");
    profile::SweepOptions o;
    o.program = std::filesystem::read_symlink("/proc/self/exe");
    o.policies = names_option(p, "sched", "lws,dmdas,prio");
    o.priorities = names_option(p, "priorities", "none,critical-path");
    o.cpu_compute = names_option(p, "cpu-compute", "off");
    o.repeat = cli::int_option(p, "repeat", 3, 1);
    o.ranks = cli::int_option(p, "ranks", 1, 1);
    o.out_dir = p.value("out").value_or("sweep-out");
    o.train_args.assign(training.begin() + 1, training.end());
    const auto known = scheduling_policies();
    const bool plugin = std::find(o.train_args.begin(), o.train_args.end(), "--sched-plugin") != o.train_args.end();
    for (const std::string& policy : o.policies)
      if (!plugin && std::find(known.begin(), known.end(), policy) == known.end())
        throw UsageError("--sched: unknown scheduling policy '" + policy + "' (see --sched help)");
    for (const std::string& scheme : o.priorities) cli::parse_priority_scheme_flag("--priorities", scheme);
    for (const std::string& value : o.cpu_compute) cli::parse_cpu_compute_flag("--cpu-compute", value);
    const auto rows =
        profile::run_sweep(o, [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
    std::fputs(profile::sweep_table(rows).c_str(), stdout);
    const auto json_file = o.out_dir / "sweep.json", chart = o.out_dir / "sweep.svg";
    std::ofstream(json_file) << profile::sweep_json(o, rows).dump(2) << "\n";
    profile::write_sweep_chart(rows, chart);
    std::printf("\nwrote %s and %s\n", json_file.c_str(), chart.c_str());
    return 0;
  });
}

}  // namespace starzero
