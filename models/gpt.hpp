#pragma once
// GPT-2 as llm.c lays it out, as layers the engine drives (offload/model.hpp): layer 0 the
// embedding (forward = encoder), layers 1..L the transformer blocks, layer L+1 the final
// layernorm plus the classifier tied to wte (it reads layer 0's parameters and accumulates into
// layer 0's gradient) and the loss. Each layer's flat parameter array and where each tensor sits in it are
// models/gpt_layout.hpp's table.
// The tied embedding's gradient gets the classifier's contribution (backward of layer L+1) and
// then the encoder's (backward of layer 0) through the RW dependencies on layer 0's gradient.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "models/gpt_layout.hpp"
#include "models/transformer_model.hpp"
#include "offload/footprint.hpp"
#include "offload/model.hpp"
#include "runtime/tensor.hpp"
#include "tasks/nn.hpp"

namespace starzero {

// The presets (gpt_preset, gpt_preset_names) are in models/gpt_layout.hpp.

// The head-group count `--head-groups auto` picks on the running StarPU session for a model of
// `heads` heads run in `tiles` tiles: 1 when there is a CUDA worker (one kernel per op is best on
// a GPU), else the fewest groups that give every CPU worker an attention task (tiles × groups >=
// CPU workers), at most one group per head.
int auto_head_groups(int heads, int tiles);

class GptModel final : public TransformerModel<GptShape, GptLayout> {
 public:
  // Activations for micro-batches of B sequences of T <= max_seq tokens, cut into `tiles` groups
  // of whole sequences (1 <= tiles <= B): every row-wise op is then one task per tile, so that
  // several workers can share one op. Results do not depend on the tile count.
  // `activations`: what the blocks keep for the backward and what they recompute
  // (offload/footprint.hpp, docs/activation-memory.md); the results do not depend on it.
  // `head_groups` (1 <= head_groups <= NH): attention forward and backward run as one task per
  // tile and group of consecutive heads, each writing only its heads' columns of the tile
  // (Tensor::split_columns); bitwise the results of one group.
  GptModel(const GptShape& shape, DType dtype, int B, int T, int tiles = 1, const ActivationPolicy& activations = {},
           int head_groups = 1);
  ~GptModel() override;

  std::string layer_name(int layer) const override;
  std::vector<int> shared_groups(int layer) const override;
  // With more than one tile, the embedding's and the blocks' gradients are cut so that each
  // parameter's gradient task writes its own piece: every linear weight in `tiles` pieces of whole
  // output channels (one weight-gradient task per piece and tile), each bias, each layernorm's
  // weight and bias together, and wpe. One tile (the GPU default): whole.
  std::vector<std::size_t> gradient_pieces(int layer) const override;
  void init_layer(int layer, std::span<float> params, std::uint64_t seed) const override;
  void submit_forward(int layer, const GroupHandles& groups) override;
  void submit_backward(int layer, const GroupHandles& groups) override;

  int head_groups() const;
  Tiling tiling() const override { return {tiles(), head_groups()}; }
  // activation_bytes(): docs/activation-memory.md has the formula (gpt_activation_bytes computes
  // it independently); offloaded_activation_bytes(): gpt_offloaded_activation_bytes.

 private:
  struct HeadGroups;
  struct BlockActivations;
  struct Buffers;
  TokenIo token_io() const override;
  // An attention task's name: `op` + "[block]", "[g]" when there is more than one head group,
  // then the tile suffix.
  std::string head_group_name(const std::string& op, int block, int group, int tile) const;
  void submit_attention_forward(int block, int tile, const std::string& op);
  void submit_attention_backward(int block, int tile);
  struct GradientSplit;
  const GradientSplit& gradient_split(int layer) const;
  // A linear layer's and a layernorm's backward, with parameters `weight` (and `bias`) in group
  // `group`: the input gradient one task per tile, then the parameter gradients over all rows,
  // into the group's gradient or, when the engine split it, into their pieces, one task per tile
  // k (".t<k>"): a linear weight one task per piece r of output channels ("[r]"), the bias and the
  // layernorm parameters one each. Task names:
  // `op` + "_bwd_input", "_bwd_weight", "_bwd_bias" or "_bwd_params", with "[block]" unless block
  // is -1.
  void submit_linear_backward(const std::string& op, int block, const GroupHandles& groups, int group, GptParam weight,
                              std::optional<GptParam> bias, const Tensor& dinp, const Tensor& dout, const Tensor& inp);
  void submit_layernorm_backward(const std::string& op, int block, const GroupHandles& groups, int group,
                                 GptParam weight, GptParam bias, const Tensor& dinp, const Tensor& dout,
                                 const Tensor& inp, const Tensor& mean, const Tensor& rstd);
  void submit_block_forward(int block, const GroupHandles& groups);
  enum class Pass { forward, recompute };
  void submit_block_pass(int block, const GroupHandles& groups, Pass pass);
  void submit_block_backward(int block, const GroupHandles& groups);

  std::unique_ptr<HeadGroups> head_groups_;
  std::unique_ptr<Buffers> buffers_;
  std::vector<GradientSplit> gradient_splits_;  // per LlmcLayerKind; empty with one tile
};

}  // namespace starzero
