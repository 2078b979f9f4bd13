// libFuzzer harness: llm.c Llama 3 checkpoints (models/llama_files.hpp), magic 20240803, versions
// 3 (fp32) and 5 (bf16). The input is the file. Every reader is called on it: the header check
// with and without an expected shape, the full read, and the streamed read into pieces chosen from
// the input. A reader may only reject the file with FileFormatError; when they accept it, they
// must accept exactly the files whose header llama_shape_from_header accepts and whose size that
// header implies, agree with each other and with the raw bytes, and the file must round trip
// through both writers (atomically: a writer that fails leaves the old file and no temporary).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <vector>

#include "fuzz/fuzz_common.hpp"
#include "fuzz/fuzz_llmc.hpp"
#include "models/llama_files.hpp"
#include "models/llmc_format.hpp"
#include "runtime/dtype.hpp"
#include "tasks/nn_llama_kernels.hpp"

using namespace starzero;
namespace fs = std::filesystem;

namespace {

struct WriterFailed {};  // thrown from a writer's fill to test that a failed write changes nothing

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size_bytes()) == 0);
}

// Nothing in the scratch directory but `names` (a writer leaves no temporary file behind).
bool only_files(std::initializer_list<const char*> names) {
  std::size_t n = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(fuzz::scratch_dir())) {
    ++n;
    if (std::none_of(names.begin(), names.end(), [&](const char* name) { return entry.path().filename() == name; }))
      return false;
  }
  return n == names.size();
}

// Meta's FeedForward size without the int conversion of kernels::llama_ffn_hidden: the hidden
// size the header's fields stand for, however large.
long long ffn_hidden_unwrapped(long long C, float multiplier, long long multiple_of) {
  long long hidden = static_cast<long long>(2.0 * double(4 * C) / 3.0);
  if (multiplier > 0.0f) hidden = static_cast<long long>(double(multiplier) * double(hidden));
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const LlamaShape tiny = fuzz::tiny_llama_shape();
  const fuzz::LlmcFiles files = fuzz::write_llmc_input("model.bin", data, size);

  const auto header = fuzz::try_read([&] { return LlamaCheckpointFile::read_header(files.input); });
  const auto full = fuzz::try_read([&] { return LlamaCheckpointFile::read(files.input); });
  const auto header_tiny = fuzz::try_read([&] { return LlamaCheckpointFile::read_header(files.input, tiny); });
  // The header check makes the same checks as the full read, the file's size included; with an
  // expected shape it accepts exactly the files of that model.
  FUZZ_CHECK(header.has_value() == full.has_value());
  FUZZ_CHECK(header_tiny.has_value() == (full && full->shape.same_model(tiny)));

  // What the header alone says: accepted exactly when magic, version and shape are right and the
  // size is the one they imply.
  std::optional<LlamaShape> described;
  LlmcHeaderWords h{};
  if (size >= kLlmcHeaderBytes) {
    std::memcpy(h.data(), data, kLlmcHeaderBytes);
    described = fuzz::try_read([&] { return llama_shape_from_header(h, files.input); });
  }
  const bool header_ok = described && h[0] == kLlamaCheckpointMagic &&
                         (h[1] == kLlmcCheckpointFp32 || h[1] == kLlmcCheckpointBf16);
  const std::size_t elem = h[1] == kLlmcCheckpointFp32 ? sizeof(float) : sizeof(bf16_bits);
  FUZZ_CHECK(full.has_value() == (header_ok && size == kLlmcHeaderBytes + described->param_count() * elem));
  if (!full) return 0;

  // Accepted: the shape is the header's, H the one its fields stand for (no wrap-around), and the
  // values are the file's bytes.
  const LlamaShape& shape = full->shape;
  const std::size_t count = shape.param_count();
  FUZZ_CHECK(header->shape.same_model(shape) && header->version == full->version && header->params.empty());
  FUZZ_CHECK(header_tiny.has_value() == shape.same_model(tiny));
  FUZZ_CHECK(full->version == h[1]);
  FUZZ_CHECK(shape.max_seq == h[2] && shape.vocab == h[3] && shape.layers == h[4] && shape.heads == h[5] &&
             shape.kv_heads == h[6] && shape.channels == h[7] && shape.multiple_of == h[9] &&
             shape.major_version == h[14] && shape.minor_version == h[15]);
  FUZZ_CHECK(h[10] == 0 && shape.norm_eps == 1e-5f && shape.rope_theta == float(h[11]) &&
             shape.use_scaled_rope == (h[12] == 1));
  FUZZ_CHECK(float(h[8]) == shape.ffn_dim_multiplier || double(h[8]) == std::trunc(double(shape.ffn_dim_multiplier)));
  FUZZ_CHECK(ffn_hidden_unwrapped(shape.channels, shape.ffn_dim_multiplier, shape.multiple_of) == shape.ffn_hidden);
  FUZZ_CHECK(full->params.size() == count);
  fuzz::check_params_are_body(data + kLlmcHeaderBytes, elem, full->params);

  // Streamed: pieces of a size chosen by the last byte, a leading empty piece.
  const std::size_t step = 1 + std::size_t(data[size - 1]) % 97;
  std::vector<std::size_t> pieces{0};
  for (std::size_t done = 0; done < count; done += pieces.back()) pieces.push_back(std::min(step, count - done));
  std::vector<float> streamed(count, -1.0f);
  const auto into_streamed = [&](std::size_t offset, std::size_t n) {
    FUZZ_CHECK(offset + n <= count);
    return std::span<float>(streamed.data() + offset, n);
  };
  FUZZ_CHECK(LlamaCheckpointFile::read_streamed(files.input, shape, into_streamed, pieces) == full->version);
  FUZZ_CHECK(same_bits(streamed, full->params));
  // Another model expected: FileFormatError before any value is read.
  if (!shape.same_model(tiny)) {
    try {
      LlamaCheckpointFile::read_streamed(
          files.input, tiny, [&](std::size_t, std::size_t) -> std::span<float> { std::abort(); }, llmc_param_pieces(tiny.param_count()));
      FUZZ_CHECK(false);
    } catch (const FileFormatError&) {
    }
  }
  // Pieces that do not add up to the shape: std::invalid_argument, nothing read.
  pieces.push_back(1);
  try {
    LlamaCheckpointFile::read_streamed(
        files.input, shape, [&](std::size_t, std::size_t) -> std::span<float> { std::abort(); }, pieces);
    FUZZ_CHECK(false);
  } catch (const std::invalid_argument&) {
  }
  pieces.pop_back();
  // A destination of the wrong size: std::invalid_argument.
  try {
    LlamaCheckpointFile::read_streamed(
        files.input, shape, [&](std::size_t, std::size_t n) { return std::span<float>(streamed.data(), n == 0 ? 1 : n - 1); },
        pieces);
    FUZZ_CHECK(false);
  } catch (const std::invalid_argument&) {
  }

  // The writer stores the header of the shape and the same values (bf16: a NaN may come back
  // quiet); reading that file gives the same model.
  LlamaCheckpointFile::write(files.copy, shape, full->params, full->version);
  FUZZ_CHECK(only_files({"model.bin", "copy.bin"}));
  const std::vector<std::uint8_t> written = fuzz::file_bytes(files.copy);
  FUZZ_CHECK(written.size() == size);
  const LlmcHeaderWords canonical = llama_checkpoint_header(shape, full->version);
  FUZZ_CHECK(std::memcmp(written.data(), canonical.data(), kLlmcHeaderBytes) == 0);
  for (std::size_t i : {0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 12, 14, 15}) FUZZ_CHECK(canonical[i] == h[i]);
  // The float fields come back as they were when a float holds them exactly.
  if (double(float(h[8])) == double(h[8])) FUZZ_CHECK(canonical[8] == h[8]);
  if (double(float(h[11])) == double(h[11])) FUZZ_CHECK(canonical[11] == h[11]);
  if (elem == sizeof(float)) {
    FUZZ_CHECK(std::memcmp(written.data() + kLlmcHeaderBytes, data + kLlmcHeaderBytes, size - kLlmcHeaderBytes) == 0);
  } else {
    for (std::size_t i = 0; i < count; ++i)
      FUZZ_CHECK(std::memcmp(written.data() + kLlmcHeaderBytes + 2 * i, data + kLlmcHeaderBytes + 2 * i, 2) == 0 ||
                 std::isnan(full->params[i]));
  }
  const auto again = fuzz::try_read([&] { return LlamaCheckpointFile::read(files.copy); });
  FUZZ_CHECK(again && again->shape.same_model(shape) && again->version == full->version);
  if (elem == sizeof(float)) FUZZ_CHECK(same_bits(again->params, full->params));

  // The streamed writer, with the same pieces, writes the same bytes.
  LlamaCheckpointFile::write_streamed(
      files.copy, shape, full->version,
      [&](std::size_t offset, std::span<float> out) {
        FUZZ_CHECK(offset + out.size() <= count);
        std::copy_n(full->params.begin() + std::ptrdiff_t(offset), out.size(), out.begin());
      },
      pieces);
  FUZZ_CHECK(fuzz::file_bytes(files.copy) == written);
  // A write that fails part-way (in the last piece) leaves the old file as it was and no
  // temporary file.
  try {
    LlamaCheckpointFile::write_streamed(
        files.copy, shape, full->version,
        [&](std::size_t offset, std::span<float> out) {
          if (offset + out.size() == count) throw WriterFailed{};
          std::fill(out.begin(), out.end(), 1.0f);
        },
        pieces);
    FUZZ_CHECK(false);
  } catch (const WriterFailed&) {
  }
  FUZZ_CHECK(only_files({"model.bin", "copy.bin"}));
  FUZZ_CHECK(fuzz::file_bytes(files.copy) == written);
  // Pieces that do not add up: std::invalid_argument, nothing written.
  pieces.push_back(1);
  try {
    LlamaCheckpointFile::write_streamed(
        files.copy, shape, full->version, [&](std::size_t, std::span<float>) { std::abort(); }, pieces);
    FUZZ_CHECK(false);
  } catch (const std::invalid_argument&) {
  }
  FUZZ_CHECK(fuzz::file_bytes(files.copy) == written);
  return 0;
}
