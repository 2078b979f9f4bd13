#pragma once
// Loss masks: which targets a model learns. A target id below 0 (written kMaskedTarget) marks a
// position whose prediction does not count: the cross-entropy kernels give it loss 0 and its
// logits no gradient, and the models (models/token_model.hpp) take the mean loss over the counted
// targets only. Plain C++17: the CUDA kernels (tasks/nn_kernels.cu) include this header too.
namespace starzero {

inline constexpr int kMaskedTarget = -1;

// Whether target id `target` is masked (every negative id is; the models accept only kMaskedTarget).
constexpr bool is_masked_target(int target) { return target < 0; }

}  // namespace starzero
