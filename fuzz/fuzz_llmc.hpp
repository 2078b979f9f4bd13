#pragma once
// Shared by the llm.c checkpoint harnesses (fuzz_llmc_checkpoint.cpp, fuzz_llama_checkpoint.cpp).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz/fuzz_common.hpp"
#include "runtime/dtype.hpp"

namespace starzero::fuzz {

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
