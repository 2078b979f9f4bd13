// libFuzzer harness: llm.c token shards (models/llmc_files.hpp, read_token_shard; magic
// 20240520, version 1) and the dataset made from one (models/data.hpp,
// TokenDataset::from_token_shard). The input is the file. The readers may only reject it with
// FileFormatError (the dataset also with std::invalid_argument: an empty shard); an accepted
// shard holds exactly the file's tokens, round trips through the writer, and batches of its
// dataset hold its tokens.
#include <cstring>
#include <optional>
#include <vector>

#include "fuzz/fuzz_common.hpp"
#include "models/data.hpp"
#include "models/llmc_files.hpp"

using namespace starzero;
namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fs::path path = fuzz::scratch_dir() / "shard.bin";
  static const fs::path copy = fuzz::scratch_dir() / "copy.bin";
  fuzz::write_input(path, data, size);

  std::optional<std::vector<std::uint16_t>> tokens;
  try {
    tokens = read_token_shard(path);
  } catch (const FileFormatError&) {
  }
  std::optional<TokenDataset> dataset;
  bool empty = false;
  try {
    dataset = TokenDataset::from_token_shard(path, 0.25);
  } catch (const FileFormatError&) {
  } catch (const std::invalid_argument&) {
    empty = true;  // a valid shard without tokens
  }
  if (!tokens) {
    FUZZ_CHECK(!dataset && !empty);
    return 0;
  }
  const std::size_t header_bytes = kLlmcHeaderInts * sizeof(std::int32_t);
  FUZZ_CHECK(size == header_bytes + tokens->size() * sizeof(std::uint16_t));
  FUZZ_CHECK(tokens->empty() || std::memcmp(tokens->data(), data + header_bytes, size - header_bytes) == 0);
  FUZZ_CHECK(empty == tokens->empty());

  write_token_shard(copy, *tokens);
  FUZZ_CHECK(read_token_shard(copy) == *tokens);

  bool in_vocab = true;
  for (std::uint16_t t : *tokens) in_vocab = in_vocab && t < kGpt2Vocab;
  FUZZ_CHECK(dataset.has_value() == (!tokens->empty() && in_vocab));
  if (!dataset) return 0;
  FUZZ_CHECK(dataset->tokens().size() == tokens->size() && dataset->vocab() == kGpt2Vocab);
  FUZZ_CHECK(dataset->split_size(Split::train) + dataset->split_size(Split::validation) == tokens->size());
  // A batch shape from the first token; batches must hold the shard's tokens in order.
  const int B = 1 + (*tokens)[0] % 3, T = 1 + ((*tokens)[0] >> 2) % 5;
  for (Split split : {Split::train, Split::validation}) {
    const std::size_t n = dataset->sequential_batches(B, T, split);
    const std::span<const int> source = dataset->split_tokens(split);
    for (std::size_t b = 0; b < n && b < 4; ++b) {
      const Batch batch = dataset->sequential_batch(B, T, b, split);
      FUZZ_CHECK(batch.inputs.size() == std::size_t(B * T) && batch.targets.size() == std::size_t(B * T));
      for (std::size_t i = 0; i < batch.inputs.size(); ++i) {
        FUZZ_CHECK(batch.inputs[i] == source[b * std::size_t(B * T) + i]);
        FUZZ_CHECK(batch.targets[i] == source[b * std::size_t(B * T) + i + 1]);
      }
    }
    try {
      dataset->sequential_batch(B, T, n, split);
      FUZZ_CHECK(false);
    } catch (const std::invalid_argument&) {  // the split is shorter than one batch
      FUZZ_CHECK(n == 0);
    } catch (const std::out_of_range&) {
    }
  }
  try {
    const Batch batch = dataset->train_batch(B, T, size, (*tokens)[0]);
    for (std::size_t i = 0; i < batch.inputs.size(); ++i)
      FUZZ_CHECK(batch.inputs[i] >= 0 && batch.inputs[i] < kGpt2Vocab && batch.targets[i] >= 0 &&
                 batch.targets[i] < kGpt2Vocab);
  } catch (const std::invalid_argument&) {  // the train split is shorter than one batch
    FUZZ_CHECK(dataset->split_size(Split::train) < std::size_t(B * T) + 1);
  }
  return 0;
}
