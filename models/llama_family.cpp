// Llama 3 as a model family: `starzero train --model llama3` (docs/llama.md). The shape comes from
// a checkpoint when one is given (a contradicting shape flag is an error naming both), else from a
// preset (default llama3-tiny) and the shape flags; the vocabulary from the data (a text file:
// bytes, 256; an llm.c Llama 3 token shard: 128256; an llm.c GPT-2 shard: 50257).
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <random>
#include <stdexcept>

#include "models/data.hpp"
#include "models/hf_checkpoint.hpp"
#include "models/llama.hpp"
#include "models/llama_files.hpp"
#include "models/llama_layout.hpp"
#include "models/llmc_files.hpp"
#include "models/registry.hpp"
#include "models/token_rows.hpp"
#include "offload/footprint.hpp"
#include "tasks/llama_kernels.hpp"

namespace starzero {

namespace fs = std::filesystem;

namespace {

// ---- the llm.c Llama 3 checkpoint as a CheckpointFormat -------------------------------------------

class LlamaCheckpointFormat final : public CheckpointFormat {
 public:
  explicit LlamaCheckpointFormat(const LlamaShape& shape) : shape_(shape), layout_(shape) {
    for (int l = 0; l < layout_.layers(); ++l)
      for (const LlmcRun& run : layout_.layer_runs(l)) pieces_.push_back({l, run});
    std::sort(pieces_.begin(), pieces_.end(),
              [](const Piece& a, const Piece& b) { return a.run.llmc_offset < b.run.llmc_offset; });
    for (const Piece& piece : pieces_) sizes_.push_back(piece.run.count);
  }

  StateLayout state_layout() const override { return llama_state_layout(shape_); }
  std::string describe(DType precision) const override {
    return "llm.c Llama 3 version " + std::to_string(version_of(precision));
  }
  void write(const fs::path& path, const LayerSource& source, DType precision) const override {
    write_llama_checkpoint_streamed(
        path, shape_, version_of(precision),
        [&](std::size_t offset, std::span<float> out) {
          const Piece& piece = piece_at(offset);
          source(piece.layer, piece.run.layer_offset, out);
        },
        sizes_);
  }
  void check(const fs::path& path) const override { read_llama_checkpoint_header(path, shape_); }
  std::unique_ptr<CheckpointFormat> hugging_face() const override { return llama_hf_format(shape_); }
  void read(const fs::path& path, const LayerDestination& destination) const override {
    std::vector<std::span<float>> layers;
    for (int l = 0; l < layout_.layers(); ++l) layers.push_back(destination(l, layout_.layer_params(l)));
    read_llama_checkpoint_streamed(
        path, shape_,
        [&](std::size_t offset, std::size_t count) {
          const Piece& piece = piece_at(offset);
          return layers[std::size_t(piece.layer)].subspan(piece.run.layer_offset, count);
        },
        sizes_);
  }

 private:
  struct Piece {
    int layer;
    LlmcRun run;
  };
  static int version_of(DType precision) {
    if (precision == DType::f32) return kLlamaCheckpointFp32;
    if (precision == DType::bf16) return kLlamaCheckpointBf16;
    throw std::invalid_argument("llm.c Llama 3 checkpoints store fp32 (version 3) or bf16 (version 5)");
  }
  const Piece& piece_at(std::size_t offset) const {
    const auto it = std::lower_bound(pieces_.begin(), pieces_.end(), offset,
                                     [](const Piece& p, std::size_t o) { return p.run.llmc_offset < o; });
    if (it == pieces_.end() || it->run.llmc_offset != offset) throw std::logic_error("Llama runs are not contiguous");
    return *it;
  }

  LlamaShape shape_;
  LlamaLayout layout_;
  std::vector<Piece> pieces_;
  std::vector<std::size_t> sizes_;
};

// ---- Llama 3 with its data ----------------------------------------------------------------------

class LlamaTrainable final : public Trainable {
 public:
  LlamaTrainable(const LlamaShape& shape, DType dtype, int B, int T, int tiles, const ActivationPolicy& activations,
                 const TokenDataset& data, std::uint64_t seed, Split evaluation_split)
      : model_(shape, dtype, B, T, tiles, activations), data_(data), seed_(seed), evaluation_split_(evaluation_split) {}

  int layers() const override { return model_.layers(); }
  std::size_t layer_params(int layer) const override { return model_.layer_params(layer); }
  std::string layer_name(int layer) const override { return model_.layer_name(layer); }
  DType dtype() const override { return model_.dtype(); }
  std::vector<std::size_t> gradient_pieces(int layer) const override { return model_.gradient_pieces(layer); }
  void init_layer(int layer, std::span<float> params, std::uint64_t seed) const override {
    model_.init_layer(layer, params, seed);
  }
  void submit_forward(int layer, const GroupHandles& groups) override { model_.submit_forward(layer, groups); }
  void submit_backward(int layer, const GroupHandles& groups) override { model_.submit_backward(layer, groups); }

  int micro_batch() const override { return model_.batch(); }
  int row_tokens() const override { return model_.seq(); }
  void load_train_rows(std::uint64_t step, const BatchRows& rows) override {
    load(data_.train_batch(rows.global, model_.seq(), seed_, step), rows);
  }
  std::size_t validation_batches(int global_rows) const override {
    return data_.sequential_batches(global_rows, model_.seq(), evaluation_split_);
  }
  void load_validation_rows(std::size_t batch, const BatchRows& rows) override {
    load(data_.sequential_batch(rows.global, model_.seq(), batch, evaluation_split_), rows);
  }
  double mean_loss() const override { return model_.mean_loss(); }
  std::optional<std::size_t> activation_bytes() const override { return model_.activation_bytes(); }
  std::optional<std::size_t> offloaded_activation_bytes() const override { return model_.offloaded_activation_bytes(); }
  std::optional<std::string> sample(const std::function<void()>& forward, const std::string& prompt, int tokens,
                                    std::uint64_t seed) override;

 private:
  void load(const Batch& global, const BatchRows& rows) { set_batch_rows(model_, global, rows); }

  LlamaModel model_;
  const TokenDataset& data_;
  std::uint64_t seed_;
  Split evaluation_split_;
};

std::optional<std::string> LlamaTrainable::sample(const std::function<void()>& forward, const std::string& prompt,
                                                  int tokens, std::uint64_t seed) {
  return sample_bytes(model_, data_, forward, prompt, tokens, seed);
}

class LlamaSpec final : public ModelSpec {
 public:
  LlamaSpec(const LlamaShape& shape, TokenDataset data, int T, std::uint64_t seed, Split evaluation_split)
      : shape_(shape),
        data_(std::move(data)),
        T_(T),
        seed_(seed),
        evaluation_split_(evaluation_split),
        format_(shape) {}

  std::string describe() const override {
    return "Llama 3 " + shape_.to_string() + ", " + std::to_string(shape_.param_count()) + " parameters";
  }
  std::string data_summary() const override {
    return "data: " + std::to_string(data_.split_size(Split::train)) + " training and " +
           std::to_string(data_.split_size(Split::validation)) + " validation tokens (vocabulary " +
           std::to_string(data_.vocab()) + ")";
  }
  std::size_t parameter_count() const override { return shape_.param_count(); }
  ModelFootprint footprint(int batch, const ActivationPolicy& activations) const override {
    return llama_footprint(shape_, batch, T_, activations);
  }
  const CheckpointFormat& checkpoint_format() const override { return format_; }
  std::unique_ptr<Trainable> build(DType dtype, int batch, int tiles,
                                   const ActivationPolicy& activations) const override {
    return std::make_unique<LlamaTrainable>(shape_, dtype, batch, T_, tiles, activations, data_, seed_,
                                            evaluation_split_);
  }
  std::optional<std::size_t> activation_bytes(DType dtype, int batch,
                                              const ActivationPolicy& activations) const override {
    return llama_activation_bytes(shape_, dtype_size(dtype), batch, T_, activations);
  }
  std::optional<std::size_t> offloaded_activation_bytes(DType dtype, int batch,
                                                        const ActivationPolicy& activations) const override {
    return llama_offloaded_activation_bytes(shape_, dtype_size(dtype), batch, T_, activations);
  }

 private:
  LlamaShape shape_;
  TokenDataset data_;
  int T_;
  std::uint64_t seed_;
  Split evaluation_split_;
  LlamaCheckpointFormat format_;
};

// ---- choosing the shape and the data --------------------------------------------------------

TokenDataset load_dataset(const ModelRequest& request) {
  if (!request.data) return TokenDataset::from_text_files(checkout_text_files(), request.validation_fraction);
  const fs::path& path = *request.data;
  if (!fs::exists(path)) throw std::invalid_argument("--data: no such file '" + path.string() + "'");
  if (path.extension() != ".bin") return TokenDataset::from_text_file(path, request.validation_fraction);
  const std::int32_t magic = file_magic(path);
  if (magic == kLlmcTokenMagic) return TokenDataset::from_token_shard(path, request.validation_fraction);
  const std::vector<std::uint32_t> shard = read_llama_token_shard(path);  // FileFormatError for anything else
  if (shard.empty()) throw FileFormatError(path.string() + ": the token shard is empty");
  std::vector<int> tokens(shard.size());
  for (std::size_t i = 0; i < shard.size(); ++i) {
    if (shard[i] >= std::uint32_t(kLlama3Vocab))
      throw FileFormatError(path.string() + ": token " + std::to_string(shard[i]) + " at index " + std::to_string(i) +
                            " is outside Llama 3's vocabulary of " + std::to_string(kLlama3Vocab));
    tokens[i] = int(shard[i]);
  }
  return TokenDataset(std::move(tokens), kLlama3Vocab, request.validation_fraction);
}

void check_flag(const char* flag, const std::optional<int>& given, int from_file) {
  if (given && *given != from_file)
    throw std::invalid_argument(std::string("--") + flag + " " + std::to_string(*given) +
                                " contradicts the checkpoint's " + std::to_string(from_file));
}

// A shape whose width the flags changed: H from the preset's rule, and header fields llm.c's
// int32 header can hold exactly (H as the multiple, no multiplier) unless the preset's still do.
void settle_ffn(LlamaShape& shape) {
  shape.ffn_hidden = kernels::llama_ffn_hidden(shape.channels, shape.ffn_dim_multiplier, shape.multiple_of);
  try {
    if (llama_shape_from_header(llama_checkpoint_header(shape, kLlamaCheckpointFp32), "flags").same_model(shape))
      return;
  } catch (const FileFormatError&) {
  }
  shape.ffn_dim_multiplier = 0.0f;
  shape.multiple_of = shape.ffn_hidden;
}

LlamaShape shape_from_flags(const ModelRequest& request, int vocab) {
  LlamaShape shape = llama_preset(request.preset.value_or("llama3-tiny"));
  if (request.layers) shape.layers = *request.layers;
  if (request.channels) shape.channels = *request.channels;
  if (request.heads) shape.heads = *request.heads;
  if (request.max_seq) shape.max_seq = *request.max_seq;
  shape.vocab = vocab;  // the data decides the vocabulary
  try {
    if (shape.channels <= 0 || shape.heads <= 0) shape.validate();
    settle_ffn(shape);
    shape.validate();
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string("invalid model shape: ") + e.what());
  }
  return shape;
}

LlamaShape shape_from_checkpoint(const ModelRequest& request) {
  const LlamaShape shape = llama_checkpoint_shape(*request.checkpoint);  // a file or a Hugging Face folder
  if (request.preset) {
    LlamaShape flags = llama_preset(*request.preset);
    flags.layers = request.layers.value_or(flags.layers);
    flags.channels = request.channels.value_or(flags.channels);
    flags.heads = request.heads.value_or(flags.heads);
    flags.max_seq = request.max_seq.value_or(flags.max_seq);
    if (flags.layers != shape.layers || flags.channels != shape.channels || flags.heads != shape.heads ||
        flags.max_seq != shape.max_seq || flags.kv_heads != shape.kv_heads)
      throw std::invalid_argument("the shape flags (--preset " + *request.preset +
                                  ": L=" + std::to_string(flags.layers) + " C=" + std::to_string(flags.channels) +
                                  " NH=" + std::to_string(flags.heads) + " NKV=" + std::to_string(flags.kv_heads) +
                                  " maxT=" + std::to_string(flags.max_seq) + ") contradict the checkpoint's shape " +
                                  shape.to_string());
    return shape;
  }
  check_flag("layers", request.layers, shape.layers);
  check_flag("channels", request.channels, shape.channels);
  check_flag("heads", request.heads, shape.heads);
  check_flag("max-seq", request.max_seq, shape.max_seq);
  return shape;
}

std::unique_ptr<ModelSpec> prepare_llama(const ModelRequest& request) {
  if (request.checkpoint && !fs::exists(*request.checkpoint))
    throw std::invalid_argument("no such checkpoint '" + request.checkpoint->string() + "'");
  TokenDataset data = load_dataset(request);
  data.use_tokenizer(request.tokenizer);
  const bool evaluation = request.validation_fraction == 0;
  LlamaShape shape;
  if (request.checkpoint) {
    shape = shape_from_checkpoint(request);
    const int largest = *std::max_element(data.tokens().begin(), data.tokens().end());
    if (evaluation && largest >= shape.vocab)
      throw std::invalid_argument("the data holds token " + std::to_string(largest) +
                                  ", outside the checkpoint's vocabulary of " + std::to_string(shape.vocab));
    if (!evaluation && data.vocab() != shape.vocab)
      throw std::invalid_argument("the data's vocabulary " + std::to_string(data.vocab()) +
                                  " differs from the checkpoint's " + std::to_string(shape.vocab));
  } else {
    shape = shape_from_flags(request, data.vocab());
  }
  const int T = request.seq.value_or(std::min(64, shape.max_seq));
  if (T < 1 || T > shape.max_seq)
    throw std::invalid_argument("--seq " + std::to_string(T) + " outside 1..max-seq " + std::to_string(shape.max_seq));
  if (!evaluation && data.split_size(Split::train) < std::size_t(T) + 1)
    throw std::invalid_argument("the training data has " + std::to_string(data.split_size(Split::train)) +
                                " tokens: too few for --seq " + std::to_string(T));
  return std::make_unique<LlamaSpec>(shape, std::move(data), T, request.seed,
                                     evaluation ? Split::train : Split::validation);
}

// Llama's state files record {V, C, L, NH, NKV, -H} (GPT's six fields are all positive, the
// MLP's end in zeros).
std::unique_ptr<CheckpointFormat> llama_format_of_state(const StateShapeFields& fields) {
  try {
    return std::make_unique<LlamaCheckpointFormat>(llama_shape_from_fields(fields));
  } catch (const std::invalid_argument&) {
    return nullptr;
  }
}

}  // namespace

std::unique_ptr<CheckpointFormat> llama_llmc_format(const LlamaShape& shape) {
  return std::make_unique<LlamaCheckpointFormat>(shape);
}

ModelFamily llama3_family() {
  return {"llama3",
          "Llama 3 in llm.c's layout (--preset llama3-tiny|llama3-1B|llama3-8B|llama3-70B, --layers, --channels, "
          "--heads, --max-seq; llm.c Llama 3 checkpoints and token shards)",
          prepare_llama, llama_format_of_state};
}

}  // namespace starzero
