#pragma once
// What llm.c's files share, GPT-2's (models/gpt_files.hpp) and Llama 3's
// (models/llama_files.hpp) alike: the 256-int32 header and its magic, the checkpoints' parameter
// body after it (every parameter as fp32, version 3, or bf16, version 5, read into and written
// from pieces so that no file-sized buffer is needed), and the token shards' count and body.
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/files.hpp"

namespace starzero {

inline constexpr std::size_t kLlmcHeaderWords = 256;
inline constexpr std::size_t kLlmcHeaderBytes = kLlmcHeaderWords * sizeof(std::int32_t);
using LlmcHeaderWords = std::array<std::int32_t, kLlmcHeaderWords>;

// Another llm.c format's magic, named when a file has it: "wrong magic M (...): this is a <is>".
struct LlmcOtherMagic {
  std::int32_t magic;
  std::string_view is;
};
// Reads the header at the reader's position; FileFormatError when the file is shorter than it
// ("truncated header") or its magic is not `magic` ("... (an <name> has <magic>)").
LlmcHeaderWords read_llmc_header(FileReader& in, std::int32_t magic, std::string_view name,
                                 std::span<const LlmcOtherMagic> others = {});
// FileFormatError unless `version` is 3 (fp32) or 5 (bf16).
void check_llmc_checkpoint_version(const std::filesystem::path& path, int version);
// FileFormatError unless the file holds the header and `count` parameters of `version`.
void check_llmc_checkpoint_size(const FileReader& in, int version, std::size_t count, const std::string& shape);

// A checkpoint read whole, or its parameters piece by piece into destination(offset, count):
// `read_header(in)` reads and checks the header and the file's size and returns the Checkpoint
// (shape, version) it describes. Returns the checkpoint, or the file's version.
template <class Checkpoint, class ReadHeader>
Checkpoint read_llmc_checkpoint_whole(const std::filesystem::path& path, ReadHeader read_header);
template <class Checkpoint, class ReadHeader>
int read_llmc_checkpoint_pieces(const std::filesystem::path& path, ReadHeader read_header,
                                const std::function<std::span<float>(std::size_t, std::size_t)>& destination,
                                std::span<const std::size_t> pieces);
// `params` (`count` of them, std::invalid_argument otherwise) in pieces of at most 2^20 through
// `write_streamed(fill, pieces)`.
void write_llmc_checkpoint_whole(
    const std::filesystem::path& path, std::span<const float> params, std::size_t count, const std::string& shape,
    const std::function<void(const std::function<void(std::size_t, std::span<float>)>&, std::span<const std::size_t>)>&
        write_streamed);

// A token shard: header [0] magic, [1] version, [2] count, then `count` tokens of `Token`.
template <class Token>
std::vector<Token> read_llmc_token_shard(const std::filesystem::path& path, std::int32_t magic, std::string_view name,
                                         std::int32_t version, std::span<const LlmcOtherMagic> others = {});
// `too_many`: the std::invalid_argument message when there are more tokens than an int32 counts.
template <class Token>
void write_llmc_token_shard(const std::filesystem::path& path, std::int32_t magic, std::int32_t version,
                            std::span<const Token> tokens, const std::string& too_many);
// The token count of a shard's header, checked against the file's size (FileFormatError).
std::size_t llmc_token_count(const FileReader& in, const LlmcHeaderWords& header, std::int32_t version,
                             std::size_t token_bytes);
void write_llmc_token_file(const std::filesystem::path& path, std::int32_t magic, std::int32_t version,
                           std::span<const std::byte> tokens, std::size_t count, const std::string& too_many);

// Reads `out.size()` parameters at the reader's position into `out`, widening bf16 exactly.
void read_llmc_params(FileReader& in, bool bf16, std::span<float> out);

// Reads `count` parameters at the reader's position piece by piece into destination(offset, n).
// std::invalid_argument when the pieces do not add up to `count` ("checkpoint PATH: pieces of N
// parameters, SHAPE has COUNT") or a destination has the wrong size.
void read_llmc_param_pieces(FileReader& in, bool bf16, std::size_t count, const std::filesystem::path& path,
                            const std::string& shape,
                            const std::function<std::span<float>(std::size_t, std::size_t)>& destination,
                            std::span<const std::size_t> pieces);

// `count` parameters as pieces of at most 2^20.
std::vector<std::size_t> llmc_param_pieces(std::size_t count);

// Writes `header` and then `count` parameters, each piece filled by fill(offset, piece), through
// write_file_atomically. Checks the pieces add up to `count` like read_llmc_param_pieces.
void write_llmc_params_file(const std::filesystem::path& path, std::span<const std::byte> header, bool bf16,
                            std::size_t count, const std::string& shape,
                            const std::function<void(std::size_t, std::span<float>)>& fill,
                            std::span<const std::size_t> pieces);


// ---- templates ----------------------------------------------------------------------------------

template <class Checkpoint, class ReadHeader>
Checkpoint read_llmc_checkpoint_whole(const std::filesystem::path& path, ReadHeader read_header) {
  FileReader in(path);
  Checkpoint ckpt = read_header(in);
  ckpt.params.resize(ckpt.shape.param_count());
  read_llmc_params(in, ckpt.version == 5, ckpt.params);
  return ckpt;
}

template <class Checkpoint, class ReadHeader>
int read_llmc_checkpoint_pieces(const std::filesystem::path& path, ReadHeader read_header,
                                const std::function<std::span<float>(std::size_t, std::size_t)>& destination,
                                std::span<const std::size_t> pieces) {
  FileReader in(path);
  const Checkpoint header = read_header(in);
  read_llmc_param_pieces(in, header.version == 5, header.shape.param_count(), path, header.shape.to_string(),
                         destination, pieces);
  return header.version;
}

template <class Token>
std::vector<Token> read_llmc_token_shard(const std::filesystem::path& path, std::int32_t magic, std::string_view name,
                                         std::int32_t version, std::span<const LlmcOtherMagic> others) {
  FileReader in(path);
  const LlmcHeaderWords header = read_llmc_header(in, magic, name, others);
  const std::size_t count = llmc_token_count(in, header, version, sizeof(Token));
  std::vector<Token> tokens(count);
  in.read_exact(tokens.data(), count * sizeof(Token));
  return tokens;
}

template <class Token>
void write_llmc_token_shard(const std::filesystem::path& path, std::int32_t magic, std::int32_t version,
                            std::span<const Token> tokens, const std::string& too_many) {
  write_llmc_token_file(path, magic, version, std::as_bytes(tokens), tokens.size(), too_many);
}

}  // namespace starzero
