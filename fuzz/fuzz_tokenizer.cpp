// libFuzzer harness: tokenizer files (models/tokenizer.hpp, Tokenizer::load: llm.c's
// gpt2_tokenizer.bin or a Hugging Face tokenizer.json). The input is the file. The reader may only
// reject it with FileFormatError; an accepted tokenizer decodes every id of its vocabulary, the
// bytes of all of them together are the concatenation of each one's, and an id past it is refused.
#include <numeric>
#include <optional>
#include <stdexcept>
#include <vector>

#include "fuzz/fuzz_common.hpp"
#include "models/tokenizer.hpp"
#include "runtime/files.hpp"

using namespace starzero;
namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fs::path path = fuzz::scratch_dir() / "tokenizer";
  fuzz::write_input(path, data, size);
  std::optional<Tokenizer> tokenizer;
  try {
    tokenizer = Tokenizer::load(path);
  } catch (const FileFormatError&) {
    return 0;
  }
  FUZZ_CHECK(tokenizer->vocab() > 0);
  if (const auto eot = tokenizer->end_of_text()) FUZZ_CHECK(*eot >= 0 && std::size_t(*eot) < tokenizer->vocab());
  std::vector<int> ids(tokenizer->vocab());
  std::iota(ids.begin(), ids.end(), 0);
  std::string each;
  for (int id : ids) {
    const std::string piece = tokenizer->decode(std::vector<int>{id});
    each += piece;
  }
  FUZZ_CHECK(tokenizer->decode(ids) == each);
  bool refused = false;
  try {
    tokenizer->decode(std::vector<int>{int(tokenizer->vocab())});
  } catch (const std::invalid_argument&) {
    refused = true;
  }
  FUZZ_CHECK(refused);
  return 0;
}
