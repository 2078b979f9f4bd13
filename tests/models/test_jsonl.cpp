// Fine-tuning data from JSONL (models/jsonl_data.hpp) and mask shards (models/mask_shard.hpp), with
// real files in a temporary folder. The tokenizers are Llama 3's and GPT-2's layouts (vocabulary
// sizes, special-token ids, pre-tokenizers and post-processors as their tokenizer.json files have
// them) without merges: every byte is its own token, so the expected streams are the bytes of the
// records written out here, with the special tokens where the format puts them.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/gpt_files.hpp"
#include "models/jsonl_data.hpp"
#include "models/llama_files.hpp"
#include "models/mask_shard.hpp"
#include "models/pretokenize.hpp"
#include "models/tokenizer.hpp"
#include "runtime/files.hpp"
#include "tests/raw_files.hpp"
#include "tests/temp_dir.hpp"

using namespace starzero;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using starzero::testing::TempDir;

namespace {

constexpr int kBegin = 128000, kEnd = 128001;  // Llama 3's <|begin_of_text|>, <|end_of_text|>
constexpr int kGptEnd = 50256;                 // GPT-2's <|endoftext|>

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  REQUIRE(out);
}

// The byte's character in UTF-8 (GPT-2's bytes_to_unicode).
std::string byte_string(int b) {
  const char32_t u = Tokenizer::byte_character(std::uint8_t(b));
  if (u < 0x80) return std::string(1, char(u));
  return {char(0xC0 | (u >> 6)), char(0x80 | (u & 0x3F))};
}

// Ids 0..255 the bytes, then fillers no text encodes to (byte 0 and digits, as
// tests/models/gpt2_fixture.py) up to `first_special`.
nlohmann::json byte_vocab(int first_special) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_string(b)] = b;
  for (int i = 256; i < first_special; ++i) vocab[byte_string(0) + std::to_string(i)] = i;
  return vocab;
}

nlohmann::json special(int id, const std::string& content) {
  return {{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
          {"normalized", false}, {"special", true}};
}

// Llama 3's TemplateProcessing: `single` is <|begin_of_text|> $A, and `after` more specials after $A.
nlohmann::json llama3_template(const std::vector<std::pair<std::string, int>>& after = {}) {
  nlohmann::json single = nlohmann::json::array({{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                                                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}});
  nlohmann::json specials = {
      {"<|begin_of_text|>", {{"id", "<|begin_of_text|>"}, {"ids", {kBegin}}, {"tokens", {"<|begin_of_text|>"}}}}};
  for (const auto& [name, id] : after) {
    single.push_back({{"SpecialToken", {{"id", name}, {"type_id", 0}}}});
    specials[name] = {{"id", name}, {"ids", {id}}, {"tokens", {name}}};
  }
  return {{"type", "Sequence"},
          {"processors",
           {{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}},
            {{"type", "TemplateProcessing"}, {"single", single}, {"pair", nlohmann::json::array()},
             {"special_tokens", specials}}}}};
}

// Llama 3's layout: 128000 ordinary ids, then 256 specials (<|begin_of_text|> 128000,
// <|end_of_text|> 128001, ...), its Split pre-tokenizer, ignore_merges, and `post_processor`.
fs::path llama3_tokenizer(const fs::path& dir, const nlohmann::json& post_processor = llama3_template(),
                          const std::string& name = "llama3.json") {
  nlohmann::json added = nlohmann::json::array({special(kBegin, "<|begin_of_text|>"), special(kEnd, "<|end_of_text|>")});
  for (int i = 2; i < 256; ++i) added.push_back(special(kBegin + i, "<|reserved_special_token_" + std::to_string(i) + "|>"));
  const nlohmann::json doc = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", std::string(split_pattern_regex(SplitPattern::llama3))}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
      {"post_processor", post_processor},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"ignore_merges", true}, {"vocab", byte_vocab(kBegin)}, {"merges", nlohmann::json::array()}}}};
  write_text(dir / name, doc.dump());
  return dir / name;
}

// GPT-2's layout: 50257 ids, <|endoftext|> 50256 (in the vocabulary and added), ByteLevel
// pre-tokenizer and post-processor.
fs::path gpt2_tokenizer(const fs::path& dir) {
  nlohmann::json vocab = byte_vocab(kGptEnd);
  vocab["<|endoftext|>"] = kGptEnd;
  const nlohmann::json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  const nlohmann::json doc = {{"version", "1.0"},
                              {"added_tokens", {special(kGptEnd, "<|endoftext|>")}},
                              {"normalizer", nullptr},
                              {"pre_tokenizer", byte_level},
                              {"post_processor", byte_level},
                              {"decoder", byte_level},
                              {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
  write_text(dir / "gpt2.json", doc.dump());
  return dir / "gpt2.json";
}

// The names in a folder, sorted.
std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// The tokens of text without merges: its bytes.
std::vector<int> bytes_of(const std::string& text) {
  std::vector<int> ids;
  for (char c : text) ids.push_back(std::uint8_t(c));
  return ids;
}

// Builds an expected stream: pieces of tokens with their mask value.
struct Stream {
  std::vector<int> tokens;
  std::vector<std::uint8_t> counted;
  Stream& add(const std::vector<int>& ids, int count) {
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    counted.insert(counted.end(), ids.size(), std::uint8_t(count));
    return *this;
  }
  Stream& add(const std::string& text, int count) { return add(bytes_of(text), count); }
  Stream& add(int id, int count) { return add(std::vector<int>{id}, count); }
};

const Tokenizer& llama3() {
  static TempDir dir("starzero-jsonl-tokenizers");
  static const Tokenizer t = Tokenizer::load(llama3_tokenizer(dir.path()));
  return t;
}

const Tokenizer& gpt2() {
  static TempDir dir("starzero-jsonl-tokenizers");
  static const Tokenizer t = Tokenizer::load(gpt2_tokenizer(dir.path()));
  return t;
}

JsonlOptions options(LossOn loss_on = LossOn::completion, std::size_t seq = 0,
                     LongRecords long_records = LongRecords::split, BadRecords bad = BadRecords::fail) {
  JsonlOptions o;
  o.loss_on = loss_on;
  o.seq = seq;
  o.long_records = long_records;
  o.bad_records = bad;
  return o;
}

}  // namespace

TEST_CASE("tokenizer post-processor: Llama 3's template puts <|begin_of_text|> first, GPT-2's adds nothing",
          "[jsonl]") {
  CHECK(llama3().vocab() == 128256);
  CHECK(llama3().bos() == kBegin);
  CHECK(llama3().end_of_text() == kEnd);
  CHECK(llama3().encode_document("Hi") == std::vector<int>{kBegin, 'H', 'i'});
  CHECK(llama3().encode("Hi") == std::vector<int>{'H', 'i'});
  CHECK(gpt2().vocab() == 50257);
  CHECK_FALSE(gpt2().bos());
  CHECK(gpt2().end_of_text() == kGptEnd);
  CHECK(gpt2().encode_document("Hi") == std::vector<int>{'H', 'i'});
}

TEST_CASE("jsonl: text records with Llama 3: BOS, the text, EOS; every token but BOS counted", "[jsonl]") {
  TempDir dir("starzero-jsonl");
  write_text(dir / "a.jsonl", "{\"text\": \"Hi\"}\n\n  \r\n{\"text\": \"ok!\", \"id\": 7}\r\n{\"text\":\"\\u00e9\"}");
  for (LossOn loss_on : {LossOn::completion, LossOn::all}) {
    const JsonlTokens got = read_jsonl(dir / "a.jsonl", llama3(), options(loss_on));
    const Stream want = Stream()
                            .add(kBegin, 0).add("Hi", 1).add(kEnd, 1)
                            .add(kBegin, 0).add("ok!", 1).add(kEnd, 1)
                            .add(kBegin, 0).add("\xc3\xa9", 1).add(kEnd, 1);
    CHECK(got.tokens == want.tokens);
    CHECK(got.counted == want.counted);
    CHECK(got.summary.kind == JsonlKind::text);
    const JsonlCounts& c = got.summary.counts;
    CHECK(c.records == 3);  // blank lines are no records
    CHECK(c.kept == 3);
    CHECK(c.tokens == 13);
    CHECK(c.counted == 10);
    CHECK(c.split + c.dropped + c.bad == 0);
  }
}

TEST_CASE("jsonl: prompt/completion with Llama 3: prompt and BOS 0 under completion, only BOS under all",
          "[jsonl]") {
  TempDir dir("starzero-jsonl");
  write_text(dir / "pc.jsonl",
             "{\"prompt\": \"Q: 2+2?\\n\", \"completion\": \" 4\"}\n{\"completion\": \"yes\", \"prompt\": \"\"}\n");
  const JsonlTokens completion = read_jsonl(dir / "pc.jsonl", llama3(), options(LossOn::completion));
  const Stream want = Stream()
                          .add(kBegin, 0).add("Q: 2+2?\n", 0).add(" 4", 1).add(kEnd, 1)
                          .add(kBegin, 0).add("yes", 1).add(kEnd, 1);
  CHECK(completion.tokens == want.tokens);
  CHECK(completion.counted == want.counted);
  CHECK(completion.summary.kind == JsonlKind::prompt_completion);
  CHECK(completion.summary.counts.counted == 7);

  const JsonlTokens all = read_jsonl(dir / "pc.jsonl", llama3(), options(LossOn::all));
  const Stream want_all = Stream()
                              .add(kBegin, 0).add("Q: 2+2?\n", 1).add(" 4", 1).add(kEnd, 1)
                              .add(kBegin, 0).add("yes", 1).add(kEnd, 1);
  CHECK(all.tokens == want.tokens);
  CHECK(all.counted == want_all.counted);
  CHECK(all.summary.counts.counted == 15);
}

TEST_CASE("jsonl: GPT-2 has no BOS: documents are the text and <|endoftext|>", "[jsonl]") {
  TempDir dir("starzero-jsonl");
  write_text(dir / "t.jsonl", "{\"text\": \"a b\"}\n{\"text\": \"c\"}\n");
  const JsonlTokens text = read_jsonl(dir / "t.jsonl", gpt2(), options());
  const Stream want = Stream().add("a b", 1).add(kGptEnd, 1).add("c", 1).add(kGptEnd, 1);
  CHECK(text.tokens == want.tokens);
  CHECK(text.counted == want.counted);

  write_text(dir / "pc.jsonl", "{\"prompt\": \"x=\", \"completion\": \"1\"}\n");
  const JsonlTokens pc = read_jsonl(dir / "pc.jsonl", gpt2(), options());
  const Stream want_pc = Stream().add("x=", 0).add("1", 1).add(kGptEnd, 1);
  CHECK(pc.tokens == want_pc.tokens);
  CHECK(pc.counted == want_pc.counted);
}

TEST_CASE("jsonl: a template's tokens after the text are counted; one that ends with EOS gets no second",
          "[jsonl]") {
  TempDir dir("starzero-jsonl");
  const Tokenizer ends = Tokenizer::load(llama3_tokenizer(dir.path(), llama3_template({{"<|end_of_text|>", kEnd}}), "ends.json"));
  const Tokenizer other =
      Tokenizer::load(llama3_tokenizer(dir.path(), llama3_template({{"<|reserved_special_token_5|>", kBegin + 5}}), "other.json"));
  write_text(dir / "pc.jsonl", "{\"prompt\": \"p\", \"completion\": \"c\"}\n");
  const JsonlTokens a = read_jsonl(dir / "pc.jsonl", ends, options());
  CHECK(a.tokens == std::vector<int>{kBegin, 'p', 'c', kEnd});
  CHECK(a.counted == std::vector<std::uint8_t>{0, 0, 1, 1});
  const JsonlTokens b = read_jsonl(dir / "pc.jsonl", other, options());
  CHECK(b.tokens == std::vector<int>{kBegin, 'p', 'c', kBegin + 5, kEnd});
  CHECK(b.counted == std::vector<std::uint8_t>{0, 0, 1, 1, 1});
}

TEST_CASE("jsonl: records longer than --seq + 1 tokens are split (kept) or dropped, and counted", "[jsonl]") {
  TempDir dir("starzero-jsonl");
  // With BOS and EOS: 4, 5 (exactly T + 1 for T = 4), 6 and 7 tokens.
  write_text(dir / "long.jsonl", "{\"text\": \"ab\"}\n{\"text\": \"abc\"}\n{\"text\": \"abcd\"}\n{\"text\": \"abcde\"}\n");
  const JsonlTokens split = read_jsonl(dir / "long.jsonl", llama3(), options(LossOn::completion, 4, LongRecords::split));
  CHECK(split.summary.counts.records == 4);
  CHECK(split.summary.counts.kept == 4);
  CHECK(split.summary.counts.split == 2);
  CHECK(split.summary.counts.dropped == 0);
  CHECK(split.tokens.size() == 22);
  CHECK(split.summary.counts.tokens == 22);
  CHECK(split.summary.counts.counted == 18);

  const JsonlTokens drop = read_jsonl(dir / "long.jsonl", llama3(), options(LossOn::completion, 4, LongRecords::drop));
  CHECK(drop.summary.counts.kept == 2);
  CHECK(drop.summary.counts.split == 0);
  CHECK(drop.summary.counts.dropped == 2);
  CHECK(drop.summary.counts.tokens == 9);
  CHECK(drop.summary.counts.counted == 7);
  CHECK(drop.tokens == Stream().add(kBegin, 0).add("ab", 1).add(kEnd, 1).add(kBegin, 0).add("abc", 1).add(kEnd, 1).tokens);

  const JsonlTokens unlimited = read_jsonl(dir / "long.jsonl", llama3(), options(LossOn::completion, 0, LongRecords::drop));
  CHECK(unlimited.summary.counts.kept == 4);
  CHECK(unlimited.summary.counts.dropped == 0);
}

TEST_CASE("jsonl: every bad record is one line FILE:LINE: REASON; fail throws it, skip counts it", "[jsonl]") {
  TempDir dir("starzero-jsonl");
  const fs::path file = dir / "bad.jsonl";
  const std::vector<std::pair<std::string, std::string>> cases{
      {"{\"text\": \"a\"", "malformed JSON at column 13: syntax error while parsing object - unexpected end of input"},
      {"{\"text\": \"a\"} {\"text\": \"b\"}",
       "malformed JSON at column 15: syntax error while parsing value - unexpected '{'"},
      {"{\"text\": \"\xff\"}", "malformed JSON at column 11: syntax error while parsing value - invalid string: ill-formed UTF-8 byte"},
      {"text", "malformed JSON at column 2: syntax error while parsing value - invalid literal"},
      {"{\"text\": \"a\", \"n\": 1e999}", "malformed JSON: number overflow parsing"},
      {"[\"text\", \"a\"]", "not a JSON object"},
      {"\"a\"", "not a JSON object"},
      {"{\"id\": 3}", "neither \"text\" nor \"prompt\" and \"completion\""},
      {"{\"text\": \"a\", \"prompt\": \"b\"}", "both \"text\" and \"prompt\"/\"completion\""},
      {"{\"text\": \"a\", \"completion\": \"b\"}", "both \"text\" and \"prompt\"/\"completion\""},
      {"{\"text\": 5}", "\"text\" is not a string"},
      {"{\"text\": null}", "\"text\" is not a string"},
      {"{\"text\": \"\"}", "empty \"text\""},
  };
  for (const auto& [line, why] : cases) {
    INFO(line);
    // Line 1 good, line 2 blank (still a line), line 3 bad, line 4 good.
    write_text(file, "{\"text\": \"ok\"}\n\n" + line + "\n{\"text\": \"fine\"}\n");
    CHECK_THROWS_MATCHES(read_jsonl(file, llama3(), options()), FileFormatError,
                         Catch::Matchers::Message(file.string() + ":3: " + why));
    const JsonlTokens skipped = read_jsonl(file, llama3(), options(LossOn::completion, 0, LongRecords::split, BadRecords::skip));
    CHECK(skipped.summary.counts.records == 3);
    CHECK(skipped.summary.counts.kept == 2);
    CHECK(skipped.summary.counts.bad == 1);
    CHECK(skipped.summary.bad_lines == std::vector<std::string>{file.string() + ":3: " + why});
    CHECK(skipped.tokens == Stream().add(kBegin, 0).add("ok", 1).add(kEnd, 1).add(kBegin, 0).add("fine", 1).add(kEnd, 1).tokens);
  }
  const std::vector<std::pair<std::string, std::string>> pc_cases{
      {"{\"prompt\": \"a\"}", "\"prompt\" without \"completion\""},
      {"{\"completion\": \"a\"}", "\"completion\" without \"prompt\""},
      {"{\"prompt\": null, \"completion\": \"x\"}", "\"prompt\" is not a string"},
      {"{\"prompt\": \"q\", \"completion\": [\"x\"]}", "\"completion\" is not a string"},
      {"{\"prompt\": \"q\", \"completion\": \"\"}", "empty \"completion\""},
      {"{\"text\": \"t\"}", "a text record in a file of prompt/completion records (line 1)"},
  };
  for (const auto& [line, why] : pc_cases) {
    INFO(line);
    write_text(file, "{\"prompt\": \"q\", \"completion\": \"a\"}\n" + line + "\n");
    CHECK_THROWS_MATCHES(read_jsonl(file, llama3(), options()), FileFormatError,
                         Catch::Matchers::Message(file.string() + ":2: " + why));
    const JsonlTokens skipped = read_jsonl(file, llama3(), options(LossOn::completion, 0, LongRecords::split, BadRecords::skip));
    CHECK(skipped.summary.counts.bad == 1);
    CHECK(skipped.summary.counts.kept == 1);
    CHECK(skipped.summary.bad_lines == std::vector<std::string>{file.string() + ":2: " + why});
  }
  // The first good record fixes the kind, even after bad ones.
  write_text(file, "{\"prompt\": \"q\"}\n{\"text\": \"t\"}\n{\"prompt\": \"q\", \"completion\": \"a\"}\n");
  const JsonlTokens mixed = read_jsonl(file, llama3(), options(LossOn::completion, 0, LongRecords::split, BadRecords::skip));
  CHECK(mixed.summary.kind == JsonlKind::text);
  CHECK(mixed.summary.counts.bad == 2);
  CHECK(mixed.summary.bad_lines.back() == file.string() + ":3: a prompt/completion record in a file of text records (line 2)");
}

TEST_CASE("jsonl: skip keeps the first 20 bad lines, counts all; files and tokenizers it cannot use", "[jsonl]") {
  TempDir dir("starzero-jsonl");
  std::string text = "{\"text\": \"a\"}\n";
  for (int i = 0; i < 25; ++i) text += "{}\n";
  write_text(dir / "many.jsonl", text);
  const JsonlTokens many = read_jsonl(dir / "many.jsonl", gpt2(), options(LossOn::completion, 0, LongRecords::split, BadRecords::skip));
  CHECK(many.summary.counts.bad == 25);
  CHECK(many.summary.bad_lines.size() == 20);
  CHECK(many.summary.bad_lines[19] == (dir / "many.jsonl").string() + ":21: neither \"text\" nor \"prompt\" and \"completion\"");

  CHECK_THROWS_MATCHES(read_jsonl(dir / "absent.jsonl", gpt2(), options()), FileFormatError,
                       Catch::Matchers::Message((dir / "absent.jsonl").string() + ": no such file"));
  CHECK_THROWS_MATCHES(read_jsonl(dir.path(), gpt2(), options()), FileFormatError,
                       Catch::Matchers::Message(dir.path().string() + ": not a regular file"));
  write_text(dir / "empty.jsonl", "");
  const JsonlTokens empty = read_jsonl(dir / "empty.jsonl", gpt2(), options());
  CHECK(empty.tokens.empty());
  CHECK_FALSE(empty.summary.kind);

  // A post-processor it does not know is an error only here, when documents are asked for.
  nlohmann::json bert = {{"type", "BertProcessing"}, {"sep", {"[SEP]", 102}}, {"cls", {"[CLS]", 101}}};
  const Tokenizer unknown = Tokenizer::load(llama3_tokenizer(dir.path(), bert, "bert.json"));
  CHECK(unknown.encode("a") == std::vector<int>{'a'});
  CHECK_FALSE(unknown.bos());
  CHECK_THROWS_WITH(read_jsonl(dir / "many.jsonl", unknown, options()), Contains("post_processor type 'BertProcessing' is not supported"));
  // No end-of-text token: documents cannot end.
  nlohmann::json doc = nlohmann::json::parse(std::ifstream(dir / "bert.json"));
  doc["added_tokens"][1]["content"] = "<|eot|>";
  doc["post_processor"] = nullptr;
  write_text(dir / "no_eot.json", doc.dump());
  CHECK_THROWS_WITH(read_jsonl(dir / "many.jsonl", Tokenizer::load(dir / "no_eot.json"), options()),
                    Contains("names no end-of-text token"));
}

TEST_CASE("jsonl: progress reports bytes read up to the file's size", "[jsonl]") {
  TempDir dir("starzero-jsonl");
  std::string text;
  for (int i = 0; i < 3000; ++i) text += "{\"text\": \"" + std::string(500, 'a' + char(i % 26)) + "\"}\n";
  write_text(dir / "big.jsonl", text);
  std::vector<std::uint64_t> seen;
  std::uint64_t total = 0;
  const JsonlTokens got = read_jsonl(dir / "big.jsonl", gpt2(), options(), [&](std::uint64_t done, std::uint64_t size) {
    seen.push_back(done);
    total = size;
  });
  CHECK(got.summary.counts.kept == 3000);
  CHECK(total == text.size());
  REQUIRE(seen.size() >= 2);  // about every MiB of the 1.5 MB, and the end
  CHECK(seen.back() == text.size());
  CHECK(std::is_sorted(seen.begin(), seen.end()));
}

TEST_CASE("mask shard: round trip, ranges read at their offset", "[jsonl]") {
  TempDir dir("starzero-mask");
  const fs::path file = dir / "m.mask";
  std::vector<std::uint8_t> values(3000);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = std::uint8_t((i * 7 + i / 13) % 3 == 0);
  write_mask_shard(file, values);
  CHECK(fs::file_size(file) == 1024 + 3000);
  const std::vector<char> raw = testing::read_raw(file);
  CHECK(testing::raw_at<std::int32_t>(raw, 0) == 20261207);
  CHECK(testing::raw_at<std::int32_t>(raw, 4) == 1);
  CHECK(testing::raw_at<std::int32_t>(raw, 8) == 3000);
  for (std::size_t i = 12; i < 1024; i += 4) REQUIRE(testing::raw_at<std::int32_t>(raw, i) == 0);
  CHECK(read_mask_shard_count(file) == 3000);
  std::vector<std::uint8_t> all(3000);
  read_mask_range(file, 0, all);
  CHECK(all == values);
  std::vector<std::uint8_t> part(17);
  read_mask_range(file, 2983, part);
  CHECK(std::equal(part.begin(), part.end(), values.begin() + 2983));
  read_mask_range(file, 3000, std::span<std::uint8_t>());
  CHECK_THROWS_AS(read_mask_range(file, 2990, part), std::invalid_argument);
  CHECK_THROWS_AS(read_mask_range(file, 3001, std::span<std::uint8_t>()), std::invalid_argument);
  CHECK(dir.entries() == std::vector<std::string>{"m.mask"});

  write_mask_shard(dir / "empty.mask", {});
  CHECK(read_mask_shard_count(dir / "empty.mask") == 0);
  const std::vector<std::uint8_t> two{0, 2};
  CHECK_THROWS_AS(write_mask_shard(dir / "two.mask", two), std::invalid_argument);
  CHECK_FALSE(fs::exists(dir / "two.mask"));
}

TEST_CASE("mask shard: every malformed file is a FileFormatError naming it", "[jsonl]") {
  TempDir dir("starzero-mask");
  const fs::path good = dir / "good.mask", bad = dir / "bad.mask";
  write_mask_shard(good, std::vector<std::uint8_t>{1, 0, 1, 1, 0});
  const std::vector<char> raw = testing::read_raw(good);
  const auto refused = [&](const std::string& what) {
    testing::require_format_error([&] { read_mask_shard_count(bad); }, bad, what);
    std::vector<std::uint8_t> out(1);
    testing::require_format_error([&] { read_mask_range(bad, 0, out); }, bad, what);
  };
  testing::write_raw(bad, std::vector<char>(raw.begin(), raw.begin() + 100));
  refused("truncated mask shard header: file has 100 bytes, the header needs 1024");
  testing::write_patched(bad, raw, [](auto& b) { testing::set_raw<std::int32_t>(b, 0, 20261208); });
  refused("wrong magic 20261208 (a mask shard has 20261207)");
  testing::write_patched(bad, raw, [](auto& b) { testing::set_raw<std::int32_t>(b, 0, 20240520); });
  refused("this is a GPT-2 token shard, not its mask");
  testing::write_patched(bad, raw, [](auto& b) { testing::set_raw<std::int32_t>(b, 4, 2); });
  refused("unknown mask shard version 2 (known: 1)");
  testing::write_patched(bad, raw, [](auto& b) { testing::set_raw<std::int32_t>(b, 8, 6); });
  refused("mask count 6 inconsistent with the file size: truncated data");
  testing::write_patched(bad, raw, [](auto& b) { testing::set_raw<std::int32_t>(b, 8, 4); });
  refused("mask count 4 inconsistent with the file size: trailing data");
  testing::write_patched(bad, raw, [](auto& b) { testing::set_raw<std::int32_t>(b, 8, -1); });
  refused("negative mask count -1");
  CHECK_THROWS_AS(read_mask_shard_count(dir / "absent.mask"), FileFormatError);

  // A value other than 0 or 1: the count is right, the range that holds it is refused.
  testing::write_patched(bad, raw, [](auto& b) { b[1024 + 3] = 2; });
  CHECK(read_mask_shard_count(bad) == 5);
  std::vector<std::uint8_t> head(3), tail(2);
  read_mask_range(bad, 0, head);
  CHECK(head == std::vector<std::uint8_t>{1, 0, 1});
  testing::require_format_error([&] { read_mask_range(bad, 3, tail); }, bad, "mask value 2 at 3 is neither 0 nor 1");
}

TEST_CASE("jsonl shards: token and mask shards of whole documents, in the format of the vocabulary", "[jsonl]") {
  TempDir dir("starzero-jsonl");
  write_text(dir / "pc.jsonl",
             "{\"prompt\": \"ab\", \"completion\": \"cd\"}\n"          // 6 tokens with BOS and EOS
             "{\"prompt\": \"e\", \"completion\": \"fghijklmnop\"}\n"  // 14: longer than a shard
             "{\"prompt\": \"q\", \"completion\": \"r\"}\n");          // 4
  JsonlShardOptions shard_options;
  shard_options.shard_tokens = 8;
  const fs::path out = dir / "out";
  const JsonlTokens stream = read_jsonl(dir / "pc.jsonl", llama3(), options());
  const JsonlShards shards = write_jsonl_shards(dir / "pc.jsonl", llama3(), options(), out, shard_options);
  CHECK(shards.llama_format);
  CHECK(shards.summary.counts.kept == 3);
  CHECK(shards.summary.counts.tokens == 24);
  // 6 | 6 + 2 of the second (8 at most) | its last 6 | the third's 4 would make 10: a shard of its own.
  const std::vector<std::size_t> sizes{6, 8, 6, 4};
  REQUIRE(shards.shards.size() == sizes.size());
  std::vector<int> tokens;
  std::vector<std::uint8_t> counted;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const fs::path bin = out / ("train_00000" + std::to_string(i) + ".bin");
    const fs::path mask = out / ("train_00000" + std::to_string(i) + ".mask");
    CHECK(shards.shards[i] == bin);
    const std::vector<std::uint32_t> shard = LlamaTokenShardFile::read(bin);
    CHECK(shard.size() == sizes[i]);
    REQUIRE(read_mask_shard_count(mask) == shard.size());
    std::vector<std::uint8_t> m(shard.size());
    read_mask_range(mask, 0, m);
    tokens.insert(tokens.end(), shard.begin(), shard.end());
    counted.insert(counted.end(), m.begin(), m.end());
  }
  CHECK(tokens == stream.tokens);
  CHECK(counted == stream.counted);
  CHECK(tokens[0] == kBegin);
  CHECK(tokens[6] == kBegin);
  CHECK(tokens[20] == kBegin);
  const std::vector<std::string> eight{"train_000000.bin", "train_000000.mask", "train_000001.bin", "train_000001.mask",
                                       "train_000002.bin", "train_000002.mask", "train_000003.bin", "train_000003.mask"};
  CHECK(entries(out) == eight);

  // GPT-2's vocabulary: uint16 shards; fewer shards than before: the older ones past them go.
  write_text(dir / "t.jsonl", "{\"text\": \"hello\"}\n{\"text\": \"!\"}\n");
  shard_options.shard_tokens = 100;
  const JsonlShards gpt = write_jsonl_shards(dir / "t.jsonl", gpt2(), options(), out, shard_options);
  CHECK_FALSE(gpt.llama_format);
  REQUIRE(gpt.shards.size() == 1);
  CHECK(GptTokenShardFile::read(out / "train_000000.bin") ==
        std::vector<std::uint16_t>{'h', 'e', 'l', 'l', 'o', kGptEnd, '!', kGptEnd});
  CHECK(read_mask_shard_count(out / "train_000000.mask") == 8);
  CHECK(entries(out) == std::vector<std::string>{"train_000000.bin", "train_000000.mask"});
}

TEST_CASE("jsonl shards: a failure leaves the folder as it was, with no partial folder", "[jsonl]") {
  TempDir dir("starzero-jsonl");
  const fs::path out = dir / "out";
  write_text(dir / "t.jsonl", "{\"text\": \"hello\"}\n");
  write_jsonl_shards(dir / "t.jsonl", gpt2(), options(), out);
  const std::vector<char> before = testing::read_raw(out / "train_000000.bin");
  JsonlShardOptions small;
  small.shard_tokens = 2;
  write_text(dir / "bad.jsonl", "{\"text\": \"a long first record\"}\n{\"text\": 1}\n");
  CHECK_THROWS_MATCHES(write_jsonl_shards(dir / "bad.jsonl", gpt2(), options(), out, small), FileFormatError,
                       Catch::Matchers::Message((dir / "bad.jsonl").string() + ":2: \"text\" is not a string"));
  CHECK(entries(out) == std::vector<std::string>{"train_000000.bin", "train_000000.mask"});
  CHECK(testing::read_raw(out / "train_000000.bin") == before);
  // A folder the failed call made is gone again; a missing file fails before any is made.
  CHECK_THROWS_AS(write_jsonl_shards(dir / "bad.jsonl", gpt2(), options(), dir / "new", small), FileFormatError);
  CHECK_THROWS_AS(write_jsonl_shards(dir / "absent.jsonl", gpt2(), options(), dir / "new", small), FileFormatError);
  CHECK_FALSE(fs::exists(dir / "new"));

  write_text(dir / "dropped.jsonl", "{\"text\": \"a long record\"}\n");
  CHECK_THROWS_MATCHES(write_jsonl_shards(dir / "dropped.jsonl", gpt2(), options(LossOn::all, 4, LongRecords::drop), out),
                       FileFormatError,
                       Catch::Matchers::Message((dir / "dropped.jsonl").string() +
                                                ": no document to write (1 records: 1 dropped as long, 0 bad)"));
  CHECK(entries(out) == std::vector<std::string>{"train_000000.bin", "train_000000.mask"});

  // A killed run's partial folder is removed by the next run; a live process's is left alone.
  fs::create_directory(out / ".partial-tokenize.999999999");
  fs::create_directory(out / (".partial-tokenize." + std::to_string(::getppid())));
  write_jsonl_shards(dir / "t.jsonl", gpt2(), options(), out);
  CHECK(entries(out) == std::vector<std::string>{".partial-tokenize." + std::to_string(::getppid()),
                                                             "train_000000.bin", "train_000000.mask"});
}
