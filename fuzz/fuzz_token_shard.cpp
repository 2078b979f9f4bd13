// libFuzzer harness: llm.c token shards (models/gpt_files.hpp, GptTokenShardFile::read; magic
// 20240520, version 1) and the dataset made from one (models/data.hpp,
// TokenDataset::from_token_shard). The input is the file. The readers may only reject it with
// FileFormatError (the dataset also with std::invalid_argument: an empty shard); an accepted
// shard holds exactly the file's tokens, round trips through the writer, and batches of its
// dataset hold its tokens.
#include <cstring>
#include <optional>
#include <vector>

#include "fuzz/fuzz_common.hpp"
#include "fuzz/fuzz_llmc.hpp"
#include "fuzz/fuzz_token_data.hpp"
#include "models/data.hpp"
#include "models/gpt_files.hpp"

using namespace starzero;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fuzz::LlmcFiles files = fuzz::write_llmc_input("shard.bin", data, size);

  const auto tokens = fuzz::try_read([&] { return GptTokenShardFile::read(files.input); });
  std::optional<TokenDataset> dataset;
  bool empty = false;
  try {
    dataset = TokenDataset::from_token_shard(files.input, 0.25);
  } catch (const FileFormatError&) {
  } catch (const std::invalid_argument&) {
    empty = true;  // a valid shard without tokens
  }
  if (!tokens) {
    FUZZ_CHECK(!dataset && !empty);
    return 0;
  }
  const std::size_t header_bytes = kLlmcHeaderBytes;
  FUZZ_CHECK(size == header_bytes + tokens->size() * sizeof(std::uint16_t));
  FUZZ_CHECK(tokens->empty() || std::memcmp(tokens->data(), data + header_bytes, size - header_bytes) == 0);
  FUZZ_CHECK(empty == tokens->empty());

  GptTokenShardFile::write(files.copy, *tokens);
  FUZZ_CHECK(GptTokenShardFile::read(files.copy) == *tokens);

  bool in_vocab = true;
  for (std::uint16_t t : *tokens) in_vocab = in_vocab && t < kGpt2Vocab;
  FUZZ_CHECK(dataset.has_value() == (!tokens->empty() && in_vocab));
  if (!dataset) return 0;
  fuzz::check_token_batches(*dataset, tokens->size(), kGpt2Vocab, (*tokens)[0], size);
  return 0;
}
