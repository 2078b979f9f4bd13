// libFuzzer harness: llm.c token shards (models/gpt_files.hpp, GptTokenShardFile::read; magic
// 20240520, version 1) and the dataset made from one (models/data.hpp,
// TokenDataset::from_token_shard). The input is the file. The readers may only reject it with
// FileFormatError (the dataset also an empty shard); an accepted
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
  // The dataset streams the shard: its header is checked now (an empty shard refused too), its
  // tokens when a batch reads them.
  std::optional<TokenDataset> dataset;
  try {
    dataset = TokenDataset::from_token_shard(files.input, 0.25);
  } catch (const FileFormatError&) {
  }
  if (!tokens) {
    FUZZ_CHECK(!dataset);
    return 0;
  }
  const std::size_t header_bytes = kLlmcHeaderBytes;
  FUZZ_CHECK(size == header_bytes + tokens->size() * sizeof(std::uint16_t));
  FUZZ_CHECK(tokens->empty() || std::memcmp(tokens->data(), data + header_bytes, size - header_bytes) == 0);

  GptTokenShardFile::write(files.copy, *tokens);
  FUZZ_CHECK(GptTokenShardFile::read(files.copy) == *tokens);

  bool in_vocab = true;
  for (std::uint16_t t : *tokens) in_vocab = in_vocab && t < kGpt2Vocab;
  FUZZ_CHECK(dataset.has_value() == !tokens->empty());
  if (!dataset) return 0;
  std::vector<int> as_ints(tokens->begin(), tokens->end());
  // A token outside the vocabulary is refused when read, naming the file.
  try {
    std::vector<int> read(as_ints.size());
    dataset->store().read(0, read);
    FUZZ_CHECK(in_vocab && read == as_ints);
  } catch (const FileFormatError&) {
    FUZZ_CHECK(!in_vocab);
  }
  if (!in_vocab) return 0;
  fuzz::check_token_batches(*dataset, as_ints, kGpt2Vocab, (*tokens)[0], size);
  return 0;
}
