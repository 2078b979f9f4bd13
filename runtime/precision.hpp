#pragma once
// The training precision: what parameters, gradients and activations are kept in (the optimizer
// state is fp32 in every one). One type for the flags, the run, the planner, the reports and the
// metrics; DType (runtime/dtype.hpp) stays the element type of a tensor, which also holds token ids.
#include <cstdint>
#include <optional>
#include <string_view>

#include "runtime/dtype.hpp"

namespace starzero {

// fp16 is the planner's only (2 bytes, as bf16): runs train in bf16 or fp32.
enum class Precision : std::uint8_t { bf16, fp16, fp32 };

constexpr int precision_bytes(Precision p) { return p == Precision::fp32 ? 4 : 2; }

// "bf16", "fp16", "fp32": the spelling of --precision, of the reports and of the metrics file.
constexpr std::string_view precision_name(Precision p) {
  return p == Precision::bf16 ? "bf16" : p == Precision::fp16 ? "fp16" : "fp32";
}

constexpr std::optional<Precision> precision_from_name(std::string_view name) {
  if (name == "bf16") return Precision::bf16;
  if (name == "fp16") return Precision::fp16;
  if (name == "fp32") return Precision::fp32;
  return std::nullopt;
}

// The element type a tensor of this precision is stored in (fp16 counts as bf16: same size), and
// back.
constexpr DType storage_dtype(Precision p) { return p == Precision::fp32 ? DType::f32 : DType::bf16; }
constexpr Precision precision_of(DType t) { return t == DType::f32 ? Precision::fp32 : Precision::bf16; }

}  // namespace starzero
