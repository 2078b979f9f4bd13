#include "models/llama_flops.hpp"

#include <stdexcept>
#include <string>

#include "tasks/nn.hpp"
#include "tasks/nn_llama.hpp"

namespace starzero {

std::vector<sim::CountedGpuWork> llama_training_gpu_kernels(const LlamaShape& shape, DType dtype, int batch, int seq,
                                                            const ActivationPolicy& activations) {
  if (batch < 1 || seq < 1)
    throw std::invalid_argument("Llama kernels need B and T >= 1, got B=" + std::to_string(batch) +
                                " T=" + std::to_string(seq));
  using tasks::LlamaArgs;
  using tasks::NnArgs;
  namespace nn = tasks::nn;
  namespace llama = tasks::llama;
  const int C = shape.channels, Q = shape.qkv_channels(), H = shape.ffn_hidden, V = shape.vocab;
  // As LlamaModel builds them: the loss over the unpadded vocabulary.
  const tasks::Dims d{.dtype = dtype, .B = batch, .T = seq, .C = C, .NH = shape.heads, .V = V, .Vp = V};
  const tasks::LlamaDims ld{.dtype = dtype, .B = batch, .T = seq, .C = C, .NH = shape.heads, .NKV = shape.kv_heads,
                            .H = H};
  const double s = double(dtype_size(dtype)), n = double(batch) * seq;  // n: rows
  std::vector<sim::CountedGpuWork> kernels;
  const auto add = [&kernels](const auto& codelet, const auto& args, double count) {
    kernels.push_back({*codelet.gpu_work(args, {}), count});
  };
  const auto op = [&](const Codelet<LlamaArgs>& codelet, double count) { add(codelet, LlamaArgs{.d = ld}, count); };
  const auto gemm = [&](const Codelet<NnArgs>& codelet, int in, int out, double count) {
    add(codelet, NnArgs{.d = d, .C = in, .OC = out}, count);
  };
  // The residual adds count their buffers' elements (tasks/nn.hpp): n·C elements, `accesses`
  // stored elements read or written per element.
  const auto residuals = [&kernels, s, n, C](double accesses, double count) {
    kernels.push_back({{.kind = sim::GpuCostClass::streaming, .bytes = accesses * n * C * s}, count});
  };
  const double blocks = shape.layers;
  const auto linears = [&](const Codelet<NnArgs>& codelet, double count) {
    gemm(codelet, C, Q, count);      // qkv
    gemm(codelet, C, C, count);      // attproj
    gemm(codelet, C, H, 2 * count);  // fc, fc2
  };
  // Forward, per block.
  op(llama::rmsnorm_forward, 2 * blocks);
  linears(nn::matmul_forward, blocks);
  gemm(nn::matmul_forward, H, C, blocks);  // fcproj
  op(llama::rope_forward, blocks);
  op(llama::attention_gqa_forward, blocks);
  op(llama::swiglu_forward, blocks);
  residuals(3, 2 * blocks);
  // Recomputation, per block: the forward pass again without fcproj and its residual, the matmuls,
  // RoPE and the first residual only with full.
  if (activations.recompute != Recompute::none) {
    op(llama::rmsnorm_forward, 2 * blocks);
    op(llama::attention_gqa_forward, blocks);
    op(llama::swiglu_forward, blocks);
  }
  if (activations.recompute == Recompute::full) {
    linears(nn::matmul_forward, blocks);
    op(llama::rope_forward, blocks);
    residuals(3, blocks);
  }
  // Backward, per block.
  linears(nn::matmul_backward_input, blocks);
  linears(nn::matmul_backward_weight, blocks);
  gemm(nn::matmul_backward_input, H, C, blocks);
  gemm(nn::matmul_backward_weight, H, C, blocks);
  op(llama::swiglu_backward, blocks);
  op(llama::attention_gqa_backward, blocks);
  op(llama::rope_backward, blocks);
  op(llama::rmsnorm_backward_input, 2 * blocks);
  op(llama::rmsnorm_backward_params, 2 * blocks);
  residuals(5, 2 * blocks);
  // Once: the embedding, the final RMSNorm, lm_head and the loss.
  op(llama::embedding_forward, 1);
  op(llama::embedding_backward, 1);
  op(llama::rmsnorm_forward, 1);
  op(llama::rmsnorm_backward_input, 1);
  op(llama::rmsnorm_backward_params, 1);
  gemm(nn::matmul_forward, C, V, 1);
  gemm(nn::matmul_backward_input, C, V, 1);
  gemm(nn::matmul_backward_weight, C, V, 1);
  add(nn::crossentropy_forward, NnArgs{.d = d}, 1);
  add(nn::crossentropy_backward, NnArgs{.d = d}, 1);
  return kernels;
}

}  // namespace starzero
