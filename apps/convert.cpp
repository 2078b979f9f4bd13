// `starzero convert`: a Hugging Face folder (config.json, model.safetensors or an index and its
// shards) to llm.c's checkpoint file and back, for GPT-2 and Llama 3, one tensor in memory at a
// time (models/hf_checkpoint.hpp).
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "apps/cli.hpp"
#include "apps/command.hpp"
#include "apps/commands.hpp"
#include "models/hf_checkpoint.hpp"
#include "models/llama_files.hpp"
#include "models/gpt_files.hpp"

namespace starzero {

namespace fs = std::filesystem;

namespace {

// One model's two formats, and how to read its llm.c file at random.
struct Formats {
  std::unique_ptr<CheckpointFormat> llmc, hf;
  HfModelMap map;
  std::vector<std::vector<LlmcRun>> runs;  // per engine layer
  DType llmc_precision = DType::f32;       // the input file's, when it is an llm.c file
};

template <class Layout>
std::vector<std::vector<LlmcRun>> runs_of(const Layout& layout) {
  std::vector<std::vector<LlmcRun>> runs;
  for (int l = 0; l < layout.layers(); ++l) runs.push_back(layout.layer_runs(l));
  return runs;
}

Formats formats_of(const fs::path& in) {
  Formats f;
  if (checkpoint_family(in) == "llama3") {
    const LlamaShape shape = llama_checkpoint_shape(in);
    f = {llama_llmc_format(shape), llama_hf_format(shape), llama_hf_map(shape), runs_of(LlamaLayout(shape))};
    if (!fs::is_directory(in))
      f.llmc_precision = read_llama_checkpoint_header(in).version == kLlamaCheckpointBf16 ? DType::bf16 : DType::f32;
  } else {
    const GptShape shape = gpt_checkpoint_shape(in);
    f = {gpt_llmc_format(shape), gpt_hf_format(shape), gpt_hf_map(shape), runs_of(GptLayout(shape))};
    if (!fs::is_directory(in))
      f.llmc_precision = read_llmc_checkpoint_header(in).version == kLlmcCheckpointBf16 ? DType::bf16 : DType::f32;
  }
  return f;
}

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
  const Formats f = formats_of(in);
  const CheckpointFormat& source_format = from == "hf" ? *f.hf : *f.llmc;
  const CheckpointFormat& target_format = to == "hf" ? *f.hf : *f.llmc;
  source_format.check(in);
  const DType input_precision = from == "hf" ? hf_folder_precision(in) : f.llmc_precision;
  const DType precision = storage_dtype(cli::precision_option(p, "precision", precision_of(input_precision)));
  const LayerSource source =
      from == "hf" ? hf_folder_source(in, f.map) : llmc_file_source(in, f.runs, kLlmcHeaderInts * 4, f.llmc_precision);
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
