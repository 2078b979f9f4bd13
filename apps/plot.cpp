// `starzero plot FILE.jsonl --out FILE.svg`: the loss, validation and throughput curves of a
// `starzero train --metrics` file (profile/metrics_chart.hpp), drawn by gnuplot.
#include <cstdio>
#include <string>

#include "apps/cli.hpp"
#include "apps/command.hpp"
#include "apps/commands.hpp"
#include "profile/metrics_chart.hpp"

namespace starzero {

namespace {

const CommandHelp kHelp = {
    "starzero plot", "starzero plot FILE.jsonl --out FILE.svg [--title TEXT]",
    "Draws the metrics file of `starzero train --metrics FILE.jsonl`: the training loss per step\n"
    "with the validation losses (top) and tokens/s (bottom), as an SVG made by gnuplot. A file a\n"
    "resumed run appended to is drawn as one curve (a step written twice keeps its last line).\n",
    "  starzero train --steps 300 --metrics run.jsonl && starzero plot run.jsonl --out loss.svg\n"};

}  // namespace

int plot_main(int argc, char** argv) {
  cli::ArgParser parser("starzero plot");
  parser.option("out", "FILE", "the SVG to write (required)")
      .option("title", "TEXT", "chart title (default: the metrics file's name)")
      .flag("help", "show this help");
  cli::Positionals args = cli::split_positionals(argc, argv, {"--out", "--title"});
  return run_command(kHelp, parser, int(args.flags.size()), args.flags.data(), [&](const cli::ArgParser& p) {
    const std::filesystem::path file = args.single("FILE.jsonl", kHelp.usage);
    if (!p.given("out")) throw UsageError("--out FILE.svg is required");
    const profile::MetricsCurves curves = profile::read_metrics(file);
    const std::filesystem::path svg = *p.value("out");
    profile::write_metrics_chart(curves, p.value("title").value_or(file.filename().string()), svg);
    std::printf("plot: %s (%zu steps, %zu validation points, %d run%s) -> %s\n", file.c_str(), curves.steps.size(),
                curves.validation.size(), curves.runs, curves.runs == 1 ? "" : "s", svg.c_str());
    return 0;
  });
}

}  // namespace starzero
