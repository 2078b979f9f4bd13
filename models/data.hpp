#pragma once
// Training data: a byte-level tokenizer and a token dataset with a train/validation split that
// hands out batches. Host-side, no StarPU.
//
// Training batches are a pure function of (seed, step): resuming at step s with the same seed
// replays exactly the batches an uninterrupted run would have seen. Sequential batches read a
// split the way llm.c's validation loader reads a shard.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tasks/loss_mask.hpp"  // kMaskedTarget

namespace starzero {

// Byte-level tokenizer: token = byte value 0..255; every byte (0, 255, non-printable) round trips.
inline constexpr int kByteVocab = 256;
// GPT-2's BPE vocabulary, the vocabulary of llm.c token shards.
inline constexpr int kGpt2Vocab = 50257;

std::vector<int> encode_bytes(std::string_view text);
// std::invalid_argument for a token outside 0..255.
std::string decode_bytes(std::span<const int> tokens);

enum class Split { train, validation };

// B·T inputs and B·T targets, row-major [B][T]; targets[i] is the token after inputs[i], or
// kMaskedTarget where that position is not learned (tasks/loss_mask.hpp: no loss, no gradient,
// not in the mean loss).
struct Batch {
  std::vector<int> inputs, targets;
};

class Tokenizer;

// The text that ships with this checkout, its docs and sources (sorted): every model family's
// default training data, so the demo needs no download. std::runtime_error when none is found.
std::vector<std::filesystem::path> checkout_text_files();

class TokenDataset {
 public:
  // The last floor(size · validation_fraction) tokens form the validation split, the rest the
  // train split. std::invalid_argument on empty data, a fraction outside [0, 1), or a token
  // outside [0, vocab).
  TokenDataset(std::vector<int> tokens, int vocab, double validation_fraction = 0.1);

  // Byte tokens (vocab 256) of one text file.
  static TokenDataset from_text_file(const std::filesystem::path& path, double validation_fraction = 0.1);
  // Byte tokens of several text files joined with "\n" (between files, not after the last).
  static TokenDataset from_text_files(std::span<const std::filesystem::path> paths, double validation_fraction = 0.1);
  // The tokens of an llm.c token shard (vocab 50257); FileFormatError for a bad shard.
  static TokenDataset from_token_shard(const std::filesystem::path& path, double validation_fraction = 0.1);

  int vocab() const { return vocab_; }
  std::span<const int> tokens() const { return tokens_; }
  // --tokenizer FILE (models/tokenizer.hpp): the decoder of these ids, for samples of a token
  // model, and their encoder when the data is text: byte tokens (vocab 256) are replaced by the
  // text's encoding in the tokenizer's vocabulary (the same validation fraction). FileFormatError
  // for a bad file; std::invalid_argument when its vocabulary is smaller than a token shard's or it
  // cannot encode text that needs it. Nothing for an empty path.
  void use_tokenizer(const std::optional<std::filesystem::path>& path);
  // std::invalid_argument unless the tokenizer, if any, has exactly the model's vocabulary.
  void check_tokenizer_vocab(int model_vocab) const;
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  std::span<const int> split_tokens(Split split) const;
  std::size_t split_size(Split split) const { return split_tokens(split).size(); }

  // B rows of T+1 consecutive train tokens, each from its own random offset drawn from a
  // generator seeded by (seed, step) only. std::invalid_argument when B or T is not positive or
  // the train split has fewer than B·T + 1 tokens.
  Batch train_batch(int B, int T, std::uint64_t seed, std::uint64_t step) const;

  // Batch b covers tokens [b·B·T, b·B·T + B·T] of the split (B·T + 1 tokens: inputs, and
  // targets shifted by one); sequential_batches = (split size − 1) / (B·T) whole batches.
  std::size_t sequential_batches(int B, int T, Split split) const;
  // std::invalid_argument when the split is shorter than one batch (B·T + 1 tokens),
  // std::out_of_range for b >= sequential_batches(B, T, split).
  Batch sequential_batch(int B, int T, std::size_t b, Split split) const;

 private:
  std::vector<int> tokens_;
  int vocab_;
  std::shared_ptr<const Tokenizer> tokenizer_;  // shared: datasets are copied into model specs
  std::size_t train_size_;  // tokens [0, train_size_) train, [train_size_, end) validation
  double validation_fraction_;
  std::string tokenizer_file_;
};

}  // namespace starzero
