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
// Every op is one task (tiles are ignored, as the MLP does), activations are all kept
// (recompute none only) and stay on the device (no activation offload).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "models/llama_layout.hpp"
#include "offload/footprint.hpp"
#include "offload/model.hpp"
#include "runtime/tensor.hpp"
#include "tasks/llama.hpp"
#include "tasks/nn.hpp"

namespace starzero {

class LlamaModel final : public Model {
 public:
  // Activations for micro-batches of B sequences of T <= max_seq tokens. `activations` must keep
  // everything on the device (std::invalid_argument otherwise). StarPU must be running (the RoPE
  // table is written at construction).
  LlamaModel(const LlamaShape& shape, DType dtype, int B, int T, const ActivationPolicy& activations = {});
  ~LlamaModel() override;

  int layers() const override { return shape_.layers + 2; }
  std::size_t layer_params(int layer) const override { return layout_.layer_params(layer); }
  std::string layer_name(int layer) const override;
  DType dtype() const override { return dims_.dtype; }
  // wte, the linear weights and lm_head N(0, 0.02), the two output projections of each block
  // N(0, 0.02/sqrt(2L)) (GPT-2's rule, as llm.c initialises), RMSNorm weights 1.
  void init_layer(int layer, std::span<float> params, std::uint64_t seed) const override;
  void submit_forward(int layer, const GroupHandles& groups) override;
  void submit_backward(int layer, const GroupHandles& groups) override;

  const LlamaShape& shape() const { return shape_; }
  const LlamaLayout& layout() const { return layout_; }
  int batch() const { return dims_.B; }
  int seq() const { return dims_.T; }
  // Bytes of one micro-batch's buffers as allocated (llama_activation_bytes gives the same).
  std::size_t activation_bytes() const;

  // Submits the copy of one micro-batch's B·T inputs and targets (asynchronous tasks).
  void set_batch(std::span<const int> inputs, std::span<const int> targets);
  // Mean loss of the last forward pass; waits only for that pass's loss task.
  double mean_loss() const;
  // Softmax probabilities of position t of sequence b after the last forward pass.
  std::vector<float> probabilities(int b, int t) const;

  // llm.c's flat order (models/llama_files.hpp) <-> the layers' arrays.
  void layers_to_file(const std::vector<std::span<const float>>& layer_params, std::span<float> file) const;
  void file_to_layers(std::span<const float> file, const std::vector<std::span<float>>& layer_values) const;

 private:
  struct Buffers;
  void submit_block_forward(int block, const GroupHandles& groups);
  void submit_block_backward(int block, const GroupHandles& groups);
  std::size_t offset(LlamaParam param) const { return layout_[param].layer_offset; }

  LlamaShape shape_;
  LlamaLayout layout_;
  tasks::Dims dims_;        // for tasks/nn.hpp's ops (NH = heads, V = Vp = vocab)
  tasks::LlamaDims ldims_;  // for tasks/llama.hpp's
  std::unique_ptr<Buffers> buffers_;
};

}  // namespace starzero
