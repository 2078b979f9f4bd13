#pragma once
// Llama 3 as llm.c's train_llama3.py lays it out, as layers the engine drives
// (offload/model.hpp); docs/llama.md. Layer 0 the token embedding (no position table: RoPE
// inside attention), layers 1..L the blocks, layer L+1 the head: final RMSNorm, the untied
// lm_head and the softmax cross-entropy. Each layer's flat parameter array and where each tensor
// sits in it are models/llama_layout.hpp's table. No weight tying: shared_groups() stays empty.
//
// Block b, on its input x (the embedding or block b-1's output), with Meta's names in brackets:
//   ln1 = rmsnorm(x; ln1w)            qkv = ln1 · c_attnᵀ = [q | k | v], q and k rotated (RoPE)
//   atty = grouped-query causal attention(qkv)       res2 = x + atty · c_projᵀ
//   ln2 = rmsnorm(res2; ln2w)         fc = ln2 · c_fcᵀ [w3], fc2 = ln2 · c_fc2ᵀ [w1]
//   sw = silu(fc2) · fc               out = res2 + sw · c_proj(mlp)ᵀ [w2]
//
// A micro-batch is cut into tiles of whole sequences (models/sequence_tiles.hpp, `--tiles`): every
// row-wise op is one task per tile, the weight gradients tasks of their own beside the input
// gradients. What a block keeps for its backward, what it recomputes and what is offloaded is
// the ActivationPolicy's (docs/llama.md, "Activation memory"); results depend on neither.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "models/llama_layout.hpp"
#include "models/sequence_tiles.hpp"
#include "models/transformer_model.hpp"
#include "offload/footprint.hpp"
#include "offload/model.hpp"
#include "runtime/tensor.hpp"
#include "tasks/nn_llama.hpp"
#include "tasks/nn.hpp"

namespace starzero {

class LlamaModel final : public TransformerModel<LlamaShape, LlamaLayout> {
 public:
  // Activations for micro-batches of B sequences of T <= max_seq tokens, cut into `tiles` groups of
  // whole sequences (1 <= tiles <= B). `activations`: what the blocks keep for the backward, what
  // they recompute and what lives in pinned host memory between forward and backward. For a
  // given tile count the results depend on nothing else (not on `activations`, nor on the
  // scheduling); across tile counts they agree to float rounding. StarPU must be running (the
  // RoPE table is written at construction).
  LlamaModel(const LlamaShape& shape, DType dtype, int B, int T, int tiles = 1,
             const ActivationPolicy& activations = {});
  ~LlamaModel() override;

  std::string layer_name(int layer) const override;
  // With more than one tile, each block's and the head's gradient is cut so that each
  // weight-gradient task writes its own piece: every linear weight (and lm_head) into min(tiles,
  // its output channels) pieces of whole output channels, each RMSNorm weight one piece. The
  // embedding's gradient stays whole (one scatter-add task writes it). One tile: all whole.
  std::vector<std::size_t> gradient_pieces(int layer) const override;
  // wte, the linear weights and lm_head N(0, 0.02), the two output projections of each block
  // N(0, 0.02/sqrt(2L)) (GPT-2's rule, as llm.c initialises), RMSNorm weights 1.
  void init_layer(int layer, std::span<float> params, std::uint64_t seed) const override;
  void submit_forward(int layer, const GroupHandles& groups) override;
  void submit_backward(int layer, const GroupHandles& groups) override;

  // activation_bytes() and offloaded_activation_bytes(): llama_activation_bytes and
  // llama_offloaded_activation_bytes give the same.

 private:
  struct Block;
  struct Buffers;
  struct GradientSplit;
  enum class Pass { forward, recompute };
  // The block's forward tasks, or (recompute) again those whose outputs the policy does not keep,
  // named "<op>_recompute[b]".
  void submit_block_pass(int block, const GroupHandles& groups, Pass pass);
  void submit_block_backward(int block, const GroupHandles& groups);
  // A bias-free linear layer's backward (weight `weight` in group `group`): the input gradient one
  // task per tile ("<op>_bwd_input"), the weight gradient over all rows ("<op>_bwd_weight") or,
  // when the engine split the gradient, one task per tile and piece of output channels
  // ("<op>_bwd_weight[r]", tiles added in order). "[block]" after `op` unless block is -1.
  void submit_linear_backward(const std::string& op, int block, const GroupHandles& groups, int group,
                              LlamaParam weight, const Tensor& dinp, const Tensor& dout, const Tensor& inp);
  // An RMSNorm's backward: the input gradient per tile ("<op>_bwd_input"), the weight's gradient
  // ("<op>_bwd_params", per tile into its piece when split).
  void submit_rmsnorm_backward(const std::string& op, int block, const GroupHandles& groups, int group,
                               LlamaParam weight, const Tensor& dinp, const Tensor& dout, const Tensor& inp,
                               const Tensor& rstd);
  const GradientSplit* gradient_split(int layer) const;
  TokenIo token_io() const override;
  std::size_t offset(LlamaParam param) const { return layout_[param].layer_offset; }

  // dims_ (the base's) is for tasks/nn.hpp's ops: NH = heads, V = Vp = vocab.
  tasks::LlamaDims ldims_;                    // for tasks/nn_llama.hpp's
  std::vector<tasks::LlamaDims> tile_ldims_;  // ldims_ with tile k's sequences as B
  std::unique_ptr<Buffers> buffers_;
  std::vector<GradientSplit> gradient_splits_;  // block and head; empty with one tile
};

}  // namespace starzero
