#pragma once
// What llm.c's files share, GPT-2's (models/gpt_files.hpp) and Llama 3's
// (models/llama_files.hpp) alike: the 256-int32 header and its magic, the checkpoints' parameter
// body after it (every parameter as fp32, version 3, or bf16, version 5, read into and written
// from pieces so that no file-sized buffer is needed), and the token shards' count and body.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <stdexcept>
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

// FileFormatError unless a model's shape is valid ("invalid shape: ...").
template <class Shape>
void check_llmc_shape(const std::filesystem::path& path, const Shape& shape);
// std::invalid_argument unless a writer's `version` is 3 or 5 ("<name> checkpoint version must be").
void check_llmc_write_version(std::string_view name, int version);
// std::invalid_argument unless `given` parameters are the shape's `count`.
void check_llmc_param_count(const std::filesystem::path& path, std::size_t given, std::size_t count,
                            const std::string& shape);

// The token count of a shard's header, checked against the file's size (FileFormatError).
std::size_t llmc_token_count(const FileReader& in, const LlmcHeaderWords& header, std::int32_t version,
                             std::size_t token_bytes);
// Header [0] magic, [1] version, [2] count, then the tokens' bytes; std::invalid_argument when
// `count` does not fit the int32 of the header.
void write_llmc_token_file(const std::filesystem::path& path, std::int32_t magic, std::int32_t version,
                           std::span<const std::byte> tokens, std::size_t count);
// The magic of a file's first int32 (0 when it is shorter), to tell the formats apart.
std::int32_t file_magic(const std::filesystem::path& path);

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


// ---- one model's llm.c files -------------------------------------------------------------------
// The checkpoint and token shard of one model, the same code for every model: what differs is
// its codec (GptLlmcCodec in models/gpt_files.hpp, LlamaLlmcCodec in models/llama_files.hpp):
//
//   struct Codec {
//     using Shape = ...;  // validate(), param_count(), to_string(); same_model() or ==
//     using Token = ...;  // a token shard's element
//     static constexpr LlmcFileIds kIds{"llm.c", checkpoint magic, token magic, token version};
//     static constexpr std::array<LlmcOtherMagic, N> kNotCheckpoint, kNotTokenShard;
//     // The header of `shape` (std::invalid_argument when it cannot describe it), and the shape
//     // of a header whose magic and version are checked (FileFormatError naming `path`).
//     static LlmcHeaderWords checkpoint_header(const Shape&, int version, const std::filesystem::path&);
//     static Shape shape_from_header(const LlmcHeaderWords&, const std::filesystem::path&);
//   };
//
// Every reader checks the whole file before trusting it (magic, version, shape, exact size) and
// throws FileFormatError naming the file and what is wrong; every writer goes through
// write_file_atomically (a crash never leaves a half-written target). Little-endian, as llm.c.

inline constexpr std::int32_t kLlmcCheckpointFp32 = 3;
inline constexpr std::int32_t kLlmcCheckpointBf16 = 5;

// What tells a model's llm.c files from other models': `name` in messages ("<name> checkpoint",
// "<name> token shard"), the checkpoint's magic, the token shard's magic and version.
struct LlmcFileIds {
  std::string_view name;
  std::int32_t checkpoint_magic = 0, token_magic = 0, token_version = 0;
};

template <class Shape>
struct LlmcCheckpointOf {
  Shape shape;
  std::vector<float> params;          // always fp32, llm.c order; bf16 files are widened exactly
  int version = kLlmcCheckpointFp32;  // the version the file was stored with
};

// 256 int32 header ([0] magic, [1] version, then the shape), then every parameter in llm.c order
// as fp32 (version 3) or bf16 (version 5: rounded to nearest even).
template <class Codec>
class LlmcCheckpointFile {
 public:
  using Shape = typename Codec::Shape;
  using Checkpoint = LlmcCheckpointOf<Shape>;
  using Place = std::function<std::span<float>(std::size_t, std::size_t)>;
  using Fill = std::function<void(std::size_t, std::span<float>)>;

  static Checkpoint read(const std::filesystem::path& path) { return read_whole(path, nullptr); }
  // Also FileFormatError when the file holds another model than `expected` (naming both).
  static Checkpoint read(const std::filesystem::path& path, const Shape& expected) {
    return read_whole(path, &expected);
  }
  // The header alone (params left empty), with every check of a full read, the size included.
  static Checkpoint read_header(const std::filesystem::path& path) {
    FileReader in(path);
    return read_header_at(in, nullptr);
  }
  static Checkpoint read_header(const std::filesystem::path& path, const Shape& expected) {
    FileReader in(path);
    return read_header_at(in, &expected);
  }
  // The parameters read in file order straight into `destination(llmc_offset, count)`, no copy of
  // the file in memory; `pieces` add up to the parameter count. Returns the file's version.
  static int read_streamed(const std::filesystem::path& path, const Shape& expected, const Place& destination,
                           std::span<const std::size_t> pieces) {
    FileReader in(path);
    const Checkpoint header = read_header_at(in, &expected);
    read_llmc_param_pieces(in, header.version == kLlmcCheckpointBf16, header.shape.param_count(), path,
                           header.shape.to_string(), destination, pieces);
    return header.version;
  }
  // std::invalid_argument for a wrong parameter count, version or shape; I/O errors propagate.
  static void write(const std::filesystem::path& path, const Shape& shape, std::span<const float> params,
                    int version = kLlmcCheckpointFp32) {
    check_llmc_param_count(path, params.size(), shape.param_count(), shape.to_string());
    write_streamed(
        path, shape, version,
        [&](std::size_t offset, std::span<float> out) {
          std::copy_n(params.begin() + std::ptrdiff_t(offset), out.size(), out.begin());
        },
        llmc_param_pieces(params.size()));
  }
  // Piece by piece, one in memory: `fill(llmc_offset, values)` sets each piece's, in file order.
  static void write_streamed(const std::filesystem::path& path, const Shape& shape, int version, const Fill& fill,
                             std::span<const std::size_t> pieces) {
    shape.validate();
    check_llmc_write_version(Codec::kIds.name, version);
    const LlmcHeaderWords header = Codec::checkpoint_header(shape, version, path);
    write_llmc_params_file(path, std::as_bytes(std::span(header)), version == kLlmcCheckpointBf16,
                           shape.param_count(), shape.to_string(), fill, pieces);
  }

 private:
  // A Llama shape is the same model without the header fields a file cannot hold.
  static bool same_model(const Shape& file, const Shape& expected) {
    if constexpr (requires { file.same_model(expected); })
      return file.same_model(expected);
    else
      return file == expected;
  }
  // Reads and checks the header and the file's size; `in` is left at the first parameter.
  static Checkpoint read_header_at(FileReader& in, const Shape* expected) {
    const std::filesystem::path& path = in.path();
    const LlmcHeaderWords header =
        read_llmc_header(in, Codec::kIds.checkpoint_magic, std::string(Codec::kIds.name) + " checkpoint",
                         Codec::kNotCheckpoint);
    check_llmc_checkpoint_version(path, header[1]);
    Checkpoint ckpt;
    ckpt.version = header[1];
    ckpt.shape = Codec::shape_from_header(header, path);
    // Before the size check, so a file of another model is reported as such.
    if (expected && !same_model(ckpt.shape, *expected))
      throw_format_error(path, "shape mismatch: file has " + ckpt.shape.to_string() + ", expected " +
                                   expected->to_string());
    check_llmc_checkpoint_size(in, ckpt.version, ckpt.shape.param_count(), ckpt.shape.to_string());
    return ckpt;
  }
  static Checkpoint read_whole(const std::filesystem::path& path, const Shape* expected) {
    FileReader in(path);
    Checkpoint ckpt = read_header_at(in, expected);
    ckpt.params.resize(ckpt.shape.param_count());
    read_llmc_params(in, ckpt.version == kLlmcCheckpointBf16, ckpt.params);
    return ckpt;
  }
};

// A token shard: 256 int32 header [0] magic, [1] version, [2] count, then `count` tokens.
template <class Codec>
class LlmcTokenShardFile {
 public:
  using Token = typename Codec::Token;

  // The header's token count, checked against the file's size; no token is read (FileFormatError).
  static std::size_t count(const std::filesystem::path& path) {
    FileReader in(path);
    const LlmcHeaderWords header =
        read_llmc_header(in, Codec::kIds.token_magic, std::string(Codec::kIds.name) + " token shard",
                         Codec::kNotTokenShard);
    return llmc_token_count(in, header, Codec::kIds.token_version, sizeof(Token));
  }
  static std::vector<Token> read(const std::filesystem::path& path) {
    FileReader in(path);
    const LlmcHeaderWords header =
        read_llmc_header(in, Codec::kIds.token_magic, std::string(Codec::kIds.name) + " token shard",
                         Codec::kNotTokenShard);
    const std::size_t count = llmc_token_count(in, header, Codec::kIds.token_version, sizeof(Token));
    std::vector<Token> tokens(count);
    in.read_exact(tokens.data(), count * sizeof(Token));
    return tokens;
  }
  static void write(const std::filesystem::path& path, std::span<const Token> tokens) {
    write_llmc_token_file(path, Codec::kIds.token_magic, Codec::kIds.token_version, std::as_bytes(tokens),
                          tokens.size());
  }
};

template <class Shape>
void check_llmc_shape(const std::filesystem::path& path, const Shape& shape) {
  try {
    shape.validate();
  } catch (const std::invalid_argument& e) {
    throw_format_error(path, std::string("invalid shape: ") + e.what());
  }
}

}  // namespace starzero
