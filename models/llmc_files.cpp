#include "models/llmc_files.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <string_view>

#include "models/llmc_params.hpp"
#include "runtime/dtype.hpp"

namespace starzero {

static_assert(std::endian::native == std::endian::little,
              "llm.c files are little-endian; a big-endian host would need byte swapping");

namespace {

void check_shape(const std::filesystem::path& path, const GptShape& shape) {
  try {
    shape.validate();
  } catch (const std::invalid_argument& e) {
    throw_format_error(path, std::string("invalid shape: ") + e.what());
  }
}

void check_expected(const std::filesystem::path& path, const GptShape& have, const GptShape& expected) {
  if (have != expected)
    throw_format_error(path, "shape mismatch: file has " + have.to_string() + ", expected " + expected.to_string());
}

}  // namespace

// ---- llm.c tensor order ----------------------------------------------------------------------

std::vector<TensorSpec> llmc_tensor_specs(const GptShape& shape) {
  const GptLayout layout(shape);
  std::vector<TensorSpec> specs;
  for (const GptTensor& tensor : layout.tensors())
    specs.push_back({std::string(tensor.name), tensor.count, tensor.per_layer, tensor.llmc_offset});
  return specs;
}

// ---- llm.c checkpoint -------------------------------------------------------------------------

namespace {
constexpr std::size_t header_bytes = kLlmcHeaderInts * sizeof(std::int32_t);

// One of the two llm.c formats, as a wrong magic names it.
struct LlmcFormat {
  std::int32_t magic;
  std::string_view name;        // in "an <name> has <magic>"
  std::string_view short_name;  // in "this is a <short_name>"
};
constexpr LlmcFormat kCheckpointFormat{kLlmcCheckpointMagic, "llm.c checkpoint", "checkpoint"};
constexpr LlmcFormat kTokenShardFormat{kLlmcTokenMagic, "llm.c token shard", "token shard"};

// The 256-int32 header both llm.c formats start with, its magic checked to be `format`'s (a
// file of the `other` format is named as such).
std::array<std::int32_t, kLlmcHeaderInts> read_llmc_header(FileReader& in, const LlmcFormat& format,
                                                           const LlmcFormat& other) {
  const std::filesystem::path& path = in.path();
  if (in.size() < header_bytes)
    throw_format_error(path, "truncated header: file has " + std::to_string(in.size()) + " bytes, the header needs " +
                                 std::to_string(header_bytes));
  std::array<std::int32_t, kLlmcHeaderInts> header{};
  in.read_exact(header.data(), header_bytes);
  if (header[0] != format.magic)
    throw_format_error(path, "wrong magic " + std::to_string(header[0]) + " (an " + std::string(format.name) + " has " +
                                 std::to_string(format.magic) + ")" +
                                 (header[0] == other.magic ? ": this is a " + std::string(other.short_name) : ""));
  return header;
}

// Reads and checks the header and the file's size; `in` is left at the first parameter.
LlmcCheckpoint read_checkpoint_header(FileReader& in, const std::filesystem::path& path, const GptShape* expected) {
  const auto header = read_llmc_header(in, kCheckpointFormat, kTokenShardFormat);
  const int version = header[1];
  if (version != kLlmcCheckpointFp32 && version != kLlmcCheckpointBf16)
    throw_format_error(path, "unknown version " + std::to_string(version) + " (known: 3 = fp32, 5 = bf16)");

  LlmcCheckpoint ckpt;
  ckpt.version = version;
  StateShapeFields fields{};
  std::copy_n(header.begin() + 2, fields.size(), fields.begin());
  ckpt.shape = gpt_shape_from_fields(fields);
  check_shape(path, ckpt.shape);
  // Before the size check, so a file of another model is reported as such.
  if (expected) check_expected(path, ckpt.shape, *expected);

  const std::size_t count = ckpt.shape.param_count();
  const std::size_t elem = version == kLlmcCheckpointFp32 ? sizeof(float) : sizeof(bf16_bits);
  const std::size_t need = header_bytes + count * elem;
  if (in.size() != need)
    throw_format_error(path, describe_size_mismatch(in.size(), need, "shape " + ckpt.shape.to_string()));
  return ckpt;
}

LlmcCheckpoint read_checkpoint(const std::filesystem::path& path, const GptShape* expected) {
  FileReader in(path);
  LlmcCheckpoint ckpt = read_checkpoint_header(in, path, expected);
  ckpt.params.resize(ckpt.shape.param_count());
  read_llmc_params(in, ckpt.version == kLlmcCheckpointBf16, ckpt.params);
  return ckpt;
}

}  // namespace

LlmcCheckpoint read_llmc_checkpoint(const std::filesystem::path& path) { return read_checkpoint(path, nullptr); }

LlmcCheckpoint read_llmc_checkpoint_header(const std::filesystem::path& path) {
  FileReader in(path);
  return read_checkpoint_header(in, path, nullptr);
}

LlmcCheckpoint read_llmc_checkpoint_header(const std::filesystem::path& path, const GptShape& expected) {
  FileReader in(path);
  return read_checkpoint_header(in, path, &expected);
}

LlmcCheckpoint read_llmc_checkpoint(const std::filesystem::path& path, const GptShape& expected) {
  return read_checkpoint(path, &expected);
}

int read_llmc_checkpoint_streamed(const std::filesystem::path& path, const GptShape& expected,
                                  const std::function<std::span<float>(std::size_t, std::size_t)>& destination,
                                  std::span<const std::size_t> pieces) {
  FileReader in(path);
  const LlmcCheckpoint header = read_checkpoint_header(in, path, &expected);
  read_llmc_param_pieces(in, header.version == kLlmcCheckpointBf16, header.shape.param_count(), path,
                         header.shape.to_string(), destination, pieces);
  return header.version;
}

void write_llmc_checkpoint(const std::filesystem::path& path, const GptShape& shape, std::span<const float> params,
                           int version) {
  if (params.size() != shape.param_count())
    throw std::invalid_argument("checkpoint " + path.string() + ": " + std::to_string(params.size()) +
                                " parameters given, shape " + shape.to_string() + " has " +
                                std::to_string(shape.param_count()));
  const std::vector<std::size_t> pieces = llmc_param_pieces(params.size());
  write_llmc_checkpoint_streamed(
      path, shape, version,
      [&](std::size_t offset, std::span<float> out) {
        std::copy_n(params.begin() + std::ptrdiff_t(offset), out.size(), out.begin());
      },
      pieces);
}

void write_llmc_checkpoint_streamed(const std::filesystem::path& path, const GptShape& shape, int version,
                                    const std::function<void(std::size_t, std::span<float>)>& fill,
                                    std::span<const std::size_t> pieces) {
  shape.validate();
  if (version != kLlmcCheckpointFp32 && version != kLlmcCheckpointBf16)
    throw std::invalid_argument("llm.c checkpoint version must be 3 (fp32) or 5 (bf16), not " +
                                std::to_string(version));
  std::array<std::int32_t, kLlmcHeaderInts> header{};
  header[0] = kLlmcCheckpointMagic;
  header[1] = version;
  const StateShapeFields fields = gpt_shape_fields(shape);
  std::copy(fields.begin(), fields.end(), header.begin() + 2);
  write_llmc_params_file(path, std::as_bytes(std::span(header)), version == kLlmcCheckpointBf16, shape.param_count(),
                         shape.to_string(), fill, pieces);
}

// ---- llm.c token shard ------------------------------------------------------------------------

std::vector<std::uint16_t> read_token_shard(const std::filesystem::path& path) {
  FileReader in(path);
  const auto header = read_llmc_header(in, kTokenShardFormat, kCheckpointFormat);
  if (header[1] != kLlmcTokenVersion)
    throw_format_error(path, "unknown version " + std::to_string(header[1]) + " (known: 1)");
  if (header[2] < 0) throw_format_error(path, "negative token count " + std::to_string(header[2]));
  const std::size_t count = std::size_t(header[2]);
  const std::size_t need = header_bytes + count * sizeof(std::uint16_t);
  if (in.size() != need)
    throw_format_error(path, "token count " + std::to_string(count) + " inconsistent with the file size: " +
                                 describe_size_mismatch(in.size(), need, "the header"));
  std::vector<std::uint16_t> tokens(count);
  in.read_exact(tokens.data(), count * sizeof(std::uint16_t));
  return tokens;
}

void write_token_shard(const std::filesystem::path& path, std::span<const std::uint16_t> tokens) {
  if (tokens.size() > std::size_t(INT32_MAX))
    throw std::invalid_argument("token shard " + path.string() + ": " + std::to_string(tokens.size()) +
                                " tokens do not fit the int32 count of the header");
  write_file_atomically(path, [&](std::ostream& os) {
    std::array<std::int32_t, kLlmcHeaderInts> header{};
    header[0] = kLlmcTokenMagic;
    header[1] = kLlmcTokenVersion;
    header[2] = std::int32_t(tokens.size());
    write_bytes(os, header.data(), sizeof header);
    write_bytes(os, tokens.data(), tokens.size_bytes());
  });
}

}  // namespace starzero
