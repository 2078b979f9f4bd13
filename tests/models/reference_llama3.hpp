#pragma once
// An independent, naive, double-precision Llama 3 forward pass and mean cross-entropy loss,
// written from the math of Meta's model.py / llm.c's train_llama3.py. It shares no code with the
// model under test: it reads the flat llm.c-order parameter vector itself, and only LlamaShape (a
// plain struct) comes from the project.
//
// llm.c parameter order (per-layer tensors layer-major), Q = (NH + 2·NKV)·hs, hs = C/NH:
//   wte [V,C]  ln1w [L,C]  qkvw [L,Q,C]  attprojw [L,C,C]  ln2w [L,C]  fcw [L,H,C]  fc2w [L,H,C]
//   fcprojw [L,C,H]  lnfw [C]  lm_head [V,C]
//
// Forward, for each of the B sequences of T tokens:
//   x = wte[token]
//   for each layer l:
//     h = rmsnorm(x; ln1w)                 h_i = x_i / sqrt(mean(x²) + eps) · w_i
//     [q | k | v] = h · qkvwᵀ              NH query heads, NKV key/value heads of hs channels
//     q, k rotated: pairs (2i, 2i+1) of each head by angle t·f_i, f_i = theta^(-2i/hs)
//                   (Llama 3.1 scaling of f_i when use_scaled_rope)
//     y_h = causal softmax(q_h·k_g / sqrt(hs)) · v_g, g = h / (NH/NKV)
//     x = x + y · attprojwᵀ
//     h = rmsnorm(x; ln2w)
//     u = silu(h · fc2wᵀ) ⊙ (h · fcwᵀ)     silu(z) = z / (1 + e^-z)
//     x = x + u · fcprojwᵀ
//   logits = rmsnorm(x; lnfw) · lm_headᵀ
//   loss = mean over the B·T positions of −log softmax(logits)[target]
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <vector>

#include "models/llama_layout.hpp"

namespace starzero::reference {

struct LlamaOffsets {
  std::size_t wte, ln1w, qkvw, attprojw, ln2w, fcw, fc2w, fcprojw, lnfw, lm_head, total;

  explicit LlamaOffsets(const LlamaShape& s) {
    const std::size_t C = std::size_t(s.channels), L = std::size_t(s.layers), V = std::size_t(s.vocab),
                      H = std::size_t(s.ffn_hidden),
                      Q = std::size_t(s.heads + 2 * s.kv_heads) * (std::size_t(s.channels) / std::size_t(s.heads));
    std::size_t next = 0;
    auto take = [&next](std::size_t count) {
      const std::size_t start = next;
      next += count;
      return start;
    };
    wte = take(V * C);
    ln1w = take(L * C);
    qkvw = take(L * Q * C);
    attprojw = take(L * C * C);
    ln2w = take(L * C);
    fcw = take(L * H * C);
    fc2w = take(L * H * C);
    fcprojw = take(L * C * H);
    lnfw = take(C);
    lm_head = take(V * C);
    total = next;
  }
};

// Meta's apply_scaling (Llama 3.1): scale factor 8, low 1, high 4, original context 8192.
inline double llama31_scaled_frequency(double freq) {
  const double pi = 3.14159265358979323846;
  const double scale = 8, low = 1, high = 4, old_context = 8192;
  const double wavelength = 2 * pi / freq;
  if (wavelength < old_context / high) return freq;
  if (wavelength > old_context / low) return freq / scale;
  const double smooth = (old_context / wavelength - low) / (high - low);
  return (1 - smooth) * freq / scale + smooth * freq;
}

template <class P>
double llama3_loss(const P& params, const LlamaShape& s, const std::vector<int>& inputs,
                   const std::vector<int>& targets, int B, int T) {
  const LlamaOffsets o(s);
  if (params.size() != o.total) throw std::invalid_argument("reference: wrong parameter count");
  const int C = s.channels, NH = s.heads, NKV = s.kv_heads, hs = C / NH, H = s.ffn_hidden, V = s.vocab;
  const int Q = (NH + 2 * NKV) * hs;
  const double eps = double(s.norm_eps);
  auto p = [&](std::size_t i) { return double(params[i]); };

  auto rmsnorm = [&](const std::vector<double>& x, std::size_t w) {
    double ss = 0;
    for (int i = 0; i < C; ++i) ss += x[std::size_t(i)] * x[std::size_t(i)];
    const double r = 1.0 / std::sqrt(ss / C + eps);
    std::vector<double> y(static_cast<std::size_t>(C));
    for (int i = 0; i < C; ++i) y[std::size_t(i)] = x[std::size_t(i)] * r * p(w + std::size_t(i));
    return y;
  };
  // y[OC] = x[IC] · Wᵀ, W [OC, IC] at w.
  auto linear = [&](const std::vector<double>& x, std::size_t w, int IC, int OC) {
    std::vector<double> y(static_cast<std::size_t>(OC), 0.0);
    for (int oc = 0; oc < OC; ++oc) {
      double acc = 0;
      for (int ic = 0; ic < IC; ++ic)
        acc += x[std::size_t(ic)] * p(w + std::size_t(oc) * std::size_t(IC) + std::size_t(ic));
      y[std::size_t(oc)] = acc;
    }
    return y;
  };
  std::vector<double> freq(static_cast<std::size_t>(hs / 2));
  for (int i = 0; i < hs / 2; ++i) {
    double f = std::pow(double(s.rope_theta), -2.0 * i / hs);
    if (s.use_scaled_rope) f = llama31_scaled_frequency(f);
    freq[std::size_t(i)] = f;
  }

  double total_loss = 0;
  for (int b = 0; b < B; ++b) {
    std::vector<std::vector<double>> x(static_cast<std::size_t>(T));
    for (int t = 0; t < T; ++t) {
      x[std::size_t(t)].resize(std::size_t(C));
      const std::size_t row = o.wte + std::size_t(inputs[std::size_t(b * T + t)]) * std::size_t(C);
      for (int i = 0; i < C; ++i) x[std::size_t(t)][std::size_t(i)] = p(row + std::size_t(i));
    }
    for (int l = 0; l < s.layers; ++l) {
      const std::size_t L = std::size_t(l);
      std::vector<std::vector<double>> qkv(static_cast<std::size_t>(T));
      for (int t = 0; t < T; ++t) {
        qkv[std::size_t(t)] =
            linear(rmsnorm(x[std::size_t(t)], o.ln1w + L * std::size_t(C)), o.qkvw + L * std::size_t(Q * C), C, Q);
        for (int head = 0; head < NH + NKV; ++head)  // q and k heads
          for (int i = 0; i < hs / 2; ++i) {
            double& a = qkv[std::size_t(t)][std::size_t(head * hs + 2 * i)];
            double& c = qkv[std::size_t(t)][std::size_t(head * hs + 2 * i + 1)];
            const double angle = t * freq[std::size_t(i)];
            const double a0 = a, c0 = c;
            a = a0 * std::cos(angle) - c0 * std::sin(angle);
            c = a0 * std::sin(angle) + c0 * std::cos(angle);
          }
      }
      for (int t = 0; t < T; ++t) {
        std::vector<double> y(static_cast<std::size_t>(C), 0.0);
        for (int h = 0; h < NH; ++h) {
          const int g = h / (NH / NKV);
          const std::size_t qo = std::size_t(h * hs), ko = std::size_t((NH + g) * hs),
                            vo = std::size_t((NH + NKV + g) * hs);
          std::vector<double> score(static_cast<std::size_t>(t + 1));
          double mx = -1e300;
          for (int t2 = 0; t2 <= t; ++t2) {
            double dot = 0;
            for (int i = 0; i < hs; ++i)
              dot += qkv[std::size_t(t)][qo + std::size_t(i)] * qkv[std::size_t(t2)][ko + std::size_t(i)];
            score[std::size_t(t2)] = dot / std::sqrt(double(hs));
            mx = std::max(mx, score[std::size_t(t2)]);
          }
          double sum = 0;
          for (double& v : score) sum += (v = std::exp(v - mx));
          for (int t2 = 0; t2 <= t; ++t2)
            for (int i = 0; i < hs; ++i)
              y[std::size_t(h * hs + i)] += score[std::size_t(t2)] / sum * qkv[std::size_t(t2)][vo + std::size_t(i)];
        }
        const std::vector<double> proj = linear(y, o.attprojw + L * std::size_t(C * C), C, C);
        for (int i = 0; i < C; ++i) x[std::size_t(t)][std::size_t(i)] += proj[std::size_t(i)];
      }
      for (int t = 0; t < T; ++t) {
        const std::vector<double> h = rmsnorm(x[std::size_t(t)], o.ln2w + L * std::size_t(C));
        const std::vector<double> up = linear(h, o.fcw + L * std::size_t(H) * std::size_t(C), C, H);
        const std::vector<double> gate = linear(h, o.fc2w + L * std::size_t(H) * std::size_t(C), C, H);
        std::vector<double> u(static_cast<std::size_t>(H));
        for (int j = 0; j < H; ++j) {
          const double z = gate[std::size_t(j)];
          u[std::size_t(j)] = z / (1 + std::exp(-z)) * up[std::size_t(j)];
        }
        const std::vector<double> proj = linear(u, o.fcprojw + L * std::size_t(C) * std::size_t(H), H, C);
        for (int i = 0; i < C; ++i) x[std::size_t(t)][std::size_t(i)] += proj[std::size_t(i)];
      }
    }
    for (int t = 0; t < T; ++t) {
      const std::vector<double> logits = linear(rmsnorm(x[std::size_t(t)], o.lnfw), o.lm_head, C, V);
      double mx = -1e300;
      for (double v : logits) mx = std::max(mx, v);
      double sum = 0;
      for (double v : logits) sum += std::exp(v - mx);
      total_loss += -(logits[std::size_t(targets[std::size_t(b * T + t)])] - mx - std::log(sum));
    }
  }
  return total_loss / (double(B) * T);
}

}  // namespace starzero::reference
