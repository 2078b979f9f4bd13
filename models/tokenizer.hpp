#pragma once
// Tokenizers for token models' text: turns token ids back into bytes, so that samples of GPT-2
// and Llama 3 token models print as text. Two file formats:
// - llm.c's `gpt2_tokenizer.bin`: 256 little-endian uint32 of header (magic 20240328, version 1
//   or 2, vocabulary size, and from version 2 the end-of-text id), then per token one byte of
//   length and that many bytes;
// - Hugging Face's `tokenizer.json` with a byte-level BPE (GPT-2, Llama 3): `model.vocab` maps
//   each token string to its id, each byte written as one printable character by GPT-2's
//   bytes_to_unicode table; `added_tokens` holds the special ones, which decode as their text.
// Decoding only: encoding text (BPE merges) is not implemented.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace starzero {

class Tokenizer {
 public:
  // Reads either format (chosen by content: a JSON object or llm.c's magic). FileFormatError
  // naming the file and the problem for anything else: missing, truncated, trailing bytes, a
  // token length past the end, a vocabulary with gaps or duplicate ids, a character outside the
  // byte table, a decoder other than ByteLevel.
  static Tokenizer load(const std::filesystem::path& path);

  // The bytes of these ids, in order. std::invalid_argument for an id outside the vocabulary.
  std::string decode(std::span<const int> ids) const;
  std::size_t vocab() const { return pieces_.size(); }
  // The end-of-text id when the file names one (llm.c version 2; "<|endoftext|>" or
  // "<|end_of_text|>" among the added tokens).
  std::optional<int> end_of_text() const { return end_of_text_; }

  // GPT-2's bytes_to_unicode: the printable character (a Unicode code point) standing for a byte.
  static char32_t byte_character(std::uint8_t byte);

 private:
  std::vector<std::string> pieces_;  // id -> bytes
  std::optional<int> end_of_text_;
};

}  // namespace starzero
