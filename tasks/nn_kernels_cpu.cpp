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
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "tasks/float_views.hpp"
#include "tasks/nn_simd.hpp"

namespace starzero::kernels {

namespace {

using std::size_t;

// The widest SIMD path of this CPU, for the vectorised kernels.
SimdPath cpu_path() {
  static const SimdPath path = best_simd_path();
  return path;
}

// OpenBLAS would otherwise start one thread per core inside every StarPU worker.
void blas_single_threaded() {
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
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
// Where things are for the query heads [h0, h0 + nh) (kernels/nn_kernels.hpp): qkv [B, T, (NH +
// 2·NKV)·hs] holds at each position the NH query heads, then the NKV key heads, then the NKV value
// heads (GPT: NKV = NH, that is q, k, v of C each); query head h reads key/value head h / group.
// dout [B, T, NH·hs] is read whole; out and the q parts of dinp are the group's strided columns,
// the k and v parts those of the group's key/value heads [h0 / group, (h0 + nh) / group); lse
// [B, nh, T] at ld_lse per sequence.
struct AttentionLayout {
  int Tn, NH, NKV, hs, h0;
  int group = NH / NKV;                       // query heads per key/value head
  int C3 = (NH + 2 * NKV) * hs;               // channels of one position of qkv
  int Cout = NH * hs;                         // channels of one position of out and dout
  float scale = 1.0f / std::sqrt(float(hs));  // of the scores q·k

  size_t query(int b, int t, int h) const { return (size_t(b) * Tn + t) * C3 + size_t(h) * hs; }
  size_t key(int b, int t, int h) const { return (size_t(b) * Tn + t) * C3 + size_t(NH + h / group) * hs; }
  size_t value(int b, int t, int h) const { return (size_t(b) * Tn + t) * C3 + size_t(NH + NKV + h / group) * hs; }
  // Head h of position t in dout.
  size_t head(int b, int t, int h) const { return (size_t(b) * Tn + t) * Cout + size_t(h) * hs; }
  // Query head h of position t in a group's strided block with rows `ld` apart (out, dq).
  size_t in_group(int b, int t, int h, int ld) const { return (size_t(b) * Tn + t) * ld + size_t(h - h0) * hs; }
  // The key/value head of query head h in the group's blocks of dk, dv.
  size_t kv_in_group(int b, int t, int h, int ld) const {
    return (size_t(b) * Tn + t) * ld + size_t(h / group - h0 / group) * hs;
  }
  // The row (b, h, t) of lse (ld_lse per sequence).
  size_t row_stat(int b, int t, int h, int ld_lse) const { return size_t(b) * ld_lse + size_t(h - h0) * Tn + t; }
};

// Calls head(b, h) for every sequence b and head h of the group, in this order.
template <class Head>
void for_each_head(int B, int h0, int nh, const Head& head) {
  for (int b = 0; b < B; ++b)
    for (int h = h0; h < h0 + nh; ++h) head(b, h);
}

// The query blocks of a head: rows [first, first + rows), which see keys [0, first + rows).
template <class Block>
void for_each_query_block(int Tn, const Block& block) {
  for (int first = 0; first < Tn; first += kAttentionQueryBlock)
    block(first, std::min(kAttentionQueryBlock, Tn - first));
}

// Row `t` of a block's scores (keys [0, keys)): p = exp(s − lse) for t2 <= t, 0 beyond.
void probabilities_from_lse(float* row, int t, int keys, float lse) {
  for (int t2 = 0; t2 <= t; ++t2) row[t2] = std::exp(row[t2] - lse);
  std::fill(row + t + 1, row + keys, 0.0f);
}

// Per (sequence, head) and block of query rows, single-threaded sgemms over [rows, hs] and
// [rows, keys] matrices (q, k, v and their gradients are strided views of qkv); the causal
// softmax runs row by row in a [rows, keys] scratch. A head's sgemms are the same calls (sizes,
// strides) whatever the group, so they give the same bits.
void attention_forward_f32(float* out, int ld_out, float* lse, int ld_lse, const float* inp, int B,
                           const AttentionLayout& at, int nh) {
  const int Tn = at.Tn, h0 = at.h0;
  blas_single_threaded();
  std::vector<float> scores(size_t(kAttentionQueryBlock) * size_t(Tn));
  for_each_head(B, h0, nh, [&](int b, int h) {
    const float* key = inp + at.key(b, 0, h);
    const float* value = inp + at.value(b, 0, h);
    for_each_query_block(Tn, [&](int first, int rows) {
      const int keys = first + rows;
      // scores = scale · q kᵀ over keys [0, keys)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, at.hs, at.scale, inp + at.query(b, first, h),
                  at.C3, key, at.C3, 0.0f, scores.data(), keys);
      for (int r = 0; r < rows; ++r) {
        const int t = first + r;
        float* row = scores.data() + size_t(r) * keys;
        const float maxval = *std::max_element(row, row + t + 1);
        float expsum = 0.0f;
        for (int t2 = 0; t2 <= t; ++t2) expsum += std::exp(row[t2] - maxval);
        const float row_lse = maxval + std::log(expsum);
        lse[at.row_stat(b, t, h, ld_lse)] = row_lse;
        probabilities_from_lse(row, t, keys, row_lse);
      }
      // out = p v
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, at.hs, keys, 1.0f, scores.data(), keys, value,
                  at.C3, 0.0f, out + at.in_group(b, first, h, ld_out), ld_out);
    });
  });
}

// Query heads in increasing order: the heads of one key/value group add into its dk and dv in a
// fixed order.
void attention_backward_f32(float* dq, float* dk, float* dv, int ld_dinp, const float* dout, const float* inp,
                            const float* lse, int ld_lse, int B, const AttentionLayout& at, int nh) {
  const int Tn = at.Tn, h0 = at.h0;
  blas_single_threaded();
  std::vector<float> probs(size_t(kAttentionQueryBlock) * size_t(Tn)), dprobs(probs.size());
  for_each_head(B, h0, nh, [&](int b, int h) {
    const float* key = inp + at.key(b, 0, h);
    const float* value = inp + at.value(b, 0, h);
    const size_t kv_head = at.kv_in_group(b, 0, h, ld_dinp);
    for_each_query_block(Tn, [&](int first, int rows) {
      const int keys = first + rows;
      const float* query = inp + at.query(b, first, h);
      const float* dout_block = dout + at.head(b, first, h);
      const int C = at.Cout;
      // The block's probabilities again: p = exp(scale · q kᵀ − lse).
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, at.hs, at.scale, query, at.C3, key, at.C3, 0.0f,
                  probs.data(), keys);
      for (int r = 0; r < rows; ++r)
        probabilities_from_lse(probs.data() + size_t(r) * keys, first + r, keys, lse[at.row_stat(b, first + r, h, ld_lse)]);
      // out = p v:  dp = dout vᵀ,  dv += pᵀ dout
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, at.hs, 1.0f, dout_block, C, value, at.C3, 0.0f,
                  dprobs.data(), keys);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, keys, at.hs, rows, 1.0f, probs.data(), keys, dout_block, C,
                  1.0f, dv + kv_head, ld_dinp);
      // softmax: ds[t2] = p[t2] · (dp[t2] − Σ_t3 p[t3] · dp[t3]) (masked p are 0, so ds is too)
      for (int r = 0; r < rows; ++r) {
        const float* p = probs.data() + size_t(r) * keys;
        float* ds = dprobs.data() + size_t(r) * keys;
        const int t = first + r;
        float dot = 0.0f;
        for (int t2 = 0; t2 <= t; ++t2) dot += p[t2] * ds[t2];
        for (int t2 = 0; t2 <= t; ++t2) ds[t2] = p[t2] * (ds[t2] - dot);
        std::fill(ds + t + 1, ds + keys, 0.0f);
      }
      // s = scale · q kᵀ:  dq += scale · ds k,  dk += scale · dsᵀ q
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, at.hs, keys, at.scale, dprobs.data(), keys, key,
                  at.C3, 1.0f, dq + at.in_group(b, first, h, ld_dinp), ld_dinp);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, keys, at.hs, rows, at.scale, dprobs.data(), keys, query,
                  at.C3, 1.0f, dk + kv_head, ld_dinp);
    });
  });
}

// bf16 storage: float rows as wide as a whole tensor's, into which the T blocks of columns a
// head group reads or writes are loaded at their own columns, so that the fp32 kernel's sgemms
// find them at the same places (and with the same strides) as in a float tensor.
class FloatRows {
 public:
  FloatRows(size_t rows, int width)
      : rows_(rows), width_(width), values_(std::make_unique_for_overwrite<float[]>(rows * size_t(width))) {}
  float* at(int column) { return values_.get() + column; }
  int ld() const { return width_; }
  // Columns [column, column + count) of every row, from the T block whose rows are `ld` apart.
  template <class T>
  void load(int column, int count, const T* block, int ld) {
    for (size_t r = 0; r < rows_; ++r)
      for (int i = 0; i < count; ++i) values_[r * width_ + size_t(column + i)] = to_float(block[r * ld + i]);
  }
  void zero(int column, int count) {
    for (size_t r = 0; r < rows_; ++r) std::fill_n(at(column) + r * width_, count, 0.0f);
  }
  // Rounds those columns into the T block, once per element.
  template <class T>
  void store(int column, int count, T* block, int ld) const {
    for (size_t r = 0; r < rows_; ++r)
      for (int i = 0; i < count; ++i) block[r * ld + i] = from_float<T>(values_[r * width_ + size_t(column + i)]);
  }

 private:
  size_t rows_;
  int width_;
  std::unique_ptr<float[]> values_;
};

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
// On the widest SIMD path of this CPU (tasks/nn_simd.hpp). The backward computes dweight and dbias
// as sums over the rows in row order, so computing them in a task of their own gives the same bits.
template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias, int N, int C) {
  simd::layernorm_forward(cpu_path(), out, mean, rstd, inp, weight, bias, N, C);
}

template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const float* mean,
                        const float* rstd, int N, int C) {
  simd::layernorm_backward(cpu_path(), dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
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

template <class T>
void matmul_backward_weight_rows(T* dweight, const T* dout, const T* inp, int N, int C, int OC, int first, int rows) {
  assert(first >= 0 && rows >= 0 && first + rows <= OC);
  if (N <= 0 || C <= 0 || rows <= 0) return;
  const size_t n = size_t(N), c = size_t(C), oc = size_t(OC);
  std::vector<float> s_dout, s_inp, s_dw;
  const float* fdout = float_view(dout, n * oc, s_dout);
  const float* finp = float_view(inp, n * c, s_inp);
  float* fdw = float_accum(dweight, size_t(rows) * c, s_dw);
  blas_single_threaded();
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, C, N, 1.0f, fdout + first, OC, finp, C, 1.0f, fdw, C);
  store_back(dweight, fdw, size_t(rows) * c);
}

// ---- attention -------------------------------------------------------------------------------------
// fp32: in place. bf16: qkv and dout as float copies, and the group's own columns of out or dinp
// in float rows as wide as the whole tensor's (FloatRows), so the sgemms are the fp32 path's
// calls; only the group's columns are read and written back.
namespace {
void check_attention_shape(int B, int Tn, int NH, int NKV, int hs, int h0, int nh) {
  (void)B, (void)Tn, (void)NH, (void)NKV, (void)hs, (void)h0, (void)nh;
  assert(NH > 0 && NKV > 0 && NH % NKV == 0 && hs > 0 && h0 >= 0 && nh >= 0 && h0 + nh <= NH);
  assert(h0 % (NH / NKV) == 0 && nh % (NH / NKV) == 0);  // whole key/value groups
}
}  // namespace

template <class T>
void attention_forward_gqa(T* out, int ld_out, float* lse, int ld_lse, const T* qkv, int B, int Tn, int NH, int NKV,
                           int hs, int h0, int nh) {
  check_attention_shape(B, Tn, NH, NKV, hs, h0, nh);
  const size_t rows = size_t(std::max(B, 0)) * size_t(std::max(Tn, 0));
  if (rows == 0 || nh == 0) return;
  const AttentionLayout at{Tn, NH, NKV, hs, h0};
  std::vector<float> s_qkv;
  const float* fqkv = float_view(qkv, rows * size_t(at.C3), s_qkv);
  if constexpr (std::is_same_v<T, float>) {
    attention_forward_f32(out, ld_out, lse, ld_lse, fqkv, B, at, nh);
  } else {
    const int first = h0 * hs, width = nh * hs;
    FloatRows fout(rows, at.Cout);
    fout.zero(first, width);
    attention_forward_f32(fout.at(first), fout.ld(), lse, ld_lse, fqkv, B, at, nh);
    fout.store(first, width, out, ld_out);
  }
}

template <class T>
void attention_backward_gqa(T* dq, T* dk, T* dv, int ld_dinp, const T* dout, const T* qkv, const float* lse,
                            int ld_lse, int B, int Tn, int NH, int NKV, int hs, int h0, int nh) {
  check_attention_shape(B, Tn, NH, NKV, hs, h0, nh);
  const size_t rows = size_t(std::max(B, 0)) * size_t(std::max(Tn, 0));
  if (rows == 0 || nh == 0) return;
  const AttentionLayout at{Tn, NH, NKV, hs, h0};
  std::vector<float> s_qkv, s_dout;
  const float* fqkv = float_view(qkv, rows * size_t(at.C3), s_qkv);
  const float* fdout = float_view(dout, rows * size_t(at.Cout), s_dout);
  if constexpr (std::is_same_v<T, float>) {
    attention_backward_f32(dq, dk, dv, ld_dinp, fdout, fqkv, lse, ld_lse, B, at, nh);
  } else {
    // Rows as wide as dinp's: the group's columns of the q part and of its key/value heads'
    // k and v parts.
    const int width = nh * hs, kv_width = width / at.group;
    const int q = h0 * hs, k = (NH + h0 / at.group) * hs, v = k + NKV * hs;
    FloatRows fdinp(rows, at.C3);
    fdinp.load(q, width, dq, ld_dinp);
    fdinp.load(k, kv_width, dk, ld_dinp);
    fdinp.load(v, kv_width, dv, ld_dinp);
    attention_backward_f32(fdinp.at(q), fdinp.at(k), fdinp.at(v), fdinp.ld(), fdout, fqkv, lse, ld_lse, B, at, nh);
    fdinp.store(q, width, dq, ld_dinp);
    fdinp.store(k, kv_width, dk, ld_dinp);
    fdinp.store(v, kv_width, dv, ld_dinp);
  }
}

// ---- GELU, residual, softmax + cross-entropy: on the widest SIMD path (tasks/nn_simd.hpp) -----------
template <class T>
void gelu_forward(T* out, const T* inp, std::size_t n) {
  simd::gelu_forward(cpu_path(), out, inp, n);
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::size_t n) {
  simd::gelu_backward(cpu_path(), dinp, inp, dout, n);
}

template <class T>
void residual_forward(T* out, const T* inp1, const T* inp2, std::size_t n) {
  simd::residual_forward(cpu_path(), out, inp1, inp2, n);
}

template <class T>
void residual_backward(T* dinp1, T* dinp2, const T* dout, std::size_t n) {
  simd::residual_backward(cpu_path(), dinp1, dinp2, dout, n);
}

template <class T>
void softmax_crossentropy_forward(float* losses, float* probs, const T* logits, const int* targets, int N, int V,
                                  int Vp) {
  for (int n = 0; n < N; ++n) assert(targets[n] < V);  // negative: masked (tasks/loss_mask.hpp)
  simd::softmax_crossentropy_forward(cpu_path(), losses, probs, logits, targets, N, V, Vp);
}

template <class T>
void softmax_crossentropy_backward(T* dlogits, const float* probs, const int* targets, int N, int V, int Vp,
                                   float dloss) {
  simd::softmax_crossentropy_backward(cpu_path(), dlogits, probs, targets, N, V, Vp, dloss);
}

// ---- explicit instantiations -----------------------------------------------------------------------
#define STARZERO_INSTANTIATE_CPU_KERNELS(T)                                                                            \
  template void encoder_forward<T>(T*, const int*, const T*, const T*, int, int, int);                                 \
  template void encoder_backward<T>(T*, T*, const T*, const int*, int, int, int);                                      \
  template void layernorm_forward<T>(T*, float*, float*, const T*, const T*, const T*, int, int);                      \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const float*, const float*, int, int); \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int, int, int);                                    \
  template void matmul_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int);                           \
  template void matmul_backward_weight_rows<T>(T*, const T*, const T*, int, int, int, int, int);                       \
  template void attention_forward_gqa<T>(T*, int, float*, int, const T*, int, int, int, int, int, int, int);         \
  template void attention_backward_gqa<T>(T*, T*, T*, int, const T*, const T*, const float*, int, int, int, int, int,  \
                                          int, int, int);                                                              \
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
