#pragma once
// Llama 3's parameter layout, written once (llm.c's train_llama3.py tensors and file order).
// Everything that needs the layout derives it from the table of named tensors in
// llama_layout.cpp: LlamaModel's per-layer arrays and the offsets its tasks use, llm.c's file
// order (models/llama_files.hpp), the .state files' layout and the planner's numbers.
//
// The engine sees Llama 3 as L + 2 layers, each one flat parameter array:
//   layer 0        embedding   [wte V·C]
//   layers 1..L    blocks      [ln1w C | qkvw Q·C | attprojw C·C | ln2w C | fcw H·C | fc2w H·C |
//                               fcprojw C·H], block l-1's slice of each tensor (Q = (NH + 2·NKV)·hs)
//   layer L+1      head        [lnfw C | lm_head V·C] (final RMSNorm, untied classifier, loss)
// llm.c's file holds the 10 tensors whole, one after the other, per-layer ones layer-major:
//   wte, ln_1, c_attn, c_proj, ln_2, c_fc, c_fc2, c_proj (mlp), ln_f, lm_head. No biases.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "models/gpt_layout.hpp"  // LlmcRun
#include "models/llmc_layout.hpp"
#include "offload/footprint.hpp"
#include "train/state_layout.hpp"

namespace starzero {

// Llama 3 hyperparameters.
struct LlamaShape {
  int layers = 0;      // L (llm.c header[4] n_layer)
  int channels = 0;    // C (header[7] n_embd)
  int heads = 0;       // NH query heads (header[5] n_head)
  int kv_heads = 0;    // NKV key/value heads (header[6] n_kv_head)
  int ffn_hidden = 0;  // H, the SwiGLU hidden size (from ffn_dim_multiplier and multiple_of)
  int vocab = 0;       // V (header[3]); wte and lm_head have V rows (no padding)
  int max_seq = 0;     // header[2] block_size: the longest sequence (RoPE table rows)
  float norm_eps = 1e-5f;
  float rope_theta = 500000.0f;
  bool use_scaled_rope = false;  // Llama 3.1's RoPE frequency scaling (tasks/nn_llama_kernels.hpp)
  // What llm.c's header records of H (header[8], header[9]) and the version (header[14], [15]):
  // written to checkpoints; llama_ffn_hidden(C, ffn_dim_multiplier, multiple_of) must be H.
  float ffn_dim_multiplier = 0.0f;  // 0: none
  int multiple_of = 1;
  int major_version = 3, minor_version = 1;

  int head_size() const { return heads > 0 ? channels / heads : 0; }
  int qkv_channels() const { return (heads + 2 * kv_heads) * head_size(); }
  // The sum of the layout table: 2·V·C + C + L·(2C + Q·C + C² + 3·C·H).
  std::size_t param_count() const;
  // All sizes positive, C % NH == 0, hs even, NH % NKV == 0, norm_eps > 0, rope_theta > 0,
  // L <= 65536, parameter bytes fit 63 bits; std::invalid_argument naming what is wrong.
  void validate() const;
  // "L=2 C=64 NH=4 NKV=2 H=192 V=256 maxT=64".
  std::string to_string() const;
  // The fields that decide the layout and the math (not the header's bookkeeping fields).
  bool same_model(const LlamaShape& other) const;
  // The .state files' six shape fields: {V, C, L, NH, NKV, -H}. The negative last field tells a
  // Llama run from GPT's (all positive) and the MLP's ({V, C, K, 0, 0, 0}).
  StateShapeFields fields() const;
  // The shape those fields describe, with max_seq, norm_eps, RoPE and the header fields of the
  // preset of the same width (C, NH, NKV, H), else llm.c's defaults (maxT 8192, eps 1e-5, theta
  // 500000, scaled RoPE); std::invalid_argument when the fields are no Llama shape.
  static LlamaShape from_fields(const StateShapeFields& fields);
  // How messages show such fields (as they are: they may be no valid shape).
  static std::string print_fields(const StateShapeFields& fields);
};

// ---- presets ----------------------------------------------------------------------------------
using LlamaPreset = LlmcPreset<LlamaShape>;
// "llama3-tiny" (byte vocabulary, for tests and the demo), "llama3-1B" (Llama 3.2 1B's shape),
// "llama3-8B" (Llama 3.1 8B), "llama3-70B" (Llama 3.1 70B); docs/llama.md.
std::span<const LlamaPreset> llama_presets();
// std::invalid_argument listing the names.
LlamaShape llama_preset(std::string_view name);
// A shape from its header's fields (norm_eps 1e-5): L blocks of C channels, NH heads of which NKV
// key/value heads, V tokens, maxT positions, RoPE theta (scaled: Llama 3.1's scaling), and H from
// llm.c's rule (ffn_dim_multiplier `multiplier`, `multiple_of`); Llama major.minor. Not validated.
LlamaShape llama_shape(int L, int C, int NH, int NKV, int V, int maxT, float theta, bool scaled, float multiplier,
                       int multiple_of, int major, int minor);
std::vector<std::string> llama_preset_names();

// ---- the table of named tensors ---------------------------------------------------------------
enum class LlamaParam { wte, ln1w, qkvw, attprojw, ln2w, fcw, fc2w, fcprojw, lnfw, lm_head };
inline constexpr std::size_t kLlamaParamCount = 10;

using LlamaTensor = LlmcTensor<LlamaParam>;

using LlamaLayout = LlmcLayout<LlamaShape, LlamaParam>;
template <>
LlamaLayout::LlmcLayout(const LlamaShape& shape);

// ---- what other parts need, derived from the table ------------------------------------------
// The planner's view of a micro-batch of `batch` sequences of `seq` tokens (0: max_seq): Ψ, the
// layer kinds "embedding", "block", "head", LlamaModel's activation tensors, the bytes of its
// buffers under `activations` (llama_activation_bytes, llama_offloaded_activation_bytes) and its
// FLOPs (llama_training_flops).
ModelFootprint llama_footprint(const LlamaShape& shape, int batch, int seq = 0,
                               const ActivationPolicy& activations = {});
// FLOPs of one micro-batch of B sequences of T tokens (N = B·T rows) as LlamaModel's tasks declare
// them (tasks/nn_llama.hpp, tasks/nn.hpp), matmuls and attention only: forward 2·N·(C·Q + C² + 3·C·H)
// per block plus lm_head 2·N·C·V, and attention 4·B·T²·C per block; backward twice the matmuls and
// attention 10·B·T²·C; recompute full: qkv, attproj, fc and fc2 (2·N·(C·Q + C² + 2·C·H)) and the
// attention; selective: the attention. The element-wise tasks (RMSNorm, RoPE, SwiGLU, residuals,
// cross-entropy) are left out.
double llama_training_flops(const LlamaShape& shape, int batch, int seq, const ActivationPolicy& activations);
// Bytes of LlamaModel's activation buffers that stay on the device, for B sequences of T tokens
// at `element` bytes per stored element, keeping what `activations` says (the formula of
// docs/llama.md, computed apart from the buffers).
std::size_t llama_activation_bytes(const LlamaShape& shape, std::size_t element, int B, int T,
                                   const ActivationPolicy& activations = {});
// Of the blocks' kept activations, the bytes --offload-activations cpu keeps in pinned host memory.
std::size_t llama_offloaded_activation_bytes(const LlamaShape& shape, std::size_t element, int B, int T,
                                             const ActivationPolicy& activations);

}  // namespace starzero
