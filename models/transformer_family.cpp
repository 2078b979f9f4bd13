// What the transformer families share (models/transformer_family.hpp).
#include "models/transformer_family.hpp"

#include <algorithm>
#include <utility>

#include "models/tokenizer.hpp"

namespace starzero {

namespace fs = std::filesystem;

// ---- LlmcRunsFormat -----------------------------------------------------------------------------

LlmcRunsFormat::LlmcRunsFormat(std::string name, int layers,
                               const std::function<std::vector<LlmcRun>(int)>& layer_runs,
                               const std::function<std::size_t(int)>& layer_params)
    : name_(std::move(name)) {
  for (int l = 0; l < layers; ++l) {
    layer_params_.push_back(layer_params(l));
    for (const LlmcRun& run : layer_runs(l)) pieces_.push_back({l, run});
  }
  std::sort(pieces_.begin(), pieces_.end(),
            [](const Piece& a, const Piece& b) { return a.run.llmc_offset < b.run.llmc_offset; });
  for (const Piece& piece : pieces_) sizes_.push_back(piece.run.count);
}

std::string LlmcRunsFormat::describe(DType precision) const {
  return name_ + " version " + std::to_string(version_of(precision));
}

// llm.c's order interleaves the layers (per-layer tensors are layer-major): the runs of every
// layer are written by increasing file offset, one run in memory at a time.
void LlmcRunsFormat::write(const fs::path& path, const LayerSource& source, DType precision) const {
  write_runs(
      path, version_of(precision),
      [&](std::size_t offset, std::span<float> out) {
        const Piece& piece = piece_at(offset);
        source(piece.layer, piece.run.layer_offset, out);
      },
      sizes_);
}

// Each run read from the file straight into its layer's destination, in file order.
void LlmcRunsFormat::read(const fs::path& path, const LayerDestination& destination) const {
  std::vector<std::span<float>> layers;
  for (std::size_t l = 0; l < layer_params_.size(); ++l) layers.push_back(destination(int(l), layer_params_[l]));
  read_runs(
      path,
      [&](std::size_t offset, std::size_t count) {
        const Piece& piece = piece_at(offset);
        return layers[std::size_t(piece.layer)].subspan(piece.run.layer_offset, count);
      },
      sizes_);
}

DType LlmcRunsFormat::stored_precision(const fs::path& path) const {
  return read_version(path) == kLlmcCheckpointBf16 ? DType::bf16 : DType::f32;
}

LayerSource LlmcRunsFormat::source(const fs::path& path) const {
  std::vector<std::vector<LlmcRun>> runs(layer_params_.size());
  for (const Piece& piece : pieces_) runs[std::size_t(piece.layer)].push_back(piece.run);
  return llmc_file_source(path, std::move(runs), kLlmcHeaderBytes, stored_precision(path));
}

// llm.c's versions: 3 stores fp32, 5 bf16.
int LlmcRunsFormat::version_of(DType precision) const {
  if (precision == DType::f32) return 3;
  if (precision == DType::bf16) return 5;
  throw std::invalid_argument(name_ + " checkpoints store fp32 (version 3) or bf16 (version 5)");
}

const LlmcRunsFormat::Piece& LlmcRunsFormat::piece_at(std::size_t offset) const {
  const auto it = std::lower_bound(pieces_.begin(), pieces_.end(), offset,
                                   [](const Piece& p, std::size_t o) { return p.run.llmc_offset < o; });
  if (it == pieces_.end() || it->run.llmc_offset != offset) throw std::logic_error(name_ + " runs are not contiguous");
  return *it;
}

// ---- the spec and prepare -----------------------------------------------------------------------

std::string token_data_summary(const TokenDataset& data) {
  const std::string where = data.store().describe();
  return "data: " + (where.empty() ? "" : where + ": ") + std::to_string(data.split_size(Split::train)) + " training and " +
         std::to_string(data.split_size(Split::validation)) + " validation tokens (vocabulary " +
         std::to_string(data.vocab()) + ")";
}

namespace {

bool is_jsonl(const std::vector<fs::path>& files) { return files.size() == 1 && files.front().extension() == ".jsonl"; }

// "train.jsonl: 120 prompt/completion records (2 split, 0 dropped, 1 bad skipped: FILE:LINE: ...),
// 4500 tokens, 3000 counted".
std::string describe_jsonl(const fs::path& file, const JsonlSummary& summary) {
  const JsonlCounts& c = summary.counts;
  std::string text = file.filename().string() + ": " + std::to_string(c.kept) + " " +
                     (summary.kind == JsonlKind::prompt_completion ? "prompt/completion" : "text") + " records (" +
                     std::to_string(c.split) + " split, " + std::to_string(c.dropped) + " dropped, " +
                     std::to_string(c.bad) + " bad skipped";
  if (!summary.bad_lines.empty()) text += "; the first: " + summary.bad_lines.front();
  return text + "), " + std::to_string(c.tokens) + " tokens, " + std::to_string(c.counted) + " counted";
}

// A JSONL file's records as tokens and their loss mask, in memory (models/jsonl_data.hpp).
std::shared_ptr<const TokenStore> open_jsonl(const fs::path& file, const ModelRequest& request,
                                             const Tokenizer* tokenizer, int& vocab) {
  if (!tokenizer)
    throw std::invalid_argument(file.string() + ": JSONL records need --tokenizer tokenizer.json to become tokens");
  JsonlOptions options = request.jsonl;
  if (request.seq) options.seq = std::size_t(*request.seq);
  if (options.long_records == LongRecords::drop && options.seq == 0)
    throw std::invalid_argument("--long-records drop needs --seq T (a record is long past T + 1 tokens)");
  JsonlTokens read = read_jsonl(file, *tokenizer, options, request.data_progress);
  vocab = int(tokenizer->vocab());
  return memory_token_store(std::move(read.tokens), std::move(read.counted), describe_jsonl(file, read.summary));
}

// A --data or --val-data argument's tokens: a JSONL file, or llm.c token shards.
std::shared_ptr<const TokenStore> open_data(const std::string& argument, const std::vector<fs::path>& files,
                                            const ModelRequest& request, const Tokenizer* tokenizer,
                                            const std::function<TokenShardFormat(const fs::path&)>& shard_format,
                                            int& vocab) {
  if (is_jsonl(files)) return open_jsonl(files.front(), request, tokenizer, vocab);
  for (const fs::path& file : files)
    if (file.extension() != ".bin")
      throw std::invalid_argument("'" + argument + "' names " + file.string() +
                                  (files.size() == 1 ? "" : " among several files") +
                                  ": several files must all be llm.c token shards (.bin)");
  TokenShardFormat format = shard_format(files.front());
  // A smaller tokenizer's shards (`starzero tokenize` writes GPT-2's uint16 format up to 65536
  // tokens): its vocabulary is the data's, and every token read is checked against it.
  if (tokenizer && tokenizer->vocab() < std::size_t(format.vocab)) format.vocab = int(tokenizer->vocab());
  vocab = format.vocab;
  return token_shard_store(files, format);
}

// load_token_data without the tokenizer's attachment.
TokenDataset read_token_data(const ModelRequest& request, const Tokenizer* tokenizer,
                             const std::function<TokenShardFormat(const fs::path&)>& shard_format) {
  if (!request.data) return TokenDataset::from_text_files(checkout_text_files(), request.validation_fraction);
  const std::string argument = request.data->string();
  const std::vector<fs::path> files = data_files(argument);
  if (files.size() == 1 && files.front().extension() != ".bin" && !is_jsonl(files)) {
    if (request.validation_data)
      throw std::invalid_argument("--val-data goes with token shards or JSONL, not a text --data");
    return TokenDataset::from_text_file(files.front(), request.validation_fraction);
  }
  int vocab = 0, validation_vocab = 0;
  std::shared_ptr<const TokenStore> store = open_data(argument, files, request, tokenizer, shard_format, vocab),
                                    validation;
  if (request.validation_data) {
    const std::string val = request.validation_data->string();
    validation = open_data(val, data_files(val), request, tokenizer, shard_format, validation_vocab);
    if (validation_vocab != vocab)
      throw std::invalid_argument("--val-data's vocabulary (" + std::to_string(validation_vocab) +
                                  ") is not --data's (" + std::to_string(vocab) + ")");
  }
  return TokenDataset(std::move(store), vocab, request.validation_fraction, std::move(validation));
}

}  // namespace

TokenDataset load_token_data(const ModelRequest& request,
                             const std::function<TokenShardFormat(const fs::path&)>& shard_format) {
  std::shared_ptr<const Tokenizer> tokenizer;
  if (request.tokenizer) tokenizer = std::make_shared<const Tokenizer>(Tokenizer::load(*request.tokenizer));
  TokenDataset data = read_token_data(request, tokenizer.get(), shard_format);
  if (tokenizer) data.use_tokenizer(std::move(tokenizer), request.tokenizer->string());
  return data;
}

void check_flag(const char* flag, const std::optional<int>& given, int from_file) {
  if (given && *given != from_file)
    throw std::invalid_argument(std::string("--") + flag + " " + std::to_string(*given) +
                                " contradicts the checkpoint's " + std::to_string(from_file));
}

void check_checkpoint_flags(const ModelRequest& request, int layers, int channels, int heads, int max_seq,
                            const std::function<std::string(const ModelRequest&)>& preset_fields,
                            const std::string& file_fields, const std::string& file_shape) {
  if (request.preset) {
    const std::string flags = preset_fields(request);
    if (flags != file_fields)
      throw std::invalid_argument("the shape flags (--preset " + *request.preset + ": " + flags +
                                  ") contradict the checkpoint's shape " + file_shape);
    return;
  }
  check_flag("layers", request.layers, layers);
  check_flag("channels", request.channels, channels);
  check_flag("heads", request.heads, heads);
  check_flag("max-seq", request.max_seq, max_seq);
}

void check_data_vocabulary(const TokenDataset& data, int vocab, bool evaluation) {
  // Evaluation reads every token only when the data's vocabulary is larger than the checkpoint's.
  const int largest = evaluation && data.vocab() > vocab ? data.largest_token() : 0;
  if (evaluation && largest >= vocab)
    throw std::invalid_argument("the data holds token " + std::to_string(largest) +
                                ", outside the checkpoint's vocabulary of " + std::to_string(vocab));
  if (!evaluation && data.vocab() != vocab)
    throw std::invalid_argument("the data's vocabulary " + std::to_string(data.vocab()) +
                                " differs from the checkpoint's " + std::to_string(vocab));
}

int checked_seq(const ModelRequest& request, const TokenDataset& data, int max_seq, bool evaluation) {
  const int T = request.seq.value_or(std::min(64, max_seq));
  if (T < 1 || T > max_seq)
    throw std::invalid_argument("--seq " + std::to_string(T) + " outside 1..max-seq " + std::to_string(max_seq));
  if (!evaluation && data.split_size(Split::train) < std::size_t(T) + 1)
    throw std::invalid_argument("the training data has " + std::to_string(data.split_size(Split::train)) +
                                " tokens: too few for --seq " + std::to_string(T));
  return T;
}

}  // namespace starzero
