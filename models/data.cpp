#include "models/data.hpp"

#include <glob.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

#include "models/gpt_files.hpp"
#include "models/mask_shard.hpp"
#include "models/tokenizer.hpp"
#include "runtime/files.hpp"

namespace starzero {

namespace fs = std::filesystem;

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

// A bijection of [0, n) drawn from `key`: a 4-round Feistel network on the smallest even number
// of bits that holds n, walked until the value lands inside (at most 4 tries expected). Nothing is
// stored: the permutation of a 100 M-window shard costs no memory.
std::uint64_t permute_index(std::uint64_t index, std::uint64_t n, std::uint64_t key) {
  if (n <= 1) return index;
  int bits = 2;
  while ((std::uint64_t(1) << bits) < n) bits += 2;
  const int half = bits / 2;
  const std::uint64_t mask = (std::uint64_t(1) << half) - 1;
  std::uint64_t x = index;
  do {
    std::uint64_t left = x >> half, right = x & mask;
    for (std::uint64_t round = 0; round < 4; ++round) {
      const std::uint64_t f = mix64(right ^ mix64(key + round)) & mask;
      const std::uint64_t next = left ^ f;
      left = right;
      right = next;
    }
    x = (left << half) | right;
  } while (x >= n);
  return x;
}

std::size_t windows_in(std::size_t tokens, int T) { return tokens > std::size_t(T) ? (tokens - 1) / std::size_t(T) : 0; }

// Reads tokens [offset, offset + out.size()) of a split's pieces joined.
void read_joined(const TokenStore& store, std::span<const TokenStore::Piece> pieces, std::size_t offset,
                 std::span<int> out) {
  std::size_t done = 0;
  for (const TokenStore::Piece& piece : pieces) {
    if (done == out.size()) break;
    if (offset >= piece.size) {
      offset -= piece.size;
      continue;
    }
    const std::size_t n = std::min(piece.size - offset, out.size() - done);
    store.read(piece.begin + offset, out.subspan(done, n));
    done += n;
    offset = 0;
  }
  if (done != out.size()) throw std::out_of_range("read past the end of the split");
}

class MemoryTokenStore final : public TokenStore {
 public:
  MemoryTokenStore(std::vector<int> tokens, std::vector<std::uint8_t> counted, std::string description)
      : tokens_(std::move(tokens)), counted_(std::move(counted)), description_(std::move(description)) {
    if (!counted_.empty() && counted_.size() != tokens_.size())
      throw std::invalid_argument("the loss mask has " + std::to_string(counted_.size()) + " values for " +
                                  std::to_string(tokens_.size()) + " tokens");
  }
  std::size_t size() const override { return tokens_.size(); }
  std::vector<Piece> pieces() const override { return {Piece{0, tokens_.size()}}; }
  void read(std::size_t offset, std::span<int> out) const override {
    std::copy_n(tokens_.begin() + std::ptrdiff_t(offset), out.size(), out.begin());
  }
  bool has_mask() const override { return !counted_.empty(); }
  void read_mask(std::size_t offset, std::span<std::uint8_t> out) const override {
    std::copy_n(counted_.begin() + std::ptrdiff_t(offset), out.size(), out.begin());
  }
  std::string describe() const override { return description_; }

 private:
  std::vector<int> tokens_;
  std::vector<std::uint8_t> counted_;
  std::string description_;  // "": text, whose summary's counts say it all
};

class ShardTokenStore final : public TokenStore {
 public:
  ShardTokenStore(std::vector<fs::path> paths, const TokenShardFormat& format) : format_(format) {
    if (paths.empty()) throw std::invalid_argument("no token shards");
    std::size_t begin = 0, masks = 0;
    for (fs::path& path : paths) {
      const std::size_t count = format_.count(path);
      if (count == 0) throw FileFormatError(path.string() + ": the token shard is empty");
      fs::path mask = path;
      mask.replace_extension(".mask");
      const bool masked = fs::exists(mask);
      if (masked) {
        ++masks;
        if (const std::size_t values = read_mask_shard_count(mask); values != count)
          throw FileFormatError(mask.string() + ": " + std::to_string(values) + " mask values for the " +
                                std::to_string(count) + " tokens of " + path.string());
      }
      shards_.push_back({std::move(path), masked ? mask : fs::path(), begin, count});
      begin += count;
    }
    if (masks != 0 && masks != shards_.size())
      throw std::invalid_argument(std::to_string(masks) + " of " + std::to_string(shards_.size()) +
                                  " token shards have a .mask beside them: all or none must");
    size_ = begin;
  }
  std::size_t size() const override { return size_; }
  std::vector<Piece> pieces() const override {
    std::vector<Piece> pieces;
    for (const Shard& shard : shards_) pieces.push_back({shard.begin, shard.count});
    return pieces;
  }
  void read(std::size_t offset, std::span<int> out) const override {
    for_each_shard(offset, out.size(), [&](const Shard& shard, std::size_t at, std::size_t done, std::size_t n) {
      std::vector<unsigned char> bytes(n * format_.token_bytes);
      read_file_at(shard.path, kLlmcHeaderBytes + at * format_.token_bytes, bytes.data(), bytes.size());
      for (std::size_t i = 0; i < n; ++i) {
        std::uint32_t token = 0;
        std::memcpy(&token, bytes.data() + i * format_.token_bytes, format_.token_bytes);  // little-endian
        if (token >= std::uint32_t(format_.vocab))
          throw FileFormatError(shard.path.string() + ": token " + std::to_string(token) + " at index " +
                                std::to_string(at + i) + " is outside the vocabulary of the " + format_.name +
                                " shards (" + std::to_string(format_.vocab) + ")");
        out[done + i] = int(token);
      }
    });
  }
  bool has_mask() const override { return !shards_.front().mask.empty(); }
  void read_mask(std::size_t offset, std::span<std::uint8_t> out) const override {
    for_each_shard(offset, out.size(), [&](const Shard& shard, std::size_t at, std::size_t done, std::size_t n) {
      read_mask_range(shard.mask, at, out.subspan(done, n));
    });
  }
  std::string describe() const override {
    return std::to_string(shards_.size()) + " " + format_.name + " token shard" + (shards_.size() == 1 ? "" : "s") +
           " (" + std::to_string(size_) + " tokens)";
  }

 private:
  struct Shard {
    fs::path path, mask;
    std::size_t begin = 0, count = 0;
  };
  // visit(shard, offset in it, offset in the output, count) for each shard [offset, offset + n) spans.
  template <class Visit>
  void for_each_shard(std::size_t offset, std::size_t n, const Visit& visit) const {
    auto it = std::upper_bound(shards_.begin(), shards_.end(), offset,
                               [](std::size_t o, const Shard& s) { return o < s.begin; });
    if (it == shards_.begin() || offset + n > size_) throw std::out_of_range("read past the end of the token shards");
    --it;
    std::size_t done = 0;
    while (done < n) {
      const std::size_t at = offset + done - it->begin, count = std::min(it->count - at, n - done);
      visit(*it, at, done, count);
      done += count;
      ++it;
    }
  }
  TokenShardFormat format_;
  std::vector<Shard> shards_;
  std::size_t size_ = 0;
};

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

void TokenStore::read_mask(std::size_t, std::span<std::uint8_t>) const {
  throw std::logic_error("this token store has no loss mask");
}

std::shared_ptr<const TokenStore> memory_token_store(std::vector<int> tokens, std::vector<std::uint8_t> counted,
                                                     std::string description) {
  return std::make_shared<const MemoryTokenStore>(std::move(tokens), std::move(counted), std::move(description));
}

std::shared_ptr<const TokenStore> token_shard_store(std::vector<fs::path> paths, const TokenShardFormat& format) {
  return std::make_shared<const ShardTokenStore>(std::move(paths), format);
}

std::vector<fs::path> data_files(const std::string& argument) {
  std::vector<fs::path> files;
  if (fs::is_directory(argument)) {
    for (const auto& entry : fs::directory_iterator(argument))
      if (entry.is_regular_file() && entry.path().extension() == ".bin") files.push_back(entry.path());
    if (files.empty()) throw std::invalid_argument("--data: the folder '" + argument + "' holds no .bin token shard");
  } else if (fs::exists(argument)) {
    files.push_back(argument);
  } else if (argument.find_first_of("*?[") != std::string::npos) {
    glob_t found{};
    const int rc = ::glob(argument.c_str(), 0, nullptr, &found);
    for (std::size_t i = 0; rc == 0 && i < found.gl_pathc; ++i)
      if (fs::is_regular_file(found.gl_pathv[i])) files.emplace_back(found.gl_pathv[i]);
    globfree(&found);
    if (files.empty()) throw std::invalid_argument("--data: no file matches '" + argument + "'");
  } else {
    throw std::invalid_argument("--data: no such file '" + argument + "'");
  }
  std::sort(files.begin(), files.end());
  return files;
}

TokenDataset::TokenDataset(std::vector<int> tokens, int vocab, double validation_fraction)
    : vocab_(vocab), validation_fraction_(validation_fraction) {
  if (tokens.empty()) throw std::invalid_argument("TokenDataset: no tokens (empty data)");
  if (vocab_ <= 0) throw std::invalid_argument("TokenDataset: vocab must be positive, not " + std::to_string(vocab_));
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab_)
      throw std::invalid_argument("TokenDataset: token " + std::to_string(tokens[i]) + " at index " +
                                  std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(vocab_) + ")");
  store_ = memory_token_store(std::move(tokens));
  cut_splits();
}

TokenDataset::TokenDataset(std::shared_ptr<const TokenStore> store, int vocab, double validation_fraction,
                           std::shared_ptr<const TokenStore> validation)
    : store_(std::move(store)), validation_store_(std::move(validation)), vocab_(vocab),
      validation_fraction_(validation_fraction) {
  if (!store_ || store_->size() == 0) throw std::invalid_argument("TokenDataset: no tokens (empty data)");
  if (vocab_ <= 0) throw std::invalid_argument("TokenDataset: vocab must be positive, not " + std::to_string(vocab_));
  cut_splits();
}

void TokenDataset::cut_splits() {
  if (!(validation_fraction_ >= 0.0 && validation_fraction_ < 1.0))
    throw std::invalid_argument("TokenDataset: validation fraction must be in [0, 1), not " +
                                std::to_string(validation_fraction_));
  train_ = SplitPieces{store_.get(), {}, 0};
  validation_ = SplitPieces{validation_store_ ? validation_store_.get() : store_.get(), {}, 0};
  const std::size_t size = store_->size();
  const std::size_t held_out =
      validation_store_ ? 0 : static_cast<std::size_t>(double(size) * validation_fraction_);
  const std::size_t train_end = size - held_out;
  for (const TokenStore::Piece& piece : store_->pieces()) {
    const std::size_t end = piece.begin + piece.size;
    if (piece.begin < train_end) train_.pieces.push_back({piece.begin, std::min(end, train_end) - piece.begin});
    if (end > train_end && !validation_store_) {
      const std::size_t begin = std::max(piece.begin, train_end);
      validation_.pieces.push_back({begin, end - begin});
    }
  }
  if (validation_store_) validation_.pieces = validation_store_->pieces();
  for (SplitPieces* split : {&train_, &validation_})
    for (const TokenStore::Piece& piece : split->pieces) split->tokens += piece.size;
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

const TokenShardFormat& gpt2_token_shards() {
  static const TokenShardFormat format{"GPT-2", 2, kGpt2Vocab,
                                       [](const fs::path& path) { return GptTokenShardFile::count(path); }};
  return format;
}

TokenDataset TokenDataset::from_token_shard(const std::filesystem::path& path, double validation_fraction) {
  return TokenDataset(token_shard_store({path}, gpt2_token_shards()), kGpt2Vocab, validation_fraction);
}

std::size_t TokenDataset::split_size(Split split) const { return pieces_of(split).tokens; }

std::vector<int> TokenDataset::read_split(Split split, std::size_t offset, std::size_t count) const {
  const SplitPieces& pieces = pieces_of(split);
  if (offset > pieces.tokens || count > pieces.tokens - offset)
    throw std::out_of_range(std::string("tokens past the end of the ") + split_name(split) + " split");
  std::vector<int> tokens(count);
  read_joined(*pieces.store, pieces.pieces, offset, tokens);
  return tokens;
}

int TokenDataset::largest_token() const {
  int largest = 0;
  for (const TokenStore* store : {store_.get(), validation_store_.get()}) {
    if (!store) continue;
    constexpr std::size_t kChunk = std::size_t(1) << 20;
    std::vector<int> chunk;
    for (std::size_t at = 0; at < store->size(); at += kChunk) {
      chunk.resize(std::min(kChunk, store->size() - at));
      store->read(at, chunk);
      largest = std::max(largest, *std::max_element(chunk.begin(), chunk.end()));
    }
  }
  return largest;
}

std::size_t TokenDataset::windows(int T, Split split) const {
  check_batch_dims(1, T);
  std::size_t total = 0;
  for (const TokenStore::Piece& piece : pieces_of(split).pieces) total += windows_in(piece.size, T);
  return total;
}

void TokenDataset::fill_window(const SplitPieces& split, std::size_t piece, std::size_t window, int T, Batch& batch,
                               std::size_t row) const {
  const TokenStore::Piece& p = split.pieces[piece];
  const std::size_t begin = p.begin + window * std::size_t(T), n = std::size_t(T);
  std::vector<int> tokens(n + 1);
  split.store->read(begin, tokens);
  const std::size_t base = row * n;
  std::copy_n(tokens.begin(), n, batch.inputs.begin() + std::ptrdiff_t(base));
  std::copy_n(tokens.begin() + 1, n, batch.targets.begin() + std::ptrdiff_t(base));
  if (!split.store->has_mask()) return;
  std::vector<std::uint8_t> counted(n);
  split.store->read_mask(begin + 1, counted);  // the targets' mask
  for (std::size_t t = 0; t < n; ++t)
    if (!counted[t]) batch.targets[base + t] = kMaskedTarget;
}

Batch TokenDataset::stream_batch(int B, int T, std::uint64_t seed, std::uint64_t position) const {
  check_batch_dims(B, T);
  check_split_holds_batch(train_.tokens, B, T, Split::train);
  const std::size_t P = train_.pieces.size();
  std::vector<std::size_t> piece_windows(P);
  for (std::size_t k = 0; k < P; ++k) piece_windows[k] = windows_in(train_.pieces[k].size, T);
  const std::uint64_t W = std::accumulate(piece_windows.begin(), piece_windows.end(), std::uint64_t(0));
  if (W == 0)
    throw std::invalid_argument("no piece of the train split holds one window of T + 1 = " + std::to_string(T + 1) +
                                " tokens");
  Batch batch{std::vector<int>(std::size_t(B) * std::size_t(T)), std::vector<int>(std::size_t(B) * std::size_t(T))};
  // The epoch's piece order (Fisher-Yates from mt19937_64, whose output the standard fixes, with a
  // plain modulo) and where each piece starts in it; recomputed only when the epoch changes.
  std::uint64_t epoch = ~std::uint64_t(0);
  std::vector<std::size_t> order(P);
  std::vector<std::uint64_t> starts(P);
  for (std::size_t row = 0; row < std::size_t(B); ++row) {
    const std::uint64_t sample = position + row, e = sample / W, j = sample % W;
    const std::uint64_t key = mix64(seed ^ mix64(e));
    if (e != epoch) {
      epoch = e;
      std::iota(order.begin(), order.end(), std::size_t(0));
      std::mt19937_64 rng(key);
      for (std::size_t k = P; k > 1; --k) std::swap(order[k - 1], order[std::size_t(rng() % k)]);
      std::uint64_t at = 0;
      for (std::size_t k = 0; k < P; ++k) {
        starts[k] = at;
        at += piece_windows[order[k]];
      }
    }
    // The last slot starting at or before j holds it: a piece without windows shares its start with
    // the next one, which upper_bound passes, and j < W keeps it off a trailing one.
    const std::size_t slot = std::size_t(std::upper_bound(starts.begin(), starts.end(), j) - starts.begin()) - 1;
    const std::size_t piece = order[slot];
    const std::uint64_t window = permute_index(j - starts[slot], piece_windows[piece], mix64(key ^ (piece + 1)));
    fill_window(train_, piece, std::size_t(window), T, batch, row);
  }
  return batch;
}

Batch TokenDataset::train_batch(int B, int T, std::uint64_t seed, std::uint64_t step) const {
  if (step < 1) throw std::invalid_argument("training steps count from 1");
  return stream_batch(B, T, seed, (step - 1) * std::uint64_t(B));
}

std::size_t TokenDataset::sequential_batches(int B, int T, Split split) const {
  check_batch_dims(B, T);
  return windows(T, split) / std::size_t(B);
}

Batch TokenDataset::sequential_batch(int B, int T, std::size_t b, Split split) const {
  check_batch_dims(B, T);
  const SplitPieces& pieces = pieces_of(split);
  check_split_holds_batch(pieces.tokens, B, T, split);
  const std::size_t count = sequential_batches(B, T, split);
  if (b >= count)
    throw std::out_of_range(std::string("sequential batch ") + std::to_string(b) + " is past the end of the " +
                            split_name(split) + " split (" + std::to_string(count) +
                            " batches of B=" + std::to_string(B) + ", T=" + std::to_string(T) + ")");
  Batch batch{std::vector<int>(std::size_t(B) * std::size_t(T)), std::vector<int>(std::size_t(B) * std::size_t(T))};
  std::size_t piece = 0, first = 0;  // the piece holding window b·B and its first window's index
  for (std::size_t row = 0; row < std::size_t(B); ++row) {
    const std::size_t w = b * std::size_t(B) + row;
    while (w - first >= windows_in(pieces.pieces[piece].size, T)) first += windows_in(pieces.pieces[piece++].size, T);
    fill_window(pieces, piece, w - first, T, batch, row);
  }
  return batch;
}

void TokenDataset::use_tokenizer(std::shared_ptr<const Tokenizer> tokenizer, const std::string& file) {
  if (vocab_ == kByteVocab && tokenizer->vocab() != std::size_t(kByteVocab)) {  // text: encode it
    if (!tokenizer->can_encode())
      throw std::invalid_argument("--tokenizer " + file + " cannot encode the training text: " +
                                  tokenizer->encoding_unavailable());
    std::vector<int> bytes(store_->size());
    store_->read(0, bytes);
    *this = TokenDataset(tokenizer->encode(decode_bytes(bytes)), int(tokenizer->vocab()), validation_fraction_);
  } else if (tokenizer->vocab() < std::size_t(vocab_)) {
    throw std::invalid_argument("--tokenizer " + file + ": its " + std::to_string(tokenizer->vocab()) +
                                " tokens do not cover the data's vocabulary of " + std::to_string(vocab_));
  }
  tokenizer_ = std::move(tokenizer);
  tokenizer_file_ = file;
}

// ---- TrainBatchStream ---------------------------------------------------------------------------

TrainBatchStream::~TrainBatchStream() { drop_read_ahead(); }

void TrainBatchStream::drop_read_ahead() {
  if (next_.valid()) next_.wait();  // a read in flight finishes before what it reads into goes
  next_ = {};
}

void TrainBatchStream::set_origin(std::uint64_t origin_step, std::uint64_t position) {
  drop_read_ahead();  // read for the old origin's positions
  origin_step_ = origin_step;
  origin_position_ = position;
  current_step_ = 0;
}

std::uint64_t TrainBatchStream::position_before(std::uint64_t step, int G) const {
  if (step <= origin_step_) throw std::invalid_argument("step " + std::to_string(step) + " is before the resume");
  return origin_position_ + (step - origin_step_ - 1) * std::uint64_t(G);
}

const Batch& TrainBatchStream::batch(std::uint64_t step, int G) {
  if (current_step_ == step && current_rows_ == G) return current_;
  // The read ahead, when there is one, is for the step after the current one, of as many rows.
  if (next_.valid() && step == current_step_ + 1 && G == current_rows_) {
    current_ = next_.get();  // rethrows what the background read threw
  } else {
    drop_read_ahead();
    current_ = data_.stream_batch(G, T_, seed_, position_before(step, G));
  }
  current_step_ = step;
  current_rows_ = G;
  // The next step's batch, read while this one trains.
  next_ = std::async(std::launch::async, [this, position = position_before(step + 1, G), G] {
    return data_.stream_batch(G, T_, seed_, position);
  });
  return current_;
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
