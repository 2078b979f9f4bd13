// Tokenizers (models/tokenizer.hpp): llm.c's gpt2_tokenizer.bin and Hugging Face's byte-level BPE
// tokenizer.json, decoded against bytes written out by hand here; GPT-2's bytes_to_unicode table
// against its definition's counts and known entries; malformed files as FileFormatError. Encoding:
// the pre-tokenizer's pieces against Python's `regex` module, merges worked out by hand (random
// texts against an independent BPE: tests/models/tokenizer_encode_test.sh).
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/pretokenize.hpp"
#include "models/tokenizer.hpp"
#include "runtime/files.hpp"
#include "tests/temp_dir.hpp"

using namespace starzero;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using starzero::testing::TempDir;

namespace {

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

// llm.c's layout: 256 uint32 of header, then (length, bytes) per token.
std::string llmc_tokenizer(std::uint32_t version, const std::vector<std::string>& tokens, std::uint32_t eot) {
  std::vector<std::uint32_t> header(256, 0);
  header[0] = 20240328;
  header[1] = version;
  header[2] = std::uint32_t(tokens.size());
  header[3] = eot;
  std::string bytes(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  for (const std::string& t : tokens) bytes += char(std::uint8_t(t.size())) + t;
  return bytes;
}

}  // namespace

TEST_CASE("bytes_to_unicode: printable bytes stand for themselves, the other 68 from U+0100", "[tokenizer]") {
  int identity = 0;
  for (int b = 0; b < 256; ++b) identity += Tokenizer::byte_character(std::uint8_t(b)) == char32_t(b);
  CHECK(identity == 188);  // '!'..'~' (94), 0xA1..0xAC (12), 0xAE..0xFF (82)
  CHECK(Tokenizer::byte_character(0) == U'\u0100');
  CHECK(Tokenizer::byte_character(' ') == U'\u0120');   // GPT-2's "Ġ"
  CHECK(Tokenizer::byte_character('\n') == U'\u010A');  // "Ċ"
  CHECK(Tokenizer::byte_character(0x7F) == U'\u0121');
  CHECK(Tokenizer::byte_character(0xAD) == U'\u0143');  // the last one mapped
  CHECK(Tokenizer::byte_character('A') == U'A');
}

TEST_CASE("llm.c's tokenizer: ids to their bytes, version 2's end-of-text", "[tokenizer]") {
  TempDir dir("starzero-tokenizer");
  const std::vector<std::string> tokens{"Hello", " world", "!", "\n", std::string("caf\xc3\xa9", 5), "<|endoftext|>"};
  write_bytes(dir.path() / "v2.bin", llmc_tokenizer(2, tokens, 5));
  const Tokenizer t = Tokenizer::load(dir.path() / "v2.bin");
  CHECK(t.vocab() == 6);
  CHECK(t.end_of_text() == 5);
  const std::vector<int> ids{0, 1, 2, 3, 4, 2, 5};
  CHECK(t.decode(ids) == "Hello world!\ncaf\xc3\xa9!<|endoftext|>");
  CHECK(t.decode({}).empty());
  CHECK_THROWS_AS(t.decode(std::vector<int>{6}), std::invalid_argument);
  CHECK_THROWS_AS(t.decode(std::vector<int>{-1}), std::invalid_argument);

  write_bytes(dir.path() / "v1.bin", llmc_tokenizer(1, tokens, 0));
  CHECK_FALSE(Tokenizer::load(dir.path() / "v1.bin").end_of_text());

  const std::string good = llmc_tokenizer(2, tokens, 5);
  const auto refused = [&](const std::string& bytes, const std::string& why) {
    write_bytes(dir.path() / "bad.bin", bytes);
    CHECK_THROWS_WITH(Tokenizer::load(dir.path() / "bad.bin"), Contains(why));
  };
  refused(good.substr(0, 100), "tokenizer header");
  refused(good.substr(0, good.size() - 3), "past the end");
  refused(good.substr(0, 1024), "missing");
  refused(good + "x", "trailing data");
  refused(llmc_tokenizer(3, tokens, 5), "version 3");
  refused(llmc_tokenizer(2, tokens, 6), "end-of-text id 6");
  refused(std::string(1024, '\0'), "neither");
  CHECK_THROWS_AS(Tokenizer::load(dir.path() / "absent.bin"), FileFormatError);
}

TEST_CASE("tokenizer.json: byte-level vocabulary and added tokens to bytes", "[tokenizer]") {
  TempDir dir("starzero-tokenizer");
  // GPT-2 spelling: "Ġ" is a space, "Ċ" a newline, "Ã©" the two bytes of é; an added token
  // outside the vocabulary (as Llama 3's specials) and one inside it (as GPT-2's <|endoftext|>).
  const std::string json = R"({
    "version": "1.0",
    "added_tokens": [{"id": 6, "content": "<|endoftext|>", "special": true},
                     {"id": 7, "content": "<|begin_of_text|>", "special": true}],
    "decoder": {"type": "ByteLevel", "add_prefix_space": false},
    "model": {"type": "BPE", "vocab": {"Hello": 0, "Ġworld": 1, "!": 2, "Ċ": 3, "cafÃ©": 4, "Ġ": 5,
                                       "<|endoftext|>": 6},
              "merges": ["Ġ w", "o r"]}
  })";
  write_bytes(dir.path() / "tokenizer.json", json);
  const Tokenizer t = Tokenizer::load(dir.path() / "tokenizer.json");
  CHECK(t.vocab() == 8);
  CHECK(t.end_of_text() == 6);
  const std::vector<int> ids{7, 0, 1, 2, 3, 4, 5, 6};
  CHECK(t.decode(ids) == "<|begin_of_text|>Hello world!\ncaf\xc3\xa9 <|endoftext|>");

  const auto refused = [&](const std::string& text, const std::string& why) {
    write_bytes(dir.path() / "bad.json", text);
    CHECK_THROWS_WITH(Tokenizer::load(dir.path() / "bad.json"), Contains(why));
  };
  refused(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 2}}})", "without gaps");
  refused(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 0}}})", "given twice");
  refused(R"({"model": {"type": "BPE", "vocab": {"Ѐ": 0}}})", "outside the byte table");
  refused(R"({"decoder": {"type": "Metaspace"}, "model": {"type": "BPE", "vocab": {"a": 0}}})", "ByteLevel");
  refused(R"({"model": {"type": "Unigram", "vocab": {"a": 0}}})", "not BPE");
  refused(R"({"model": {"type": "BPE"}})", "not a tokenizer.json");
  refused(R"({"model": )", "not JSON");
}

// Expected pieces computed with Python's `regex` module (which has \p{L} and \p{N}) and the two
// patterns as tokenizer.json files state them: regex.findall(pattern, text).
TEST_CASE("pretokenize: GPT-2's and Llama 3's split patterns", "[tokenizer]") {
  using Pieces = std::vector<std::string_view>;
  const std::vector<std::pair<std::string_view, Pieces>> gpt2{
      {"Hello world", {"Hello", " world"}},
      {"I'm don't WE'LL", {"I", "'m", " don", "'t", " WE", "'", "LL"}},
      {"  two  spaces\n\n  x", {" ", " two", " ", " spaces", "\n\n ", " x"}},
      {"12345 abc!!\r\n\tdef ", {"12345", " abc", "!!", "\r\n", "\t", "def", " "}},
      {"café Ελλάδα 日本語²", {"café", " Ελλάδα", " 日本語", "²"}},
      {"a\u00a0b\u3000 c", {"a", "\u00a0", "b", "\u3000", " c"}},
  };
  const std::vector<std::pair<std::string_view, Pieces>> llama3{
      {"Hello world", {"Hello", " world"}},
      {"I'm don't WE'LL", {"I", "'m", " don", "'t", " WE", "'LL"}},
      {"  two  spaces\n\n  x", {" ", " two", " ", " spaces", "\n\n", " ", " x"}},
      {"12345 abc!!\r\n\tdef ", {"123", "45", " abc", "!!\r\n", "\tdef", " "}},
      {"café Ελλάδα 日本語²", {"café", " Ελλάδα", " 日本語", "²"}},
      {"a\u00a0b\u3000 c", {"a", "\u00a0b", "\u3000", " c"}},
  };
  for (const auto& [text, pieces] : gpt2) CHECK(pretokenize(text, SplitPattern::gpt2) == pieces);
  for (const auto& [text, pieces] : llama3) CHECK(pretokenize(text, SplitPattern::llama3) == pieces);
  // Bytes that are not UTF-8 stand alone as "other" characters; nothing is lost.
  CHECK(pretokenize("a\xff\xfe b\xc3", SplitPattern::gpt2) == Pieces{"a", "\xff\xfe", " b", "\xc3"});
  CHECK(pretokenize("", SplitPattern::llama3).empty());
  CHECK(is_unicode_letter(U'ǅ'));
  CHECK(is_unicode_number(U'Ⅻ'));
  CHECK_FALSE(is_unicode_letter(U'😀'));
  CHECK(is_unicode_space(U'\u2003'));
}

TEST_CASE("tokenizer.json: encoding by merge rank, added tokens whole", "[tokenizer]") {
  TempDir dir("starzero-tokenizer");
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    std::string c;  // the byte's character in UTF-8
    const char32_t u = Tokenizer::byte_character(std::uint8_t(b));
    if (u < 0x80) c = std::string(1, char(u));
    else c = {char(0xC0 | (u >> 6)), char(0x80 | (u & 0x3F))};
    vocab[c] = b;
  }
  // Merges by hand, ranks in order: "l l" before "h e"; "Ġ h" comes last, so " hello" is
  // "Ġ" + "hello"... unless "Ġhello" forms: its parts merge only at the end.
  const std::vector<std::pair<std::string, std::string>> merges{
      {"l", "l"}, {"h", "e"}, {"he", "ll"}, {"hell", "o"}, {"Ġ", "hello"}, {"Ġ", "h"}};
  int next = 256;
  nlohmann::json pairs = nlohmann::json::array(), strings = nlohmann::json::array();
  for (const auto& [a, b] : merges) {
    vocab[a + b] = next++;
    pairs.push_back({a, b});
    strings.push_back(a + " " + b);
  }
  const auto write = [&](const std::string& name, const nlohmann::json& m, const nlohmann::json& pre) {
    nlohmann::json doc = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}}}, {"pre_tokenizer", pre},
                          {"added_tokens", {{{"id", next}, {"content", "<|endoftext|>"}, {"special", true}}}}};
    write_bytes(dir.path() / name, doc.dump());
    return Tokenizer::load(dir.path() / name);
  };
  const nlohmann::json byte_level = {{"type", "ByteLevel"}, {"use_regex", true}};
  for (const Tokenizer& t : {write("strings.json", strings, byte_level), write("pairs.json", pairs, byte_level)}) {
    REQUIRE(t.can_encode());
    // hello=259, Ġhello=260; "hel" is h-e (257) then l; "<|endoftext|>" is token 262.
    CHECK(t.encode("hello hello hel<|endoftext|>") == std::vector<int>{259, 260, 32, 257, 'l', 262});
    CHECK(t.encode("") == std::vector<int>{});
    const std::string text = "caf\xc3\xa9 \xff<|endoftext|><|endoftext";
    CHECK(t.decode(t.encode(text)) == text);
  }
  const auto cannot = [&](const nlohmann::json& pre, const std::string& why) {
    const Tokenizer t = write("pre.json", strings, pre);
    CHECK_FALSE(t.can_encode());
    CHECK_THROWS_WITH(t.encode("x"), Contains(why));
  };
  cannot(nullptr, "no pre_tokenizer");
  cannot({{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}}, "neither GPT-2's nor Llama 3's");
  cannot({{"type", "Whitespace"}}, "not supported");
  cannot({{"type", "ByteLevel"}, {"add_prefix_space", true}}, "prefix space");
  CHECK_THROWS_WITH(write("bad.json", nlohmann::json::array({"q z"}), byte_level), Contains("makes no vocabulary token"));
  CHECK_THROWS_WITH(write("bad.json", nlohmann::json::array({"hz"}), byte_level), Contains("separated by a space"));

  write_bytes(dir.path() / "v2.bin", llmc_tokenizer(2, {"a", "b"}, 1));
  const Tokenizer llmc = Tokenizer::load(dir.path() / "v2.bin");
  CHECK_FALSE(llmc.can_encode());
  CHECK_THROWS_WITH(llmc.encode("a"), Contains("no BPE merges"));
}

TEST_CASE("tokenizer.json: the post-processor's template around one text (encode_document)", "[tokenizer]") {
  TempDir dir("starzero-tokenizer");
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    const char32_t u = Tokenizer::byte_character(std::uint8_t(b));
    vocab[u < 0x80 ? std::string(1, char(u)) : std::string{char(0xC0 | (u >> 6)), char(0x80 | (u & 0x3F))}] = b;
  }
  const nlohmann::json specials_json = {{{"id", 256}, {"content", "<s>"}}, {{"id", 257}, {"content", "</s>"}},
                                        {{"id", 258}, {"content", "<|endoftext|>"}}};
  const auto load = [&](const nlohmann::json& post) {
    nlohmann::json doc = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
                          {"pre_tokenizer", {{"type", "ByteLevel"}, {"use_regex", true}}},
                          {"added_tokens", specials_json}};
    if (!post.is_discarded()) doc["post_processor"] = post;
    write_bytes(dir.path() / "t.json", doc.dump());
    return Tokenizer::load(dir.path() / "t.json");
  };
  const auto special = [](const std::string& name) { return nlohmann::json{{"SpecialToken", {{"id", name}, {"type_id", 0}}}}; };
  const nlohmann::json a = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};
  const auto ids = [](const std::string& name, std::vector<int> i) {
    return nlohmann::json{{"id", name}, {"ids", i}, {"tokens", nlohmann::json::array()}};
  };
  const nlohmann::json s_and_end = {{"<s>", ids("<s>", {256})}, {"</s>", ids("</s>", {257, 258})}};
  const auto templ = [&](const nlohmann::json& single, const nlohmann::json& specials) {
    return nlohmann::json{{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", specials}};
  };
  const nlohmann::json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", true}};

  // None, null and ByteLevel add nothing.
  for (const nlohmann::json& none : {nlohmann::json(nlohmann::json::value_t::discarded), nlohmann::json(nullptr), byte_level}) {
    const Tokenizer t = load(none);
    CHECK(t.encode_document("ab") == std::vector<int>{'a', 'b'});
    CHECK_FALSE(t.bos());
    CHECK(t.document_template_unavailable().empty());
  }
  // <s> $A </s>, where </s> stands for two ids: both after the text.
  const Tokenizer wrapped = load(templ({special("<s>"), a, special("</s>")}, s_and_end));
  CHECK(wrapped.encode_document("ab") == std::vector<int>{256, 'a', 'b', 257, 258});
  CHECK(wrapped.encode_document("") == std::vector<int>{256, 257, 258});
  CHECK(wrapped.bos() == 256);
  CHECK(wrapped.document_template().after == std::vector<int>{257, 258});
  // A Sequence: each processor wraps what the ones before made.
  const Tokenizer sequence = load({{"type", "Sequence"},
                                   {"processors", {byte_level, templ({special("</s>"), a}, s_and_end),
                                                   templ({special("<s>"), a, special("<s>")}, s_and_end)}}});
  CHECK(sequence.encode_document("x") == std::vector<int>{256, 257, 258, 'x', 256});
  CHECK_FALSE(sequence.bos());  // three tokens before the text

  // Anything else: encode works, post-processing is refused with the reason.
  const auto refused = [&](const nlohmann::json& post, const std::string& why) {
    const Tokenizer t = load(post);
    CHECK(t.encode("ab") == std::vector<int>{'a', 'b'});
    CHECK_THAT(t.document_template_unavailable(), Contains(why));
    CHECK_THROWS_AS(t.encode_document("ab"), std::invalid_argument);
    CHECK_THROWS_WITH(t.document_template(), Contains("t.json cannot post-process: ") && Contains(why));
    CHECK_FALSE(t.bos());
  };
  refused({{"type", "RobertaProcessing"}}, "post_processor type 'RobertaProcessing' is not supported");
  refused({{"type", "Sequence"}, {"processors", {byte_level, {{"type", "BertProcessing"}}}}}, "'BertProcessing'");
  refused(templ(nlohmann::json::array({special("<s>")}), s_and_end), "holds $A 0 times");
  refused(templ({a, a}, s_and_end), "holds $A 2 times");
  refused(templ({special("<s>"), {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}, s_and_end), "other than $A");
  refused(templ({special("<x>"), a}, s_and_end), "names special token '<x>' without its ids");
  refused(templ({special("<s>"), a}, {{"<s>", ids("<s>", {259})}}), "'<s>' has id 259, outside the vocabulary");
  refused(templ("<s> $A", s_and_end), "single template is not a list");
  refused({{"type", "TemplateProcessing"}}, "its post_processor is malformed");
  refused(templ({{{"Other", 1}}, a}, s_and_end), "its post_processor is malformed");
}
