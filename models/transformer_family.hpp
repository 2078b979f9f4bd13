#pragma once
// What the transformer families (GPT-2: models/gpt_family.cpp, Llama 3: models/llama_family.cpp)
// share as model families: the llm.c checkpoint as a CheckpointFormat, the Trainable over a token
// model and its data, the ModelSpec, and the checks of `prepare` (checkpoint, data, --seq). A
// family supplies one traits struct that names what differs, and registers
// `transformer_family<Traits>(name, summary)`:
//
//   struct Traits : TransformerTypes<Shape, Model, Layout, Codec, HfFolder> {
//     // Shape: layers, channels, heads, max_seq, vocab, param_count(), to_string();
//     // Model: an offload/model.hpp Model with batch(), seq(), set_batch(), probabilities(),
//     //   mean_loss(), activation_bytes(), offloaded_...();
//     // Layout: its models/llmc_layout.hpp layout, constructed from a Shape;
//     // Codec: its llm.c files' (models/llmc_format.hpp); HfFolder: its Hugging Face folder
//     //   (models/hf_checkpoint.hpp's GptHfFolder is the pattern).
//     // Each function below may be a constexpr pointer to one of that signature
//     // (`static constexpr auto activation_bytes = gpt_activation_bytes;`).
//     static std::string describe(const Shape&);             // "Llama 3 L=2 C=64 ..."
//     static Shape preset(std::string_view name);             // std::invalid_argument
//     static std::vector<std::string> preset_names();         // the default (no --preset) first
//     static std::string preset_fields(const Shape&);         // the fields a preset fixes, for
//                                                             // comparing with a checkpoint's
//     static Shape shape_from_flags(const ModelRequest&, int vocab);
//     static TokenShardFormat token_shard_format(const std::filesystem::path& first_shard);
//     static void check_tiling(const Shape&, const Tiling&);  // optional: the head groups
//     static ModelFootprint footprint(const Shape&, int B, int T, const ActivationPolicy&);
//     static std::size_t activation_bytes(const Shape&, std::size_t element, int B, int T,
//                                         const ActivationPolicy&);
//     static std::size_t offloaded_activation_bytes(same arguments);
//     static std::unique_ptr<Model> make_model(const Shape&, DType, int B, int T, const Tiling&,
//                                              const ActivationPolicy&);  // tiles set
//     static std::unique_ptr<CheckpointFormat> format_of_state(const StateShapeFields&);
//     static Shape planned_shape(const Shape&, int seq);  // the shape `plan` sizes for --seq
//     static int kv_heads(const Shape&);                   // key/value heads
//     static int ffn_hidden(const Shape&);                 // the MLP's hidden width
//   };
//
// docs/adding-a-model.md, "A transformer variant".
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/data.hpp"
#include "models/gpt_layout.hpp"  // LlmcRun
#include "models/hf_checkpoint.hpp"
#include "models/llmc_format.hpp"
#include "models/registry.hpp"
#include "models/token_rows.hpp"
#include "offload/footprint.hpp"
#include "train/trainable.hpp"

namespace starzero {

// The types a family's traits name, in one line (see above).
template <class ShapeT, class ModelT, class LayoutT, class CodecT, class HfFolderT>
struct TransformerTypes {
  using Shape = ShapeT;
  using Model = ModelT;
  using Layout = LayoutT;
  using Codec = CodecT;
  using HfFolder = HfFolderT;
};

// ---- llm.c's checkpoint files as a CheckpointFormat --------------------------------------------

// A checkpoint in llm.c's order, whose per-layer tensors are layer-major: the engine's layers map
// to runs of the file (LlmcRun), written and read in file order, one run in memory at a time. A
// family's format gives the runs of each layer and its file's streamed reader and writer.
class LlmcRunsFormat : public CheckpointFormat {
 public:
  using RunFill = std::function<void(std::size_t, std::span<float>)>;
  using RunPlace = std::function<std::span<float>(std::size_t, std::size_t)>;

  std::string describe(DType precision) const override;
  void write(const std::filesystem::path& path, const LayerSource& source, DType precision) const override;
  void read(const std::filesystem::path& path, const LayerDestination& destination) const override;
  DType stored_precision(const std::filesystem::path& path) const override;
  // Each request read from the file at random, only the runs it covers.
  LayerSource source(const std::filesystem::path& path) const override;

 protected:
  // `name` ("llm.c", "llm.c Llama 3") for messages; `layer_runs(l)` and `layer_params(l)` of each
  // of the `layers` layers.
  LlmcRunsFormat(std::string name, int layers, const std::function<std::vector<LlmcRun>(int)>& layer_runs,
                 const std::function<std::size_t(int)>& layer_params);
  // The family's file: version 3 (fp32) or 5 (bf16) written from `fill(offset, values)`, read into
  // `place(offset, count)`, piece by piece in file order.
  virtual void write_runs(const std::filesystem::path& path, int version, const RunFill& fill,
                          std::span<const std::size_t> sizes) const = 0;
  virtual void read_runs(const std::filesystem::path& path, const RunPlace& place,
                         std::span<const std::size_t> sizes) const = 0;
  // The file's version, its header checked against the shape (FileFormatError).
  virtual int read_version(const std::filesystem::path& path) const = 0;

 private:
  struct Piece {
    int layer;
    LlmcRun run;
  };
  int version_of(DType precision) const;
  const Piece& piece_at(std::size_t offset) const;

  std::string name_;
  std::vector<std::size_t> layer_params_;
  std::vector<Piece> pieces_;       // every layer's runs by file offset: they tile the file
  std::vector<std::size_t> sizes_;  // their sizes, in that order
};

// A family's llm.c checkpoint file (Traits: the family's, above) as a CheckpointFormat.
template <class Traits>
class LlmcFileFormat final : public LlmcRunsFormat {
 public:
  using Shape = typename Traits::Shape;
  using File = LlmcCheckpointFile<typename Traits::Codec>;
  explicit LlmcFileFormat(const Shape& shape) : LlmcFileFormat(shape, typename Traits::Layout(shape)) {}

  StateLayout state_layout() const override { return typename Traits::Layout(shape_).state_layout(); }
  void check(const std::filesystem::path& path) const override { File::read_header(path, shape_); }
  std::unique_ptr<CheckpointFormat> hugging_face() const override {
    return hf_checkpoint_format(Traits::HfFolder::map(shape_), typename Traits::Layout(shape_).state_layout());
  }

 private:
  LlmcFileFormat(const Shape& shape, const typename Traits::Layout& layout)
      : LlmcRunsFormat(
            std::string(Traits::Codec::kIds.name), layout.layers(), [&](int l) { return layout.layer_runs(l); },
            [&](int l) { return layout.layer_params(l); }),
        shape_(shape) {}
  void write_runs(const std::filesystem::path& path, int version, const RunFill& fill,
                  std::span<const std::size_t> sizes) const override {
    File::write_streamed(path, shape_, version, fill, sizes);
  }
  void read_runs(const std::filesystem::path& path, const RunPlace& place,
                 std::span<const std::size_t> sizes) const override {
    File::read_streamed(path, shape_, place, sizes);
  }
  int read_version(const std::filesystem::path& path) const override {
    return File::read_header(path, shape_).version;
  }

  Shape shape_;
};

// The shape of a family's checkpoint: a Hugging Face folder's config.json, an llm.c file's header.
template <class Traits>
typename Traits::Shape transformer_checkpoint_shape(const std::filesystem::path& path) {
  if (std::filesystem::is_directory(path)) return Traits::HfFolder::shape_from_config(path);
  return LlmcCheckpointFile<typename Traits::Codec>::read_header(path).shape;
}

template <class Traits>
std::unique_ptr<CheckpointFormat> transformer_format_of_checkpoint(const std::filesystem::path& path) {
  return std::make_unique<LlmcFileFormat<Traits>>(transformer_checkpoint_shape<Traits>(path));
}

// ---- a token model with its data as a Trainable -------------------------------------------------

// What a transformer's spec fixes besides its shape and data.
struct TransformerOptions {
  int seq = 0;             // T, tokens per row
  std::uint64_t seed = 0;  // the training batches' seed
  Split evaluation_split = Split::validation;
};

template <class TokenModel>
class TransformerTrainable final : public Trainable {
 public:
  TransformerTrainable(std::unique_ptr<TokenModel> model, const TokenDataset& data, const TransformerOptions& options)
      : model_(std::move(model)),
        data_(data),
        evaluation_split_(options.evaluation_split),
        train_batches_(data, model_->seq(), options.seed) {}

  int layers() const override { return model_->layers(); }
  std::size_t layer_params(int layer) const override { return model_->layer_params(layer); }
  std::string layer_name(int layer) const override { return model_->layer_name(layer); }
  DType dtype() const override { return model_->dtype(); }
  std::vector<int> shared_groups(int layer) const override { return model_->shared_groups(layer); }
  std::vector<std::size_t> gradient_pieces(int layer) const override { return model_->gradient_pieces(layer); }
  void init_layer(int layer, std::span<float> params, std::uint64_t seed) const override {
    model_->init_layer(layer, params, seed);
  }
  void submit_forward(int layer, const GroupHandles& groups) override { model_->submit_forward(layer, groups); }
  void submit_backward(int layer, const GroupHandles& groups) override { model_->submit_backward(layer, groups); }

  int micro_batch() const override { return model_->batch(); }
  int row_tokens() const override { return model_->seq(); }
  void load_train_rows(std::uint64_t step, const BatchRows& rows) override {
    batch_targets_ = set_batch_rows(*model_, train_batches_.batch(step, rows.global), rows);
  }
  void resume_data(std::uint64_t step, std::uint64_t position) override { train_batches_.set_origin(step, position); }
  std::uint64_t data_position_after(std::uint64_t step, int global_rows) const override {
    return train_batches_.position_before(step + 1, global_rows);
  }
  std::size_t validation_batches(int global_rows) const override {
    return data_.sequential_batches(global_rows, model_->seq(), evaluation_split_);
  }
  void load_validation_rows(std::size_t batch, const BatchRows& rows) override {
    batch_targets_ =
        set_batch_rows(*model_, data_.sequential_batch(rows.global, model_->seq(), batch, evaluation_split_), rows);
  }
  double mean_loss() const override { return model_->mean_loss(); }
  std::optional<TargetCount> batch_targets() const override { return batch_targets_; }
  std::optional<std::size_t> activation_bytes() const override { return model_->activation_bytes(); }
  std::optional<std::size_t> offloaded_activation_bytes() const override {
    return model_->offloaded_activation_bytes();
  }
  std::optional<std::string> sample(const std::function<void()>& forward, const std::string& prompt, int tokens,
                                    std::uint64_t seed) override {
    return sample_bytes(*model_, data_, forward, prompt, tokens, seed);
  }

 private:
  std::unique_ptr<TokenModel> model_;
  const TokenDataset& data_;
  Split evaluation_split_;
  TrainBatchStream train_batches_;
  std::optional<TargetCount> batch_targets_;  // the last loaded global batch's
};

// ---- the spec -----------------------------------------------------------------------------------

// "data: N training and M validation tokens (vocabulary V)".
std::string token_data_summary(const TokenDataset& data);

// ModelSpec::check_tiling for a transformer: the tile count, then what the family adds.
template <class Traits>
void check_transformer_tiling(const typename Traits::Shape& shape, const Tiling& tiling, int batch) {
  check_tile_count(tiling, batch);
  if constexpr (requires { Traits::check_tiling(shape, tiling); }) Traits::check_tiling(shape, tiling);
}

template <class Traits>
class TransformerSpec final : public ModelSpec {
 public:
  using Shape = typename Traits::Shape;
  TransformerSpec(const Shape& shape, TokenDataset data, const TransformerOptions& options)
      : shape_(shape), data_(std::move(data)), options_(options), format_(shape) {}

  std::string describe() const override {
    return Traits::describe(shape_) + ", " + std::to_string(shape_.param_count()) + " parameters";
  }
  std::string data_summary() const override { return token_data_summary(data_); }
  std::size_t parameter_count() const override { return shape_.param_count(); }
  ModelFootprint footprint(int batch, const ActivationPolicy& activations) const override {
    return Traits::footprint(shape_, batch, options_.seq, activations);
  }
  const CheckpointFormat& checkpoint_format() const override { return format_; }
  void check_tiling(const Tiling& tiling, int batch) const override {
    check_transformer_tiling<Traits>(shape_, tiling, batch);
  }
  std::unique_ptr<Trainable> build(DType dtype, int batch, const Tiling& tiling,
                                   const ActivationPolicy& activations) const override {
    return std::make_unique<TransformerTrainable<typename Traits::Model>>(
        Traits::make_model(shape_, dtype, batch, options_.seq, tiling, activations), data_, options_);
  }
  std::optional<std::size_t> activation_bytes(DType dtype, int batch,
                                              const ActivationPolicy& activations) const override {
    return Traits::activation_bytes(shape_, dtype_size(dtype), batch, options_.seq, activations);
  }
  std::optional<std::size_t> offloaded_activation_bytes(DType dtype, int batch,
                                                        const ActivationPolicy& activations) const override {
    return Traits::offloaded_activation_bytes(shape_, dtype_size(dtype), batch, options_.seq, activations);
  }

 private:
  Shape shape_;
  TokenDataset data_;
  TransformerOptions options_;
  LlmcFileFormat<Traits> format_;
};

// ---- prepare: from the command line's request to a checked spec --------------------------------

// The data a request names: the checkout's text without --data, a text file, JSONL records, or
// (.bin) llm.c token shards (a file, a folder or a glob: data_files) of the format `shard_format`
// gives for the first, with --val-data's as the validation split; with --tokenizer, read once and
// used by the dataset (TokenDataset::use_tokenizer) and the JSONL reader alike.
TokenDataset load_token_data(const ModelRequest& request,
                             const std::function<TokenShardFormat(const std::filesystem::path&)>& shard_format);
// std::invalid_argument "--FLAG given contradicts the checkpoint's from_file" when given differs.
void check_flag(const char* flag, const std::optional<int>& given, int from_file);
// The shape flags against a checkpoint's shape: `fields` of the preset with the flags' overrides
// must equal the checkpoint's (`file_fields`); without --preset, each flag given must agree.
void check_checkpoint_flags(const ModelRequest& request, int layers, int channels, int heads, int max_seq,
                            const std::function<std::string(const ModelRequest&)>& preset_fields,
                            const std::string& file_fields, const std::string& file_shape);
// The data against a checkpoint's vocabulary: evaluation needs every token inside it, training
// the same vocabulary.
void check_data_vocabulary(const TokenDataset& data, int vocab, bool evaluation);
// --seq (default min(64, max_seq)) within 1..max_seq and the training data long enough for it.
int checked_seq(const ModelRequest& request, const TokenDataset& data, int max_seq, bool evaluation);

// `shape` (a preset's) with the shape flags the request gives.
template <class Shape>
Shape with_shape_flags(Shape shape, const ModelRequest& request) {
  shape.layers = request.layers.value_or(shape.layers);
  shape.channels = request.channels.value_or(shape.channels);
  shape.heads = request.heads.value_or(shape.heads);
  shape.max_seq = request.max_seq.value_or(shape.max_seq);
  return shape;
}

template <class Traits>
typename Traits::Shape transformer_shape_from_checkpoint(const ModelRequest& request) {
  const typename Traits::Shape shape = transformer_checkpoint_shape<Traits>(*request.checkpoint);
  const auto preset_fields = [](const ModelRequest& r) {
    return Traits::preset_fields(with_shape_flags(Traits::preset(*r.preset), r));
  };
  check_checkpoint_flags(request, shape.layers, shape.channels, shape.heads, shape.max_seq, preset_fields,
                         Traits::preset_fields(shape), shape.to_string());
  return shape;
}

template <class Traits>
std::unique_ptr<ModelSpec> prepare_transformer(const ModelRequest& request) {
  if (request.checkpoint && !std::filesystem::exists(*request.checkpoint))
    throw std::invalid_argument("no such checkpoint '" + request.checkpoint->string() + "'");
  TokenDataset data = load_token_data(request, Traits::token_shard_format);
  const bool evaluation = request.validation_fraction == 0;
  typename Traits::Shape shape;
  if (request.checkpoint) {
    shape = transformer_shape_from_checkpoint<Traits>(request);
    data.check_tokenizer_vocab(shape.vocab);
    check_data_vocabulary(data, shape.vocab, evaluation);
  } else {
    shape = Traits::shape_from_flags(request, data.vocab());
  }
  TransformerOptions options;
  options.seq = checked_seq(request, data, shape.max_seq, evaluation);
  options.seed = request.seed;
  options.evaluation_split = evaluation ? Split::train : Split::validation;
  return std::make_unique<TransformerSpec<Traits>>(shape, std::move(data), options);
}

// A preset without data: its shape, footprint and model (models/registry.hpp's PresetModel).
template <class Traits>
PresetModel transformer_preset(std::string_view name) {
  using Shape = typename Traits::Shape;
  const Shape shape = Traits::preset(name);
  PresetModel preset;
  preset.describe = Traits::describe(shape);
  preset.parameters = shape.param_count();
  preset.layers = shape.layers;
  preset.channels = shape.channels;
  preset.heads = shape.heads;
  preset.kv_heads = Traits::kv_heads(shape);
  preset.ffn_hidden = Traits::ffn_hidden(shape);
  preset.vocab = shape.vocab;
  preset.max_seq = shape.max_seq;
  preset.footprint = [shape](int batch, int seq, const ActivationPolicy& activations) {
    return Traits::footprint(Traits::planned_shape(shape, seq), batch, seq, activations);
  };
  preset.make_model = [shape](DType dtype, int batch, int seq, const Tiling& tiling) {
    return std::unique_ptr<TokenModel>(Traits::make_model(shape, dtype, batch, seq, tiling, ActivationPolicy{}));
  };
  preset.check_tiling = [shape](const Tiling& tiling, int batch) {
    check_transformer_tiling<Traits>(shape, tiling, batch);
  };
  return preset;
}

template <class Traits>
ModelFamily transformer_family(std::string name, std::string summary) {
  return {std::move(name),
          std::move(summary),
          prepare_transformer<Traits>,
          Traits::format_of_state,
          transformer_preset<Traits>,
          Traits::preset_names(),
          Traits::HfFolder::kModelType,
          Traits::Codec::kIds.checkpoint_magic,
          transformer_format_of_checkpoint<Traits>};
}

}  // namespace starzero
