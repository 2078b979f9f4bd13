#pragma once
// Training data: a byte-level tokenizer, where tokens live (TokenStore: memory, or llm.c token
// shards read by offset, never whole), and a token dataset with a train/validation split that
// hands out batches. Host-side, no StarPU.
//
// Samples are windows of T + 1 tokens at stride T inside one piece of a split (a shard, or the
// part of it the split holds): window w of a piece covers its tokens [w·T, w·T + T]. Training draws
// them as one stream: sample i is in epoch i / W (W windows in the split); each epoch visits the
// pieces in an order and each piece's windows in an order drawn from (seed, epoch), so every
// window is used once per epoch. Step s's global batch of G rows is samples [p, p + G) of the
// stream, p = the stream position (TrainBatchStream); data-parallel ranks take disjoint rows of it.
// The stream is a pure function of (seed, position): a resume that restores the position replays
// exactly what an uninterrupted run would have drawn, with any rank count. Sequential batches read
// a split's windows in order, the way llm.c's validation loader reads a shard.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <future>
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

// Where a data set's tokens live, read by range. Pieces are the runs samples never cross (one per
// shard); they cover [0, size()) in order.
class TokenStore {
 public:
  struct Piece {
    std::size_t begin = 0, size = 0;
  };
  virtual ~TokenStore() = default;
  virtual std::size_t size() const = 0;
  virtual std::vector<Piece> pieces() const = 0;
  // Tokens [offset, offset + out.size()); FileFormatError (naming the file and index) for a token
  // outside the store's vocabulary or a file that fails.
  virtual void read(std::size_t offset, std::span<int> out) const = 0;
  // Whether a loss mask comes with the tokens, and its values (1: the token is learned as a target).
  virtual bool has_mask() const { return false; }
  virtual void read_mask(std::size_t offset, std::span<std::uint8_t> out) const;
  // "3 GPT-2 token shards (300000000 tokens)" and the like, for messages ("": tokens in memory).
  virtual std::string describe() const = 0;
};

// Tokens in memory (text, or a JSONL file's), with an optional loss mask of the same length;
// `description` is what describe() says.
std::shared_ptr<const TokenStore> memory_token_store(std::vector<int> tokens, std::vector<std::uint8_t> counted = {},
                                                     std::string description = "");

// An llm.c token shard format: its token width and vocabulary, and its header check (the token
// count, checked against the file's size; FileFormatError otherwise).
struct TokenShardFormat {
  std::string name;  // "GPT-2", "Llama 3"
  std::size_t token_bytes = 2;
  int vocab = 0;  // every token read must be below it (a smaller tokenizer's shards: its vocabulary)
  std::function<std::size_t(const std::filesystem::path&)> count;
};
// llm.c's GPT-2 token shards: uint16 tokens, vocabulary 50257 (models/gpt_files.hpp).
const TokenShardFormat& gpt2_token_shards();
// The shards `paths` as one store, each header checked now (FileFormatError naming the file: a
// bad header, a size that disagrees with it, an empty shard). A shard's `NAME.mask` beside it
// (models/mask_shard.hpp) is its loss mask; either every shard has one or none.
std::shared_ptr<const TokenStore> token_shard_store(std::vector<std::filesystem::path> paths,
                                                    const TokenShardFormat& format);
// What a --data or --val-data argument names: a file; a folder (its *.bin files, sorted); or a glob
// pattern ('fineweb_train_*.bin', sorted). std::invalid_argument when nothing matches.
std::vector<std::filesystem::path> data_files(const std::string& argument);

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
  // The same split of any store (the validation split cut from its last tokens), or with a separate
  // validation store (then validation_fraction is ignored). std::invalid_argument on empty data.
  TokenDataset(std::shared_ptr<const TokenStore> store, int vocab, double validation_fraction,
               std::shared_ptr<const TokenStore> validation = nullptr);

  // Byte tokens (vocab 256) of one text file.
  static TokenDataset from_text_file(const std::filesystem::path& path, double validation_fraction = 0.1);
  // Byte tokens of several text files joined with "\n" (between files, not after the last).
  static TokenDataset from_text_files(std::span<const std::filesystem::path> paths, double validation_fraction = 0.1);
  // The tokens of an llm.c token shard (vocab 50257), streamed; FileFormatError for a bad shard.
  static TokenDataset from_token_shard(const std::filesystem::path& path, double validation_fraction = 0.1);

  int vocab() const { return vocab_; }
  const TokenStore& store() const { return *store_; }
  // --tokenizer FILE (models/tokenizer.hpp), loaded: the decoder of these ids, for samples of a
  // token model, and their encoder when the data is text: byte tokens (vocab 256) are replaced by
  // the text's encoding in the tokenizer's vocabulary (the same validation fraction).
  // std::invalid_argument when its vocabulary is smaller than a token shard's or it
  // cannot encode text that needs it. `file` names it in messages.
  void use_tokenizer(std::shared_ptr<const Tokenizer> tokenizer, const std::string& file);
  // std::invalid_argument unless the tokenizer, if any, has exactly the model's vocabulary.
  void check_tokenizer_vocab(int model_vocab) const;
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  std::size_t split_size(Split split) const;
  // Tokens [offset, offset + count) of the split, its pieces joined (std::out_of_range past its end).
  std::vector<int> read_split(Split split, std::size_t offset, std::size_t count) const;
  // The largest token id in the data (read through in chunks: constant memory).
  int largest_token() const;
  // Windows of T + 1 tokens the split holds (see the top of this file).
  std::size_t windows(int T, Split split) const;

  // Rows [first, first + count) of the training stream at `position` (G = count rows: samples
  // position .. position + G − 1), for seed `seed`. std::invalid_argument when B or T is not
  // positive, the train split has fewer than B·T + 1 tokens, or no piece holds T + 1 tokens.
  Batch stream_batch(int B, int T, std::uint64_t seed, std::uint64_t position) const;
  // The stream's batch of step `step` (1, 2, ...) from the start: stream_batch at (step − 1)·B.
  Batch train_batch(int B, int T, std::uint64_t seed, std::uint64_t step) const;

  // Batch b covers windows [b·B, b·B + B) of the split in order (in one piece: tokens
  // [b·B·T, b·B·T + B·T], inputs and targets shifted by one); sequential_batches = windows / B.
  std::size_t sequential_batches(int B, int T, Split split) const;
  // std::invalid_argument when the split is shorter than one batch (B·T + 1 tokens),
  // std::out_of_range for b >= sequential_batches(B, T, split).
  Batch sequential_batch(int B, int T, std::size_t b, Split split) const;

 private:
  struct SplitPieces {
    const TokenStore* store = nullptr;
    std::vector<TokenStore::Piece> pieces;
    std::size_t tokens = 0;
  };
  const SplitPieces& pieces_of(Split split) const { return split == Split::train ? train_ : validation_; }
  void cut_splits();
  // Window w of piece `piece` into row `row` of `batch`.
  void fill_window(const SplitPieces& split, std::size_t piece, std::size_t window, int T, Batch& batch,
                   std::size_t row) const;

  std::shared_ptr<const TokenStore> store_, validation_store_;
  int vocab_;
  std::shared_ptr<const Tokenizer> tokenizer_;  // shared: datasets are copied into model specs
  double validation_fraction_;
  SplitPieces train_, validation_;
  std::string tokenizer_file_;
};

// The training batches of one run: step s's batch is the stream's samples at the position
// origin_position + (s − origin_step − 1)·G, so a resume at step origin_step continues from the
// position its state recorded, whatever G is now. The next step's batch is read in the background
// while the current one trains (off the critical path).
class TrainBatchStream {
 public:
  TrainBatchStream(const TokenDataset& data, int T, std::uint64_t seed) : data_(data), T_(T), seed_(seed) {}
  ~TrainBatchStream();
  TrainBatchStream(const TrainBatchStream&) = delete;
  TrainBatchStream& operator=(const TrainBatchStream&) = delete;

  // Resume: `position` samples were drawn before step origin_step + 1.
  void set_origin(std::uint64_t origin_step, std::uint64_t position);
  // Samples drawn before step `step` (the position of its batch) with global batches of G rows.
  std::uint64_t position_before(std::uint64_t step, int G) const;
  // Step `step`'s global batch of G rows (the same Batch for every micro-batch of the step).
  const Batch& batch(std::uint64_t step, int G);

 private:
  const TokenDataset& data_;
  int T_;
  std::uint64_t seed_;
  std::uint64_t origin_step_ = 0, origin_position_ = 0;
  // Waits for the read ahead, if any, and forgets it.
  void drop_read_ahead();

  std::uint64_t current_step_ = 0;
  int current_rows_ = 0;
  Batch current_;
  std::future<Batch> next_;  // step current_step_ + 1's batch of current_rows_ rows, read ahead
};

}  // namespace starzero
