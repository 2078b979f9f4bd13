// libFuzzer harness: llm.c Llama 3 token shards (models/llama_files.hpp, read_llama_token_shard;
// magic 20240801, version 7, uint32 tokens) and the dataset `starzero train --model llama3` makes
// of one (models/llama_family.cpp's load_dataset: non-empty, every token below Llama 3's
// vocabulary of 128256, then TokenDataset). The input is the file. The reader may only reject it
// with FileFormatError; an accepted shard has exactly the size its count implies, holds exactly
// the file's tokens and round trips through the writer (atomically); the dataset exists exactly
// when the shard is non-empty and in the vocabulary, and its batches hold the shard's tokens.
#include <algorithm>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "fuzz/fuzz_common.hpp"
#include "models/data.hpp"
#include "models/llama_files.hpp"

using namespace starzero;
namespace fs = std::filesystem;

namespace {

constexpr std::size_t kHeaderBytes = kLlamaHeaderInts * sizeof(std::int32_t);

std::vector<std::uint8_t> file_bytes(const fs::path& path) {
  std::vector<std::uint8_t> bytes(fs::file_size(path));
  std::FILE* f = std::fopen(path.c_str(), "rb");
  FUZZ_CHECK(f != nullptr);
  FUZZ_CHECK(std::fread(bytes.data(), 1, bytes.size(), f) == bytes.size());
  std::fclose(f);
  return bytes;
}

std::size_t files_in_scratch() {
  std::size_t n = 0;
  for ([[maybe_unused]] const fs::directory_entry& entry : fs::directory_iterator(fuzz::scratch_dir())) ++n;
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fs::path path = fuzz::scratch_dir() / "shard.bin";
  static const fs::path copy = fuzz::scratch_dir() / "copy.bin";
  std::error_code ec;
  fs::remove(copy, ec);
  fuzz::write_input(path, data, size);

  std::int32_t first = 0;
  if (size >= sizeof first) std::memcpy(&first, data, sizeof first);
  FUZZ_CHECK(file_magic(path) == first);

  std::optional<std::vector<std::uint32_t>> tokens;
  try {
    tokens = read_llama_token_shard(path);
  } catch (const FileFormatError&) {
  }
  // Accepted exactly when magic, version and a count that gives the file's size are right.
  std::int32_t h[3] = {};
  if (size >= kHeaderBytes) std::memcpy(h, data, sizeof h);
  const bool valid = size >= kHeaderBytes && h[0] == kLlamaTokenMagic && h[1] == kLlamaTokenVersion && h[2] >= 0 &&
                     size == kHeaderBytes + std::size_t(h[2]) * sizeof(std::uint32_t);
  FUZZ_CHECK(tokens.has_value() == valid);
  if (!tokens) return 0;
  FUZZ_CHECK(tokens->size() == std::size_t(h[2]));
  FUZZ_CHECK(tokens->empty() || std::memcmp(tokens->data(), data + kHeaderBytes, size - kHeaderBytes) == 0);

  // The writer: llm.c's header (the other 253 ints zero) and the same tokens; no temporary left.
  write_llama_token_shard(copy, *tokens);
  FUZZ_CHECK(files_in_scratch() == 2);
  const std::vector<std::uint8_t> written = file_bytes(copy);
  FUZZ_CHECK(written.size() == size);
  FUZZ_CHECK(std::memcmp(written.data(), data, 3 * sizeof(std::int32_t)) == 0);
  for (std::size_t i = 3 * sizeof(std::int32_t); i < kHeaderBytes; ++i) FUZZ_CHECK(written[i] == 0);
  FUZZ_CHECK(std::memcmp(written.data() + kHeaderBytes, data + kHeaderBytes, size - kHeaderBytes) == 0);
  FUZZ_CHECK(read_llama_token_shard(copy) == *tokens);

  // The dataset, as load_dataset makes it; TokenDataset itself must refuse tokens outside the
  // vocabulary, those that wrap to negative ints included.
  bool in_vocab = true;
  for (std::uint32_t t : *tokens) in_vocab = in_vocab && t < std::uint32_t(kLlama3Vocab);
  std::vector<int> as_ints(tokens->begin(), tokens->end());
  std::optional<TokenDataset> dataset;
  try {
    dataset.emplace(as_ints, kLlama3Vocab, 0.25);
  } catch (const std::invalid_argument&) {
  }
  FUZZ_CHECK(dataset.has_value() == (!tokens->empty() && in_vocab));
  if (!dataset) return 0;
  FUZZ_CHECK(dataset->vocab() == kLlama3Vocab && dataset->tokens().size() == tokens->size());
  FUZZ_CHECK(std::equal(dataset->tokens().begin(), dataset->tokens().end(), as_ints.begin()));
  FUZZ_CHECK(dataset->split_size(Split::train) + dataset->split_size(Split::validation) == tokens->size());
  // A batch shape from the first token; batches must hold the shard's tokens in order.
  const int B = 1 + int((*tokens)[0] % 3), T = 1 + int(((*tokens)[0] >> 2) % 5);
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
  }
  try {
    const Batch batch = dataset->train_batch(B, T, size, (*tokens)[0]);
    for (std::size_t i = 0; i < batch.inputs.size(); ++i)
      FUZZ_CHECK(batch.inputs[i] >= 0 && batch.inputs[i] < kLlama3Vocab && batch.targets[i] >= 0 &&
                 batch.targets[i] < kLlama3Vocab);
  } catch (const std::invalid_argument&) {  // the train split is shorter than one batch
    FUZZ_CHECK(dataset->split_size(Split::train) < std::size_t(B * T) + 1);
  }
  return 0;
}
