// The `starzero` command line: dispatches to one sub-command per verb.
// starpu.h: in simulation (starzero-sim) it renames main to starpu_main, which StarPU's own main
// runs inside the simulated machine; main must then return explicitly.
#include <starpu.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "apps/commands.hpp"

namespace {

void print_usage(std::FILE* to) {
  std::fputs(
      "usage: starzero <command> [options]\n"
      "\n"
      "commands:\n"
      "  plan    ZeRO memory and communication per rank for a model size, a GPT config or a\n"
      "          GPT-2 or Llama 3 preset, per stage and data-parallel degree, with offload\n"
      "          placements and fit checks\n"
      "  train   train a GPT-2 or Llama 3 model (default: GPT-2 `tiny` on this checkout's own docs\n"
      "          and sources)\n"
      "  eval    mean loss of a checkpoint (llm.c file or Hugging Face folder) over the first\n"
      "          K batches of a token file\n"
      "  bench   `bench step`: training-step time, tokens/s and MFU against a GEMM probe;\n"
      "          `bench adam`: the fused CPU AdamW; `bench blas`: tiled against threaded sgemm\n"
      "  consolidate  merge the per-rank shards of a ZeRO run into one llm.c checkpoint\n"
      "  convert  a Hugging Face folder (safetensors) to an llm.c checkpoint and back\n"
      "  trace   report of a `train --trace DIR` run: steps, critical paths, workers, transfers\n"
      "  sweep   the same training under each scheduling policy x priority scheme, compared\n"
      "  plot    loss, validation and throughput curves of a `train --metrics` file, as SVG\n"
      "  platform  write a simulated machine's SimGrid platform files (for starzero-sim)\n"
      "  calibrate  train while StarPU records every codelet's durations, for starzero-sim\n"
      "  tokenize  fine-tuning records (JSONL) to llm.c token shards with loss-mask shards\n"
      "\n"
      "Run `starzero <command> --help` for a command's options.\n",
      to);
}

}  // namespace

int main(int argc, char** argv) {
  // A write past the file-size limit (RLIMIT_FSIZE) fails with EFBIG, reported like a full disk,
  // instead of killing the process in the middle of a save.
  std::signal(SIGXFSZ, SIG_IGN);
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  const std::string_view command = argv[1];
  if (command == "--help" || command == "-h" || command == "help") {
    print_usage(stdout);
    return 0;
  }
  if (command == "plan") return starzero::plan_main(argc - 1, argv + 1);
  if (command == "train") return starzero::train_main(argc - 1, argv + 1);
  if (command == "eval") return starzero::eval_main(argc - 1, argv + 1);
  if (command == "bench") return starzero::bench_main(argc - 1, argv + 1);
  if (command == "consolidate") return starzero::consolidate_main(argc - 1, argv + 1);
  if (command == "convert") return starzero::convert_main(argc - 1, argv + 1);
  if (command == "trace") return starzero::trace_main(argc - 1, argv + 1);
  if (command == "sweep") return starzero::sweep_main(argc - 1, argv + 1);
  if (command == "plot") return starzero::plot_main(argc - 1, argv + 1);
  if (command == "platform") return starzero::platform_main(argc - 1, argv + 1);
  if (command == "calibrate") return starzero::calibrate_main(argc - 1, argv + 1);
  if (command == "tokenize") return starzero::tokenize_main(argc - 1, argv + 1);
  std::fprintf(stderr, "starzero: error: unknown command '%s' (try `starzero --help`)\n", argv[1]);
  return 2;
}
