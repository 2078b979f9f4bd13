#include "models/gpt_flops.hpp"

#include <stdexcept>
#include <string>

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

}  // namespace starzero
