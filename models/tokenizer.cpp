#include "models/tokenizer.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "runtime/files.hpp"

namespace starzero {

namespace {

constexpr std::uint32_t kLlmcTokenizerMagic = 20240328;
constexpr std::size_t kLlmcHeaderInts = 256;

// bytes_to_unicode: the printable Latin-1 bytes stand for themselves, the other 68 bytes for
// U+0100 upwards, in byte order.
std::array<char32_t, 256> byte_table() {
  std::array<char32_t, 256> table{};
  const auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; };
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) table[std::size_t(b)] = printable(b) ? char32_t(b) : next++;
  return table;
}

const std::array<char32_t, 256>& bytes_to_unicode() {
  static const std::array<char32_t, 256> table = byte_table();
  return table;
}

// The byte a bytes_to_unicode character stands for; nullopt for any other character.
std::optional<std::uint8_t> character_byte(char32_t c) {
  static const std::map<char32_t, std::uint8_t> inverse = [] {
    std::map<char32_t, std::uint8_t> m;
    for (int b = 0; b < 256; ++b) m[bytes_to_unicode()[std::size_t(b)]] = std::uint8_t(b);
    return m;
  }();
  const auto it = inverse.find(c);
  if (it == inverse.end()) return std::nullopt;
  return it->second;
}

// UTF-8 text as code points; nullopt when it is not valid UTF-8.
std::optional<std::u32string> utf8_code_points(const std::string& text) {
  std::u32string out;
  for (std::size_t i = 0; i < text.size();) {
    const auto lead = std::uint8_t(text[i]);
    const int extra = lead < 0x80 ? 0 : (lead >> 5) == 0x6 ? 1 : (lead >> 4) == 0xE ? 2 : (lead >> 3) == 0x1E ? 3 : -1;
    if (extra < 0 || i + std::size_t(extra) >= text.size()) return std::nullopt;
    char32_t c = extra == 0 ? lead : lead & (0x3F >> extra);
    for (int k = 1; k <= extra; ++k) {
      const auto cont = std::uint8_t(text[i + std::size_t(k)]);
      if ((cont >> 6) != 0x2) return std::nullopt;
      c = (c << 6) | (cont & 0x3F);
    }
    out.push_back(c);
    i += std::size_t(extra) + 1;
  }
  return out;
}

std::uint32_t u32_at(const std::string& bytes, std::size_t index) {
  std::uint32_t v = 0;
  std::memcpy(&v, bytes.data() + 4 * index, 4);  // little-endian hosts only (as the llm.c files)
  return v;
}

}  // namespace

char32_t Tokenizer::byte_character(std::uint8_t byte) { return bytes_to_unicode()[byte]; }

namespace {

// llm.c's gpt2_tokenizer.bin.
void read_llmc_tokenizer(const std::filesystem::path& path, const std::string& bytes,
                         std::vector<std::string>& pieces, std::optional<int>& end_of_text) {
  if (bytes.size() < kLlmcHeaderInts * 4)
    throw_format_error(path, describe_size_mismatch(bytes.size(), kLlmcHeaderInts * 4, "the tokenizer header"));
  const std::uint32_t version = u32_at(bytes, 1), vocab = u32_at(bytes, 2);
  if (version != 1 && version != 2) throw_format_error(path, "tokenizer version " + std::to_string(version) + ", not 1 or 2");
  if (vocab == 0 || vocab > (1u << 24)) throw_format_error(path, "vocabulary size " + std::to_string(vocab));
  if (version == 2) {
    const std::uint32_t eot = u32_at(bytes, 3);
    if (eot >= vocab) throw_format_error(path, "end-of-text id " + std::to_string(eot) + " past the vocabulary");
    end_of_text = int(eot);
  }
  std::size_t at = kLlmcHeaderInts * 4;
  pieces.reserve(vocab);
  for (std::uint32_t id = 0; id < vocab; ++id) {
    if (at >= bytes.size()) throw_format_error(path, "truncated: token " + std::to_string(id) + " of " + std::to_string(vocab) + " is missing");
    const std::size_t length = std::uint8_t(bytes[at++]);
    if (length == 0 || at + length > bytes.size())
      throw_format_error(path, "token " + std::to_string(id) + " has length " + std::to_string(length) +
                                   (length == 0 ? "" : ", past the end of the file"));
    pieces.emplace_back(bytes.substr(at, length));
    at += length;
  }
  if (at != bytes.size()) throw_format_error(path, "trailing data: " + std::to_string(bytes.size() - at) + " bytes after the last token");
}

// The bytes a byte-level token string stands for.
std::string token_bytes(const std::filesystem::path& path, const std::string& token) {
  const std::optional<std::u32string> characters = utf8_code_points(token);
  if (!characters) throw_format_error(path, "a vocabulary entry is not UTF-8");
  std::string out;
  for (char32_t c : *characters) {
    const std::optional<std::uint8_t> byte = character_byte(c);
    if (!byte) throw_format_error(path, "vocabulary entry '" + token + "' has a character outside the byte table");
    out.push_back(char(*byte));
  }
  return out;
}

// Hugging Face's tokenizer.json, byte-level BPE.
void read_tokenizer_json(const std::filesystem::path& path, const std::string& bytes,
                         std::vector<std::string>& pieces, std::optional<int>& end_of_text) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(bytes);
  } catch (const nlohmann::json::exception& e) {
    throw_format_error(path, std::string("not JSON: ") + e.what());
  }
  try {
    const nlohmann::json& model = doc.at("model");
    if (model.value("type", std::string("BPE")) != "BPE") throw_format_error(path, "model type is not BPE");
    if (const auto decoder = doc.find("decoder");
        decoder != doc.end() && !decoder->is_null() && decoder->value("type", std::string()) != "ByteLevel")
      throw_format_error(path, "decoder is not ByteLevel (only byte-level BPE is read)");
    std::map<int, std::string> by_id;
    const auto add = [&](int id, std::string text) {
      if (id < 0 || !by_id.emplace(id, std::move(text)).second)
        throw_format_error(path, "token id " + std::to_string(id) + " is negative or given twice");
    };
    for (const auto& [token, id] : model.at("vocab").items()) add(id.get<int>(), token_bytes(path, token));
    if (const auto added = doc.find("added_tokens"); added != doc.end())
      for (const nlohmann::json& t : *added) {
        const int id = t.at("id").get<int>();
        const std::string content = t.at("content").get<std::string>();
        if (content == "<|endoftext|>" || content == "<|end_of_text|>") end_of_text = id;
        if (const auto it = by_id.find(id); it != by_id.end() && it->second == content) continue;  // also in vocab
        add(id, content);
      }
    if (by_id.empty() || by_id.rbegin()->first != int(by_id.size()) - 1)
      throw_format_error(path, "token ids are not 0.." + std::to_string(by_id.size()) + " without gaps");
    for (auto& [id, text] : by_id) pieces.push_back(std::move(text));
  } catch (const nlohmann::json::exception& e) {
    throw_format_error(path, std::string("not a tokenizer.json: ") + e.what());
  }
}

}  // namespace

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  const std::string bytes = read_whole_file(path);
  Tokenizer t;
  const auto first = bytes.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && bytes[first] == '{')
    read_tokenizer_json(path, bytes, t.pieces_, t.end_of_text_);
  else if (bytes.size() >= 4 && u32_at(bytes, 0) == kLlmcTokenizerMagic)
    read_llmc_tokenizer(path, bytes, t.pieces_, t.end_of_text_);
  else
    throw_format_error(path, "neither a tokenizer.json nor llm.c's tokenizer (magic " +
                                 std::to_string(kLlmcTokenizerMagic) + ")");
  return t;
}

std::string Tokenizer::decode(std::span<const int> ids) const {
  std::string out;
  for (int id : ids) {
    if (id < 0 || std::size_t(id) >= pieces_.size())
      throw std::invalid_argument("token id " + std::to_string(id) + " is outside the tokenizer's " +
                                  std::to_string(pieces_.size()) + "-token vocabulary");
    out += pieces_[std::size_t(id)];
  }
  return out;
}

}  // namespace starzero
