// The vectorised nn kernels on every SIMD path (tasks/nn_simd.hpp). Each kernel is a struct whose
// run<lanes>() is written once over the value types of runtime/simd_math.hpp; dispatch() runs it
// inside a function carrying the path's target attribute (lanes 1: scalar, 8: AVX2, 16: AVX-512).
// This file is compiled with -ffp-contract=off, so no path fuses a multiply and an add: the same
// bits on every path, and an element's result does not depend on where a vector starts.
//
// bf16 storage: rows or chunks are widened to float (exact), computed as float, and rounded once
// on store.
#include "tasks/nn_simd.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime/simd_math.hpp"
#include "tasks/float_views.hpp"
#include "tasks/loss_mask.hpp"

namespace starzero::kernels::simd {

namespace {

using namespace starzero::simd_math;
using std::size_t;

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;
constexpr float kLayerNormEps = 1e-5f;  // as the CUDA kernels and llm.c

// s = 1/(1 + exp(-2u)) = (1 + tanh u)/2.
template <class V>
[[gnu::always_inline]] inline V gelu_sigmoid(V x) {
  using O = Ops<V>;
  const V u = O::splat(kGeluScale) * (x + O::splat(kGeluCubic) * x * x * x);
  return O::splat(1.0f) / (O::splat(1.0f) + exp_clamped(O::splat(-2.0f) * u));
}

template <class V>
[[gnu::always_inline]] inline V gelu(V x) {
  return x * gelu_sigmoid(x);
}

template <class V>
[[gnu::always_inline]] inline V gelu_grad(V x) {
  using O = Ops<V>;
  const V s = gelu_sigmoid(x);
  const V du_dx = O::splat(kGeluScale) * (O::splat(1.0f) + O::splat(3.0f * kGeluCubic) * x * x);
  return s + O::splat(2.0f) * x * s * (O::splat(1.0f) - s) * du_dx;
}

// An element-wise kernel from its per-element step: Step::at(V{}, i, out, in) computes elements
// [i, i + lanes(V)) of the `outs` output arrays from the `ins` input arrays (all float). run()
// takes (outputs..., inputs..., n), all float or all bf16; for bf16, chunks of kChunk elements
// are widened into float buffers (the outputs too when the kernel accumulates into them),
// computed, and the outputs rounded once.
constexpr size_t kChunk = 512;

template <class Step, size_t outs, size_t ins, bool accumulates>
struct Elementwise {
  template <int lanes>
  [[gnu::always_inline]] static void floats(size_t n, float* const* out, const float* const* in) {
    for_each_element<lanes>(n, [&](auto v, size_t i) SZ_SIMD_INLINE { Step::at(v, i, out, in); });
  }

  template <int lanes, class T>
  [[gnu::always_inline]] static void on_chunks(size_t n, T* const* out, const T* const* in) {
    if constexpr (std::is_same_v<T, float>) {
      floats<lanes>(n, out, in);
    } else {
      float fo[outs][kChunk], fi[ins][kChunk];
      float* o[outs];
      const float* p[ins];
      for (size_t k = 0; k < outs; ++k) o[k] = fo[k];
      for (size_t k = 0; k < ins; ++k) p[k] = fi[k];
      for (size_t b = 0; b < n; b += kChunk) {
        const size_t m = std::min(kChunk, n - b);
        for (size_t k = 0; k < ins; ++k)
          for (size_t i = 0; i < m; ++i) fi[k][i] = to_float(in[k][b + i]);
        for (size_t k = 0; k < outs; ++k)
          for (size_t i = 0; i < m; ++i) fo[k][i] = accumulates ? to_float(out[k][b + i]) : 0.0f;
        floats<lanes>(m, o, p);
        for (size_t k = 0; k < outs; ++k)
          for (size_t i = 0; i < m; ++i) out[k][b + i] = from_float<bf16>(fo[k][i]);
      }
    }
  }

  template <int lanes, class T, class... Rest>
  static void run(T* first, Rest... rest) {
    const std::tuple<T*, Rest...> args(first, rest...);
    static_assert(sizeof...(Rest) == outs + ins, "the outputs, the inputs, then the count");
    T* out[outs];
    const T* in[ins];
    [&]<size_t... k>(std::index_sequence<k...>) { ((out[k] = std::get<k>(args)), ...); }
    (std::make_index_sequence<outs>{});
    [&]<size_t... k>(std::index_sequence<k...>) { ((in[k] = std::get<outs + k>(args)), ...); }
    (std::make_index_sequence<ins>{});
    on_chunks<lanes>(std::get<outs + ins>(args), out, in);
  }
};

struct GeluForwardStep {
  [[gnu::always_inline]] static void at(auto v, size_t i, float* const* out, const float* const* in) {
    using O = Ops<decltype(v)>;
    O::store(out[0] + i, gelu(O::load(in[0] + i)));
  }
};
struct GeluBackwardStep {  // out: dinp, in: inp, dout
  [[gnu::always_inline]] static void at(auto v, size_t i, float* const* out, const float* const* in) {
    using O = Ops<decltype(v)>;
    O::store(out[0] + i, O::load(out[0] + i) + gelu_grad(O::load(in[0] + i)) * O::load(in[1] + i));
  }
};
struct ResidualForwardStep {
  [[gnu::always_inline]] static void at(auto v, size_t i, float* const* out, const float* const* in) {
    using O = Ops<decltype(v)>;
    O::store(out[0] + i, O::load(in[0] + i) + O::load(in[1] + i));
  }
};
struct ResidualBackwardStep {  // out: dinp1, dinp2, in: dout
  [[gnu::always_inline]] static void at(auto v, size_t i, float* const* out, const float* const* in) {
    using O = Ops<decltype(v)>;
    const auto g = O::load(in[0] + i);
    O::store(out[0] + i, O::load(out[0] + i) + g);
    O::store(out[1] + i, O::load(out[1] + i) + g);
  }
};
using GeluForward = Elementwise<GeluForwardStep, 1, 1, false>;
using GeluBackward = Elementwise<GeluBackwardStep, 1, 2, true>;
using ResidualForward = Elementwise<ResidualForwardStep, 1, 2, false>;
using ResidualBackward = Elementwise<ResidualBackwardStep, 2, 1, true>;

// Layernorm over rows of C: mean and variance as sums in the fixed order of sum16.
struct LayernormForward {
  template <int lanes, class T>
  static void run(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias, int N, int C) {
    const size_t c = size_t(std::max(C, 0));
    std::vector<float> s_w, s_b, s_x, s_o;
    const float* w = float_view(weight, c, s_w);
    const float* b = bias != nullptr ? float_view(bias, c, s_b) : nullptr;
    for (int n = 0; n < N; ++n) {
      const float* x = float_view(inp + size_t(n) * c, c, s_x);
      const float m =
          sum16<lanes>(c, [&](auto v, size_t i) SZ_SIMD_INLINE { return Ops<decltype(v)>::load(x + i); }) / float(C);
      const float var = sum16<lanes>(c,
                                     [&](auto v, size_t i) SZ_SIMD_INLINE {
                                       using O = Ops<decltype(v)>;
                                       const auto d = O::load(x + i) - O::splat(m);
                                       return d * d;
                                     }) /
                        float(C);
      const float s = 1.0f / std::sqrt(var + kLayerNormEps);
      float* o = float_out(out + size_t(n) * c, c, s_o);
      for_each_element<lanes>(c, [&](auto v, size_t i) SZ_SIMD_INLINE {
        using O = Ops<decltype(v)>;
        const auto norm = (O::load(x + i) - O::splat(m)) * O::splat(s);
        auto y = norm * O::load(w + i);
        if (b != nullptr) y = y + O::load(b + i);
        O::store(o + i, y);
      });
      store_back(out + size_t(n) * c, o, c);
      mean[n] = m;
      rstd[n] = s;
    }
  }
};

// dinp (when given) row by row; dweight and dbias (when given) summed over the rows in row order
// in float, each element on its own, then added to the T arrays once.
struct LayernormBackward {
  template <int lanes, class T>
  static void run(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const float* mean,
                  const float* rstd, int N, int C) {
    const size_t c = size_t(std::max(C, 0));
    const bool params = dweight != nullptr || dbias != nullptr;
    std::vector<float> dw(params ? c : 0, 0.0f), db(dw.size(), 0.0f), norm(c), s_w, s_x, s_g, s_d;
    const float* w = dinp != nullptr ? float_view(weight, c, s_w) : nullptr;
    for (int n = 0; n < N; ++n) {
      const float* x = float_view(inp + size_t(n) * c, c, s_x);
      const float* g = float_view(dout + size_t(n) * c, c, s_g);
      const float m = mean[n], s = rstd[n];
      for_each_element<lanes>(c, [&](auto v, size_t i) SZ_SIMD_INLINE {
        using O = Ops<decltype(v)>;
        O::store(norm.data() + i, (O::load(x + i) - O::splat(m)) * O::splat(s));
      });
      if (params) {
        for_each_element<lanes>(c, [&](auto v, size_t i) SZ_SIMD_INLINE {
          using O = Ops<decltype(v)>;
          const auto gi = O::load(g + i);
          O::store(db.data() + i, O::load(db.data() + i) + gi);
          O::store(dw.data() + i, O::load(dw.data() + i) + O::load(norm.data() + i) * gi);
        });
      }
      if (dinp == nullptr) continue;
      // two reductions: mean(w · dout) and mean(w · dout · norm)
      const float dnorm_mean = sum16<lanes>(c,
                                            [&](auto v, size_t i) SZ_SIMD_INLINE {
                                              using O = Ops<decltype(v)>;
                                              return O::load(w + i) * O::load(g + i);
                                            }) /
                               float(C);
      const float dnorm_norm_mean = sum16<lanes>(c,
                                                 [&](auto v, size_t i) SZ_SIMD_INLINE {
                                                   using O = Ops<decltype(v)>;
                                                   return O::load(w + i) * O::load(g + i) * O::load(norm.data() + i);
                                                 }) /
                                    float(C);
      float* d = float_accum(dinp + size_t(n) * c, c, s_d);
      for_each_element<lanes>(c, [&](auto v, size_t i) SZ_SIMD_INLINE {
        using O = Ops<decltype(v)>;
        const auto dnorm = O::load(w + i) * O::load(g + i);
        const auto dx =
            (dnorm - O::splat(dnorm_mean) - O::load(norm.data() + i) * O::splat(dnorm_norm_mean)) * O::splat(s);
        O::store(d + i, O::load(d + i) + dx);
      });
      store_back(dinp + size_t(n) * c, d, c);
    }
    for (size_t i = 0; i < c && params; ++i) {
      if (dweight != nullptr) dweight[i] = from_float<T>(to_float(dweight[i]) + dw[i]);
      if (dbias != nullptr) dbias[i] = from_float<T>(to_float(dbias[i]) + db[i]);
    }
  }
};

// Softmax over the first V of Vp logits per row, with the loss −log softmax[target]:
// e = exp(l − max) (exp_clamped), Σe by sum16, probs = e · (1/Σe), padding zero.
struct CrossEntropyForward {
  template <int lanes, class T>
  static void run(float* losses, float* probs, const T* logits, const int* targets, int N, int V, int Vp) {
    const size_t v_count = size_t(std::max(V, 0)), row = size_t(std::max(Vp, 0));
    std::vector<float> s_l;
    for (int n = 0; n < N; ++n) {
      const float* l = float_view(logits + size_t(n) * row, v_count, s_l);
      float* p = probs + size_t(n) * row;
      const float maxval = max_of<lanes>(l, v_count);
      const float sum = sum16<lanes>(v_count, [&](auto v, size_t i) SZ_SIMD_INLINE {
        using O = Ops<decltype(v)>;
        const auto e = exp_clamped(O::load(l + i) - O::splat(maxval));
        O::store(p + i, e);
        return e;
      });
      const float inv = 1.0f / sum;
      for_each_element<lanes>(v_count, [&](auto v, size_t i) SZ_SIMD_INLINE {
        using O = Ops<decltype(v)>;
        O::store(p + i, O::load(p + i) * O::splat(inv));
      });
      std::fill(p + v_count, p + row, 0.0f);
      // −log softmax[ix] = log Σ exp(l − max) − (l[ix] − max): finite even where probs[ix] underflows
      const int ix = targets[n];
      losses[n] = is_masked_target(ix) ? 0.0f : float(std::log(double(sum)) - double(l[ix] - maxval));
    }
  }
};

// dlogits += (probs − onehot(target)) · dloss over the first V columns of each row; a masked
// target's row is skipped.
struct CrossEntropyBackward {
  template <int lanes, class T>
  static void run(T* dlogits, const float* probs, const int* targets, int N, int V, int Vp, float dloss) {
    const size_t v_count = size_t(std::max(V, 0)), row = size_t(std::max(Vp, 0));
    std::vector<float> s_d;
    for (int n = 0; n < N; ++n) {
      const int ix = targets[n];
      if (is_masked_target(ix)) continue;
      const float* p = probs + size_t(n) * row;
      float* d = float_accum(dlogits + size_t(n) * row, v_count, s_d);
      const float before = d[ix];
      for_each_element<lanes>(v_count, [&](auto v, size_t i) SZ_SIMD_INLINE {
        using O = Ops<decltype(v)>;
        O::store(d + i, O::load(d + i) + O::load(p + i) * O::splat(dloss));
      });
      d[ix] = before + (p[ix] - 1.0f) * dloss;
      store_back(dlogits + size_t(n) * row, d, v_count);
    }
  }
};

template <class K, class... A>
SZ_SIMD_SCALAR void on_scalar(A... a) {
  K::template run<1>(a...);
}
template <class K, class... A>
SZ_SIMD_AVX2 void on_avx2(A... a) {
  K::template run<8>(a...);
}
template <class K, class... A>
SZ_SIMD_AVX512 void on_avx512(A... a) {
  K::template run<16>(a...);
}

template <class K, class... A>
void dispatch(SimdPath path, A... a) {
  require_simd_path(path);
  switch (path) {
    case SimdPath::avx512: return on_avx512<K>(a...);
    case SimdPath::avx2: return on_avx2<K>(a...);
    case SimdPath::scalar: return on_scalar<K>(a...);
  }
}

}  // namespace

template <class T>
void gelu_forward(SimdPath path, T* out, const T* inp, size_t n) {
  dispatch<GeluForward>(path, out, inp, n);
}
template <class T>
void gelu_backward(SimdPath path, T* dinp, const T* inp, const T* dout, size_t n) {
  dispatch<GeluBackward>(path, dinp, inp, dout, n);
}
template <class T>
void residual_forward(SimdPath path, T* out, const T* inp1, const T* inp2, size_t n) {
  dispatch<ResidualForward>(path, out, inp1, inp2, n);
}
template <class T>
void residual_backward(SimdPath path, T* dinp1, T* dinp2, const T* dout, size_t n) {
  dispatch<ResidualBackward>(path, dinp1, dinp2, dout, n);
}
template <class T>
void layernorm_forward(SimdPath path, T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias,
                       int N, int C) {
  dispatch<LayernormForward>(path, out, mean, rstd, inp, weight, bias, N, C);
}
template <class T>
void layernorm_backward(SimdPath path, T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const float* mean, const float* rstd, int N, int C) {
  dispatch<LayernormBackward>(path, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
template <class T>
void softmax_crossentropy_forward(SimdPath path, float* losses, float* probs, const T* logits, const int* targets,
                                  int N, int V, int Vp) {
  dispatch<CrossEntropyForward>(path, losses, probs, logits, targets, N, V, Vp);
}
template <class T>
void softmax_crossentropy_backward(SimdPath path, T* dlogits, const float* probs, const int* targets, int N, int V,
                                   int Vp, float dloss) {
  dispatch<CrossEntropyBackward>(path, dlogits, probs, targets, N, V, Vp, dloss);
}

#define STARZERO_INSTANTIATE_SIMD_KERNELS(T)                                                                          \
  template void gelu_forward<T>(SimdPath, T*, const T*, size_t);                                                      \
  template void gelu_backward<T>(SimdPath, T*, const T*, const T*, size_t);                                           \
  template void residual_forward<T>(SimdPath, T*, const T*, const T*, size_t);                                        \
  template void residual_backward<T>(SimdPath, T*, T*, const T*, size_t);                                             \
  template void layernorm_forward<T>(SimdPath, T*, float*, float*, const T*, const T*, const T*, int, int);           \
  template void layernorm_backward<T>(SimdPath, T*, T*, T*, const T*, const T*, const T*, const float*, const float*, \
                                      int, int);                                                                      \
  template void softmax_crossentropy_forward<T>(SimdPath, float*, float*, const T*, const int*, int, int, int);       \
  template void softmax_crossentropy_backward<T>(SimdPath, T*, const float*, const int*, int, int, int, float);

STARZERO_INSTANTIATE_SIMD_KERNELS(float)
STARZERO_INSTANTIATE_SIMD_KERNELS(bf16)
#undef STARZERO_INSTANTIATE_SIMD_KERNELS

}  // namespace starzero::kernels::simd
