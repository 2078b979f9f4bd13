// What the transformer models share (models/transformer_model.hpp).
#include "models/transformer_model.hpp"

#include "tasks/nn.hpp"
#include "tasks/prefetch.hpp"

namespace starzero {

namespace {

void check_tokens(std::span<const int> ids, int vocab, bool targets) {
  for (int id : ids)
    if ((id < 0 || id >= vocab) && !(targets && id == kMaskedTarget))
      throw std::invalid_argument("set_batch: " + std::string(targets ? "target " : "token ") + std::to_string(id) +
                                  " outside the vocabulary 0.." + std::to_string(vocab - 1) +
                                  (targets ? " (or " + std::to_string(kMaskedTarget) + ": masked)" : ""));
}

}  // namespace

void submit_token_batch(const Tensor& tokens, const Tensor& targets, std::span<const int> inputs,
                        std::span<const int> target_ids, const TargetCount& global, std::size_t count, int vocab,
                        const std::string& inputs_task) {
  if (inputs.size() != count || target_ids.size() != count)
    throw std::invalid_argument("set_batch: need B*T = " + std::to_string(count) + " inputs and targets");
  check_tokens(inputs, vocab, false);
  check_tokens(target_ids, vocab, true);
  const TargetCount local = count_targets(target_ids);
  if (global.counted > global.total || global.total < local.total || global.counted < local.counted ||
      global.total - global.counted < local.total - local.counted)
    throw std::invalid_argument("set_batch: the global batch's " + std::to_string(global.counted) + " of " +
                                std::to_string(global.total) + " counted targets cannot hold this micro-batch's " +
                                std::to_string(local.counted) + " of " + std::to_string(local.total));
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

LossWeights::LossWeights(const TargetCount& global, std::size_t rows)
    : rows_(rows),
      masked_(global.masked()),
      share_(global.counted == 0 ? 0.0 : double(global.total) / (double(rows) * double(global.counted))) {}

// Unmasked: 1/N, rounded as the kernels always had it.
float LossWeights::dloss() const { return masked_ ? float(share_) : 1.0f / float(rows_); }

double LossWeights::loss(double sum) const { return masked_ ? sum * share_ : sum / double(rows_); }

double loss_of(const Tensor& losses, const LossWeights& weights) {
  auto view = losses.view(Access::read);
  double sum = 0;
  for (float loss : view.as<float>()) sum += loss;
  return weights.loss(sum);
}

std::vector<float> probability_row(const Tensor& probs, int b, int t, int B, int T, int width, int vocab) {
  if (b < 0 || b >= B || t < 0 || t >= T) throw std::out_of_range("probabilities: position out of range");
  auto view = probs.view(Access::read);
  const float* row = view.as<float>().data() + (std::size_t(b) * std::size_t(T) + std::size_t(t)) * std::size_t(width);
  return std::vector<float>(row, row + vocab);
}

}  // namespace starzero
