// libFuzzer harness: JSONL fine-tuning records (models/jsonl_data.hpp, read_jsonl) and mask shards
// (models/mask_shard.hpp). The input is the file. With a fixed tokenizer.json of Llama 3's layout
// (its split pattern, <|begin_of_text|> by a TemplateProcessing, <|end_of_text|>) the reader may
// only reject the file with FileFormatError (or std::invalid_argument); with --bad-records skip it
// never does. What it reads:
// - tokens and mask have the same length, the counts add up (records = kept + dropped + bad; tokens,
//   counted), masks are 0 or 1;
// - fail refuses exactly the files in which skip finds a bad record, with skip's first line;
// - each document is BOS (not counted), the record's text (prompt then completion) decoding to its
//   bytes, EOS (counted); prompt tokens are counted only under --loss-on all;
// - --long-records drop keeps exactly the documents of at most seq + 1 tokens that split keeps.
// The same input as a mask shard: accepted exactly when its header says 1024 + count bytes; a range
// reads the file's bytes, and is refused exactly when one of them is neither 0 nor 1.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_common.hpp"
#include "models/jsonl_data.hpp"
#include "models/mask_shard.hpp"
#include "models/pretokenize.hpp"
#include "models/tokenizer.hpp"
#include "runtime/files.hpp"

using namespace starzero;
namespace fs = std::filesystem;

namespace {

constexpr int kBegin = 261, kEnd = 262;

// A byte-level tokenizer.json of Llama 3's layout with a few merges.
const Tokenizer& tokenizer() {
  static const Tokenizer t = [] {
    nlohmann::json vocab = nlohmann::json::object();
    for (int b = 0; b < 256; ++b) {
      const char32_t u = Tokenizer::byte_character(std::uint8_t(b));
      vocab[u < 0x80 ? std::string(1, char(u)) : std::string{char(0xC0 | (u >> 6)), char(0x80 | (u & 0x3F))}] = b;
    }
    vocab["th"] = 256, vocab["the"] = 257, vocab["Ġthe"] = 258, vocab["ĠĠ"] = 259, vocab["\"}"] = 260;
    const nlohmann::json bos = {{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}};
    const nlohmann::json a = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};
    nlohmann::json post = {{"type", "TemplateProcessing"}, {"single", nlohmann::json::array({bos, a})}};
    post["special_tokens"]["<|begin_of_text|>"] = {{"id", "<|begin_of_text|>"}, {"ids", nlohmann::json::array({kBegin})}};
    const nlohmann::json split = {{"type", "Split"},
                                  {"pattern", {{"Regex", std::string(split_pattern_regex(SplitPattern::llama3))}}}};
    const nlohmann::json byte_level = {{"type", "ByteLevel"}, {"use_regex", false}};
    nlohmann::json doc;
    doc["added_tokens"] = nlohmann::json::array({{{"id", kBegin}, {"content", "<|begin_of_text|>"}},
                                                 {{"id", kEnd}, {"content", "<|end_of_text|>"}}});
    doc["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", nlohmann::json::array({split, byte_level})}};
    doc["post_processor"] = post;
    doc["model"] = {{"type", "BPE"}, {"ignore_merges", true}, {"vocab", vocab}};
    doc["model"]["merges"] = nlohmann::json::array({"t h", nlohmann::json::array({"th", "e"}), "Ġ the", "Ġ Ġ", "\" }"});
    const std::string text = doc.dump();
    const fs::path path = fuzz::scratch_dir() / "tokenizer.json";
    fuzz::write_input(path, reinterpret_cast<const std::uint8_t*>(text.data()), text.size());
    return Tokenizer::load(path);
  }();
  return t;
}

JsonlOptions make_options(LossOn loss_on, BadRecords bad, LongRecords long_records, std::size_t seq) {
  JsonlOptions o;
  o.loss_on = loss_on;
  o.bad_records = bad;
  o.long_records = long_records;
  o.seq = seq;
  return o;
}

// The input's lines as the reader cuts them ("\n", then one "\r" off the end).
std::vector<std::string> lines_of(std::string_view text) {
  std::vector<std::string> lines;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string line(text.substr(at, end - at));
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
    at = end + 1;
  }
  return lines;
}

// One document against its record's line, parsed here.
void check_document(const JsonlDocument& d, const std::vector<std::string>& lines, LossOn loss_on) {
  FUZZ_CHECK(d.line >= 1 && d.line <= lines.size());
  const nlohmann::json record = nlohmann::json::parse(lines[d.line - 1]);
  const bool text = record.contains("text");
  const std::string first = record.at(text ? "text" : "prompt").get<std::string>();
  const std::string body = text ? first : first + record.at("completion").get<std::string>();
  const std::size_t n = d.tokens.size();
  FUZZ_CHECK(n >= 3 && d.counted.size() == n);
  FUZZ_CHECK(d.tokens[0] == kBegin && d.counted[0] == 0);
  FUZZ_CHECK(d.tokens[n - 1] == kEnd && d.counted[n - 1] == 1);
  FUZZ_CHECK(tokenizer().decode(d.tokens.subspan(1, n - 2)) == body);
  const std::size_t prompt = text ? 0 : tokenizer().encode(first).size();
  for (std::size_t i = 1; i < n; ++i)
    FUZZ_CHECK(d.counted[i] == (i <= prompt && loss_on == LossOn::completion ? 0 : 1));
}

struct Read {
  JsonlSummary summary;
  std::vector<std::size_t> lengths;  // of the documents, in order
  std::vector<std::size_t> lines;
};

Read read(const fs::path& path, const JsonlOptions& o, const std::vector<std::string>& lines) {
  Read r;
  std::size_t tokens = 0, counted = 0;
  r.summary = read_jsonl_documents(path, tokenizer(), o, [&](const JsonlDocument& d) {
    check_document(d, lines, o.loss_on);
    r.lengths.push_back(d.tokens.size());
    r.lines.push_back(d.line);
    tokens += d.tokens.size();
    counted += std::size_t(std::count(d.counted.begin(), d.counted.end(), std::uint8_t(1)));
  });
  const JsonlCounts& c = r.summary.counts;
  FUZZ_CHECK(c.records == c.kept + c.dropped + c.bad);
  FUZZ_CHECK(c.kept == r.lengths.size() && c.tokens == tokens && c.counted == counted);
  FUZZ_CHECK(r.summary.bad_lines.size() == std::min(c.bad, JsonlSummary::kMaxBadLines));
  FUZZ_CHECK(c.records <= lines.size());
  return r;
}

void check_jsonl(const fs::path& path, std::string_view text) {
  const std::vector<std::string> lines = lines_of(text);
  const Read split = read(path, make_options(LossOn::completion, BadRecords::skip, LongRecords::split, 8), lines);
  const Read all = read(path, make_options(LossOn::all, BadRecords::skip, LongRecords::split, 0), lines);
  const Read drop = read(path, make_options(LossOn::completion, BadRecords::skip, LongRecords::drop, 8), lines);
  FUZZ_CHECK(all.lengths == split.lengths && all.summary.counts.bad == split.summary.counts.bad);
  FUZZ_CHECK(all.summary.counts.split == 0);
  std::vector<std::size_t> short_lines;
  for (std::size_t i = 0; i < split.lengths.size(); ++i)
    if (split.lengths[i] <= 9) short_lines.push_back(split.lines[i]);
  FUZZ_CHECK(drop.lines == short_lines);
  FUZZ_CHECK(drop.summary.counts.dropped == split.summary.counts.split);
  bool refused = false;
  try {
    read(path, make_options(LossOn::completion, BadRecords::fail, LongRecords::split, 8), lines);
  } catch (const FileFormatError& e) {
    refused = true;
    FUZZ_CHECK(!split.summary.bad_lines.empty() && e.what() == split.summary.bad_lines.front());
  }
  FUZZ_CHECK(refused == (split.summary.counts.bad > 0));
}

void check_mask_shard(const fs::path& path, const std::uint8_t* data, std::size_t size) {
  std::size_t count = 0;
  try {
    count = read_mask_shard_count(path);
  } catch (const FileFormatError&) {
    return;
  }
  FUZZ_CHECK(size == 1024 + count);
  std::vector<std::uint8_t> values(count);
  const bool binary = std::all_of(data + 1024, data + size, [](std::uint8_t v) { return v <= 1; });
  bool refused = false;
  try {
    read_mask_range(path, 0, values);
    FUZZ_CHECK(std::equal(values.begin(), values.end(), data + 1024));
  } catch (const FileFormatError&) {
    refused = true;
  }
  FUZZ_CHECK(refused == !binary);
  refused = false;
  try {
    std::vector<std::uint8_t> past(1);
    read_mask_range(path, count, past);
  } catch (const std::invalid_argument&) {
    refused = true;
  }
  FUZZ_CHECK(refused);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fs::path path = fuzz::scratch_dir() / "input.jsonl";
  fuzz::write_input(path, data, size);
  check_jsonl(path, std::string_view(reinterpret_cast<const char*>(data), size));
  check_mask_shard(path, data, size);
  return 0;
}
