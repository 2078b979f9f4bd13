#pragma once
// Shared by the llm.c file harnesses (fuzz_llmc_checkpoint.cpp, fuzz_llama_checkpoint.cpp,
// fuzz_token_shard.cpp, fuzz_llama_token_shard.cpp) and the seed corpus that feeds them
// (make_corpus.cpp): the input written as a file and read, the shapes of its files, and the check of what
// a reader returned.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>
#include <vector>

#include "fuzz/fuzz_common.hpp"
#include "models/gpt_layout.hpp"
#include "models/llama_layout.hpp"
#include "models/llmc_format.hpp"
#include "runtime/dtype.hpp"
#include "runtime/files.hpp"

namespace starzero::fuzz {

// What `read()` returns, or nothing when it rejects the file with FileFormatError (anything else
// escapes: a finding).
template <class Read>
auto try_read(Read&& read) -> std::optional<decltype(read())> {
  try {
    return read();
  } catch (const FileFormatError&) {
    return std::nullopt;
  }
}

// A harness's files in the scratch directory: the input, and a writer's target.
struct LlmcFiles {
  std::filesystem::path input, copy;
};

// The input written as `name`, and no copy left from an earlier input; file_magic reads the
// input's first int32 (0 when it is shorter).
inline LlmcFiles write_llmc_input(const char* name, const std::uint8_t* data, std::size_t size) {
  const LlmcFiles files{scratch_dir() / name, scratch_dir() / "copy.bin"};
  std::error_code ec;
  std::filesystem::remove(files.copy, ec);
  write_input(files.input, data, size);
  std::int32_t first = 0;
  if (size >= sizeof first) std::memcpy(&first, data, sizeof first);
  FUZZ_CHECK(file_magic(files.input) == first);
  return files;
}

inline GptShape gpt_shape(int maxT, int V, int Vp, int L, int NH, int C) { return GptShape{maxT, V, Vp, L, NH, C}; }

// Llama 3.1's header version, unscaled RoPE of theta 10000 (llama_shape computes H with
// tasks/nn_llama_kernels_cpu.cpp's llama_ffn_hidden).
inline LlamaShape llama_shape(int L, int C, int NH, int NKV, int V, int maxT, float multiplier, int multiple_of) {
  return starzero::llama_shape(L, C, NH, NKV, V, maxT, 10000.0f, false, multiplier, multiple_of, 3, 1);
}

// The shapes of the corpus's valid "tiny" checkpoints: GPT maxT 4, V 5 padded to 8, L 1, NH 2,
// C 4; Llama L 1, C 4, NH 2, NKV 1, V 5, maxT 4, H = 12 (244 parameters).
inline GptShape tiny_gpt_shape() { return gpt_shape(4, 5, 8, 1, 2, 4); }
inline LlamaShape tiny_llama_shape() { return llama_shape(1, 4, 2, 1, 5, 4, 0.0f, 4); }

// The parameters a reader returned are the file's body bit for bit: fp32 (`elem` 4) as stored,
// bf16 (`elem` 2) widened exactly.
inline void check_params_are_body(const std::uint8_t* body, std::size_t elem, const std::vector<float>& params) {
  for (std::size_t i = 0; i < params.size(); ++i) {
    std::uint32_t bits;
    if (elem == sizeof(float)) {
      std::memcpy(&bits, body + i * elem, sizeof bits);
    } else {
      bf16_bits half;
      std::memcpy(&half, body + i * elem, sizeof half);
      bits = std::uint32_t(half) << 16;
    }
    FUZZ_CHECK(std::memcmp(&bits, &params[i], sizeof bits) == 0);
  }
}

}  // namespace starzero::fuzz
