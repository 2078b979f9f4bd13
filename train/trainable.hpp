#pragma once
// What the training library needs of a model beyond the engine's Model (offload/model.hpp):
//   Trainable        - a model instance with its data and loss (needs a running StarPU session)
//   CheckpointFormat - the model family's checkpoint file and the shape its training-state files
//                      record (host-side only: `starzero consolidate` uses it without StarPU)
//   ModelSpec        - a model chosen and checked before StarPU starts: shape, data and files
//                      read and validated, sizes known for the planner, then built into a
//                      Trainable once the session runs.
// models/ implements these for each family and registers it (models/registry.hpp); the Trainer
// and the run (train/run.hpp) know nothing else of a model. docs/adding-a-model.md has the list.
#include <algorithm>
#include <array>
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

#include "offload/footprint.hpp"
#include "offload/model.hpp"
#include "runtime/dtype.hpp"
#include "runtime/precision.hpp"
#include "train/state_layout.hpp"

namespace starzero {

// This rank's rows of one micro-batch: rows [first, first + count) of a global batch of
// `global` rows. N ranks and K micro-batches cut the same global batch, so they train what one
// rank would on the whole batch.
struct BatchRows {
  int first = 0;
  int count = 0;
  int global = 0;
};

// The targets of one global batch: all of them, and those that count towards its loss (a model
// may mask targets: tasks/loss_mask.hpp). Its loss is the mean over the counted ones.
struct TargetCount {
  std::size_t total = 0, counted = 0;
  bool masked() const { return counted != total; }
};

// The mean loss over several global batches, as validation and `eval` report it: the mean of the
// batches' losses when nothing is masked (the expression of a run without masks), the mean over
// all their counted targets otherwise (each batch's loss weighted by its counted targets; 0 when
// none counts).
class BatchLossMean {
 public:
  // A batch's loss (the mean over its counted targets) and its targets (nullopt: none masked).
  void add(double loss, const std::optional<TargetCount>& targets) {
    sum_ += loss;
    ++batches_;
    const double counted = targets ? double(targets->counted) : 0.0;
    masked_ = masked_ || (targets && targets->masked());
    weighted_ += counted > 0 ? loss * counted : 0.0;
    counted_ += counted;
  }
  double mean() const {
    if (!masked_) return sum_ / double(batches_);
    return counted_ > 0 ? weighted_ / counted_ : 0.0;
  }

 private:
  double sum_ = 0, weighted_ = 0, counted_ = 0;
  std::size_t batches_ = 0;
  bool masked_ = false;
};

class Trainable : public Model {
 public:
  // Rows of one micro-batch on this rank, fixed at construction.
  virtual int micro_batch() const = 0;
  // Tokens per row (for tokens/s): T for a sequence model, 1 for one token per row.
  virtual int row_tokens() const = 0;
  // Submits the load of `rows` of training step `step`'s global batch (asynchronous tasks).
  // A step's batch is a function of (seed, data position) only: that is what makes resume exact.
  virtual void load_train_rows(std::uint64_t step, const BatchRows& rows) = 0;
  // The training data's stream position (samples drawn) after step `step` with global batches of
  // `global_rows` rows, recorded in the training state; resume_data restores it before step + 1,
  // so that a resume with another rank count continues the stream where it stopped. A model whose
  // batches are a function of (seed, step) alone keeps the defaults.
  virtual std::uint64_t data_position_after(std::uint64_t step, int /*global_rows*/) const { return step; }
  virtual void resume_data(std::uint64_t /*step*/, std::uint64_t /*position*/) {}
  // Whole validation batches of `global_rows` rows the data holds (0: no validation data).
  virtual std::size_t validation_batches(int global_rows) const = 0;
  virtual void load_validation_rows(std::size_t batch, const BatchRows& rows) = 0;
  // Mean loss over this rank's rows of the last forward pass; waits for that pass only. With
  // masked targets (batch_targets()), this rank's share of the global batch's mean over its
  // counted targets, scaled so that the mean over the global batch's micro-batches and ranks is
  // that mean; the gradients are scaled alike.
  virtual double mean_loss() const = 0;
  // The targets of the global batch of the last load_train_rows or load_validation_rows;
  // nullopt: the model masks none.
  virtual std::optional<TargetCount> batch_targets() const { return std::nullopt; }
  // Fraction of this rank's rows whose most probable class is the target, in the last forward
  // pass (waits for it); nullopt: the model does not report it.
  virtual std::optional<double> accuracy() const { return std::nullopt; }
  // Bytes of one micro-batch's activation buffers as allocated (nullopt: not counted).
  virtual std::optional<std::size_t> activation_bytes() const { return std::nullopt; }
  // Of one micro-batch's activations, the bytes kept in pinned host memory instead (offload).
  virtual std::optional<std::size_t> offloaded_activation_bytes() const { return std::nullopt; }
  // Text generated from `prompt`, `tokens` tokens long, printable on one line: the model loads
  // its context and calls `forward` (one forward pass of the engine) per token. nullopt: this
  // model makes no text.
  virtual std::optional<std::string> sample(const std::function<void()>& /*forward*/, const std::string& /*prompt*/,
                                            int /*tokens*/, std::uint64_t /*seed*/) {
    return std::nullopt;
  }
};

// Reads elements [begin, begin + out.size()) of layer `layer`'s fp32 parameters.
using LayerSource = std::function<void(int layer, std::size_t begin, std::span<float> out)>;

// Where a checkpoint's reader puts layer `layer`'s `count` fp32 parameters.
using LayerDestination = std::function<std::span<float>(int layer, std::size_t count)>;

class CheckpointFormat {
 public:
  virtual ~CheckpointFormat() = default;
  // What the training-state files of this model hold: its shape fields (checked when
  // resuming) and the parameters of each layer as the engine sees them.
  virtual StateLayout state_layout() const = 0;
  // Writes a checkpoint atomically from `source` (layer slices, at most one layer's worth in
  // memory at a time). `precision` f32 or bf16; std::invalid_argument for one the format lacks.
  virtual void write(const std::filesystem::path& path, const LayerSource& source, DType precision) const = 0;
  // FileFormatError unless `path` is a checkpoint of this shape: the header and the file's size
  // are checked, no parameter is read.
  virtual void check(const std::filesystem::path& path) const = 0;
  // Every layer's fp32 parameters from a checkpoint of this shape (FileFormatError otherwise),
  // read straight into `destination`, which each layer's values are asked of once.
  virtual void read(const std::filesystem::path& path, const LayerDestination& destination) const = 0;
  // The same into new arrays, one per layer.
  std::vector<std::vector<float>> read_layers(const std::filesystem::path& path) const {
    const std::vector<std::size_t> sizes = state_layout().layer_params;
    std::vector<std::vector<float>> layers(sizes.size());
    read(path, [&](int layer, std::size_t count) {
      std::vector<float>& values = layers.at(std::size_t(layer));
      values.resize(count);
      return std::span<float>(values);
    });
    return layers;
  }
  // f32 or bf16: what the checkpoint at `path` stores (FileFormatError as check()).
  virtual DType stored_precision(const std::filesystem::path& path) const = 0;
  // The checkpoint at `path` as a LayerSource (`starzero convert` writes one format from another):
  // here read whole by read_layers; a format that can read a request's values alone says so.
  virtual LayerSource source(const std::filesystem::path& path) const {
    const auto layers = std::make_shared<const std::vector<std::vector<float>>>(read_layers(path));
    return [layers](int layer, std::size_t begin, std::span<float> out) {
      const std::vector<float>& values = layers->at(std::size_t(layer));
      std::copy_n(values.begin() + std::ptrdiff_t(begin), out.size(), out.begin());
    };
  }
  // "llm.c version 3" and the like, for messages.
  virtual std::string describe(DType precision) const = 0;
  // The same model as a Hugging Face folder (config.json, model.safetensors), or null when the
  // family has none (models/hf_checkpoint.hpp).
  virtual std::unique_ptr<CheckpointFormat> hugging_face() const { return nullptr; }
  // Whether write() asks for the layers in increasing order, all of a layer's values before the
  // next layer's: a ZeRO run then gathers and holds one layer at a time while it writes.
  virtual bool writes_layers_in_order() const { return false; }
};

// How a model cuts its ops into tasks: --tiles and --head-groups, parsed together (apps/train.cpp),
// checked by the model (ModelSpec::check_tiling) and handed to ModelSpec::build. Empty: auto.
struct Tiling {
  std::optional<int> tiles;        // tasks per row-wise op, each a group of whole sequences
  std::optional<int> head_groups;  // attention tasks per tile, each a group of whole heads (GPT)
};

// std::invalid_argument unless a given tile count is 1..micro_batch: a tile is a group of whole
// sequences. Every model's check_tiling starts with it.
inline void check_tile_count(const Tiling& tiling, int micro_batch) {
  if (tiling.tiles && (*tiling.tiles < 1 || *tiling.tiles > micro_batch))
    throw std::invalid_argument("--tiles " + std::to_string(*tiling.tiles) +
                                ": a tile is a group of whole sequences, so 1 <= tiles <= the " +
                                std::to_string(micro_batch) + " sequences of a micro-batch");
}

class ModelSpec {
 public:
  virtual ~ModelSpec() = default;
  // One line: family, shape, parameter count.
  virtual std::string describe() const = 0;
  // One line on the data, or empty.
  virtual std::string data_summary() const = 0;
  virtual std::size_t parameter_count() const = 0;
  // Precision when the user names none (a model may support only fp32).
  virtual Precision default_precision() const { return Precision::bf16; }
  // Sizes for the planner (host memory checks before StarPU starts), with activations kept as
  // `activations` says.
  virtual ModelFootprint footprint(int micro_batch, const ActivationPolicy& activations) const = 0;
  virtual const CheckpointFormat& checkpoint_format() const = 0;
  // std::invalid_argument for a tiling the model cannot take with micro-batches of `micro_batch`
  // rows, before StarPU starts. Here: a tile is a group of whole sequences; a model that cuts
  // its attention by heads checks the head groups too.
  virtual void check_tiling(const Tiling& tiling, int micro_batch) const { check_tile_count(tiling, micro_batch); }
  // Builds the model for micro-batches of `micro_batch` rows, each row-wise op split into
  // `tiling.tiles` tasks over groups of rows (set: resolve_tiling; a model may run every op as one
  // task and ignore it), keeping activations as `activations` says (std::invalid_argument when the
  // model cannot recompute); StarPU must be running.
  virtual std::unique_ptr<Trainable> build(DType dtype, int micro_batch, const Tiling& tiling,
                                           const ActivationPolicy& activations) const = 0;
  // Bytes of one micro-batch's activation buffers of the model build() makes, by the model's
  // formula (docs/activation-memory.md); nullopt: the model has none.
  virtual std::optional<std::size_t> activation_bytes(DType /*dtype*/, int /*micro_batch*/,
                                                      const ActivationPolicy& /*activations*/) const {
    return std::nullopt;
  }
  // Of them, the bytes offloaded to pinned host memory, by the same formula.
  virtual std::optional<std::size_t> offloaded_activation_bytes(DType /*dtype*/, int /*micro_batch*/,
                                                                const ActivationPolicy& /*activations*/) const {
    return std::nullopt;
  }
};

}  // namespace starzero
