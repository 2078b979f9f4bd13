#include "models/jsonl_data.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <system_error>
#include <type_traits>

#include "models/gpt_files.hpp"
#include "models/llama_files.hpp"
#include "models/mask_shard.hpp"
#include "models/tokenizer.hpp"
#include "runtime/files.hpp"

namespace starzero {

namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t kProgressBytes = std::uint64_t(1) << 20;

struct Record {
  JsonlKind kind = JsonlKind::text;
  std::string first;       // the text, or the prompt
  std::string completion;  // prompt/completion records
};

const char* kind_name(JsonlKind kind) { return kind == JsonlKind::text ? "text" : "prompt/completion"; }

// nlohmann's parse error, short: "malformed JSON at column C: syntax error while parsing value - invalid
// literal" (what it last read and expected are left out: they may hold any bytes of the line).
std::string malformed(const nlohmann::json::parse_error& e) {
  const std::string what = e.what();
  const auto column = what.find("column ");
  const auto colon = column == std::string::npos ? std::string::npos : what.find(": ", column);
  std::string detail = colon == std::string::npos ? "" : what.substr(colon + 2);
  detail = detail.substr(0, detail.find("; "));
  return "malformed JSON at column " + std::to_string(e.byte) + (detail.empty() ? "" : ": " + detail);
}

// The string of `field`, or the reason it is none.
std::string string_field(const nlohmann::json& record, const char* field, std::string& out) {
  const nlohmann::json& value = record.at(field);
  if (!value.is_string()) return std::string("\"") + field + "\" is not a string";
  out = value.get<std::string>();
  return "";
}

// The record of one line; empty on success, else the reason it is bad.
std::string parse_record(std::string_view line, Record& out) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line.begin(), line.end());
  } catch (const nlohmann::json::parse_error& e) {
    return malformed(e);
  } catch (const nlohmann::json::exception& e) {  // a number past a double: "number overflow parsing '1e999'"
    std::string what = e.what();
    what = what.substr(what.find("] ") == std::string::npos ? 0 : what.find("] ") + 2);
    return "malformed JSON: " + what.substr(0, what.find(" '"));
  }
  if (!j.is_object()) return "not a JSON object";
  const bool text = j.contains("text"), prompt = j.contains("prompt"), completion = j.contains("completion");
  if (text && (prompt || completion)) return "both \"text\" and \"prompt\"/\"completion\"";
  if (!text && !prompt && !completion) return "neither \"text\" nor \"prompt\" and \"completion\"";
  if (text) {
    out.kind = JsonlKind::text;
    if (std::string why = string_field(j, "text", out.first); !why.empty()) return why;
    return out.first.empty() ? "empty \"text\"" : "";
  }
  if (!completion) return "\"prompt\" without \"completion\"";
  if (!prompt) return "\"completion\" without \"prompt\"";
  out.kind = JsonlKind::prompt_completion;
  if (std::string why = string_field(j, "prompt", out.first); !why.empty()) return why;
  if (std::string why = string_field(j, "completion", out.completion); !why.empty()) return why;
  return out.completion.empty() ? "empty \"completion\"" : "";
}

void append(std::vector<int>& tokens, std::vector<std::uint8_t>& counted, std::span<const int> ids, bool count) {
  tokens.insert(tokens.end(), ids.begin(), ids.end());
  counted.insert(counted.end(), ids.size(), std::uint8_t(count ? 1 : 0));
}

// std::invalid_argument unless the tokenizer makes documents: encodes, post-processes, ends them.
int checked_end_of_text(const Tokenizer& tokenizer) {
  if (!tokenizer.can_encode())
    throw std::invalid_argument("the tokenizer cannot encode text: " + tokenizer.encoding_unavailable());
  tokenizer.document_template();  // throws when its post-processor is not supported
  if (!tokenizer.end_of_text())
    throw std::invalid_argument("the tokenizer names no end-of-text token (<|endoftext|> or <|end_of_text|>) to end documents");
  return *tokenizer.end_of_text();
}

// Reads a file line by line, with what it read so far for the progress.
class LineReader {
 public:
  explicit LineReader(const fs::path& path) : path_(path), in_(path, std::ios::binary) {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) throw_format_error(path, fs::exists(path, ec) ? "not a regular file" : "no such file");
    if (!in_) throw_format_error(path, "cannot open");
    size_ = fs::file_size(path, ec);
  }
  // The next line without its "\n" (and "\r"); false at the end.
  bool next(std::string& line) {
    if (!std::getline(in_, line)) {
      if (in_.bad()) throw_format_error(path_, "read error");
      return false;
    }
    ++number_;
    read_ += line.size() + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return true;
  }
  std::size_t number() const { return number_; }
  std::uint64_t read() const { return std::min<std::uint64_t>(read_, size_); }
  std::uint64_t size() const { return size_; }

 private:
  fs::path path_;
  std::ifstream in_;
  std::uint64_t size_ = 0, read_ = 0;
  std::size_t number_ = 0;
};

bool blank(std::string_view line) { return line.find_first_not_of(" \t\r\n\f\v") == std::string_view::npos; }

// One record's reason to be bad, counted or thrown as `options` says.
void bad_record(const fs::path& path, std::size_t line, const std::string& why, const JsonlOptions& options,
                JsonlSummary& summary) {
  const std::string message = path.string() + ":" + std::to_string(line) + ": " + why;
  if (options.bad_records == BadRecords::fail) throw FileFormatError(message);
  ++summary.counts.bad;
  if (summary.bad_lines.size() < JsonlSummary::kMaxBadLines) summary.bad_lines.push_back(message);
}

}  // namespace

void jsonl_document(const Tokenizer& tokenizer, JsonlKind kind, std::string_view prompt_or_text,
                    std::string_view completion, LossOn loss_on, std::vector<int>& tokens,
                    std::vector<std::uint8_t>& counted) {
  const int end_of_text = checked_end_of_text(tokenizer);
  const Tokenizer::DocumentTemplate& t = tokenizer.document_template();
  tokens.clear();
  counted.clear();
  append(tokens, counted, t.before, false);
  if (kind == JsonlKind::text) {
    append(tokens, counted, tokenizer.encode(prompt_or_text), true);
  } else {
    append(tokens, counted, tokenizer.encode(prompt_or_text), loss_on == LossOn::all);
    append(tokens, counted, tokenizer.encode(completion), true);
  }
  append(tokens, counted, t.after, true);
  if (t.after.empty() || t.after.back() != end_of_text) append(tokens, counted, std::span(&end_of_text, 1), true);
}

JsonlSummary read_jsonl_documents(const fs::path& path, const Tokenizer& tokenizer, const JsonlOptions& options,
                                  const std::function<void(const JsonlDocument&)>& document,
                                  const JsonlProgress& progress) {
  checked_end_of_text(tokenizer);
  LineReader in(path);
  JsonlSummary summary;
  std::size_t kind_line = 0;  // the line whose record fixed the file's kind
  std::string line;
  Record record;
  std::vector<int> tokens;
  std::vector<std::uint8_t> counted;
  std::uint64_t reported = 0;
  while (in.next(line)) {
    if (progress && in.read() - reported >= kProgressBytes) progress(reported = in.read(), in.size());
    if (blank(line)) continue;
    ++summary.counts.records;
    if (std::string why = parse_record(line, record); !why.empty()) {
      bad_record(path, in.number(), why, options, summary);
      continue;
    }
    if (summary.kind && record.kind != *summary.kind) {
      bad_record(path, in.number(),
                 std::string("a ") + kind_name(record.kind) + " record in a file of " + kind_name(*summary.kind) +
                     " records (line " + std::to_string(kind_line) + ")",
                 options, summary);
      continue;
    }
    if (!summary.kind) summary.kind = record.kind, kind_line = in.number();
    jsonl_document(tokenizer, record.kind, record.first, record.completion, options.loss_on, tokens, counted);
    if (options.seq > 0 && tokens.size() > options.seq + 1) {
      if (options.long_records == LongRecords::drop) {
        ++summary.counts.dropped;
        continue;
      }
      ++summary.counts.split;
    }
    ++summary.counts.kept;
    summary.counts.tokens += tokens.size();
    for (std::uint8_t c : counted) summary.counts.counted += c;
    document(JsonlDocument{tokens, counted, in.number()});
  }
  if (progress) progress(in.size(), in.size());
  return summary;
}

JsonlTokens read_jsonl(const fs::path& path, const Tokenizer& tokenizer, const JsonlOptions& options,
                       const JsonlProgress& progress) {
  JsonlTokens out;
  out.summary = read_jsonl_documents(
      path, tokenizer, options,
      [&](const JsonlDocument& d) {
        out.tokens.insert(out.tokens.end(), d.tokens.begin(), d.tokens.end());
        out.counted.insert(out.counted.end(), d.counted.begin(), d.counted.end());
      },
      progress);
  return out;
}

// ---- shards -------------------------------------------------------------------------------------

namespace {

constexpr std::string_view kPartialPrefix = ".partial-tokenize.";

std::string shard_name(const std::string& prefix, std::size_t index) {
  char number[32];
  std::snprintf(number, sizeof number, "_%06zu", index);
  return prefix + number;
}

// Makes the renames into `dir` durable.
void sync_directory(const fs::path& dir) {
  const FileDescriptor fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid() || ::fsync(fd.get()) != 0)
    throw std::system_error(errno, std::generic_category(), dir.string() + ": directory fsync failed");
}

// Removes the partial folders in `dir` of processes that no longer run.
void remove_stale_partials(const fs::path& dir) {
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with(kPartialPrefix)) continue;
    const std::string pid = name.substr(kPartialPrefix.size());
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos || pid.size() > 9) continue;
    if (!process_may_own(std::stol(pid), e.path())) fs::remove_all(e.path());
  }
}

// The documents of a stream as shards of whole documents, up to `limit` tokens each, written into
// `folder`; Token: the token shard's element (uint16: GPT-2's format, uint32: Llama 3's).
template <class Token>
class ShardWriter {
 public:
  ShardWriter(fs::path folder, std::string prefix, std::size_t limit)
      : folder_(std::move(folder)), prefix_(std::move(prefix)), limit_(limit) {}

  void add(const JsonlDocument& d) {
    if (!tokens_.empty() && tokens_.size() + d.tokens.size() > limit_) write(tokens_.size());
    for (int id : d.tokens) tokens_.push_back(Token(id));
    counted_.insert(counted_.end(), d.counted.begin(), d.counted.end());
    while (tokens_.size() >= limit_) write(limit_);  // a document longer than a shard
  }
  // Writes what is left; the names of the shards written.
  const std::vector<std::string>& finish() {
    if (!tokens_.empty()) write(tokens_.size());
    return names_;
  }

 private:
  void write(std::size_t n) {
    const std::string name = shard_name(prefix_, names_.size());
    const std::span<const Token> tokens(tokens_.data(), n);
    if constexpr (std::is_same_v<Token, std::uint16_t>)
      GptTokenShardFile::write(folder_ / (name + ".bin"), tokens);
    else
      LlamaTokenShardFile::write(folder_ / (name + ".bin"), tokens);
    write_mask_shard(folder_ / (name + ".mask"), std::span(counted_.data(), n));
    tokens_.erase(tokens_.begin(), tokens_.begin() + std::ptrdiff_t(n));
    counted_.erase(counted_.begin(), counted_.begin() + std::ptrdiff_t(n));
    names_.push_back(name);
  }

  fs::path folder_;
  std::string prefix_;
  std::size_t limit_;
  std::vector<Token> tokens_;
  std::vector<std::uint8_t> counted_;
  std::vector<std::string> names_;
};

// The shards of `jsonl` in `folder`: their names.
template <class Token>
std::vector<std::string> write_shards(const fs::path& jsonl, const Tokenizer& tokenizer, const JsonlOptions& options,
                                      const fs::path& folder, const JsonlShardOptions& shard_options,
                                      const JsonlProgress& progress, JsonlSummary& summary) {
  ShardWriter<Token> writer(folder, shard_options.prefix, shard_options.shard_tokens);
  summary = read_jsonl_documents(
      jsonl, tokenizer, options, [&](const JsonlDocument& d) { writer.add(d); }, progress);
  return writer.finish();
}

// Moves the shards from `partial` into `dir`, then removes dir's older shards past them.
void publish(const fs::path& partial, const fs::path& dir, const std::string& prefix,
             const std::vector<std::string>& names) {
  for (const std::string& name : names)
    for (const char* ext : {".bin", ".mask"}) fs::rename(partial / (name + ext), dir / (name + ext));
  for (std::size_t i = names.size();; ++i) {
    const std::string name = shard_name(prefix, i);
    const bool bin = fs::remove(dir / (name + ".bin")), mask = fs::remove(dir / (name + ".mask"));
    if (!bin && !mask) break;
  }
  sync_directory(dir);
}

}  // namespace

JsonlShards write_jsonl_shards(const fs::path& jsonl, const Tokenizer& tokenizer, const JsonlOptions& options,
                               const fs::path& dir, const JsonlShardOptions& shard_options,
                               const JsonlProgress& progress) {
  if (shard_options.shard_tokens == 0 || shard_options.shard_tokens > std::size_t(INT32_MAX))
    throw std::invalid_argument("shard size " + std::to_string(shard_options.shard_tokens) +
                                " tokens: it must be 1 to " + std::to_string(INT32_MAX));
  if (shard_options.prefix.empty() || shard_options.prefix.find('/') != std::string::npos)
    throw std::invalid_argument("shard prefix '" + shard_options.prefix + "' is empty or holds '/'");
  checked_end_of_text(tokenizer);
  LineReader{jsonl};  // FileFormatError for a file it cannot read, before DIR is made
  const bool made = fs::create_directories(dir);
  remove_stale_partials(dir);
  const fs::path partial = dir / (std::string(kPartialPrefix) + std::to_string(::getpid()));
  fs::remove_all(partial);
  fs::create_directory(partial);
  JsonlShards out;
  out.llama_format = tokenizer.vocab() > 65536;
  try {
    const std::vector<std::string> names =
        out.llama_format
            ? write_shards<std::uint32_t>(jsonl, tokenizer, options, partial, shard_options, progress, out.summary)
            : write_shards<std::uint16_t>(jsonl, tokenizer, options, partial, shard_options, progress, out.summary);
    if (names.empty()) {
      const JsonlCounts& c = out.summary.counts;
      throw_format_error(jsonl, "no document to write (" + std::to_string(c.records) + " records: " +
                                    std::to_string(c.dropped) + " dropped as long, " + std::to_string(c.bad) +
                                    " bad)");
    }
    publish(partial, dir, shard_options.prefix, names);
    for (const std::string& name : names) out.shards.push_back(dir / (name + ".bin"));
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(partial, ignored);
    if (made) fs::remove(dir, ignored);  // when empty
    throw;
  }
  fs::remove_all(partial);
  return out;
}

}  // namespace starzero
