#pragma once
// Fine-tuning data from JSONL: one JSON object per line, read into a token stream with a loss
// mask, and written as llm.c token shards with mask shards beside them (`starzero tokenize`).
//
// Records. A file holds records of one kind, fixed by its first good record:
//   {"text": "..."}                            the whole text is learned
//   {"prompt": "...", "completion": "..."}     the completion is learned (--loss-on completion)
// Other keys are ignored. Lines of whitespace only are no records. A bad record is one error line
// "FILE:LINE: REASON": malformed JSON, not an object, neither "text" nor "prompt"/"completion",
// both, a "prompt" without "completion" or the reverse, a field that is not a string, an empty
// "text" or "completion" (an empty prompt is allowed), a record of the other kind than the file's.
// BadRecords::fail throws it as FileFormatError; skip counts it and goes on.
//
// Documents. Each record is one document: the tokenizer's post-processed encoding (its template's
// tokens before the text: <|begin_of_text|> for Llama 3, none for GPT-2; models/tokenizer.hpp),
// the text's tokens (prompt then completion, each encoded on its own, so the boundary is exact),
// the template's tokens after it, then the end-of-text token (unless the template already ends
// with it). Documents are concatenated (packed) in file order.
//
// Mask. counted[i] = 1 when token i is learned as a target, i.e. predicted from the tokens before
// it. The template's tokens before the text (BOS) are never counted: nothing in the document
// predicts them. LossOn::completion (the default): the prompt's tokens are 0; the completion's,
// the template's tokens after it and the end-of-text are 1. LossOn::all: every token but the BOS
// is 1. For text records both give the same mask.
//
// Long records. With seq = T > 0, a document of more than T + 1 tokens (BOS to end-of-text) does
// not fit one training window of T + 1 tokens: LongRecords::split keeps it (it spans windows),
// drop leaves it out. Both are counted.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace starzero {

class Tokenizer;

enum class JsonlKind { text, prompt_completion };
enum class LossOn { completion, all };
enum class LongRecords { split, drop };
enum class BadRecords { fail, skip };

struct JsonlOptions {
  LossOn loss_on = LossOn::completion;
  LongRecords long_records = LongRecords::split;
  BadRecords bad_records = BadRecords::fail;
  std::size_t seq = 0;  // T; 0: no record is long
};

struct JsonlCounts {
  std::size_t records = 0;  // lines that are not whitespace only
  std::size_t kept = 0;     // documents in the stream
  std::size_t split = 0;    // kept documents longer than seq + 1 tokens
  std::size_t dropped = 0;  // documents longer than seq + 1 tokens left out (LongRecords::drop)
  std::size_t bad = 0;      // bad records skipped (BadRecords::skip)
  std::size_t tokens = 0;   // tokens in the stream
  std::size_t counted = 0;  // of which counted = 1
};

struct JsonlSummary {
  JsonlCounts counts;
  std::optional<JsonlKind> kind;        // the file's kind; none without a good record
  std::vector<std::string> bad_lines;   // the first kMaxBadLines skipped records' "FILE:LINE: REASON"
  static constexpr std::size_t kMaxBadLines = 20;
};

// One document of the stream: its tokens and their mask, the same length; `line` its record's.
struct JsonlDocument {
  std::span<const int> tokens;
  std::span<const std::uint8_t> counted;
  std::size_t line = 0;
};

// How far the reading is: bytes of the file read so far, and its size.
using JsonlProgress = std::function<void(std::uint64_t bytes_read, std::uint64_t file_bytes)>;

// The document of one record (the text's or the prompt's and completion's tokens around the
// template, the end-of-text last) with its mask, as described above. std::invalid_argument when
// the tokenizer cannot encode, post-process or names no end-of-text token.
void jsonl_document(const Tokenizer& tokenizer, JsonlKind kind, std::string_view prompt_or_text,
                    std::string_view completion, LossOn loss_on, std::vector<int>& tokens,
                    std::vector<std::uint8_t>& counted);

// Reads `path` line by line and calls `document` for each document kept, in file order; `progress`
// about every MiB and at the end. FileFormatError for a file that cannot be read and, with
// BadRecords::fail, for the first bad record ("FILE:LINE: REASON"); std::invalid_argument as
// jsonl_document.
JsonlSummary read_jsonl_documents(const std::filesystem::path& path, const Tokenizer& tokenizer,
                                  const JsonlOptions& options,
                                  const std::function<void(const JsonlDocument&)>& document,
                                  const JsonlProgress& progress = {});

// The whole stream in memory: every kept document's tokens and mask, concatenated.
struct JsonlTokens {
  std::vector<int> tokens;
  std::vector<std::uint8_t> counted;
  JsonlSummary summary;
};
JsonlTokens read_jsonl(const std::filesystem::path& path, const Tokenizer& tokenizer, const JsonlOptions& options,
                       const JsonlProgress& progress = {});

// ---- token shards with masks (`starzero tokenize`) ------------------------------------------------
// DIR/<prefix>_000000.bin, ...: llm.c token shards, GPT-2's format (uint16) for a vocabulary of at
// most 65536 tokens, else Llama 3's (uint32); beside each DIR/<prefix>_000000.mask, its mask shard
// (models/mask_shard.hpp) of the same count. A shard holds whole documents, up to shard_tokens
// tokens; a document longer than that continues in the next shards.
struct JsonlShardOptions {
  std::size_t shard_tokens = 100'000'000;
  std::string prefix = "train";
};

struct JsonlShards {
  JsonlSummary summary;
  std::vector<std::filesystem::path> shards;  // the token shards, in order (each with its .mask)
  bool llama_format = false;                  // uint32 tokens (Llama 3's format), else uint16
};

// Writes the shards of `jsonl` into `dir` (created when missing). Everything is written into a
// partial folder DIR/.partial-tokenize.<pid> first, then moved into DIR, then DIR's older
// <prefix>_NNNNNN.bin/.mask past the new ones are removed: a failure leaves DIR as it was (not
// there, when this call made it) and removes the partial folder; partial folders of processes that
// no longer run are removed.
// std::invalid_argument when no document is kept, or shard_tokens is 0 or past the int32 count.
JsonlShards write_jsonl_shards(const std::filesystem::path& jsonl, const Tokenizer& tokenizer,
                               const JsonlOptions& options, const std::filesystem::path& dir,
                               const JsonlShardOptions& shard_options = {}, const JsonlProgress& progress = {});

}  // namespace starzero
