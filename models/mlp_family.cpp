// The MLP token classifier (models/mlp.hpp) as a model family: `starzero train --model mlp`.
#include <stdexcept>

#include "models/layer_checkpoint.hpp"
#include "models/mlp.hpp"
#include "models/registry.hpp"
#include "offload/footprint.hpp"

namespace starzero {

namespace {

class MlpSpec final : public ModelSpec {
 public:
  MlpSpec(const MlpShape& shape, std::uint64_t seed)
      : shape_(shape), seed_(seed), format_("mlp", shape.state_layout()) {}

  std::string describe() const override {
    return "MLP token classifier " + shape_.to_string() + ", " + std::to_string(parameter_count()) + " parameters";
  }
  std::string data_summary() const override {
    return "data: a random permutation of " + std::to_string(shape_.classes) + " classes (seed " +
           std::to_string(seed_) + ")";
  }
  std::size_t parameter_count() const override { return shape_.state_layout().param_count(); }
  Precision default_precision() const override { return Precision::fp32; }
  ModelFootprint footprint(int batch, const ActivationPolicy& /*activations: the MLP keeps all*/) const override {
    const std::int64_t B = batch, C = shape_.hidden, V = shape_.classes, K = shape_.blocks;
    ModelFootprint f;
    f.params = std::int64_t(parameter_count());
    f.layer_kinds = {{"embedding", std::int64_t(shape_.layer_params(0))},
                     {"block", std::int64_t(shape_.layer_params(1))},
                     {"classifier", std::int64_t(shape_.layer_params(shape_.blocks + 1))}};
    for (int l = 0; l < shape_.layers(); ++l) f.layer_params.push_back(std::int64_t(shape_.layer_params(l)));
    f.activation_tensors = {{"embedded", B * C}, {"h", K * B * C}, {"g", K * B * C}, {"out", K * B * C},
                            {"logits", B * V},   {"probs", B * V}, {"losses", B}};
    // The matmuls' FLOPs (tasks/nn.hpp): K blocks of C×C and the classifier C×V, forward 2·B·in·out
    // and backward twice that, for B rows (one token each).
    f.training_flops = 6.0 * double(B) * (double(K) * double(C) * double(C) + double(C) * double(V));
    return f;
  }
  const CheckpointFormat& checkpoint_format() const override { return format_; }
  // The MLP runs every op as one task: tiles are not used.
  std::unique_ptr<Trainable> build(DType dtype, int batch, const Tiling& /*tiling*/,
                                   const ActivationPolicy& activations) const override {
    if (activations.recompute != Recompute::none)
      throw std::invalid_argument("--recompute: the mlp model keeps its activations (recomputation is GPT's)");
    if (activations.offload != ActivationOffload::none)
      throw std::invalid_argument("--offload-activations: the mlp model keeps its activations on the device (GPT's)");
    if (dtype != DType::f32) throw std::invalid_argument("the MLP trains in fp32 only (--precision fp32)");
    return std::make_unique<TokenClassifier>(shape_, batch, seed_);
  }

 private:
  MlpShape shape_;
  std::uint64_t seed_;
  LayerCheckpointFormat format_;
};

// A shape flag that contradicts the checkpoint is an error naming both.
void check_flag(const char* flag, const std::optional<int>& given, int from_file) {
  if (given && *given != from_file)
    throw std::invalid_argument(std::string("--") + flag + " " + std::to_string(*given) +
                                " contradicts the checkpoint's " + std::to_string(from_file));
}

std::unique_ptr<ModelSpec> prepare_mlp(const ModelRequest& request) {
  for (const auto& [flag, given] :
       {std::pair{"preset", request.preset.has_value()}, std::pair{"heads", request.heads.has_value()},
        std::pair{"max-seq", request.max_seq.has_value()}, std::pair{"data", request.data.has_value()}})
    if (given)
      throw std::invalid_argument(std::string("--") + flag +
                                  " is not for --model mlp (its data is drawn from the seed)");
  if (request.seq && *request.seq != 1)
    throw std::invalid_argument("--model mlp reads one token per row: --seq must be 1");
  MlpShape shape;
  if (request.checkpoint) {
    const LayerCheckpointHeader header = read_layer_checkpoint_header(*request.checkpoint);
    if (header.family != "mlp")
      throw std::invalid_argument(request.checkpoint->string() + " is a checkpoint of model '" + header.family + "'");
    shape = MlpShape{header.shape_fields[0], header.shape_fields[1], header.shape_fields[2]};
    check_flag("channels", request.channels, shape.hidden);
    check_flag("layers", request.layers, shape.blocks);
  } else {
    shape.hidden = request.channels.value_or(shape.hidden);
    shape.blocks = request.layers.value_or(shape.blocks);
  }
  if (shape.classes < 2 || shape.hidden < 1 || shape.blocks < 0)
    throw std::invalid_argument("invalid MLP shape " + shape.to_string());
  return std::make_unique<MlpSpec>(shape, request.seed);
}

// The MLP's state files record {V, C, K, 0, 0, 0} (GPT's six fields are all positive).
std::unique_ptr<CheckpointFormat> mlp_format_of_state(const StateShapeFields& fields) {
  const MlpShape shape{fields[0], fields[1], fields[2]};
  // A layout is built from these fields before the files' sizes are checked: absurd counts
  // (a corrupt header) must not allocate gigabytes first.
  constexpr int kMaxBlocks = 1 << 16;
  if (fields[3] != 0 || fields[4] != 0 || fields[5] != 0 || shape.classes < 2 || shape.hidden < 1 || shape.blocks < 0 ||
      shape.blocks > kMaxBlocks)
    return nullptr;
  return std::make_unique<LayerCheckpointFormat>("mlp", shape.state_layout());
}

}  // namespace

ModelFamily mlp_family() {
  ModelFamily family;  // no presets, no llm.c files, no Hugging Face folder
  family.name = "mlp";
  family.summary = "a residual-MLP token classifier (--layers: blocks, default 3; --channels: hidden size, default 32)";
  family.prepare = prepare_mlp;
  family.format_of_state = mlp_format_of_state;
  return family;
}

}  // namespace starzero
