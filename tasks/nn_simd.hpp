#pragma once
// Vectorised CPU element-wise kernels of the nn set: GELU forward and backward, on every SIMD path
// (runtime/simd.hpp). tasks/nn_kernels_cpu.cpp runs them on the best path of the CPU; the tests
// run every path.
//
// The tanh of GELU's tanh approximation is computed from one exponential, e = exp(-2u):
//   gelu(x)  = 0.5·x·(1 + tanh u) = x·s,  s = 1/(1 + e)       (no cancellation for x < 0)
//   gelu'(x) = s + 2·x·s·(1 − s)·u',      u = √(2/π)·(x + 0.044715·x³)
// with exp a Cody-Waite range reduction and a degree-6 polynomial (Cephes' expf), its argument
// clamped to [-87.3, 88.3]. Every path performs the same float operations in the same order and
// without FMA (-ffp-contract=off), so the paths give the same bits; against a double-precision
// GELU the error is below 2e-6 relative + 1e-7 absolute (tests/test_gpt_kernels.cpp).
#include <cstddef>

#include "runtime/dtype.hpp"
#include "runtime/simd.hpp"

namespace starzero::kernels::simd {

// out[i] = gelu(inp[i]).
template <class T>
void gelu_forward(SimdPath path, T* out, const T* inp, std::size_t n);
// dinp[i] += gelu'(inp[i]) · dout[i].
template <class T>
void gelu_backward(SimdPath path, T* dinp, const T* inp, const T* dout, std::size_t n);

}  // namespace starzero::kernels::simd
