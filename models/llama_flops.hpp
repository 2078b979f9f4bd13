#pragma once
// The GPU kernels of one Llama 3 micro-batch as LlamaModel's tasks declare them (tasks/nn_llama.hpp,
// tasks/nn.hpp): the planner's ModelFootprint::training_gpu_kernels_2/_4, the GPU side of the step
// bound (sim/step_bound.hpp). llama_training_flops (models/llama_layout.hpp) counts FLOPs only.
#include <vector>

#include "models/llama_layout.hpp"
#include "runtime/dtype.hpp"
#include "runtime/gpu_cost.hpp"

namespace starzero {

// One micro-batch of B sequences of T tokens under `activations`, each kernel as its codelet's GPU
// cost class charges it (runtime/gpu_cost.hpp), the bias-free matmuls as GEMMs:
//   forward, per block  RMSNorm ×2, qkv, RoPE, grouped-query attention, attproj, fc, fc2, SwiGLU,
//                       fcproj, two residual adds;
//   recompute, per block  (LlamaModel::submit_block_pass) full: RMSNorm ×2, qkv, RoPE, attention,
//                       attproj and its residual, fc, fc2, SwiGLU; selective: RMSNorm ×2, the
//                       attention and SwiGLU; none: nothing;
//   backward, per block  each matmul's input and weight gradients, SwiGLU, attention, RoPE,
//                       RMSNorm's input and weight gradients ×2, two residuals;
//   once                the embedding, the final RMSNorm, lm_head and the loss, both ways.
// Storage `dtype`; attention as our own kernel (the plan picks the kernel: sim::with_attention).
// std::invalid_argument for B or T < 1.
std::vector<sim::CountedGpuWork> llama_training_gpu_kernels(const LlamaShape& shape, DType dtype, int batch, int seq,
                                                            const ActivationPolicy& activations);

}  // namespace starzero
