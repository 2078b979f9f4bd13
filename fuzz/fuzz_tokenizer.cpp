// libFuzzer harness: tokenizer files (models/tokenizer.hpp, Tokenizer::load: llm.c's
// gpt2_tokenizer.bin or a Hugging Face tokenizer.json). The input is the file. The reader may only
// reject it with FileFormatError; an accepted tokenizer decodes every id of its vocabulary, the
// bytes of all of them together are the concatenation of each one's, and an id past it is refused.
// Encoding: the input is also text, encoded by two fixed tokenizer.json files (GPT-2's and Llama
// 3's split pattern, a few merges, an added token) and by the input's own tokenizer when it can
// encode: the ids are in the vocabulary and decode to the text, and the pre-tokenizer's pieces
// (models/pretokenize.hpp) are never empty and concatenate to the text.
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_common.hpp"
#include "models/pretokenize.hpp"
#include "models/tokenizer.hpp"
#include "runtime/files.hpp"

using namespace starzero;
namespace fs = std::filesystem;

namespace {

// The text as a JSON string.
std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// A byte-level tokenizer.json with a few merges over " the" and "<|endoftext|>" as an added token.
Tokenizer fixed_tokenizer(const char* name, const std::string& pre_tokenizer) {
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    const char32_t u = Tokenizer::byte_character(std::uint8_t(b));
    std::string c = u < 0x80 ? std::string(1, char(u)) : std::string{char(0xC0 | (u >> 6)), char(0x80 | (u & 0x3F))};
    if (c == "\\" || c == "\"") c = "\\" + c;
    vocab += "\"" + c + "\": " + std::to_string(b) + ",";
  }
  vocab += R"("th": 256, "the": 257, "Ġthe": 258, "ĠĠ": 259)";
  const std::string json = R"({"pre_tokenizer": )" + pre_tokenizer + R"(, "added_tokens": [{"id": 260, "content": "<|endoftext|>"}],
    "model": {"type": "BPE", "ignore_merges": true, "vocab": {)" + vocab + R"(},
              "merges": ["t h", ["th", "e"], "Ġ the", "Ġ Ġ"]}})";
  const fs::path path = fuzz::scratch_dir() / name;
  fuzz::write_input(path, reinterpret_cast<const std::uint8_t*>(json.data()), json.size());
  return Tokenizer::load(path);
}

void check_encoding(const Tokenizer& tokenizer, std::string_view text) {
  const std::vector<int> ids = tokenizer.encode(text);
  for (int id : ids) FUZZ_CHECK(id >= 0 && std::size_t(id) < tokenizer.vocab());
  FUZZ_CHECK(tokenizer.decode(ids) == text);
}

void check_pieces(std::string_view text, SplitPattern pattern) {
  std::string joined;
  for (const std::string_view piece : pretokenize(text, pattern)) {
    FUZZ_CHECK(!piece.empty());
    joined += piece;
  }
  FUZZ_CHECK(joined == text);
}

void check_fixed_encoders(std::string_view text) {
  static const Tokenizer gpt2 = fixed_tokenizer("gpt2.json", R"({"type": "ByteLevel", "use_regex": true})");
  static const Tokenizer llama3 = fixed_tokenizer(
      "llama3.json", R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": )" +
                         json_string(split_pattern_regex(SplitPattern::llama3)) +
                         R"(}}, {"type": "ByteLevel", "use_regex": false}]})");
  FUZZ_CHECK(gpt2.can_encode() && llama3.can_encode());
  check_encoding(gpt2, text);
  check_encoding(llama3, text);
  check_pieces(text, SplitPattern::gpt2);
  check_pieces(text, SplitPattern::llama3);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fs::path path = fuzz::scratch_dir() / "tokenizer";
  fuzz::write_input(path, data, size);
  check_fixed_encoders(std::string_view(reinterpret_cast<const char*>(data), size));
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
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (tokenizer->can_encode()) check_encoding(*tokenizer, text);
  return 0;
}
