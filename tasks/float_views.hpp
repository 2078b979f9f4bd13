#pragma once
// Float views of T arrays (T = float or bf16) for the CPU kernels, which compute in float: the
// array itself when T is float, a converted copy in a scratch vector when T is bf16. Internal to
// tasks/: included by the CPU kernel files only.
#include <cstddef>
#include <vector>

#include "runtime/dtype.hpp"

namespace starzero::kernels {

// A read-only float view of p[0, n).
inline const float* float_view(const float* p, std::size_t, std::vector<float>&) { return p; }
inline const float* float_view(const bf16* p, std::size_t n, std::vector<float>& scratch) {
  scratch.resize(n);
  for (std::size_t i = 0; i < n; ++i) scratch[i] = to_float(p[i]);
  return scratch.data();
}

// A writable float accumulator for p[0, n): its current values; store_back() rounds a copy into
// the array once.
inline float* float_accum(float* p, std::size_t, std::vector<float>&) { return p; }
inline float* float_accum(bf16* p, std::size_t n, std::vector<float>& scratch) {
  scratch.resize(n);
  for (std::size_t i = 0; i < n; ++i) scratch[i] = to_float(p[i]);
  return scratch.data();
}
inline void store_back(float*, const float*, std::size_t) {}
inline void store_back(bf16* p, const float* acc, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) p[i] = from_float<bf16>(acc[i]);
}

// An output written from scratch (no accumulation): p itself when float, zeroed scratch otherwise.
inline float* float_out(float* p, std::size_t, std::vector<float>&) { return p; }
inline float* float_out(bf16*, std::size_t n, std::vector<float>& scratch) {
  scratch.assign(n, 0.0f);
  return scratch.data();
}

}  // namespace starzero::kernels
