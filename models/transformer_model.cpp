// What the transformer models share (models/transformer_model.hpp).
#include "models/transformer_model.hpp"

#include "tasks/nn.hpp"

namespace starzero {

void submit_token_batch(const Tensor& tokens, const Tensor& targets, std::span<const int> inputs,
                        std::span<const int> target_ids, std::size_t count, int vocab, const std::string& inputs_task) {
  if (inputs.size() != count || target_ids.size() != count)
    throw std::invalid_argument("set_batch: need B*T = " + std::to_string(count) + " inputs and targets");
  for (std::span<const int> ids : {inputs, target_ids})
    for (int id : ids)
      if (id < 0 || id >= vocab)
        throw std::invalid_argument("set_batch: token " + std::to_string(id) + " outside the vocabulary 0.." +
                                    std::to_string(vocab - 1));
  tasks::submit_load_tokens(tokens.handle(), inputs.data(), count, inputs_task);
  tasks::submit_load_tokens(targets.handle(), target_ids.data(), count, "load_targets");
}

double mean_of_losses(const Tensor& losses, std::size_t count) {
  auto view = losses.view(Access::read);
  double sum = 0;
  for (float loss : view.as<float>()) sum += loss;
  return sum / double(count);
}

std::vector<float> probability_row(const Tensor& probs, int b, int t, int B, int T, int width, int vocab) {
  if (b < 0 || b >= B || t < 0 || t >= T) throw std::out_of_range("probabilities: position out of range");
  auto view = probs.view(Access::read);
  const float* row = view.as<float>().data() + (std::size_t(b) * std::size_t(T) + std::size_t(t)) * std::size_t(width);
  return std::vector<float>(row, row + vocab);
}

}  // namespace starzero
