#include "models/tokenizer.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <unordered_map>

#include "models/pretokenize.hpp"
#include "runtime/files.hpp"

namespace starzero {

namespace tokenizer_detail {

// What encoding needs, read from a tokenizer.json.
struct BpeEncoder {
  SplitPattern pattern = SplitPattern::gpt2;
  bool ignore_merges = false;
  std::unordered_map<std::string, int> ids;  // model.vocab: bytes -> id
  std::array<int, 256> byte_ids{};           // the token of each single byte
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<std::uint64_t, std::pair<int, int>> merges;
  std::vector<std::pair<std::string, int>> added;  // added tokens, longest first
  std::array<bool, 256> added_starts{};             // bytes an added token starts with
};

}  // namespace tokenizer_detail

struct Tokenizer::Encoder : tokenizer_detail::BpeEncoder {};

using tokenizer_detail::BpeEncoder;

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

// Hugging Face's tokenizer.json, byte-level BPE: the ids' bytes; the document, for the encoder.
nlohmann::json read_tokenizer_json(const std::filesystem::path& path, const std::string& bytes,
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
  return doc;
}

// One element of a pre_tokenizer: the split pattern it applies (nullopt for a ByteLevel that only
// maps bytes); `why` set for anything else.
std::optional<SplitPattern> pre_tokenizer_step(const nlohmann::json& step, std::string& why) {
  const std::string type = step.value("type", std::string());
  if (type == "ByteLevel") {
    if (step.value("add_prefix_space", false)) why = "its ByteLevel pre_tokenizer adds a prefix space";
    return step.value("use_regex", true) ? std::optional(SplitPattern::gpt2) : std::nullopt;
  }
  if (type == "Split") {
    const nlohmann::json regex = step.value("pattern", nlohmann::json::object()).value("Regex", nlohmann::json());
    const std::string text = regex.is_string() ? regex.get<std::string>() : "";
    const std::optional<SplitPattern> pattern = split_pattern_from_regex(text);
    if (!pattern) why = "its Split pre_tokenizer's pattern is neither GPT-2's nor Llama 3's regex";
    else if (step.value("behavior", std::string("Isolated")) != "Isolated" || step.value("invert", false))
      why = "its Split pre_tokenizer is not Isolated, not inverted";
    return pattern;
  }
  why = "pre_tokenizer type '" + type + "' is not supported (ByteLevel, Split or a Sequence of them)";
  return std::nullopt;
}

// The split pattern of the pre_tokenizer, a step or a Sequence with exactly one step that splits;
// nullopt with `why` set for any other.
std::optional<SplitPattern> pre_tokenizer_pattern(const nlohmann::json& doc, std::string& why) {
  const auto pre = doc.find("pre_tokenizer");
  if (pre == doc.end() || pre->is_null() || !pre->is_object()) {
    why = "it has no pre_tokenizer";
    return std::nullopt;
  }
  const bool sequence = pre->value("type", std::string()) == "Sequence";
  const nlohmann::json steps = sequence ? pre->value("pretokenizers", nlohmann::json::array()) : nlohmann::json::array({*pre});
  std::optional<SplitPattern> pattern;
  for (const nlohmann::json& step : steps) {
    const std::optional<SplitPattern> p = step.is_object() ? pre_tokenizer_step(step, why) : std::nullopt;
    if (p && pattern) why = "its pre_tokenizer splits twice";
    if (p) pattern = p;
  }
  if (!pattern && why.empty()) why = "its pre_tokenizer does not split (no regex)";
  return why.empty() ? pattern : std::nullopt;
}

int vocab_id(const std::filesystem::path& path, const BpeEncoder& e, const std::string& token) {
  const auto it = e.ids.find(token_bytes(path, token));
  if (it == e.ids.end()) throw_format_error(path, "merge token '" + token + "' is not in the vocabulary");
  return it->second;
}

// model.merges, "a b" strings or [a, b] pairs: rank = position.
void read_merges(const std::filesystem::path& path, const nlohmann::json& merges, BpeEncoder& e) {
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const nlohmann::json& m = merges[rank];
    std::string left, right;
    if (m.is_string()) {
      const std::string text = m.get<std::string>();
      const auto space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos)
        throw_format_error(path, "merge '" + text + "' is not two tokens separated by a space");
      left = text.substr(0, space), right = text.substr(space + 1);
    } else if (m.is_array() && m.size() == 2) {
      left = m[0].get<std::string>(), right = m[1].get<std::string>();
    } else {
      throw_format_error(path, "merge " + std::to_string(rank) + " is neither \"a b\" nor [a, b]");
    }
    const int l = vocab_id(path, e, left), r = vocab_id(path, e, right);
    const auto merged = e.ids.find(token_bytes(path, left) + token_bytes(path, right));
    if (merged == e.ids.end()) throw_format_error(path, "merge '" + left + " " + right + "' makes no vocabulary token");
    e.merges.try_emplace(std::uint64_t(std::uint32_t(l)) << 32 | std::uint32_t(r), int(rank), merged->second);
  }
}

// The encoder of a tokenizer.json; nullopt with `why` set when it cannot encode.
std::optional<BpeEncoder> read_encoder(const std::filesystem::path& path, const nlohmann::json& doc, std::string& why) {
  try {
    if (const auto n = doc.find("normalizer"); n != doc.end() && !n->is_null()) {
      why = "its normalizer is not supported";
      return std::nullopt;
    }
    const std::optional<SplitPattern> pattern = pre_tokenizer_pattern(doc, why);
    if (!pattern) return std::nullopt;
    BpeEncoder e;
    e.pattern = *pattern;
    const nlohmann::json& model = doc.at("model");
    e.ignore_merges = model.value("ignore_merges", false);
    for (const auto& [token, id] : model.at("vocab").items()) e.ids.emplace(token_bytes(path, token), id.get<int>());
    for (int b = 0; b < 256; ++b) {
      const auto it = e.ids.find(std::string(1, char(b)));
      if (it == e.ids.end()) {
        why = "its vocabulary has no token for byte " + std::to_string(b);
        return std::nullopt;
      }
      e.byte_ids[std::size_t(b)] = it->second;
    }
    read_merges(path, model.value("merges", nlohmann::json::array()), e);
    if (const auto added = doc.find("added_tokens"); added != doc.end())
      for (const nlohmann::json& t : *added)
        if (const std::string content = t.at("content").get<std::string>(); !content.empty()) {
          e.added.emplace_back(content, t.at("id").get<int>());
          e.added_starts[std::uint8_t(content[0])] = true;
        }
    std::stable_sort(e.added.begin(), e.added.end(), [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
    return e;
  } catch (const nlohmann::json::exception& e) {
    throw_format_error(path, std::string("not a tokenizer.json: ") + e.what());
  }
}

using DocumentTemplate = Tokenizer::DocumentTemplate;

// A TemplateProcessing's `single` template: the ids of its special tokens before and after $A;
// false with `why` set for a template that is not one special-token list around $A.
bool template_processing(const nlohmann::json& step, std::size_t vocab, DocumentTemplate& out, std::string& why) {
  const nlohmann::json& single = step.at("single");
  const nlohmann::json& specials = step.at("special_tokens");
  if (!single.is_array()) {
    why = "its TemplateProcessing's single template is not a list";
    return false;
  }
  int sequences = 0;
  for (const nlohmann::json& piece : single) {
    if (const auto sequence = piece.find("Sequence"); sequence != piece.end()) {
      if (sequence->at("id").get<std::string>() != "A") {
        why = "its TemplateProcessing's single template holds a sequence other than $A";
        return false;
      }
      ++sequences;
      continue;
    }
    const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
    const auto special = specials.find(name);
    if (special == specials.end()) {
      why = "its TemplateProcessing names special token '" + name + "' without its ids";
      return false;
    }
    for (const nlohmann::json& id : special->at("ids")) {
      const auto value = id.get<std::int64_t>();
      if (value < 0 || std::uint64_t(value) >= vocab) {
        why = "its TemplateProcessing's '" + name + "' has id " + std::to_string(value) + ", outside the vocabulary";
        return false;
      }
      (sequences == 0 ? out.before : out.after).push_back(int(value));
    }
  }
  if (sequences != 1) why = "its TemplateProcessing's single template holds $A " + std::to_string(sequences) + " times";
  return sequences == 1;
}

// Wraps `t` in what one post_processor adds (a Sequence: each of its processors in turn); false
// with `why` set for one that is not supported.
bool add_post_processor(const nlohmann::json& p, std::size_t vocab, DocumentTemplate& t, std::string& why) {
  const std::string type = p.at("type").get<std::string>();
  if (type == "ByteLevel") return true;  // offsets only
  if (type == "Sequence") {
    for (const nlohmann::json& step : p.at("processors"))
      if (!add_post_processor(step, vocab, t, why)) return false;
    return true;
  }
  if (type != "TemplateProcessing") {
    why = "post_processor type '" + type + "' is not supported (TemplateProcessing, ByteLevel or a Sequence of them)";
    return false;
  }
  DocumentTemplate step;
  if (!template_processing(p, vocab, step, why)) return false;
  t.before.insert(t.before.begin(), step.before.begin(), step.before.end());
  t.after.insert(t.after.end(), step.after.begin(), step.after.end());
  return true;
}

// The post_processor's template (none: empty); `why` set when it is not supported.
DocumentTemplate read_document_template(const nlohmann::json& doc, std::size_t vocab, std::string& why) {
  DocumentTemplate t;
  const auto p = doc.find("post_processor");
  if (p == doc.end() || p->is_null()) return t;
  try {
    if (add_post_processor(*p, vocab, t, why)) return t;
  } catch (const nlohmann::json::exception& e) {
    why = std::string("its post_processor is malformed: ") + e.what();
  }
  return {};
}

// The ids of one pre-token piece: its bytes merged by rank, the lowest first, every occurrence of
// that pair left to right (GPT-2's encoder.py).
void bpe(const BpeEncoder& e, std::string_view piece, std::vector<int>& out) {
  if (e.ignore_merges)
    if (const auto it = e.ids.find(std::string(piece)); it != e.ids.end()) return out.push_back(it->second);
  std::vector<int> symbols;
  symbols.reserve(piece.size());
  for (char c : piece) symbols.push_back(e.byte_ids[std::uint8_t(c)]);
  const auto key = [&](std::size_t i) { return std::uint64_t(std::uint32_t(symbols[i])) << 32 | std::uint32_t(symbols[i + 1]); };
  while (symbols.size() > 1) {
    std::pair<int, int> best{-1, -1};
    std::uint64_t best_key = 0;
    for (std::size_t i = 0; i + 1 < symbols.size(); ++i)
      if (const auto it = e.merges.find(key(i)); it != e.merges.end() && (best.first < 0 || it->second.first < best.first))
        best = it->second, best_key = key(i);
    if (best.first < 0) break;
    std::vector<int> merged;
    merged.reserve(symbols.size());
    for (std::size_t i = 0; i < symbols.size(); ++i) {
      if (i + 1 < symbols.size() && key(i) == best_key) {
        merged.push_back(best.second);
        ++i;
      } else {
        merged.push_back(symbols[i]);
      }
    }
    symbols = std::move(merged);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
}

// The added token at text[at], the longest; nullptr for none.
const std::pair<std::string, int>* added_at(const BpeEncoder& e, std::string_view text, std::size_t at) {
  if (!e.added_starts[std::uint8_t(text[at])]) return nullptr;
  for (const auto& token : e.added)
    if (text.compare(at, token.first.size(), token.first) == 0) return &token;
  return nullptr;
}

// Ordinary text: pre-tokenized, each piece merged (a piece seen before is looked up).
void encode_plain(const BpeEncoder& e, std::string_view text, std::vector<int>& out,
                  std::unordered_map<std::string, std::vector<int>>& cache) {
  for (const std::string_view piece : pretokenize(text, e.pattern)) {
    auto [it, fresh] = cache.try_emplace(std::string(piece));
    if (fresh) bpe(e, piece, it->second);
    out.insert(out.end(), it->second.begin(), it->second.end());
    if (cache.size() > (1u << 20)) cache.clear();  // bounded memory on huge texts
  }
}

}  // namespace

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  const std::string bytes = read_whole_file(path);
  Tokenizer t;
  const auto first = bytes.find_first_not_of(" \t\r\n");
  t.file_ = path.string();
  if (first != std::string::npos && bytes[first] == '{') {
    const nlohmann::json doc = read_tokenizer_json(path, bytes, t.pieces_, t.end_of_text_);
    t.template_ = read_document_template(doc, t.pieces_.size(), t.no_template_);
    if (std::optional<BpeEncoder> e = read_encoder(path, doc, t.no_encoder_))
      t.encoder_ = std::make_shared<const Encoder>(Encoder{std::move(*e)});
  } else if (bytes.size() >= 4 && u32_at(bytes, 0) == kLlmcTokenizerMagic) {
    read_llmc_tokenizer(path, bytes, t.pieces_, t.end_of_text_);
    t.no_encoder_ = "llm.c's gpt2_tokenizer.bin has no BPE merges (give the model's tokenizer.json)";
  } else {
    throw_format_error(path, "neither a tokenizer.json nor llm.c's tokenizer (magic " +
                                 std::to_string(kLlmcTokenizerMagic) + ")");
  }
  return t;
}

std::vector<int> Tokenizer::encode(std::string_view text) const {
  if (!encoder_) throw std::invalid_argument("tokenizer " + file_ + " cannot encode text: " + no_encoder_);
  std::vector<int> out;
  std::unordered_map<std::string, std::vector<int>> cache;
  std::size_t plain = 0;  // start of the text not yet encoded
  for (std::size_t at = 0; at < text.size(); ++at)
    if (const auto* token = added_at(*encoder_, text, at)) {
      encode_plain(*encoder_, text.substr(plain, at - plain), out, cache);
      out.push_back(token->second);
      at += token->first.size() - 1;
      plain = at + 1;
    }
  encode_plain(*encoder_, text.substr(plain), out, cache);
  return out;
}

const Tokenizer::DocumentTemplate& Tokenizer::document_template() const {
  if (!no_template_.empty()) throw std::invalid_argument("tokenizer " + file_ + " cannot post-process: " + no_template_);
  return template_;
}

std::vector<int> Tokenizer::encode_document(std::string_view text) const {
  const DocumentTemplate& t = document_template();
  std::vector<int> out = t.before;
  const std::vector<int> ids = encode(text);
  out.insert(out.end(), ids.begin(), ids.end());
  out.insert(out.end(), t.after.begin(), t.after.end());
  return out;
}

std::optional<int> Tokenizer::bos() const {
  if (!no_template_.empty() || template_.before.size() != 1) return std::nullopt;
  return template_.before.front();
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
