#include "models/data.hpp"

#include <algorithm>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

#include "models/gpt_files.hpp"
#include "models/tokenizer.hpp"
#include "runtime/files.hpp"

namespace starzero {

namespace {

const char* split_name(Split split) { return split == Split::train ? "train" : "validation"; }

void check_batch_dims(int B, int T) {
  if (B <= 0 || T <= 0)
    throw std::invalid_argument("batch dimensions must be positive (B=" + std::to_string(B) +
                                ", T=" + std::to_string(T) + ")");
}

// The split must hold one batch of B·T inputs plus the final target.
void check_split_holds_batch(std::size_t split_size, int B, int T, Split split) {
  const std::size_t need = std::size_t(B) * std::size_t(T) + 1;
  if (split_size < need)
    throw std::invalid_argument(std::string("the ") + split_name(split) + " split has " + std::to_string(split_size) +
                                " tokens, fewer than one batch of B·T + 1 = " + std::to_string(B) + "·" +
                                std::to_string(T) + " + 1 = " + std::to_string(need));
}

// splitmix64's finaliser: spreads (seed, step) over all 64 bits before seeding.
std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void fill_row(std::span<const int> source, std::size_t offset, int T, Batch& batch, std::size_t row) {
  const std::size_t base = row * std::size_t(T);
  for (std::size_t t = 0; t < std::size_t(T); ++t) {
    batch.inputs[base + t] = source[offset + t];
    batch.targets[base + t] = source[offset + t + 1];
  }
}

}  // namespace

std::vector<int> encode_bytes(std::string_view text) {
  std::vector<int> tokens(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

std::string decode_bytes(std::span<const int> tokens) {
  std::string text(tokens.size(), '\0');
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] > 255)
      throw std::invalid_argument("decode_bytes: token " + std::to_string(tokens[i]) + " at index " +
                                  std::to_string(i) + " is not a byte (0..255)");
    text[i] = static_cast<char>(static_cast<unsigned char>(tokens[i]));
  }
  return text;
}

TokenDataset::TokenDataset(std::vector<int> tokens, int vocab, double validation_fraction)
    : tokens_(std::move(tokens)), vocab_(vocab), validation_fraction_(validation_fraction) {
  if (tokens_.empty()) throw std::invalid_argument("TokenDataset: no tokens (empty data)");
  if (vocab_ <= 0) throw std::invalid_argument("TokenDataset: vocab must be positive, not " + std::to_string(vocab_));
  if (!(validation_fraction >= 0.0 && validation_fraction < 1.0))
    throw std::invalid_argument("TokenDataset: validation fraction must be in [0, 1), not " +
                                std::to_string(validation_fraction));
  for (std::size_t i = 0; i < tokens_.size(); ++i)
    if (tokens_[i] < 0 || tokens_[i] >= vocab_)
      throw std::invalid_argument("TokenDataset: token " + std::to_string(tokens_[i]) + " at index " +
                                  std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(vocab_) + ")");
  const auto validation = static_cast<std::size_t>(double(tokens_.size()) * validation_fraction);
  train_size_ = tokens_.size() - validation;
}

TokenDataset TokenDataset::from_text_file(const std::filesystem::path& path, double validation_fraction) {
  return from_text_files(std::span(&path, 1), validation_fraction);
}

TokenDataset TokenDataset::from_text_files(std::span<const std::filesystem::path> paths, double validation_fraction) {
  std::string text;
  for (std::size_t i = 0; i < paths.size(); ++i) {
    if (i > 0) text += '\n';
    text += read_whole_file(paths[i]);
  }
  if (text.empty()) throw std::invalid_argument("TokenDataset: the text files hold no bytes (empty data)");
  return TokenDataset(encode_bytes(text), kByteVocab, validation_fraction);
}

TokenDataset TokenDataset::from_token_shard(const std::filesystem::path& path, double validation_fraction) {
  const std::vector<std::uint16_t> shard = GptTokenShardFile::read(path);
  if (shard.empty()) throw std::invalid_argument("TokenDataset: token shard " + path.string() + " is empty");
  std::vector<int> tokens(shard.size());
  for (std::size_t i = 0; i < shard.size(); ++i) {
    if (shard[i] >= kGpt2Vocab)
      throw FileFormatError(path.string() + ": token " + std::to_string(shard[i]) + " at index " + std::to_string(i) +
                            " is outside the GPT-2 vocabulary (" + std::to_string(kGpt2Vocab) + ")");
    tokens[i] = shard[i];
  }
  return TokenDataset(std::move(tokens), kGpt2Vocab, validation_fraction);
}

std::span<const int> TokenDataset::split_tokens(Split split) const {
  const std::span<const int> all(tokens_);
  return split == Split::train ? all.first(train_size_) : all.subspan(train_size_);
}

Batch TokenDataset::train_batch(int B, int T, std::uint64_t seed, std::uint64_t step) const {
  check_batch_dims(B, T);
  const std::span<const int> train = split_tokens(Split::train);
  check_split_holds_batch(train.size(), B, T, Split::train);
  // mt19937_64's output sequence is fixed by the standard (unlike the distributions), and the
  // offset is taken with a plain modulo, so batches are identical across runs and libraries.
  std::mt19937_64 rng(mix64(seed ^ mix64(step)));
  const std::uint64_t offsets = train.size() - std::size_t(T);  // valid offsets: [0, size − T − 1]
  Batch batch{std::vector<int>(std::size_t(B) * std::size_t(T)), std::vector<int>(std::size_t(B) * std::size_t(T))};
  for (std::size_t row = 0; row < std::size_t(B); ++row) fill_row(train, std::size_t(rng() % offsets), T, batch, row);
  return batch;
}

std::size_t TokenDataset::sequential_batches(int B, int T, Split split) const {
  check_batch_dims(B, T);
  const std::size_t size = split_size(split);
  return size == 0 ? 0 : (size - 1) / (std::size_t(B) * std::size_t(T));
}

Batch TokenDataset::sequential_batch(int B, int T, std::size_t b, Split split) const {
  check_batch_dims(B, T);
  const std::span<const int> source = split_tokens(split);
  check_split_holds_batch(source.size(), B, T, split);
  const std::size_t count = sequential_batches(B, T, split);
  if (b >= count)
    throw std::out_of_range(std::string("sequential batch ") + std::to_string(b) + " is past the end of the " +
                            split_name(split) + " split (" + std::to_string(count) +
                            " batches of B=" + std::to_string(B) + ", T=" + std::to_string(T) + ")");
  const std::size_t BT = std::size_t(B) * std::size_t(T);
  Batch batch{std::vector<int>(BT), std::vector<int>(BT)};
  // Rows are consecutive: the whole batch is one run of B·T + 1 tokens, as llm.c reads it.
  for (std::size_t row = 0; row < std::size_t(B); ++row) fill_row(source, b * BT + row * std::size_t(T), T, batch, row);
  return batch;
}

void TokenDataset::use_tokenizer(const std::optional<std::filesystem::path>& path) {
  if (!path) return;
  auto tokenizer = std::make_shared<const Tokenizer>(Tokenizer::load(*path));
  if (vocab_ == kByteVocab && tokenizer->vocab() != std::size_t(kByteVocab)) {  // text: encode it
    if (!tokenizer->can_encode())
      throw std::invalid_argument("--tokenizer " + path->string() + " cannot encode the training text: " +
                                  tokenizer->encoding_unavailable());
    *this = TokenDataset(tokenizer->encode(decode_bytes(tokens_)), int(tokenizer->vocab()), validation_fraction_);
  } else if (tokenizer->vocab() < std::size_t(vocab_)) {
    throw std::invalid_argument("--tokenizer " + path->string() + ": its " + std::to_string(tokenizer->vocab()) +
                                " tokens do not cover the data's vocabulary of " + std::to_string(vocab_));
  }
  tokenizer_ = std::move(tokenizer);
  tokenizer_file_ = path->string();
}

void TokenDataset::check_tokenizer_vocab(int model_vocab) const {
  if (tokenizer_ && tokenizer_->vocab() != std::size_t(model_vocab))
    throw std::invalid_argument("--tokenizer " + tokenizer_file_ + " has " + std::to_string(tokenizer_->vocab()) +
                                " tokens; the model's vocabulary has " + std::to_string(model_vocab));
}

#ifndef STARZERO_SOURCE_DIR
#define STARZERO_SOURCE_DIR ""  // built without models/CMakeLists.txt (the fuzz harnesses): no default text
#endif

std::vector<std::filesystem::path> checkout_text_files() {
  const std::filesystem::path root = STARZERO_SOURCE_DIR;
  std::vector<std::filesystem::path> files;
  for (const char* dir : {"", "docs", "runtime", "tasks", "optimizers", "offload", "models", "train", "apps",
                          "examples", "tests", "scripts"}) {
    const std::filesystem::path folder = root / dir;
    if (!std::filesystem::is_directory(folder)) continue;
    for (const auto& entry : std::filesystem::directory_iterator(folder)) {
      const auto ext = entry.path().extension().string();
      if (entry.is_regular_file() && (ext == ".md" || ext == ".cpp" || ext == ".hpp" || ext == ".cu" || ext == ".sh"))
        files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) throw std::runtime_error("no default training text found under " + root.string());
  return files;
}

}  // namespace starzero
