#include "models/pretokenize.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <span>

namespace starzero {

namespace {

struct CodeRange {
  char32_t first, last;
};

#include "models/unicode_tables.inc"

bool in_ranges(std::span<const CodeRange> ranges, char32_t c) {
  const auto it = std::upper_bound(ranges.begin(), ranges.end(), c,
                                   [](char32_t v, const CodeRange& r) { return v < r.first; });
  return it != ranges.begin() && c <= std::prev(it)->last;
}

constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

enum class Kind : std::uint8_t { letter, number, space, other };

// One character of the text: its code point (0xFFFD for a byte that is not valid UTF-8), class,
// and where its bytes start.
struct Char {
  char32_t c;
  Kind kind;
  std::size_t at;
};

// The code point of the UTF-8 sequence at text[at] and its length; length 0 when not valid UTF-8
// (overlong forms and surrogates included).
std::pair<char32_t, std::size_t> utf8_at(std::string_view text, std::size_t at) {
  const auto lead = std::uint8_t(text[at]);
  if (lead < 0x80) return {lead, 1};
  const std::size_t extra = (lead >> 5) == 0x6 ? 1 : (lead >> 4) == 0xE ? 2 : (lead >> 3) == 0x1E ? 3 : 0;
  if (extra == 0 || at + extra >= text.size()) return {0, 0};
  char32_t c = lead & (0x3F >> extra);
  for (std::size_t k = 1; k <= extra; ++k) {
    const auto cont = std::uint8_t(text[at + k]);
    if ((cont >> 6) != 0x2) return {0, 0};
    c = (c << 6) | (cont & 0x3F);
  }
  constexpr char32_t smallest[] = {0, 0x80, 0x800, 0x10000};
  if (c < smallest[extra] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return {0, 0};
  return {c, extra + 1};
}

Kind kind_of(char32_t c) {
  if (is_unicode_letter(c)) return Kind::letter;
  if (is_unicode_number(c)) return Kind::number;
  if (is_unicode_space(c)) return Kind::space;
  return Kind::other;
}

std::vector<Char> characters(std::string_view text) {
  std::vector<Char> out;
  out.reserve(text.size());
  for (std::size_t at = 0; at < text.size();) {
    const auto [c, length] = utf8_at(text, at);
    if (length == 0) {
      out.push_back({0xFFFD, Kind::other, at++});
      continue;
    }
    out.push_back({c, kind_of(c), at});
    at += length;
  }
  return out;
}

// The matcher of one pattern over the characters: each rule returns the end of its match at i, or
// 0 when it does not match there (a match is never empty).
class Cutter {
 public:
  explicit Cutter(const std::vector<Char>& chars) : s_(chars) {}

  std::size_t gpt2(std::size_t i) const {
    if (const std::size_t e = contraction(i, false)) return e;
    for (const Kind k : {Kind::letter, Kind::number})
      if (const std::size_t e = run(optional_space(i, k), k)) return e;
    if (const std::size_t e = run(optional_space(i, Kind::other), Kind::other)) return e;
    return spaces(i);
  }

  std::size_t llama3(std::size_t i) const {
    if (const std::size_t e = contraction(i, true)) return e;
    // [^\r\n\p{L}\p{N}]?\p{L}+
    const bool lead = i + 1 < s_.size() && !is(i, Kind::letter) && !is(i, Kind::number) && !newline(i);
    if (const std::size_t e = run(lead && is(i + 1, Kind::letter) ? i + 1 : i, Kind::letter)) return e;
    if (is(i, Kind::number)) {  // \p{N}{1,3}
      std::size_t e = i + 1;
      while (e < s_.size() && e < i + 3 && is(e, Kind::number)) ++e;
      return e;
    }
    if (std::size_t e = run(optional_space(i, Kind::other), Kind::other)) {  //  ?[^\s\p{L}\p{N}]+[\r\n]*
      while (e < s_.size() && newline(e)) ++e;
      return e;
    }
    const std::size_t end = space_run_end(i);  // \s*[\r\n]+: up to the run's last newline
    for (std::size_t e = end; e > i; --e)
      if (newline(e - 1)) return e;
    return spaces(i);
  }

 private:
  bool is(std::size_t i, Kind k) const { return i < s_.size() && s_[i].kind == k; }
  bool newline(std::size_t i) const { return s_[i].c == '\r' || s_[i].c == '\n'; }

  // 's|'t|'re|'ve|'m|'ll|'d, ASCII case folded when `fold`.
  std::size_t contraction(std::size_t i, bool fold) const {
    if (s_[i].c != '\'' || i + 1 >= s_.size()) return 0;
    const auto lower = [&](std::size_t k) -> char32_t {
      const char32_t c = k < s_.size() ? s_[k].c : 0;
      return fold && c >= 'A' && c <= 'Z' ? c + 32 : c;
    };
    const char32_t a = lower(i + 1), b = lower(i + 2);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return 0;
  }

  // " ?" before a run of kind k: the run's start.
  std::size_t optional_space(std::size_t i, Kind k) const {
    return s_[i].c == ' ' && is(i + 1, k) ? i + 1 : i;
  }

  // The end of the run of kind k starting at i; 0 when s_[i] is not of kind k.
  std::size_t run(std::size_t i, Kind k) const {
    if (!is(i, k)) return 0;
    while (is(i, k)) ++i;
    return i;
  }

  std::size_t space_run_end(std::size_t i) const {
    while (is(i, Kind::space)) ++i;
    return i;
  }

  // \s+(?!\S)|\s+: a whitespace run, less its last character when a non-space follows (that one
  // then leads the next piece), unless the run is that one character.
  std::size_t spaces(std::size_t i) const {
    const std::size_t end = space_run_end(i);
    if (end == i) return 0;
    return end == s_.size() || end - i == 1 ? end : end - 1;
  }

  const std::vector<Char>& s_;
};

}  // namespace

bool is_unicode_letter(char32_t c) { return in_ranges(kLetterRanges, c); }
bool is_unicode_number(char32_t c) { return in_ranges(kNumberRanges, c); }

bool is_unicode_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::optional<SplitPattern> split_pattern_from_regex(std::string_view regex) {
  if (regex == kGpt2Regex) return SplitPattern::gpt2;
  if (regex == kLlama3Regex) return SplitPattern::llama3;
  return std::nullopt;
}

std::string_view split_pattern_regex(SplitPattern pattern) {
  return pattern == SplitPattern::gpt2 ? kGpt2Regex : kLlama3Regex;
}

std::vector<std::string_view> pretokenize(std::string_view text, SplitPattern pattern) {
  const std::vector<Char> chars = characters(text);
  const Cutter cutter(chars);
  std::vector<std::string_view> pieces;
  for (std::size_t i = 0; i < chars.size();) {
    std::size_t end = pattern == SplitPattern::gpt2 ? cutter.gpt2(i) : cutter.llama3(i);
    if (end == 0) end = i + 1;  // unreachable: every character matches some rule; never loop
    const std::size_t from = chars[i].at, to = end < chars.size() ? chars[end].at : text.size();
    pieces.push_back(text.substr(from, to - from));
    i = end;
  }
  return pieces;
}

}  // namespace starzero
