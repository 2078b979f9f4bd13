#pragma once
// An independent, naive, double-precision GPT-2 forward pass and mean cross-entropy loss, written
// from the math of llm.c's train_gpt2.c (gpt2_forward). It shares no code with the model under
// test: it reads the flat llm.c-order parameter vector itself, and only GptShape (a plain struct
// of six ints) comes from the project.
//
// llm.c parameter order (per-layer tensors are layer-major: layer l's slice follows layer l-1's):
//   wte [Vp,C]  wpe [maxT,C]
//   ln1w [L,C]  ln1b [L,C]  qkvw [L,3C,C]  qkvb [L,3C]  attprojw [L,C,C]  attprojb [L,C]
//   ln2w [L,C]  ln2b [L,C]  fcw [L,4C,C]   fcb [L,4C]   fcprojw [L,C,4C]  fcprojb [L,C]
//   lnfw [C]    lnfb [C]
//
// Forward, for each of the B sequences of T tokens:
//   x = wte[token] + wpe[position]
//   for each layer l:
//     h   = layernorm(x; ln1w, ln1b)                 (eps 1e-5, biased variance)
//     qkv = h · qkvwᵀ + qkvb                          (q, k, v: C each, NH heads of hs = C/NH)
//     a   = causal softmax(q·k / sqrt(hs)) · v, per head
//     x   = x + (a · attprojwᵀ + attprojb)
//     h   = layernorm(x; ln2w, ln2b)
//     u   = gelu(h · fcwᵀ + fcb)                      (tanh form)
//     x   = x + (u · fcprojwᵀ + fcprojb)
//   y = layernorm(x; lnfw, lnfb)
//   logits[v] = y · wte[v]  for v < V only (the Vp − V padding rows take no part in the softmax)
//   loss = mean over the B·T positions of −log softmax(logits)[target], a negative target (a
//          masked one) left out of the sum and of the count
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <vector>

#include "models/gpt_files.hpp"

namespace starzero::reference {

// Where each of the 16 llm.c tensors starts in the flat vector (computed here from the shape,
// independently of llmc_tensor_specs).
struct GptOffsets {
  std::size_t wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw, lnfb,
      total;

  explicit GptOffsets(const GptShape& s) {
    const std::size_t C = std::size_t(s.channels), L = std::size_t(s.layers);
    std::size_t next = 0;
    auto take = [&next](std::size_t count) {
      const std::size_t start = next;
      next += count;
      return start;
    };
    wte = take(std::size_t(s.padded_vocab) * C);
    wpe = take(std::size_t(s.max_seq) * C);
    ln1w = take(L * C);
    ln1b = take(L * C);
    qkvw = take(L * 3 * C * C);
    qkvb = take(L * 3 * C);
    attprojw = take(L * C * C);
    attprojb = take(L * C);
    ln2w = take(L * C);
    ln2b = take(L * C);
    fcw = take(L * 4 * C * C);
    fcb = take(L * 4 * C);
    fcprojw = take(L * 4 * C * C);
    fcprojb = take(L * C);
    lnfw = take(C);
    lnfb = take(C);
    total = next;
  }
};

namespace detail {

using Rows = std::vector<std::vector<double>>;  // [N][width]

// out[c] = (x[c] − mean) / sqrt(var + 1e-5) · w[c] + b[c], biased variance over the C elements.
template <class P>
std::vector<double> layernorm(const std::vector<double>& x, const P* w, const P* b) {
  const std::size_t C = x.size();
  double mean = 0;
  for (double v : x) mean += v;
  mean /= double(C);
  double var = 0;
  for (double v : x) var += (v - mean) * (v - mean);
  var /= double(C);
  const double rstd = 1.0 / std::sqrt(var + 1e-5);
  std::vector<double> out(C);
  for (std::size_t c = 0; c < C; ++c) out[c] = (x[c] - mean) * rstd * double(w[c]) + double(b[c]);
  return out;
}

// out[o] = Σ_c x[c] · w[o, c] + b[o]   (w is [OC, C], row-major).
template <class P>
std::vector<double> linear(const std::vector<double>& x, const P* w, const P* b, std::size_t OC) {
  const std::size_t C = x.size();
  std::vector<double> out(OC);
  for (std::size_t o = 0; o < OC; ++o) {
    double sum = double(b[o]);
    for (std::size_t c = 0; c < C; ++c) sum += x[c] * double(w[o * C + c]);
    out[o] = sum;
  }
  return out;
}

inline double gelu(double x) {
  const double pi = 3.14159265358979323846;
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
}

}  // namespace detail

// Mean cross-entropy loss of the B·T predictions whose target is not negative (masked; 0 when
// every target is). `params` is the flat llm.c-order vector (float or double elements); inputs and
// targets are B·T token ids, row-major [B, T].
template <class P>
double gpt2_loss(const std::vector<P>& params, const GptShape& shape, const std::vector<int>& inputs,
                 const std::vector<int>& targets, int B, int T) {
  using detail::Rows;
  const GptOffsets off(shape);
  if (params.size() != off.total) throw std::invalid_argument("reference gpt2_loss: wrong parameter count");
  if (inputs.size() != std::size_t(B) * std::size_t(T) || targets.size() != inputs.size())
    throw std::invalid_argument("reference gpt2_loss: need B*T inputs and targets");
  if (T > shape.max_seq) throw std::invalid_argument("reference gpt2_loss: T > max_seq");
  const std::size_t C = std::size_t(shape.channels), L = std::size_t(shape.layers);
  const std::size_t NH = std::size_t(shape.heads), hs = C / NH;
  const std::size_t V = std::size_t(shape.vocab), Tn = std::size_t(T);
  const P* p = params.data();

  double loss_sum = 0;
  std::size_t counted = 0;
  for (int b = 0; b < B; ++b) {
    // Residual stream x[t][c] of this sequence.
    Rows x(Tn, std::vector<double>(C));
    for (int t = 0; t < T; ++t) {
      const int token = inputs[std::size_t(b) * std::size_t(T) + std::size_t(t)];
      for (std::size_t c = 0; c < C; ++c)
        x[std::size_t(t)][c] =
            double(p[off.wte + std::size_t(token) * C + c]) + double(p[off.wpe + std::size_t(t) * C + c]);
    }

    for (std::size_t l = 0; l < L; ++l) {
      // --- attention sub-block ---
      Rows qkv(Tn);
      for (int t = 0; t < T; ++t) {
        const auto h = detail::layernorm(x[std::size_t(t)], p + off.ln1w + l * C, p + off.ln1b + l * C);
        qkv[std::size_t(t)] = detail::linear(h, p + off.qkvw + l * 3 * C * C, p + off.qkvb + l * 3 * C, 3 * C);
      }
      Rows attn(Tn, std::vector<double>(C, 0.0));
      const double scale = 1.0 / std::sqrt(double(hs));
      for (std::size_t head = 0; head < NH; ++head) {
        for (int t = 0; t < T; ++t) {
          const double* q = qkv[std::size_t(t)].data() + head * hs;  // query: columns [0, C)
          // Scores against keys t2 <= t (causal), softmax with the maximum subtracted.
          std::vector<double> score(std::size_t(t) + 1);
          double maxval = -INFINITY;
          for (int t2 = 0; t2 <= t; ++t2) {
            const double* k = qkv[std::size_t(t2)].data() + C + head * hs;  // key: columns [C, 2C)
            double dot = 0;
            for (std::size_t i = 0; i < hs; ++i) dot += q[i] * k[i];
            score[std::size_t(t2)] = dot * scale;
            maxval = std::max(maxval, score[std::size_t(t2)]);
          }
          double denom = 0;
          for (double& s : score) {
            s = std::exp(s - maxval);
            denom += s;
          }
          for (int t2 = 0; t2 <= t; ++t2) {
            const double* v = qkv[std::size_t(t2)].data() + 2 * C + head * hs;  // value: [2C, 3C)
            const double weight = score[std::size_t(t2)] / denom;
            for (std::size_t i = 0; i < hs; ++i) attn[std::size_t(t)][head * hs + i] += weight * v[i];
          }
        }
      }
      for (int t = 0; t < T; ++t) {
        const auto proj =
            detail::linear(attn[std::size_t(t)], p + off.attprojw + l * C * C, p + off.attprojb + l * C, C);
        for (std::size_t c = 0; c < C; ++c) x[std::size_t(t)][c] += proj[c];
      }

      // --- MLP sub-block ---
      for (int t = 0; t < T; ++t) {
        const auto h = detail::layernorm(x[std::size_t(t)], p + off.ln2w + l * C, p + off.ln2b + l * C);
        auto u = detail::linear(h, p + off.fcw + l * 4 * C * C, p + off.fcb + l * 4 * C, 4 * C);
        for (double& v : u) v = detail::gelu(v);
        const auto proj = detail::linear(u, p + off.fcprojw + l * 4 * C * C, p + off.fcprojb + l * C, C);
        for (std::size_t c = 0; c < C; ++c) x[std::size_t(t)][c] += proj[c];
      }
    }

    // --- final layernorm, classifier tied to wte (first V rows), cross-entropy ---
    for (int t = 0; t < T; ++t) {
      const auto y = detail::layernorm(x[std::size_t(t)], p + off.lnfw, p + off.lnfb);
      std::vector<double> logits(V);
      double maxval = -INFINITY;
      for (std::size_t v = 0; v < V; ++v) {
        double dot = 0;
        for (std::size_t c = 0; c < C; ++c) dot += y[c] * double(p[off.wte + v * C + c]);
        logits[v] = dot;
        maxval = std::max(maxval, dot);
      }
      double denom = 0;
      for (double z : logits) denom += std::exp(z - maxval);
      const int target = targets[std::size_t(b) * std::size_t(T) + std::size_t(t)];
      if (target < 0) continue;
      // −log softmax[target] = log Σ exp(z − max) − (z_target − max)
      loss_sum += std::log(denom) - (logits[std::size_t(target)] - maxval);
      ++counted;
    }
  }
  return counted == 0 ? 0.0 : loss_sum / double(counted);
}

}  // namespace starzero::reference
