#pragma once
// The FLOPs of one GPT micro-batch as GptModel's tasks declare them (tasks/nn.hpp): the planner's
// ModelFootprint::training_flops, the compute side of the step bound (sim/step_bound.hpp).
// gpt_footprint (models/gpt_layout.hpp) sizes memory only; its callers that need the bound add this.
#include "models/gpt_layout.hpp"
#include "offload/footprint.hpp"
#include "runtime/dtype.hpp"
#include "runtime/gpu_cost.hpp"

#include <vector>

namespace starzero {

// One micro-batch of B sequences of T tokens, N = B·T rows, under `activations`:
//   forward    matmuls 2·N·(12·C²·L + Vp·C) (qkv 3C², attproj C², fc 4C², fcproj 4C² per block, the
//              classifier Vp·C), attention 4·B·T²·C·L;
//   backward   matmuls twice the forward's (input and weight gradients), attention 10·B·T²·C·L;
//   recompute  full: qkv, attproj and fc again (2·N·8·C²·L; fcproj's output is never read) and the
//              attention (4·B·T²·C·L); selective: the attention only; none: nothing.
// The element-wise tasks (layernorms, GELU, residuals, cross-entropy, encoder, biases), under 1 %
// of the total from C = 768 up, are left out. std::invalid_argument for B or T < 1.
double gpt_training_flops(const GptShape& shape, int batch, int seq, const ActivationPolicy& activations);

// The GPU kernels of one micro-batch, each as its codelet's GPU cost class charges it
// (runtime/gpu_cost.hpp; tasks/nn.hpp): per block the forward's layernorms, four matmuls with their
// biases, attention, residuals and GELU; the backward's; the recomputation of `activations` (full:
// qkv, attproj and fc and the attention; selective: the attention); once the encoder, the final
// layernorm, the classifier and the loss. Storage `dtype`; attention as our own kernel (the plan
// picks the kernel: sim::with_attention). std::invalid_argument for B or T < 1.
std::vector<sim::CountedGpuWork> gpt_training_gpu_kernels(const GptShape& shape, DType dtype, int batch, int seq,
                                                          const ActivationPolicy& activations);

}  // namespace starzero
