// `starzero tokenize --data train.jsonl --tokenizer tokenizer.json --out DIR`: fine-tuning records
// (JSONL, models/jsonl_data.hpp) to llm.c token shards with a loss-mask shard beside each
// (models/mask_shard.hpp), then the counts.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "apps/cli.hpp"
#include "apps/command.hpp"
#include "apps/commands.hpp"
#include "models/jsonl_data.hpp"
#include "models/tokenizer.hpp"

namespace starzero {

namespace fs = std::filesystem;

namespace {

const CommandHelp kHelp = {
    "starzero tokenize",
    "starzero tokenize --data FILE.jsonl --tokenizer tokenizer.json --out DIR [options]",
    "Tokenizes fine-tuning records, one JSON object per line: {\"text\": ...} or {\"prompt\": ..., \"completion\": ...}\n"
    "(one kind per file). Each record is a document: the tokenizer's post-processed encoding (Llama 3:\n"
    "<|begin_of_text|> first), then its end-of-text token; documents are packed one after the other. Writes\n"
    "DIR/train_000000.bin, ...: llm.c token shards (GPT-2's uint16 format for a vocabulary of at most 65536 tokens,\n"
    "else Llama 3's uint32), and beside each DIR/train_000000.mask: 1 for each token learned as a target, 0 for\n"
    "the prompt's tokens and the begin-of-text. A bad record is one error line naming FILE:LINE. The shards\n"
    "appear in DIR only when everything is written. docs/manual.md, \"Fine-tuning data\", has the details.\n",
    "  starzero tokenize --data train.jsonl --tokenizer Llama-3.2-1B/tokenizer.json --out data/ --seq 1024\n"
    "  starzero tokenize --data chat.jsonl --tokenizer gpt2/tokenizer.json --out data/ --loss-on all \\\n"
    "      --long-records drop --seq 512 --bad-records skip --shard-tokens 10M\n"};

void print_summary(const fs::path& data, const fs::path& out, const JsonlOptions& o, const JsonlShards& s) {
  const JsonlCounts& c = s.summary.counts;
  for (const std::string& line : s.summary.bad_lines) std::fprintf(stderr, "starzero tokenize: skipped %s\n", line.c_str());
  if (c.bad > s.summary.bad_lines.size())
    std::fprintf(stderr, "starzero tokenize: skipped %zu more bad records\n", c.bad - s.summary.bad_lines.size());
  std::printf("tokenize: %s (%s records) -> %s: %zu shard%s, %s format\n", data.c_str(),
              s.summary.kind == JsonlKind::text ? "text" : "prompt/completion", out.c_str(), s.shards.size(),
              s.shards.size() == 1 ? "" : "s", s.llama_format ? "Llama 3 (uint32)" : "GPT-2 (uint16)");
  std::printf("records %zu: kept %zu, split %zu, dropped %zu, bad %zu", c.records, c.kept, c.split, c.dropped, c.bad);
  if (o.seq > 0) std::printf(" (long: more than --seq %zu + 1 tokens)", o.seq);
  std::printf("\ntokens %zu, counted %zu (%.1f %%), loss on %s\n", c.tokens, c.counted,
              c.tokens ? 100.0 * double(c.counted) / double(c.tokens) : 0.0,
              o.loss_on == LossOn::all ? "all but the begin-of-text" : "completions");
}

int run_tokenize(const cli::ArgParser& p) {
  for (const char* required : {"data", "tokenizer", "out"})
    if (!p.given(required)) throw UsageError(std::string("--") + required + " is required");
  const JsonlOptions options = cli::jsonl_options(p);
  JsonlShardOptions shard_options;
  shard_options.shard_tokens = std::size_t(cli::int_option(p, "shard-tokens", 100'000'000, 1, INT32_MAX));
  const fs::path data = *p.value("data"), out = *p.value("out");
  if (fs::exists(out) && !fs::is_directory(out))
    throw UsageError("--out '" + cli::printable(out.string()) + "' is not a folder");
  const Tokenizer tokenizer = Tokenizer::load(*p.value("tokenizer"));
  const JsonlShards shards = write_jsonl_shards(data, tokenizer, options, out, shard_options, cli::jsonl_progress("tokenize"));
  print_summary(data, out, options, shards);
  return 0;
}

}  // namespace

int tokenize_main(int argc, char** argv) {
  cli::ArgParser parser("starzero tokenize");
  cli::add_jsonl_options(parser);
  parser.option("data", "FILE", "the JSONL records (required)")
      .option("tokenizer", "FILE", "a Hugging Face tokenizer.json with a byte-level BPE (required)")
      .option("out", "DIR", "where the shards go, created when missing (required)")
      .option("seq", "T", "the training sequence length: a record of more than T + 1 tokens is long (default: none is)")
      .option("shard-tokens", "N", "tokens per shard, at most (default 100M; whole documents unless one is longer)")
      .flag("help", "show this help");
  return run_command(kHelp, parser, argc, argv, run_tokenize);
}

}  // namespace starzero
