#pragma once
// What the token models (GPT-2: models/gpt_family.cpp, Llama 3: models/llama_family.cpp) do alike
// as Trainables, for any model with batch(), seq(), set_batch(inputs, targets) and
// probabilities(b, t): loading a rank's rows of a global batch, and sampling text.
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "models/data.hpp"
#include "train/trainable.hpp"

namespace starzero {

// Rows [first, first + count) of a global batch of T-token rows, into the model's inputs.
template <class TokenModel>
void set_batch_rows(TokenModel& model, const Batch& global, const BatchRows& rows) {
  const std::size_t T = std::size_t(model.seq());
  const auto begin = std::ptrdiff_t(std::size_t(rows.first) * T),
             end = begin + std::ptrdiff_t(std::size_t(rows.count) * T);
  model.set_batch(std::span<const int>(global.inputs.data() + begin, global.inputs.data() + end),
                  std::span<const int>(global.targets.data() + begin, global.targets.data() + end));
}

// Multinomial sampling from the softmax, with the model's B x T activations (the prompt sits in
// row 0; the rest of the batch is ignored); `forward` runs the model's forward pass. Byte
// vocabulary only (nullopt otherwise); non-ASCII bytes and control characters show as '?', so the
// sample prints on one line.
template <class TokenModel>
std::optional<std::string> sample_bytes(TokenModel& model, const TokenDataset& data,
                                        const std::function<void()>& forward, const std::string& prompt, int tokens,
                                        std::uint64_t seed) {
  if (data.vocab() != kByteVocab) return std::nullopt;
  std::vector<int> context = encode_bytes(prompt.empty() ? "\n" : prompt);
  std::mt19937_64 rng(seed);
  std::string out;
  const std::size_t N = std::size_t(model.batch()) * std::size_t(model.seq());
  for (int i = 0; i < tokens; ++i) {
    const std::size_t window = std::min<std::size_t>(context.size(), std::size_t(model.seq()));
    std::vector<int> inputs(N, 0);
    std::copy(context.end() - std::ptrdiff_t(window), context.end(), inputs.begin());
    model.set_batch(inputs, std::vector<int>(N, 0));
    forward();
    const std::vector<float> probs = model.probabilities(0, int(window) - 1);
    std::discrete_distribution<int> pick(probs.begin(), probs.end());
    const int next = pick(rng);
    context.push_back(next);
    out.push_back(next < 128 && !std::iscntrl(next) ? char(next) : '?');
  }
  if (out.size() > 400) out = out.substr(0, 400) + "...";
  return out;
}

}  // namespace starzero
