#pragma once
// Shared by the token-shard harnesses (fuzz_token_shard.cpp, fuzz_llama_token_shard.cpp): the
// properties of a TokenDataset made from an accepted shard.
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

#include "fuzz/fuzz_common.hpp"
#include "models/data.hpp"

namespace starzero::fuzz {

// `dataset` holds `tokens` of `vocab`: its splits add up to them, and its batches (of a shape drawn
// from `first`, the shard's first token) hold them in order, inside the vocabulary.
inline void check_token_batches(const TokenDataset& dataset, const std::vector<int>& tokens, int vocab,
                                std::uint32_t first, std::size_t step) {
  const std::size_t count = tokens.size();
  FUZZ_CHECK(dataset.store().size() == count && dataset.vocab() == vocab);
  FUZZ_CHECK(dataset.split_size(Split::train) + dataset.split_size(Split::validation) == count);
  const int B = 1 + int(first % 3), T = 1 + int((first >> 2) % 5);
  for (Split split : {Split::train, Split::validation}) {
    const std::size_t n = dataset.sequential_batches(B, T, split);
    const std::span<const int> source =
        std::span<const int>(tokens).subspan(split == Split::train ? 0 : dataset.split_size(Split::train));
    for (std::size_t b = 0; b < n && b < 4; ++b) {
      const Batch batch = dataset.sequential_batch(B, T, b, split);
      FUZZ_CHECK(batch.inputs.size() == std::size_t(B * T) && batch.targets.size() == std::size_t(B * T));
      for (std::size_t i = 0; i < batch.inputs.size(); ++i) {
        FUZZ_CHECK(batch.inputs[i] == source[b * std::size_t(B * T) + i]);
        FUZZ_CHECK(batch.targets[i] == source[b * std::size_t(B * T) + i + 1]);
      }
    }
    try {
      dataset.sequential_batch(B, T, n, split);
      FUZZ_CHECK(false);
    } catch (const std::invalid_argument&) {  // the split is shorter than one batch
      FUZZ_CHECK(n == 0);
    } catch (const std::out_of_range&) {
    }
  }
  try {
    const Batch batch = dataset.train_batch(B, T, step, std::uint64_t(first) + 1);
    for (std::size_t i = 0; i < batch.inputs.size(); ++i)
      FUZZ_CHECK(batch.inputs[i] >= 0 && batch.inputs[i] < vocab && batch.targets[i] >= 0 && batch.targets[i] < vocab);
  } catch (const std::invalid_argument&) {  // the train split is shorter than one batch
    FUZZ_CHECK(dataset.split_size(Split::train) < std::size_t(B * T) + 1);
  }
}

}  // namespace starzero::fuzz
