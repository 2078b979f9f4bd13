// `starzero consolidate`: merges the per-rank optimizer-state shards of a ZeRO run into one
// llm.c checkpoint, holding at most one layer's slice in memory (DeepSpeed's zero_to_fp32 loads
// the whole model; a model larger than host memory must still consolidate).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <ostream>
#include <vector>

#include "examples/cli.hpp"
#include "examples/command.hpp"
#include "examples/commands.hpp"
#include "models/llmc_files.hpp"
#include "models/sharded_state.hpp"
#include "runtime/dtype.hpp"

namespace starzero {

namespace {

namespace fs = std::filesystem;

struct Piece {
  int layer;
  LlmcRun run;
};

int run_consolidate(const cli::ArgParser& p) {
  if (!p.given("checkpoint")) throw UsageError("--checkpoint FILE is required (the --checkpoint-out of the run)");
  if (!p.given("out")) throw UsageError("--out FILE is required");
  const fs::path checkpoint = *p.value("checkpoint");
  const fs::path out = *p.value("out");
  const std::string precision = cli::parse_choice("--precision", p.value("precision").value_or("fp32"), {"fp32", "bf16"});
  const auto saved = ShardedTrainingState::find(checkpoint);
  if (!saved)
    throw UsageError("no training state beside '" + cli::printable(checkpoint.string()) +
                     "' (expected FILE.state or FILE.rank0-of-N.state)");
  const GptShape& shape = saved->shape();

  // llm.c's order: every layer contributes runs; write them by increasing llm.c offset.
  std::vector<Piece> pieces;
  for (int l = 0; l < gpt_layers(shape); ++l)
    for (const LlmcRun& run : gpt_layer_runs(shape, l)) pieces.push_back({l, run});
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.run.llmc_offset < b.run.llmc_offset; });
  std::size_t largest = 0;
  for (const Piece& piece : pieces) largest = std::max(largest, piece.run.count);

  const int version = precision == "fp32" ? kLlmcCheckpointFp32 : kLlmcCheckpointBf16;
  write_file_atomically(out, [&](std::ostream& os) {
    std::vector<std::int32_t> header(kLlmcHeaderInts, 0);
    header[0] = kLlmcCheckpointMagic;
    header[1] = version;
    header[2] = shape.max_seq;
    header[3] = shape.vocab;
    header[4] = shape.layers;
    header[5] = shape.heads;
    header[6] = shape.channels;
    header[7] = shape.padded_vocab;
    os.write(reinterpret_cast<const char*>(header.data()), std::streamsize(header.size() * sizeof(std::int32_t)));
    std::vector<float> values(largest);
    std::vector<bf16_bits> halves;
    std::size_t written = 0;
    for (const Piece& piece : pieces) {
      if (piece.run.llmc_offset != written) throw std::logic_error("llm.c runs are not contiguous");
      const std::span<float> slice(values.data(), piece.run.count);
      saved->read(piece.layer, ShardedTrainingState::Array::master, piece.run.block_offset, slice);
      if (version == kLlmcCheckpointFp32) {
        os.write(reinterpret_cast<const char*>(slice.data()), std::streamsize(slice.size_bytes()));
      } else {
        halves.resize(slice.size());
        std::transform(slice.begin(), slice.end(), halves.begin(), float_to_bf16);
        os.write(reinterpret_cast<const char*>(halves.data()), std::streamsize(halves.size() * sizeof(bf16_bits)));
      }
      written += piece.run.count;
    }
  });
  std::printf("consolidated %d rank file(s) of step %llu (%s) into %s (llm.c version %d), at most %zu values in "
              "memory at once\n",
              saved->ranks(), (unsigned long long)saved->step(), shape.to_string().c_str(), out.c_str(), version,
              largest);
  return 0;
}

}  // namespace

int consolidate_main(int argc, char** argv) {
  cli::ArgParser parser("starzero consolidate");
  parser.option("checkpoint", "FILE", "the --checkpoint-out of a run: reads FILE.state or FILE.rank<r>-of-<N>.state")
      .option("out", "FILE", "the llm.c checkpoint to write")
      .option("precision", "P", "fp32 (llm.c version 3, default) or bf16 (version 5)")
      .flag("help", "show this help");
  return run_command("starzero consolidate", "starzero consolidate --checkpoint FILE --out FILE [options]", parser,
                     argc, argv, run_consolidate);
}

}  // namespace starzero
