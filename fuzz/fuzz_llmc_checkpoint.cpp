// libFuzzer harness: llm.c GPT-2 checkpoints (models/gpt_files.hpp), versions 3 (fp32) and 5
// (bf16). The input is the file. Every reader is called on it: the header check with and without
// an expected shape, the full read with and without one, and the streamed read into pieces chosen
// from the input. A reader may only reject the file with FileFormatError; when they accept it,
// they must agree with each other and with the raw bytes, and the file must round trip through
// the writer.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "fuzz/fuzz_common.hpp"
#include "fuzz/fuzz_llmc.hpp"
#include "models/gpt_files.hpp"
#include "runtime/dtype.hpp"

using namespace starzero;

namespace {

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size_bytes()) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fuzz::LlmcFiles files = fuzz::write_llmc_input("model.bin", data, size);
  const GptShape tiny = fuzz::tiny_gpt_shape();

  const auto header = fuzz::try_read([&] { return GptCheckpointFile::read_header(files.input); });
  const auto full = fuzz::try_read([&] { return GptCheckpointFile::read(files.input); });
  const auto header_tiny = fuzz::try_read([&] { return GptCheckpointFile::read_header(files.input, tiny); });
  const auto full_tiny = fuzz::try_read([&] { return GptCheckpointFile::read(files.input, tiny); });
  // The header check makes the same checks as the full read, the file's size included.
  FUZZ_CHECK(header.has_value() == full.has_value());
  FUZZ_CHECK(header_tiny.has_value() == full_tiny.has_value());
  FUZZ_CHECK(!full_tiny || (full && full->shape == tiny));
  FUZZ_CHECK(!full || full->shape != tiny || full_tiny);
  if (!full) return 0;

  // Accepted: the header and the values are the file's bytes.
  const std::size_t count = full->shape.param_count();
  FUZZ_CHECK(header->shape == full->shape && header->version == full->version && header->params.empty());
  FUZZ_CHECK(full->version == kLlmcCheckpointFp32 || full->version == kLlmcCheckpointBf16);
  const std::size_t elem = full->version == kLlmcCheckpointFp32 ? sizeof(float) : sizeof(bf16_bits);
  const std::size_t header_bytes = kLlmcHeaderBytes;
  FUZZ_CHECK(size == header_bytes + count * elem);
  FUZZ_CHECK(full->params.size() == count);
  fuzz::check_params_are_body(data + header_bytes, elem, full->params);
  if (full_tiny) FUZZ_CHECK(same_bits(full_tiny->params, full->params));

  // Streamed: pieces of a size chosen by the last byte, a leading empty piece.
  const std::size_t step = 1 + std::size_t(data[size - 1]) % 131;
  std::vector<std::size_t> pieces{0};
  for (std::size_t done = 0; done < count; done += pieces.back()) pieces.push_back(std::min(step, count - done));
  std::vector<float> streamed(count, -1.0f);
  const int version = GptCheckpointFile::read_streamed(
      files.input, full->shape,
      [&](std::size_t offset, std::size_t n) {
        FUZZ_CHECK(offset + n <= count);
        return std::span<float>(streamed.data() + offset, n);
      },
      pieces);
  FUZZ_CHECK(version == full->version);
  FUZZ_CHECK(same_bits(streamed, full->params));
  // Pieces that do not add up to the shape: std::invalid_argument, nothing read.
  pieces.push_back(1);
  try {
    GptCheckpointFile::read_streamed(
        files.input, full->shape, [&](std::size_t, std::size_t) -> std::span<float> { std::abort(); }, pieces);
    FUZZ_CHECK(false);
  } catch (const std::invalid_argument&) {
  }

  // The writer stores the same bytes (bf16: a NaN may come back quiet).
  GptCheckpointFile::write(files.copy, full->shape, full->params, full->version);
  const auto again = fuzz::try_read([&] { return GptCheckpointFile::read(files.copy); });
  FUZZ_CHECK(again && again->shape == full->shape && again->version == full->version);
  if (full->version == kLlmcCheckpointFp32) {
    FUZZ_CHECK(same_bits(again->params, full->params));
  } else {
    for (std::size_t i = 0; i < count; ++i)
      FUZZ_CHECK(std::memcmp(&again->params[i], &full->params[i], sizeof(float)) == 0 || std::isnan(full->params[i]));
  }
  return 0;
}
