#pragma once
// GPT-2's parameter layout, written once (llm.c's tensors and file order). Everything that needs
// the layout derives it from the table of named tensors below: GptModel's per-layer parameter arrays and the
// offsets its tasks use, llm.c's file order (llmc_tensor_specs), the .state files' layout
// (GptLayout::state_layout) and the planner's numbers (gpt_footprint). See docs/architecture.md.
//
// The engine sees GPT-2 as L + 2 layers, each one flat parameter array:
//   layer 0        embedding          [wte | wpe]
//   layers 1..L    transformer blocks [ln1w ln1b qkvw qkvb attprojw attprojb ln2w ln2b fcw fcb
//                                      fcprojw fcprojb], block l-1's slice of each tensor
//   layer L+1      final layernorm    [lnfw lnfb]
// llm.c's file holds the 16 tensors whole, one after the other, per-layer ones layer-major.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "models/llmc_layout.hpp"
#include "offload/footprint.hpp"
#include "train/state_layout.hpp"

namespace starzero {


// GPT-2 hyperparameters as llm.c's checkpoint header stores them.
struct GptShape {
  int max_seq = 0;       // header[2] maxT
  int vocab = 0;         // header[3] V
  int padded_vocab = 0;  // header[7] Vp (wte rows, padded for efficient matmuls)
  int layers = 0;        // header[4] L
  int heads = 0;         // header[5] NH
  int channels = 0;      // header[6] C

  // The sum of the layout table: Vp·C + maxT·C + L·(12C² + 13C) + 2C (std::invalid_argument
  // when it overflows 64 bits; validate() first for a shape read from a file).
  std::size_t param_count() const;
  // All positive, C % NH == 0, Vp >= V, L <= 65536 (a layout is built per layer before any file
  // size is checked), parameter bytes fit in 63 bits; std::invalid_argument.
  void validate() const;
  // "maxT=1024 V=50257 Vp=50304 L=12 NH=12 C=768".
  std::string to_string() const;
  // The header fields [2..7] of llm.c's checkpoint and of the .state files: maxT, V, L, NH, C, Vp;
  // from_fields is the inverse (not validated), print_fields how messages show them.
  StateShapeFields fields() const;
  static GptShape from_fields(const StateShapeFields& fields);
  static std::string print_fields(const StateShapeFields& fields);

  friend bool operator==(const GptShape&, const GptShape&) = default;

  // gpt_preset("gpt2-124M"): GPT-2 124M as llm.c trains it (124,475,904 parameters).
  static GptShape gpt2_124m();
};

// ---- presets ----------------------------------------------------------------------------------
using GptPreset = LlmcPreset<GptShape>;
// "tiny" (byte vocabulary, trains visibly on 2 CPU cores in minutes), "gpt2-124M", "gpt2-350M",
// "gpt2-774M", "gpt2-1558M".
std::span<const GptPreset> gpt_presets();
// Throws std::invalid_argument listing the names.
GptShape gpt_preset(std::string_view name);
std::vector<std::string> gpt_preset_names();

// ---- the table of named tensors ---------------------------------------------------------------
// llm.c's 16 parameter tensors in llm.c's file order (the index into GptLayout::tensors()).
enum class GptParam {
  wte,
  wpe,
  ln1w,
  ln1b,
  qkvw,
  qkvb,
  attprojw,
  attprojb,
  ln2w,
  ln2b,
  fcw,
  fcb,
  fcprojw,
  fcprojb,
  lnfw,
  lnfb,
};
inline constexpr std::size_t kGptParamCount = 16;

using GptTensor = LlmcTensor<GptParam>;

using GptLayout = LlmcLayout<GptShape, GptParam>;
template <>
GptLayout::LlmcLayout(const GptShape& shape);

// ---- what other parts need, derived from the table ------------------------------------------
// The .state files' layout (GptLayout(shape).state_layout()) from the fields a file stores;
// std::invalid_argument when they are no valid shape.
StateLayout gpt_state_layout_from_fields(const StateShapeFields& fields);

// The planner's view of a micro-batch of `batch` sequences of max_seq tokens: Ψ, the layer kinds
// "embedding", "block" (one of the L), "final layernorm", llm.c's activation tensors, and the
// bytes GptModel's activation buffers take under `activations` (gpt_activation_bytes).
// Overflow-checked; std::invalid_argument (one line) for an invalid shape or batch <= 0.
ModelFootprint gpt_footprint(const GptShape& shape, int batch, const ActivationPolicy& activations = {});

// Bytes of GptModel's activation buffers for micro-batches of B sequences of T tokens, by the
// formula of docs/activation-memory.md (written here apart from the buffers it describes; a test
// holds the two equal): the blocks' kept activations, the shared slots of recomputed ones, the
// two slots of activation gradients, the embedding's and the head's tensors.
// `activation_bytes` is the element size of the activations (4 fp32, 2 bf16).
std::size_t gpt_activation_bytes(const GptShape& shape, std::size_t activation_bytes, int B, int T,
                                 const ActivationPolicy& policy);
// Of the blocks' kept activations, the bytes --offload-activations cpu moves to pinned host
// memory (0 without offload): those of the first L − (window + 1) blocks. gpt_activation_bytes
// counts the rest, which stay on the device.
std::size_t gpt_offloaded_activation_bytes(const GptShape& shape, std::size_t activation_bytes, int B, int T,
                                           const ActivationPolicy& policy = {});

}  // namespace starzero
