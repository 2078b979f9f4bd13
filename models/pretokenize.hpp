#pragma once
// Pre-tokenization for byte-level BPE encoding (models/tokenizer.hpp): text cut into the pieces
// that BPE merges within, as the regular expressions of GPT-2 and of Llama 3 (tiktoken's
// cl100k_base) cut it. Written by hand: std::regex has no \p{L} or \p{N}.
//
// GPT-2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// \p{L} and \p{N} are Unicode's general categories L* and N* (models/unicode_tables.inc, generated
// by scripts/gen-unicode-tables.py from Python's unicodedata); \s is the White_Space property.
// (?i:...) folds ASCII case only (the regex engines also fold U+017F LONG S to s).
// Bytes that are not valid UTF-8 count one by one as characters of no class (like punctuation),
// so every byte of the input lands in exactly one piece.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace starzero {

enum class SplitPattern { gpt2, llama3 };

// The pattern a tokenizer.json regex string names; nullopt for any other.
std::optional<SplitPattern> split_pattern_from_regex(std::string_view regex);
std::string_view split_pattern_regex(SplitPattern pattern);

// The pieces of the text, in order; their concatenation is the text.
std::vector<std::string_view> pretokenize(std::string_view text, SplitPattern pattern);

bool is_unicode_letter(char32_t c);  // \p{L}
bool is_unicode_number(char32_t c);  // \p{N}
bool is_unicode_space(char32_t c);   // \s: White_Space

}  // namespace starzero
