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
#include <stdexcept>
#include <string>
#include <vector>

#include "models/data.hpp"
#include "models/token_model.hpp"  // count_targets
#include "models/tokenizer.hpp"
#include "train/trainable.hpp"

namespace starzero {

// Rows [first, first + count) of a global batch of T-token rows, into the model's inputs, with
// the global batch's targets counted (masked ones: tasks/loss_mask.hpp): every rank builds the
// whole global batch, so each knows how many count without communicating, and its micro-batch's
// loss and gradient are its share of the global batch's mean (TokenModel::set_batch). Returns
// that count.
template <class TokenModel>
TargetCount set_batch_rows(TokenModel& model, const Batch& global, const BatchRows& rows) {
  const std::size_t T = std::size_t(model.seq());
  const auto begin = std::ptrdiff_t(std::size_t(rows.first) * T),
             end = begin + std::ptrdiff_t(std::size_t(rows.count) * T);
  const TargetCount targets = count_targets(global.targets);
  model.set_batch(std::span<const int>(global.inputs.data() + begin, global.inputs.data() + end),
                  std::span<const int>(global.targets.data() + begin, global.targets.data() + end), targets);
  return targets;
}

// Multinomial sampling from the softmax, with the model's B x T activations (the prompt sits in
// row 0; the rest of the batch is ignored); `forward` runs the model's forward pass. A byte
// vocabulary samples after the prompt (default a newline), non-ASCII bytes and control characters
// shown as '?', so the sample prints on one line. Another vocabulary samples only with the data's
// tokenizer (nullopt otherwise), after the prompt's encoding or without a prompt from its
// end-of-text token (token 0 without one), and prints the decoded text with control characters
// as spaces.
template <class TokenModel>
std::optional<std::string> sample_bytes(TokenModel& model, const TokenDataset& data,
                                        const std::function<void()>& forward, const std::string& prompt, int tokens,
                                        std::uint64_t seed) {
  const Tokenizer* tokenizer = data.vocab() == kByteVocab ? nullptr : data.tokenizer();
  if (data.vocab() != kByteVocab && !tokenizer) return std::nullopt;
  std::vector<int> context = !tokenizer      ? encode_bytes(prompt.empty() ? "\n" : prompt)
                             : prompt.empty() ? std::vector<int>{tokenizer->end_of_text().value_or(0)}
                                              : tokenizer->encode(prompt);
  for (int id : context)
    if (id >= data.vocab())
      throw std::invalid_argument("the prompt's token " + std::to_string(id) + " is outside the model's vocabulary of " +
                                  std::to_string(data.vocab()));
  const std::size_t prompt_tokens = context.size();
  std::mt19937_64 rng(seed);
  std::string out;
  const std::size_t N = std::size_t(model.batch()) * std::size_t(model.seq());
  for (int i = 0; i < tokens; ++i) {
    const std::size_t window = std::min<std::size_t>(context.size(), std::size_t(model.seq()));
    std::vector<int> inputs(N, 0);
    std::copy(context.end() - std::ptrdiff_t(window), context.end(), inputs.begin());
    model.set_batch(inputs, std::vector<int>(N, 0));
    forward();
    std::vector<float> probs = model.probabilities(0, int(window) - 1);
    if (tokenizer && probs.size() > tokenizer->vocab()) probs.resize(tokenizer->vocab());  // ids it can decode
    std::discrete_distribution<int> pick(probs.begin(), probs.end());
    const int next = pick(rng);
    context.push_back(next);
    if (!tokenizer) out.push_back(next < 128 && !std::iscntrl(next) ? char(next) : '?');
  }
  if (tokenizer) {
    out = tokenizer->decode(std::span<const int>(context).subspan(prompt_tokens));
    for (char& c : out)
      if (std::iscntrl(static_cast<unsigned char>(c))) c = ' ';
  }
  if (out.size() > 400) out = out.substr(0, 400) + "...";
  return out;
}

}  // namespace starzero
