// `starzero convert`: a Hugging Face folder (config.json, model.safetensors or an index and its
// shards) to llm.c's checkpoint file and back, for every model family with both (GPT-2, Llama 3),
// one tensor in memory at a time (models/hf_checkpoint.hpp). The input's family
// (checkpoint_model_family) gives both formats; nothing here is per model.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "apps/cli.hpp"
#include "apps/command.hpp"
#include "apps/commands.hpp"
#include "models/registry.hpp"

namespace starzero {

namespace fs = std::filesystem;

namespace {

int run_convert(const cli::ArgParser& p) {
  for (const char* required : {"from", "to", "in", "out"})
    if (!p.given(required)) throw UsageError(std::string("--") + required + " is required");
  const std::string from = cli::parse_choice("from", *p.value("from"), {"hf", "llmc"});
  const std::string to = cli::parse_choice("to", *p.value("to"), {"hf", "llmc"});
  if (from == to) throw UsageError("--from and --to are both " + from + ": nothing to convert");
  const fs::path in = *p.value("in"), out = *p.value("out");
  if (!fs::exists(in)) throw UsageError("no such " + std::string(from == "hf" ? "folder" : "file") + " '" + cli::printable(in.string()) + "'");
  if ((from == "hf") != fs::is_directory(in))
    throw UsageError("'" + cli::printable(in.string()) + "' is " + (from == "hf" ? "not a folder (--from hf)" : "a folder (--from llmc takes a file)"));
  // The input's family gives both formats: its llm.c file and its Hugging Face folder.
  const std::unique_ptr<CheckpointFormat> llmc = checkpoint_model_family(in).format_of_checkpoint(in);
  const std::unique_ptr<CheckpointFormat> hf = llmc->hugging_face();
  if (!hf) throw UsageError("'" + cli::printable(in.string()) + "': its model has no Hugging Face format");
  const CheckpointFormat& source_format = from == "hf" ? *hf : *llmc;
  const CheckpointFormat& target_format = to == "hf" ? *hf : *llmc;
  source_format.check(in);
  const DType input_precision = source_format.stored_precision(in);
  const DType precision = storage_dtype(cli::precision_option(p, "precision", precision_of(input_precision)));
  const LayerSource source = source_format.source(in);
  target_format.write(out, source, precision);
  std::printf("converted %s (%s) to %s (%s)\n", in.c_str(), source_format.describe(input_precision).c_str(),
              out.c_str(), target_format.describe(precision).c_str());
  return 0;
}

// "--from hf DIR" and "--to llmc FILE": the path after a format is --in / --out.
std::vector<std::string> with_path_flags(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  std::vector<std::string> rewritten;
  for (std::size_t i = 0; i < args.size(); ++i) {
    rewritten.push_back(args[i]);
    const bool format_flag = args[i] == "--from" || args[i] == "--to";
    if (format_flag && i + 2 < args.size() && !args[i + 2].starts_with("--")) {
      rewritten.push_back(args[++i]);
      rewritten.push_back(rewritten[rewritten.size() - 2] == "--from" ? "--in" : "--out");
    }
  }
  return rewritten;
}

}  // namespace

int convert_main(int argc, char** argv) {
  cli::ArgParser parser("starzero convert");
  parser.option("from", "F", "the input's format: hf (a Hugging Face folder) or llmc (llm.c's checkpoint file)")
      .option("to", "F", "the output's format: llmc or hf")
      .option("in", "PATH", "the input (also given as the word after --from F)")
      .option("out", "PATH", "the output, written atomically (also the word after --to F)")
      .option("precision", "P", "fp32 or bf16 (default: the input's; fp16 tensors are read as fp32)")
      .flag("help", "show this help");
  std::vector<std::string> args = with_path_flags(argc, argv);
  std::vector<char*> pointers;
  for (std::string& arg : args) pointers.push_back(arg.data());
  return run_command(
      {"starzero convert", "starzero convert --from hf|llmc PATH --to llmc|hf PATH [options]",
       "Converts a GPT-2 or Llama 3 checkpoint between a Hugging Face folder (config.json and model.safetensors, or\n"
       "model.safetensors.index.json and its shards; F32, BF16 or F16 tensors) and llm.c's checkpoint file, one\n"
       "tensor in memory at a time. The model (gpt2 or llama) and its shape come from config.json or the file's\n"
       "header. docs/huggingface.md has the details.",
       "examples:\n"
       "  starzero convert --from hf gpt2/ --to llmc gpt2.bin\n"
       "  starzero convert --from llmc model.bin --to hf model-hf/ --precision bf16"},
      parser, int(pointers.size()), pointers.data(), run_convert);
}

}  // namespace starzero
