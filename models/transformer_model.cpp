// What the transformer models share (models/transformer_model.hpp).
#include "models/transformer_model.hpp"

#include "tasks/nn.hpp"
#include "tasks/prefetch.hpp"

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

std::vector<starpu_data_handle_t> pieces_of(const std::vector<const Tensor*>& tensors) {
  std::vector<starpu_data_handle_t> handles;
  for (const Tensor* tensor : tensors)
    for (std::size_t k = 0; k < tensor->pieces(); ++k) handles.push_back(tensor->piece(k));
  return handles;
}

void submit_block_write_back(const BlockActivationStorage& storage, int block, const Tensor& input,
                             const Tensor& output) {
  if (block < storage.offloaded()) {
    std::vector<const Tensor*> kept;
    for (const Tensor* tensor : storage.kept(block))
      if (tensor != &output) kept.push_back(tensor);
    tasks::submit_write_back(pieces_of(kept));
  }
  if (block >= 1 && block - 1 < storage.offloaded()) tasks::submit_write_back(pieces_of({&input}));
}

void submit_block_fetch(const BlockActivationStorage& storage, int block, int window,
                        const std::function<const Tensor&(int)>& output_of, const Tensor& gate) {
  const int ahead = block - window - 1;
  if (ahead < 0 || ahead >= storage.offloaded()) return;
  std::vector<const Tensor*> fetched = storage.kept(ahead);
  if (ahead >= 1) fetched.push_back(&output_of(ahead - 1));
  tasks::submit_fetch(pieces_of(fetched), pieces_of({&gate}), "activation_fetch[" + std::to_string(ahead) + "]");
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
