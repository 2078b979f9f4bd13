// libFuzzer harness: llm.c Llama 3 token shards (models/llama_files.hpp, LlamaTokenShardFile::read;
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
#include "fuzz/fuzz_llmc.hpp"
#include "fuzz/fuzz_token_data.hpp"
#include "models/data.hpp"
#include "models/llama_files.hpp"

using namespace starzero;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fuzz::LlmcFiles files = fuzz::write_llmc_input("shard.bin", data, size);

  const auto tokens = fuzz::try_read([&] { return LlamaTokenShardFile::read(files.input); });
  // Accepted exactly when magic, version and a count that gives the file's size are right.
  std::int32_t h[3] = {};
  if (size >= kLlmcHeaderBytes) std::memcpy(h, data, sizeof h);
  const bool valid = size >= kLlmcHeaderBytes && h[0] == kLlamaTokenMagic && h[1] == kLlamaTokenVersion && h[2] >= 0 &&
                     size == kLlmcHeaderBytes + std::size_t(h[2]) * sizeof(std::uint32_t);
  FUZZ_CHECK(tokens.has_value() == valid);
  if (!tokens) return 0;
  FUZZ_CHECK(tokens->size() == std::size_t(h[2]));
  FUZZ_CHECK(tokens->empty() || std::memcmp(tokens->data(), data + kLlmcHeaderBytes, size - kLlmcHeaderBytes) == 0);

  // The writer: llm.c's header (the other 253 ints zero) and the same tokens; no temporary left.
  LlamaTokenShardFile::write(files.copy, *tokens);
  FUZZ_CHECK(fuzz::files_in_scratch() == 2);
  const std::vector<std::uint8_t> written = fuzz::file_bytes(files.copy);
  FUZZ_CHECK(written.size() == size);
  FUZZ_CHECK(std::memcmp(written.data(), data, 3 * sizeof(std::int32_t)) == 0);
  for (std::size_t i = 3 * sizeof(std::int32_t); i < kLlmcHeaderBytes; ++i) FUZZ_CHECK(written[i] == 0);
  FUZZ_CHECK(std::memcmp(written.data() + kLlmcHeaderBytes, data + kLlmcHeaderBytes, size - kLlmcHeaderBytes) == 0);
  FUZZ_CHECK(LlamaTokenShardFile::read(files.copy) == *tokens);

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
  fuzz::check_token_batches(*dataset, as_ints, kLlama3Vocab, (*tokens)[0], size);
  return 0;
}
