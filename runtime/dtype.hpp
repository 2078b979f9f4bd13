#pragma once
// Element types of tensors and collectives, and the bf16 <-> fp32 conversions every folder uses.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace starzero {

enum class DType : std::uint8_t { f32, bf16 };

constexpr std::size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }
constexpr std::string_view dtype_name(DType t) { return t == DType::f32 ? "fp32" : "bf16"; }

// bf16 is stored as the upper 16 bits of an IEEE fp32 value.
using bf16_bits = std::uint16_t;

inline float bf16_to_float(bf16_bits b) { return std::bit_cast<float>(std::uint32_t(b) << 16); }

// Round to nearest, ties to even; NaN stays a (quiet) NaN instead of rounding into infinity.
inline bf16_bits float_to_bf16(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_bits((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16_bits(u >> 16);
}

}  // namespace starzero
