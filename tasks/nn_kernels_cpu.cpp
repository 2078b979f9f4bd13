// CPU implementations of tasks/nn_kernels.hpp: the GPT-2 forward and backward kernels, written
// from the math of llm.c's train_gpt2.c. Storage T is float or bf16; everything is computed in
// float and rounded once on store. Where a gradient element receives many contributions (matmul,
// attention, the layernorm parameters, the embeddings) they are summed in float first and added to
// the T buffer once, so bf16 gradients are not rounded after every term.
//
// No OpenMP and single-threaded BLAS: these run inside StarPU CPU workers, one per core.
#include "tasks/nn_kernels.hpp"

#include <cblas.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <utility>
#include <vector>

#include "tasks/nn_simd.hpp"

namespace starzero::kernels {

namespace {

using std::size_t;

constexpr float kLayerNormEps = 1e-5f;

// OpenBLAS would otherwise start one thread per core inside every StarPU worker.
void blas_single_threaded() {
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
}

// ---- float views of T arrays -------------------------------------------------------------------
// A read-only float view: the array itself when T is float, a converted copy in `scratch` otherwise.
const float* float_view(const float* p, size_t, std::vector<float>&) { return p; }
const float* float_view(const bf16* p, size_t n, std::vector<float>& scratch) {
  scratch.resize(n);
  for (size_t i = 0; i < n; ++i) scratch[i] = to_float(p[i]);
  return scratch.data();
}

// A writable float accumulator for a T array: the array itself when T is float, a converted copy
// otherwise; store_back() rounds the copy into the array once.
float* float_accum(float* p, size_t, std::vector<float>&) { return p; }
float* float_accum(bf16* p, size_t n, std::vector<float>& scratch) {
  scratch.resize(n);
  for (size_t i = 0; i < n; ++i) scratch[i] = to_float(p[i]);
  return scratch.data();
}
void store_back(float*, const float*, size_t) {}
void store_back(bf16* p, const float* acc, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = from_float<bf16>(acc[i]);
}

// Output buffer written from scratch (no accumulation): T itself when float, fresh scratch otherwise.
float* float_out(float* p, size_t, std::vector<float>&) { return p; }
float* float_out(bf16*, size_t n, std::vector<float>& scratch) {
  scratch.assign(n, 0.0f);
  return scratch.data();
}

// ---- float matmuls (BLAS) ------------------------------------------------------------------------
// out[N,OC] = inp[N,C] · weight[OC,C]ᵀ + bias[OC]
void matmul_forward_f32(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC) {
  if (N <= 0 || OC <= 0) return;
  float beta = 0.0f;
  if (bias != nullptr) {
    for (int n = 0; n < N; ++n) std::copy(bias, bias + OC, out + size_t(n) * OC);
    beta = 1.0f;
  }
  if (C <= 0) {
    if (bias == nullptr) std::fill(out, out + size_t(N) * OC, 0.0f);
    return;
  }
  blas_single_threaded();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C, beta, out, OC);
}

// dinp[N,C] += dout[N,OC] · weight[OC,C]; dweight[OC,C] += doutᵀ · inp; dbias[OC] += Σ_n dout[n,:]
void matmul_backward_f32(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                         const float* weight, int N, int C, int OC) {
  if (N <= 0 || OC <= 0) return;
  if (C > 0) {
    blas_single_threaded();
    if (dinp != nullptr)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight, C, 1.0f, dinp, C);
    if (dweight != nullptr)
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
  }
  if (dbias != nullptr) {
    for (int n = 0; n < N; ++n) {
      const float* dout_n = dout + size_t(n) * OC;
      for (int o = 0; o < OC; ++o) dbias[o] += dout_n[o];
    }
  }
}

// ---- float attention ------------------------------------------------------------------------------
// Where things are in the attention buffers: qkv [B, T, 3C] holds at each position q, k and v, each
// NH heads of hs; out and dout are [B, T, C]; preatt, att and their gradients are [B, NH, T, T].
struct AttentionLayout {
  int Tn, C, NH;
  int hs = C / NH;
  int C3 = 3 * C;
  float scale = 1.0f / std::sqrt(float(hs));  // of the scores q·k

  size_t query(int b, int t, int h) const { return (size_t(b) * Tn + t) * C3 + size_t(h) * hs; }
  size_t key(int b, int t, int h) const { return query(b, t, h) + C; }
  size_t value(int b, int t, int h) const { return query(b, t, h) + 2 * C; }
  // Head h of position t in out and dout.
  size_t head(int b, int t, int h) const { return (size_t(b) * Tn + t) * C + size_t(h) * hs; }
  // The row (b, h, t) of preatt, att and their gradients.
  size_t scores(int b, int t, int h) const { return ((size_t(b) * NH + h) * Tn + t) * Tn; }
};

// Calls row(b, t, h) for every sequence b, position t and head h, in this order.
template <class Row>
void for_each_attention_row(int B, const AttentionLayout& at, const Row& row) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < at.Tn; ++t)
      for (int h = 0; h < at.NH; ++h) row(b, t, h);
}

void attention_forward_f32(float* out, float* preatt, float* att, const float* inp, int B, int Tn, int C, int NH) {
  const AttentionLayout at{Tn, C, NH};
  for_each_attention_row(B, at, [&](int b, int t, int h) {
    const float* query = inp + at.query(b, t, h);
    float* preatt_bth = preatt + at.scores(b, t, h);
    float* att_bth = att + at.scores(b, t, h);

    // pass 1: scaled q·k for t2 <= t, and their maximum
    float maxval = -INFINITY;
    for (int t2 = 0; t2 <= t; ++t2) {
      const float* key = inp + at.key(b, t2, h);
      float dot = 0.0f;
      for (int i = 0; i < at.hs; ++i) dot += query[i] * key[i];
      dot *= at.scale;
      preatt_bth[t2] = dot;
      maxval = std::max(maxval, dot);
    }
    // pass 2: softmax over t2 <= t; masked entries are written 0 in both buffers
    float expsum = 0.0f;
    for (int t2 = 0; t2 <= t; ++t2) {
      const float e = std::exp(preatt_bth[t2] - maxval);
      att_bth[t2] = e;
      expsum += e;
    }
    const float expsum_inv = 1.0f / expsum;
    for (int t2 = 0; t2 <= t; ++t2) att_bth[t2] *= expsum_inv;
    for (int t2 = t + 1; t2 < Tn; ++t2) {
      preatt_bth[t2] = 0.0f;
      att_bth[t2] = 0.0f;
    }
    // pass 3: out = Σ_t2 att · v
    float* out_bth = out + at.head(b, t, h);
    for (int i = 0; i < at.hs; ++i) out_bth[i] = 0.0f;
    for (int t2 = 0; t2 <= t; ++t2) {
      const float* value = inp + at.value(b, t2, h);
      const float a = att_bth[t2];
      for (int i = 0; i < at.hs; ++i) out_bth[i] += a * value[i];
    }
  });
}

void attention_backward_f32(float* dinp, float* dpreatt, float* datt, const float* dout, const float* inp,
                            const float* att, int B, int Tn, int C, int NH) {
  const AttentionLayout at{Tn, C, NH};
  for_each_attention_row(B, at, [&](int b, int t, int h) {
    const float* att_bth = att + at.scores(b, t, h);
    float* datt_bth = datt + at.scores(b, t, h);
    float* dpreatt_bth = dpreatt + at.scores(b, t, h);
    const float* query = inp + at.query(b, t, h);
    float* dquery = dinp + at.query(b, t, h);
    const float* dout_bth = dout + at.head(b, t, h);

    // out = Σ_t2 att[t2] · v[t2]:  datt[t2] = dout · v[t2],  dv[t2] += att[t2] · dout
    for (int t2 = 0; t2 <= t; ++t2) {
      const float* value = inp + at.value(b, t2, h);
      float* dvalue = dinp + at.value(b, t2, h);
      const float a = att_bth[t2];
      float d = 0.0f;
      for (int i = 0; i < at.hs; ++i) {
        d += value[i] * dout_bth[i];
        dvalue[i] += a * dout_bth[i];
      }
      datt_bth[t2] = d;
    }
    // softmax: dpreatt[t3] = att[t3] · (datt[t3] − Σ_t2 att[t2] · datt[t2])
    float dot = 0.0f;
    for (int t2 = 0; t2 <= t; ++t2) dot += att_bth[t2] * datt_bth[t2];
    for (int t2 = 0; t2 <= t; ++t2) dpreatt_bth[t2] = att_bth[t2] * (datt_bth[t2] - dot);
    for (int t2 = t + 1; t2 < Tn; ++t2) {
      datt_bth[t2] = 0.0f;
      dpreatt_bth[t2] = 0.0f;
    }
    // preatt[t2] = scale · q · k[t2]
    for (int t2 = 0; t2 <= t; ++t2) {
      const float* key = inp + at.key(b, t2, h);
      float* dkey = dinp + at.key(b, t2, h);
      const float g = dpreatt_bth[t2] * at.scale;
      for (int i = 0; i < at.hs; ++i) {
        dquery[i] += key[i] * g;
        dkey[i] += query[i] * g;
      }
    }
  });
}

}  // namespace

// ---- encoder ---------------------------------------------------------------------------------------
template <class T>
void encoder_forward(T* out, const int* tokens, const T* wte, const T* wpe, int B, int Tn, int C) {
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < Tn; ++t) {
      T* out_bt = out + (size_t(b) * Tn + t) * C;
      const T* wte_ix = wte + size_t(tokens[size_t(b) * Tn + t]) * C;
      const T* wpe_t = wpe + size_t(t) * C;
      for (int i = 0; i < C; ++i) out_bt[i] = from_float<T>(to_float(wte_ix[i]) + to_float(wpe_t[i]));
    }
  }
}

template <class T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int* tokens, int B, int Tn, int C) {
  std::vector<float> acc(size_t(std::max(C, 0)));
  // dwpe[t] += Σ_b dout[b,t]
  for (int t = 0; t < Tn; ++t) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int b = 0; b < B; ++b) {
      const T* dout_bt = dout + (size_t(b) * Tn + t) * C;
      for (int i = 0; i < C; ++i) acc[i] += to_float(dout_bt[i]);
    }
    T* dwpe_t = dwpe + size_t(t) * C;
    for (int i = 0; i < C; ++i) dwpe_t[i] = from_float<T>(to_float(dwpe_t[i]) + acc[i]);
  }
  // dwte[ix] += Σ_{(b,t): tokens[b,t] = ix} dout[b,t]: group equal tokens, add each group once
  const size_t n = size_t(B) * Tn;
  std::vector<std::pair<int, size_t>> order(n);
  for (size_t k = 0; k < n; ++k) order[k] = {tokens[k], k};
  std::sort(order.begin(), order.end());
  for (size_t k = 0; k < n;) {
    const int ix = order[k].first;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (; k < n && order[k].first == ix; ++k) {
      const T* dout_bt = dout + order[k].second * C;
      for (int i = 0; i < C; ++i) acc[i] += to_float(dout_bt[i]);
    }
    T* dwte_ix = dwte + size_t(ix) * C;
    for (int i = 0; i < C; ++i) dwte_ix[i] = from_float<T>(to_float(dwte_ix[i]) + acc[i]);
  }
}

// ---- layernorm -------------------------------------------------------------------------------------
template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias, int N, int C) {
  for (int n = 0; n < N; ++n) {
    const T* x = inp + size_t(n) * C;
    float m = 0.0f;
    for (int i = 0; i < C; ++i) m += to_float(x[i]);
    m /= float(C);
    float v = 0.0f;
    for (int i = 0; i < C; ++i) {
      const float d = to_float(x[i]) - m;
      v += d * d;
    }
    v /= float(C);
    const float s = 1.0f / std::sqrt(v + kLayerNormEps);
    T* out_n = out + size_t(n) * C;
    for (int i = 0; i < C; ++i) {
      const float norm = (to_float(x[i]) - m) * s;
      const float o = norm * to_float(weight[i]) + (bias != nullptr ? to_float(bias[i]) : 0.0f);
      out_n[i] = from_float<T>(o);
    }
    mean[n] = m;
    rstd[n] = s;
  }
}

// dinp (when given) row by row; dweight and dbias (when given) as sums over the rows in row order,
// so that computing them in a task of their own gives the same bits.
template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const float* mean,
                        const float* rstd, int N, int C) {
  const bool params = dweight != nullptr || dbias != nullptr;
  std::vector<float> dw(params ? size_t(std::max(C, 0)) : 0, 0.0f), db(dw.size(), 0.0f);
  for (int n = 0; n < N; ++n) {
    const T* dout_n = dout + size_t(n) * C;
    const T* x = inp + size_t(n) * C;
    const float m = mean[n];
    const float s = rstd[n];
    if (params) {
      for (int i = 0; i < C; ++i) {
        const float norm = (to_float(x[i]) - m) * s;
        const float g = to_float(dout_n[i]);
        db[size_t(i)] += g;
        dw[size_t(i)] += norm * g;
      }
    }
    if (dinp == nullptr) continue;
    T* dinp_n = dinp + size_t(n) * C;

    // two reductions: mean(w · dout) and mean(w · dout · norm)
    float dnorm_mean = 0.0f;
    float dnorm_norm_mean = 0.0f;
    for (int i = 0; i < C; ++i) {
      const float norm = (to_float(x[i]) - m) * s;
      const float dnorm = to_float(weight[i]) * to_float(dout_n[i]);
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean /= float(C);
    dnorm_norm_mean /= float(C);

    for (int i = 0; i < C; ++i) {
      const float norm = (to_float(x[i]) - m) * s;
      const float dnorm = to_float(weight[i]) * to_float(dout_n[i]);
      const float dx = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
      dinp_n[i] = from_float<T>(to_float(dinp_n[i]) + dx);
    }
  }
  for (int i = 0; i < C && params; ++i) {
    if (dweight != nullptr) dweight[i] = from_float<T>(to_float(dweight[i]) + dw[size_t(i)]);
    if (dbias != nullptr) dbias[i] = from_float<T>(to_float(dbias[i]) + db[size_t(i)]);
  }
}

// ---- matmul ----------------------------------------------------------------------------------------
template <class T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC) {
  std::vector<float> s_inp, s_w, s_b, s_out;
  const size_t nout = size_t(std::max(N, 0)) * size_t(std::max(OC, 0));
  const float* finp = float_view(inp, size_t(std::max(N, 0)) * size_t(std::max(C, 0)), s_inp);
  const float* fw = float_view(weight, size_t(std::max(OC, 0)) * size_t(std::max(C, 0)), s_w);
  const float* fb = bias != nullptr ? float_view(bias, size_t(std::max(OC, 0)), s_b) : nullptr;
  float* fout = float_out(out, nout, s_out);
  matmul_forward_f32(fout, finp, fw, fb, N, C, OC);
  store_back(out, fout, nout);
}

template <class T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N, int C,
                     int OC) {
  const size_t n = size_t(std::max(N, 0)), c = size_t(std::max(C, 0)), oc = size_t(std::max(OC, 0));
  std::vector<float> s_dout, s_inp, s_w, s_dinp, s_dw, s_db;
  const float* fdout = float_view(dout, n * oc, s_dout);
  const float* finp = dweight != nullptr ? float_view(inp, n * c, s_inp) : nullptr;
  const float* fw = dinp != nullptr ? float_view(weight, oc * c, s_w) : nullptr;
  float* fdinp = dinp != nullptr ? float_accum(dinp, n * c, s_dinp) : nullptr;
  float* fdw = dweight != nullptr ? float_accum(dweight, oc * c, s_dw) : nullptr;
  float* fdb = dbias != nullptr ? float_accum(dbias, oc, s_db) : nullptr;
  matmul_backward_f32(fdinp, fdw, fdb, fdout, finp, fw, N, C, OC);
  if (dinp != nullptr) store_back(dinp, fdinp, n * c);
  if (dweight != nullptr) store_back(dweight, fdw, oc * c);
  if (dbias != nullptr) store_back(dbias, fdb, oc);
}

// ---- attention -------------------------------------------------------------------------------------
template <class T>
void attention_forward(T* out, float* preatt, float* att, const T* inp, int B, int Tn, int C, int NH) {
  assert(NH > 0 && C % NH == 0);
  const size_t rows = size_t(std::max(B, 0)) * size_t(std::max(Tn, 0));
  std::vector<float> s_inp, s_out;
  const float* finp = float_view(inp, rows * 3 * size_t(std::max(C, 0)), s_inp);
  float* fout = float_out(out, rows * size_t(std::max(C, 0)), s_out);
  attention_forward_f32(fout, preatt, att, finp, B, Tn, C, NH);
  store_back(out, fout, rows * size_t(std::max(C, 0)));
}

template <class T>
void attention_backward(T* dinp, float* dpreatt, float* datt, const T* dout, const T* inp, const float* att, int B,
                        int Tn, int C, int NH) {
  assert(NH > 0 && C % NH == 0);
  const size_t rows = size_t(std::max(B, 0)) * size_t(std::max(Tn, 0));
  const size_t c = size_t(std::max(C, 0));
  std::vector<float> s_inp, s_dout, s_dinp;
  const float* finp = float_view(inp, rows * 3 * c, s_inp);
  const float* fdout = float_view(dout, rows * c, s_dout);
  float* fdinp = float_accum(dinp, rows * 3 * c, s_dinp);
  attention_backward_f32(fdinp, dpreatt, datt, fdout, finp, att, B, Tn, C, NH);
  store_back(dinp, fdinp, rows * 3 * c);
}

// ---- GELU ------------------------------------------------------------------------------------------
// On the widest SIMD path of this CPU (tasks/nn_simd.hpp).
template <class T>
void gelu_forward(T* out, const T* inp, std::size_t n) {
  static const SimdPath path = best_simd_path();
  simd::gelu_forward(path, out, inp, n);
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::size_t n) {
  static const SimdPath path = best_simd_path();
  simd::gelu_backward(path, dinp, inp, dout, n);
}

// ---- residual --------------------------------------------------------------------------------------
template <class T>
void residual_forward(T* out, const T* inp1, const T* inp2, std::size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = from_float<T>(to_float(inp1[i]) + to_float(inp2[i]));
}

template <class T>
void residual_backward(T* dinp1, T* dinp2, const T* dout, std::size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float g = to_float(dout[i]);
    dinp1[i] = from_float<T>(to_float(dinp1[i]) + g);
    dinp2[i] = from_float<T>(to_float(dinp2[i]) + g);
  }
}

// ---- softmax + cross-entropy -----------------------------------------------------------------------
template <class T>
void softmax_crossentropy_forward(float* losses, float* probs, const T* logits, const int* targets, int N, int V,
                                  int Vp) {
  for (int n = 0; n < N; ++n) {
    const T* logits_n = logits + size_t(n) * Vp;
    float* probs_n = probs + size_t(n) * Vp;
    float maxval = -INFINITY;
    for (int i = 0; i < V; ++i) maxval = std::max(maxval, to_float(logits_n[i]));
    double sum = 0.0;
    for (int i = 0; i < V; ++i) {
      const float e = std::exp(to_float(logits_n[i]) - maxval);
      probs_n[i] = e;
      sum += e;
    }
    const float inv = float(1.0 / sum);
    for (int i = 0; i < V; ++i) probs_n[i] *= inv;
    for (int i = V; i < Vp; ++i) probs_n[i] = 0.0f;
    const int ix = targets[n];
    assert(ix >= 0 && ix < V);
    // -log softmax[ix] = log Σ exp(l - max) - (l[ix] - max): finite even where probs[ix] underflows
    losses[n] = float(std::log(sum) - double(to_float(logits_n[ix]) - maxval));
  }
}

template <class T>
void softmax_crossentropy_backward(T* dlogits, const float* probs, const int* targets, int N, int V, int Vp,
                                   float dloss) {
  for (int n = 0; n < N; ++n) {
    T* dlogits_n = dlogits + size_t(n) * Vp;
    const float* probs_n = probs + size_t(n) * Vp;
    const int ix = targets[n];
    for (int i = 0; i < V; ++i) {
      const float indicator = i == ix ? 1.0f : 0.0f;
      dlogits_n[i] = from_float<T>(to_float(dlogits_n[i]) + (probs_n[i] - indicator) * dloss);
    }
  }
}

// ---- explicit instantiations -----------------------------------------------------------------------
#define STARZERO_INSTANTIATE_CPU_KERNELS(T)                                                                            \
  template void encoder_forward<T>(T*, const int*, const T*, const T*, int, int, int);                                 \
  template void encoder_backward<T>(T*, T*, const T*, const int*, int, int, int);                                      \
  template void layernorm_forward<T>(T*, float*, float*, const T*, const T*, const T*, int, int);                      \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const float*, const float*, int, int); \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int, int, int);                                    \
  template void matmul_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int);                           \
  template void attention_forward<T>(T*, float*, float*, const T*, int, int, int, int);                                \
  template void attention_backward<T>(T*, float*, float*, const T*, const T*, const float*, int, int, int, int);       \
  template void gelu_forward<T>(T*, const T*, std::size_t);                                                            \
  template void gelu_backward<T>(T*, const T*, const T*, std::size_t);                                                 \
  template void residual_forward<T>(T*, const T*, const T*, std::size_t);                                              \
  template void residual_backward<T>(T*, T*, const T*, std::size_t);                                                   \
  template void softmax_crossentropy_forward<T>(float*, float*, const T*, const int*, int, int, int);                  \
  template void softmax_crossentropy_backward<T>(T*, const float*, const int*, int, int, int, float);

STARZERO_INSTANTIATE_CPU_KERNELS(float)
STARZERO_INSTANTIATE_CPU_KERNELS(bf16)
#undef STARZERO_INSTANTIATE_CPU_KERNELS

}  // namespace starzero::kernels
