// GPT-2 as a model family: `starzero train` (the default --model gpt). The shape comes from a
// checkpoint when one is given (a contradicting shape flag is an error naming both), else from
// a preset and the shape flags; the vocabulary from the data (bytes 256, GPT-2 tokens 50257).
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <random>
#include <stdexcept>

#include "models/data.hpp"
#include "models/gpt.hpp"
#include "models/gpt_flops.hpp"
#include "models/gpt_layout.hpp"
#include "models/hf_checkpoint.hpp"
#include "models/llmc_files.hpp"
#include "models/registry.hpp"
#include "models/token_rows.hpp"
#include "offload/footprint.hpp"

namespace starzero {

namespace fs = std::filesystem;

namespace {

// ---- the llm.c checkpoint as a CheckpointFormat -------------------------------------------------

class LlmcCheckpointFormat final : public CheckpointFormat {
 public:
  explicit LlmcCheckpointFormat(const GptShape& shape) : shape_(shape), layout_(shape) {}

  StateLayout state_layout() const override { return gpt_state_layout(shape_); }
  std::string describe(DType precision) const override {
    return "llm.c version " + std::to_string(version_of(precision));
  }
  // llm.c's order interleaves the layers (per-layer tensors are layer-major): the runs of every
  // layer are written by increasing llm.c offset, one run in memory at a time.
  void write(const fs::path& path, const LayerSource& source, DType precision) const override {
    write_llmc_checkpoint_streamed(
        path, shape_, version_of(precision),
        [&](std::size_t llmc_offset, std::span<float> out) {
          const Piece& piece = piece_at(llmc_offset);
          source(piece.layer, piece.run.layer_offset, out);
        },
        run_sizes());
  }
  void check(const fs::path& path) const override { read_llmc_checkpoint_header(path, shape_); }
  std::unique_ptr<CheckpointFormat> hugging_face() const override { return gpt_hf_format(shape_); }
  // Each run read from the file straight into its layer's destination, in file order.
  void read(const fs::path& path, const LayerDestination& destination) const override {
    std::vector<std::span<float>> layers;
    for (int l = 0; l < layout_.layers(); ++l) layers.push_back(destination(l, layout_.layer_params(l)));
    read_llmc_checkpoint_streamed(
        path, shape_,
        [&](std::size_t llmc_offset, std::size_t count) {
          const Piece& piece = piece_at(llmc_offset);
          return layers[std::size_t(piece.layer)].subspan(piece.run.layer_offset, count);
        },
        run_sizes());
  }

 private:
  struct Piece {
    int layer;
    LlmcRun run;
  };
  static int version_of(DType precision) {
    if (precision == DType::f32) return kLlmcCheckpointFp32;
    if (precision == DType::bf16) return kLlmcCheckpointBf16;
    throw std::invalid_argument("llm.c checkpoints store fp32 (version 3) or bf16 (version 5)");
  }
  // Every layer's runs sorted by llm.c offset: they tile the file.
  const std::vector<Piece>& pieces() const {
    if (pieces_.empty()) {
      for (int l = 0; l < layout_.layers(); ++l)
        for (const LlmcRun& run : layout_.layer_runs(l)) pieces_.push_back({l, run});
      std::sort(pieces_.begin(), pieces_.end(),
                [](const Piece& a, const Piece& b) { return a.run.llmc_offset < b.run.llmc_offset; });
    }
    return pieces_;
  }
  std::vector<std::size_t> run_sizes() const {
    std::vector<std::size_t> sizes;
    for (const Piece& piece : pieces()) sizes.push_back(piece.run.count);
    return sizes;
  }
  const Piece& piece_at(std::size_t llmc_offset) const {
    const auto& all = pieces();
    const auto it = std::lower_bound(all.begin(), all.end(), llmc_offset,
                                     [](const Piece& p, std::size_t offset) { return p.run.llmc_offset < offset; });
    if (it == all.end() || it->run.llmc_offset != llmc_offset) throw std::logic_error("llm.c runs are not contiguous");
    return *it;
  }

  GptShape shape_;
  GptLayout layout_;
  mutable std::vector<Piece> pieces_;
};

// ---- GPT-2 with its data ------------------------------------------------------------------------

class GptTrainable final : public Trainable {
 public:
  GptTrainable(const GptShape& shape, DType dtype, int B, int T, int tiles, int head_groups,
               const ActivationPolicy& activations, const TokenDataset& data, std::uint64_t seed,
               Split evaluation_split)
      : model_(shape, dtype, B, T, tiles, activations, head_groups),
        data_(data),
        seed_(seed),
        evaluation_split_(evaluation_split) {}

  int layers() const override { return model_.layers(); }
  std::size_t layer_params(int layer) const override { return model_.layer_params(layer); }
  std::string layer_name(int layer) const override { return model_.layer_name(layer); }
  DType dtype() const override { return model_.dtype(); }
  std::vector<int> shared_groups(int layer) const override { return model_.shared_groups(layer); }
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

  GptModel model_;
  const TokenDataset& data_;
  std::uint64_t seed_;
  Split evaluation_split_;
};

std::optional<std::string> GptTrainable::sample(const std::function<void()>& forward, const std::string& prompt,
                                                int tokens, std::uint64_t seed) {
  return sample_bytes(model_, data_, forward, prompt, tokens, seed);
}

class GptSpec final : public ModelSpec {
 public:
  GptSpec(const GptShape& shape, TokenDataset data, int T, std::optional<int> head_groups, std::uint64_t seed,
          Split evaluation_split)
      : shape_(shape),
        data_(std::move(data)),
        T_(T),
        head_groups_(head_groups),
        seed_(seed),
        evaluation_split_(evaluation_split),
        format_(shape) {}

  std::string describe() const override {
    return shape_.to_string() + ", " + std::to_string(shape_.param_count()) + " parameters";
  }
  std::string data_summary() const override {
    return "data: " + std::to_string(data_.split_size(Split::train)) + " training and " +
           std::to_string(data_.split_size(Split::validation)) + " validation tokens (vocabulary " +
           std::to_string(data_.vocab()) + ")";
  }
  std::size_t parameter_count() const override { return shape_.param_count(); }
  ModelFootprint footprint(int batch, const ActivationPolicy& activations) const override {
    ModelFootprint footprint = gpt_footprint(shape_, batch, activations);
    footprint.training_flops = gpt_training_flops(shape_, batch, T_, activations);
    return footprint;
  }
  const CheckpointFormat& checkpoint_format() const override { return format_; }
  std::unique_ptr<Trainable> build(DType dtype, int batch, int tiles,
                                   const ActivationPolicy& activations) const override {
    const int head_groups = head_groups_.value_or(auto_head_groups(shape_.heads, tiles));
    return std::make_unique<GptTrainable>(shape_, dtype, batch, T_, tiles, head_groups, activations, data_, seed_,
                                          evaluation_split_);
  }
  std::optional<std::size_t> activation_bytes(DType dtype, int batch,
                                              const ActivationPolicy& activations) const override {
    return gpt_activation_bytes(shape_, dtype_size(dtype), batch, T_, activations);
  }
  std::optional<std::size_t> offloaded_activation_bytes(DType dtype, int batch,
                                                        const ActivationPolicy& activations) const override {
    return gpt_offloaded_activation_bytes(shape_, dtype_size(dtype), batch, T_, activations);
  }

 private:
  GptShape shape_;
  TokenDataset data_;
  int T_;
  std::optional<int> head_groups_;  // empty: auto_head_groups on the running session
  std::uint64_t seed_;
  Split evaluation_split_;
  LlmcCheckpointFormat format_;
};

// ---- choosing the shape and the data --------------------------------------------------------

TokenDataset load_dataset(const ModelRequest& request) {
  if (!request.data) return TokenDataset::from_text_files(checkout_text_files(), request.validation_fraction);
  const fs::path& path = *request.data;
  if (!fs::exists(path)) throw std::invalid_argument("--data: no such file '" + path.string() + "'");
  return path.extension() == ".bin" ? TokenDataset::from_token_shard(path, request.validation_fraction)
                                    : TokenDataset::from_text_file(path, request.validation_fraction);
}

void check_flag(const char* flag, const std::optional<int>& given, int from_file) {
  if (given && *given != from_file)
    throw std::invalid_argument(std::string("--") + flag + " " + std::to_string(*given) +
                                " contradicts the checkpoint's " + std::to_string(from_file));
}

// The checkpoint's shape; every shape flag given must agree with it (a preset with its
// overrides is compared as the shape it makes).
GptShape shape_from_checkpoint(const ModelRequest& request) {
  const GptShape shape = gpt_checkpoint_shape(*request.checkpoint);  // a file or a Hugging Face folder
  if (request.preset) {
    GptShape flags = gpt_preset(*request.preset);
    flags.layers = request.layers.value_or(flags.layers);
    flags.channels = request.channels.value_or(flags.channels);
    flags.heads = request.heads.value_or(flags.heads);
    flags.max_seq = request.max_seq.value_or(flags.max_seq);
    if (flags.layers != shape.layers || flags.channels != shape.channels || flags.heads != shape.heads ||
        flags.max_seq != shape.max_seq)
      throw std::invalid_argument("the shape flags (--preset " + *request.preset +
                                  ": L=" + std::to_string(flags.layers) + " NH=" + std::to_string(flags.heads) +
                                  " C=" + std::to_string(flags.channels) + " maxT=" + std::to_string(flags.max_seq) +
                                  ") contradict the checkpoint's shape " + shape.to_string());
    return shape;
  }
  check_flag("layers", request.layers, shape.layers);
  check_flag("channels", request.channels, shape.channels);
  check_flag("heads", request.heads, shape.heads);
  check_flag("max-seq", request.max_seq, shape.max_seq);
  return shape;
}

GptShape shape_from_flags(const ModelRequest& request, int vocab) {
  GptShape shape = gpt_preset(request.preset.value_or("tiny"));
  if (request.layers) shape.layers = *request.layers;
  if (request.channels) shape.channels = *request.channels;
  if (request.heads) shape.heads = *request.heads;
  if (request.max_seq) shape.max_seq = *request.max_seq;
  if (vocab != shape.vocab) {  // the data decides the vocabulary
    shape.vocab = vocab;
    shape.padded_vocab = (vocab + 127) / 128 * 128;
  }
  try {
    shape.validate();
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string("invalid model shape: ") + e.what());
  }
  return shape;
}

std::unique_ptr<ModelSpec> prepare_gpt(const ModelRequest& request) {
  if (request.checkpoint && !fs::exists(*request.checkpoint))
    throw std::invalid_argument("no such checkpoint '" + request.checkpoint->string() + "'");
  TokenDataset data = load_dataset(request);
  data.use_tokenizer(request.tokenizer);
  const bool evaluation = request.validation_fraction == 0;
  GptShape shape;
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
    throw std::invalid_argument("--seq " + std::to_string(T) + " exceeds the model's max-seq " +
                                std::to_string(shape.max_seq));
  if (!evaluation && data.split_size(Split::train) < std::size_t(T) + 1)
    throw std::invalid_argument("the training data has " + std::to_string(data.split_size(Split::train)) +
                                " tokens: too few for --seq " + std::to_string(T));
  if (request.head_groups && (*request.head_groups < 1 || *request.head_groups > shape.heads))
    throw std::invalid_argument("--head-groups " + std::to_string(*request.head_groups) +
                                ": a group holds whole heads, so 1 <= head groups <= the model's " +
                                std::to_string(shape.heads) + " heads");
  return std::make_unique<GptSpec>(shape, std::move(data), T, request.head_groups, request.seed,
                                   evaluation ? Split::train : Split::validation);
}

std::unique_ptr<CheckpointFormat> gpt_format_of_state(const StateShapeFields& fields) {
  const GptShape shape = gpt_shape_from_fields(fields);
  try {
    shape.validate();
  } catch (const std::invalid_argument&) {
    return nullptr;
  }
  return std::make_unique<LlmcCheckpointFormat>(shape);
}

}  // namespace

std::unique_ptr<CheckpointFormat> gpt_llmc_format(const GptShape& shape) {
  return std::make_unique<LlmcCheckpointFormat>(shape);
}

ModelFamily gpt_family() {
  return {"gpt", "GPT-2 in llm.c's layout (--preset, --layers, --channels, --heads, --max-seq; llm.c checkpoints)",
          prepare_gpt, gpt_format_of_state};
}

}  // namespace starzero
