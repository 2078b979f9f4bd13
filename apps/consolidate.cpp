// `starzero consolidate`: merges the per-rank optimizer-state shards of a ZeRO run into one
// model checkpoint, holding at most one layer's slice in memory (train/checkpoint.hpp).
#include <cstdio>

#include "apps/cli.hpp"
#include "apps/command.hpp"
#include "apps/commands.hpp"
#include "models/registry.hpp"
#include "train/checkpoint.hpp"

namespace starzero {

namespace {

int run_consolidate(const cli::ArgParser& p) {
  if (!p.given("checkpoint")) throw UsageError("--checkpoint FILE is required (the --checkpoint-out of the run)");
  if (!p.given("out")) throw UsageError("--out FILE is required");
  const std::filesystem::path checkpoint = *p.value("checkpoint"), out = *p.value("out");
  const DType precision = storage_dtype(cli::precision_option(p, "precision", Precision::fp32));
  const ConsolidateResult result = consolidate_checkpoint(checkpoint, out, checkpoint_format_of_state, precision);
  std::printf("consolidated %d rank file(s) of step %llu into %s (%s), at most %zu values in memory at once\n",
              result.ranks, (unsigned long long)result.step, out.c_str(), result.format.c_str(), result.largest_slice);
  return 0;
}

}  // namespace

int consolidate_main(int argc, char** argv) {
  cli::ArgParser parser("starzero consolidate");
  parser.option("checkpoint", "FILE", "the --checkpoint-out of a run: reads FILE.state or FILE.rank<r>-of-<N>.state")
      .option("out", "FILE", "the checkpoint to write (the model's own format: llm.c for GPT)")
      .option("precision", "P", "fp32 (llm.c version 3, default) or bf16 (version 5)")
      .flag("help", "show this help");
  return run_command({"starzero consolidate", "starzero consolidate --checkpoint FILE --out FILE [options]"}, parser,
                     argc, argv, run_consolidate);
}

}  // namespace starzero
