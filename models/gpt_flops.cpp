#include "models/gpt_flops.hpp"

#include <stdexcept>
#include <string>

#include "tasks/nn.hpp"

namespace starzero {

double gpt_training_flops(const GptShape& shape, int batch, int seq, const ActivationPolicy& activations) {
  if (batch < 1 || seq < 1)
    throw std::invalid_argument("GPT FLOPs need B and T >= 1, got B=" + std::to_string(batch) +
                                " T=" + std::to_string(seq));
  const double B = batch, T = seq, N = B * T, C = shape.channels, L = shape.layers, Vp = shape.padded_vocab;
  const double block_matmul_forward = 2.0 * N * 12.0 * C * C;  // per block
  const double classifier_forward = 2.0 * N * Vp * C;
  const double attention_forward = 4.0 * B * T * T * C;  // per block
  const double attention_backward = 10.0 * B * T * T * C;
  double recompute = 0;  // per block
  if (activations.recompute == Recompute::full) recompute = 2.0 * N * 8.0 * C * C + attention_forward;
  if (activations.recompute == Recompute::selective) recompute = attention_forward;
  const double per_block = 3.0 * block_matmul_forward + attention_forward + attention_backward + recompute;
  return L * per_block + 3.0 * classifier_forward;
}

std::vector<sim::CountedGpuWork> gpt_training_gpu_kernels(const GptShape& shape, DType dtype, int batch, int seq,
                                                          const ActivationPolicy& activations) {
  if (batch < 1 || seq < 1)
    throw std::invalid_argument("GPT kernels need B and T >= 1, got B=" + std::to_string(batch) +
                                " T=" + std::to_string(seq));
  using tasks::NnArgs;
  namespace nn = tasks::nn;
  const int C = shape.channels, L = shape.layers;
  const tasks::Dims d{.dtype = dtype, .B = batch, .T = seq, .C = C, .NH = shape.heads, .V = shape.vocab,
                      .Vp = shape.padded_vocab};
  const double s = double(dtype_size(dtype)), n = double(batch) * seq;  // n: rows
  std::vector<sim::CountedGpuWork> kernels;
  const auto add = [&kernels](const Codelet<NnArgs>& codelet, const NnArgs& args, double count) {
    kernels.push_back({*codelet.gpu_work(args, {}), count});
  };
  // The element-wise ops (their codelets count the buffers' elements): n elements, `accesses`
  // stored elements read or written per element.
  const auto streaming = [&kernels, s](double elements, double accesses, double count) {
    kernels.push_back({{.kind = sim::GpuCostClass::streaming, .bytes = accesses * elements * s}, count});
  };
  const auto matmul = [&](const Codelet<NnArgs>& codelet, int in, int out, bool bias, double count) {
    add(codelet, NnArgs{.d = d, .bias = bias ? 0 : -1, .C = in, .OC = out}, count);
  };
  const NnArgs rows{.d = d};
  const double blocks = L;
  // Forward, per block.
  add(nn::layernorm_forward, rows, 2 * blocks);
  matmul(nn::matmul_forward, C, 3 * C, true, blocks);
  add(nn::attention_forward, rows, blocks);
  matmul(nn::matmul_forward, C, C, true, blocks);
  matmul(nn::matmul_forward, C, 4 * C, true, blocks);
  matmul(nn::matmul_forward, 4 * C, C, true, blocks);
  streaming(4 * n * C, 2, blocks);  // GELU
  streaming(n * C, 3, 2 * blocks);  // residuals
  // Recomputation, per block.
  if (activations.recompute == Recompute::full) {
    matmul(nn::matmul_forward, C, 3 * C, true, blocks);
    matmul(nn::matmul_forward, C, C, true, blocks);
    matmul(nn::matmul_forward, C, 4 * C, true, blocks);
  }
  if (activations.recompute != Recompute::none) add(nn::attention_forward, rows, blocks);
  // Backward, per block.
  matmul(nn::matmul_backward, C, 3 * C, true, blocks);
  matmul(nn::matmul_backward, C, C, true, blocks);
  matmul(nn::matmul_backward, C, 4 * C, true, blocks);
  matmul(nn::matmul_backward, 4 * C, C, true, blocks);
  add(nn::attention_backward, rows, blocks);
  add(nn::layernorm_backward_input, rows, 2 * blocks);
  add(nn::layernorm_backward_params, rows, 2 * blocks);
  streaming(4 * n * C, 4, blocks);  // GELU
  streaming(n * C, 5, 2 * blocks);  // residuals
  // Once: the encoder, the final layernorm, the classifier (no bias) and the loss.
  add(nn::encoder_forward, rows, 1);
  add(nn::encoder_backward, rows, 1);
  add(nn::layernorm_forward, rows, 1);
  add(nn::layernorm_backward_input, rows, 1);
  add(nn::layernorm_backward_params, rows, 1);
  matmul(nn::matmul_forward, C, shape.padded_vocab, false, 1);
  matmul(nn::matmul_backward, C, shape.padded_vocab, false, 1);
  add(nn::crossentropy_forward, rows, 1);
  add(nn::crossentropy_backward, rows, 1);
  return kernels;
}

}  // namespace starzero
