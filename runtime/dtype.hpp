#pragma once
// Element types of tensors and collectives, and the bf16 <-> fp32 conversions every folder uses.
// Plain C++17: CUDA sources include it too.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace starzero {

// f32 and bf16 are the floating-point types of tensors and collectives; i32 holds token ids.
enum class DType : std::uint8_t { f32, bf16, i32 };

constexpr std::size_t dtype_size(DType t) { return t == DType::bf16 ? 2 : 4; }
constexpr std::string_view dtype_name(DType t) {
  return t == DType::f32 ? "fp32" : t == DType::bf16 ? "bf16" : "int32";
}

// bf16 is stored as the upper 16 bits of an IEEE fp32 value.
using bf16_bits = std::uint16_t;

inline float bf16_to_float(bf16_bits b) {
  const std::uint32_t u = std::uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round to nearest, ties to even; NaN stays a (quiet) NaN instead of rounding into infinity.
inline bf16_bits float_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_bits((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16_bits(u >> 16);
}

// A bf16 element as a distinct type, so kernels can be templated on their storage type
// (float or bf16) and always compute in float.
struct bf16 {
  bf16_bits bits;
};
static_assert(sizeof(bf16) == 2);

inline float to_float(float x) { return x; }
inline float to_float(bf16 x) { return bf16_to_float(x.bits); }
template <class T>
T from_float(float x);
template <>
inline float from_float<float>(float x) {
  return x;
}
template <>
inline bf16 from_float<bf16>(float x) {
  return bf16{float_to_bf16(x)};
}

}  // namespace starzero
