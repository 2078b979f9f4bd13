#include "models/gpt_files.hpp"

#include <algorithm>
#include <array>
#include <bit>

#include "models/llmc_format.hpp"
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

// The magics a wrong one may be, named in the message.
constexpr LlmcOtherMagic kNotCheckpoint[] = {{kLlmcTokenMagic, "token shard"}};
constexpr LlmcOtherMagic kNotTokenShard[] = {{kLlmcCheckpointMagic, "checkpoint"}};

// Reads and checks the header and the file's size; `in` is left at the first parameter.
LlmcCheckpoint read_checkpoint_header(FileReader& in, const GptShape* expected) {
  const std::filesystem::path& path = in.path();
  const LlmcHeaderWords header = read_llmc_header(in, kLlmcCheckpointMagic, "llm.c checkpoint", kNotCheckpoint);
  check_llmc_checkpoint_version(path, header[1]);
  LlmcCheckpoint ckpt;
  ckpt.version = header[1];
  StateShapeFields fields{};
  std::copy_n(header.begin() + 2, fields.size(), fields.begin());
  ckpt.shape = GptShape::from_fields(fields);
  check_shape(path, ckpt.shape);
  // Before the size check, so a file of another model is reported as such.
  if (expected) check_expected(path, ckpt.shape, *expected);
  check_llmc_checkpoint_size(in, ckpt.version, ckpt.shape.param_count(), ckpt.shape.to_string());
  return ckpt;
}

auto header_reader(const GptShape* expected) {
  return [expected](FileReader& in) { return read_checkpoint_header(in, expected); };
}

}  // namespace

LlmcCheckpoint read_llmc_checkpoint(const std::filesystem::path& path) {
  return read_llmc_checkpoint_whole<LlmcCheckpoint>(path, header_reader(nullptr));
}

LlmcCheckpoint read_llmc_checkpoint_header(const std::filesystem::path& path) {
  FileReader in(path);
  return read_checkpoint_header(in, nullptr);
}

LlmcCheckpoint read_llmc_checkpoint_header(const std::filesystem::path& path, const GptShape& expected) {
  FileReader in(path);
  return read_checkpoint_header(in, &expected);
}

LlmcCheckpoint read_llmc_checkpoint(const std::filesystem::path& path, const GptShape& expected) {
  return read_llmc_checkpoint_whole<LlmcCheckpoint>(path, header_reader(&expected));
}

int read_llmc_checkpoint_streamed(const std::filesystem::path& path, const GptShape& expected,
                                  const std::function<std::span<float>(std::size_t, std::size_t)>& destination,
                                  std::span<const std::size_t> pieces) {
  return read_llmc_checkpoint_pieces<LlmcCheckpoint>(path, header_reader(&expected), destination, pieces);
}

void write_llmc_checkpoint(const std::filesystem::path& path, const GptShape& shape, std::span<const float> params,
                           int version) {
  write_llmc_checkpoint_whole(path, params, shape.param_count(), shape.to_string(), [&](const auto& fill, auto pieces) {
    write_llmc_checkpoint_streamed(path, shape, version, fill, pieces);
  });
}

void write_llmc_checkpoint_streamed(const std::filesystem::path& path, const GptShape& shape, int version,
                                    const std::function<void(std::size_t, std::span<float>)>& fill,
                                    std::span<const std::size_t> pieces) {
  shape.validate();
  if (version != kLlmcCheckpointFp32 && version != kLlmcCheckpointBf16)
    throw std::invalid_argument("llm.c checkpoint version must be 3 (fp32) or 5 (bf16), not " +
                                std::to_string(version));
  LlmcHeaderWords header{};
  header[0] = kLlmcCheckpointMagic;
  header[1] = version;
  const StateShapeFields fields = shape.fields();
  std::copy(fields.begin(), fields.end(), header.begin() + 2);
  write_llmc_params_file(path, std::as_bytes(std::span(header)), version == kLlmcCheckpointBf16, shape.param_count(),
                         shape.to_string(), fill, pieces);
}

// ---- llm.c token shard ------------------------------------------------------------------------

std::vector<std::uint16_t> read_token_shard(const std::filesystem::path& path) {
  return read_llmc_token_shard<std::uint16_t>(path, kLlmcTokenMagic, "llm.c token shard", kLlmcTokenVersion,
                                              kNotTokenShard);
}

void write_token_shard(const std::filesystem::path& path, std::span<const std::uint16_t> tokens) {
  write_llmc_token_shard(path, kLlmcTokenMagic, kLlmcTokenVersion, tokens,
                         std::to_string(tokens.size()) + " tokens do not fit the int32 count of the header");
}

}  // namespace starzero
