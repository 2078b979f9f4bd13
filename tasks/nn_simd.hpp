#pragma once
// Vectorised CPU kernels of the nn set, on every SIMD path (runtime/simd.hpp): GELU, residual,
// layernorm and softmax + cross-entropy, forward and backward. tasks/nn_kernels_cpu.cpp runs them
// on the best path of the CPU; the tests run every path. Shapes and accumulation contracts are
// those of the same-named kernels in tasks/nn_kernels.hpp.
//
// Every path performs the same float operations in the same order, without FMA, so the paths give
// the same bits (tests/kernels/test_gpt_kernels.cpp checks each against the scalar path):
//  - element-wise math is written once over float or vector types (runtime/simd_math.hpp);
//  - sums over a row (layernorm's mean and variance and its two backward reductions, softmax's
//    Σexp) add element i into lane i mod 16 and then the 16 lanes pairwise, on every path;
//  - maxima are exact.
// GELU's tanh comes from one exponential, e = exp(-2u):
//   gelu(x)  = 0.5·x·(1 + tanh u) = x·s,  s = 1/(1 + e)       (no cancellation for x < 0)
//   gelu'(x) = s + 2·x·s·(1 − s)·u',      u = √(2/π)·(x + 0.044715·x³)
// and softmax's exp is the same Cephes expf (runtime/simd_math.hpp exp_clamped, relative error
// below 2e-7, arguments below -87.3 give about 1e-38 instead of less). Error bounds against
// double precision are stated and tested per kernel in tests/kernels/test_gpt_kernels.cpp.
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

// out = inp1 + inp2; dinp1 += dout, dinp2 += dout.
template <class T>
void residual_forward(SimdPath path, T* out, const T* inp1, const T* inp2, std::size_t n);
template <class T>
void residual_backward(SimdPath path, T* dinp1, T* dinp2, const T* dout, std::size_t n);

// Layernorm over rows [N, C]; bias may be null. mean, rstd [N] are written.
template <class T>
void layernorm_forward(SimdPath path, T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias,
                       int N, int C);
// Accumulates into whichever of dinp, dweight, dbias are not null.
template <class T>
void layernorm_backward(SimdPath path, T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const float* mean, const float* rstd, int N, int C);

// Rows of Vp logits of which the first V are real: probs (padding 0) and losses[n] = −log p[target],
// 0 for a masked (negative) target.
template <class T>
void softmax_crossentropy_forward(SimdPath path, float* losses, float* probs, const T* logits, const int* targets,
                                  int N, int V, int Vp);
// dlogits[n, i] += (probs[n, i] − [i = target[n]]) · dloss for i < V; the padding, and the rows of
// masked (negative) targets, are untouched.
template <class T>
void softmax_crossentropy_backward(SimdPath path, T* dlogits, const float* probs, const int* targets, int N, int V,
                                   int Vp, float dloss);

}  // namespace starzero::kernels::simd
