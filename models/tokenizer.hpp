#pragma once
// Tokenizers for token models' text: turns token ids back into bytes, so that samples of GPT-2
// and Llama 3 token models print as text. Two file formats:
// - llm.c's `gpt2_tokenizer.bin`: 256 little-endian uint32 of header (magic 20240328, version 1
//   or 2, vocabulary size, and from version 2 the end-of-text id), then per token one byte of
//   length and that many bytes;
// - Hugging Face's `tokenizer.json` with a byte-level BPE (GPT-2, Llama 3): `model.vocab` maps
//   each token string to its id, each byte written as one printable character by GPT-2's
//   bytes_to_unicode table; `added_tokens` holds the special ones, which decode as their text.
// Encoding (text -> ids) needs a tokenizer.json: llm.c's file has no merges. Encoding cuts the text
// at the added tokens (each found in the text as a whole token: <|endoftext|>, <|begin_of_text|>),
// pre-tokenizes the rest with the pre_tokenizer's split pattern (GPT-2's or Llama 3's, the only two
// known: models/pretokenize.hpp), and merges each piece's bytes by the ranks of model.merges ("a b"
// strings or [a, b] pairs), as Hugging Face's tokenizers and tiktoken do. model.ignore_merges (Llama
// 3) takes a piece that is itself in the vocabulary whole. An added token's lstrip, rstrip,
// single_word and normalized attributes are not applied.
// Post-processing (encode_document): the post_processor's special tokens around one text, as Hugging
// Face's tokenizers add them with add_special_tokens=True: TemplateProcessing's `single` template
// (Llama 3: <|begin_of_text|> then $A), ByteLevel (GPT-2: adds nothing, offsets only), a Sequence
// of those (each wraps what the ones before it made), or none (null, absent, llm.c's file: adds
// nothing). Another post_processor is an error only when post-processing is asked for.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
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
  // The ids of this text, which decode to it byte for byte (any bytes, UTF-8 or not).
  // std::invalid_argument naming the file and the reason when the file cannot encode
  // (encoding_unavailable()).
  std::vector<int> encode(std::string_view text) const;
  bool can_encode() const { return encoder_ != nullptr; }

  // The special tokens the post-processor puts before and after one text.
  struct DocumentTemplate {
    std::vector<int> before, after;
  };
  // The post-processor's template; std::invalid_argument naming the file and the reason when it is
  // not one of the supported ones (document_template_unavailable()).
  const DocumentTemplate& document_template() const;
  // Empty when document_template() works; else why not.
  const std::string& document_template_unavailable() const { return no_template_; }
  // Post-processed encoding: before + encode(text) + after (Llama 3: <|begin_of_text|> first; GPT-2:
  // encode(text)). std::invalid_argument as encode() and document_template().
  std::vector<int> encode_document(std::string_view text) const;
  // The begin-of-text id: the one token the template puts before the text; nullopt when it puts
  // none or several, or has no supported template.
  std::optional<int> bos() const;
  // Why this file cannot encode (llm.c's file, an unknown pre_tokenizer or a normalizer, a byte
  // without a token); empty when it can.
  const std::string& encoding_unavailable() const { return no_encoder_; }
  std::size_t vocab() const { return pieces_.size(); }
  // The end-of-text id when the file names one (llm.c version 2; "<|endoftext|>" or
  // "<|end_of_text|>" among the added tokens): the end of a document (models/jsonl_data.hpp).
  std::optional<int> end_of_text() const { return end_of_text_; }

  // GPT-2's bytes_to_unicode: the printable character (a Unicode code point) standing for a byte.
  static char32_t byte_character(std::uint8_t byte);

 private:
  std::vector<std::string> pieces_;  // id -> bytes
  std::optional<int> end_of_text_;
  struct Encoder;
  std::shared_ptr<const Encoder> encoder_;  // null when the file cannot encode
  std::string no_encoder_;                  // then why
  DocumentTemplate template_;               // the post-processor's (empty: adds nothing)
  std::string no_template_;                 // why the post-processor is not supported; empty when it is
  std::string file_;                        // the path, for messages
};

}  // namespace starzero
