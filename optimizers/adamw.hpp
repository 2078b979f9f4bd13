#pragma once
// AdamW as PyTorch and llm.c compute it (docs/toolchain.md, "AdamW conventions"): with t the 1-based step,
//   g = grad * grad_scale                        (grad_scale: global-norm clipping, else 1)
//   m = β1 m + (1-β1) g ;  v = β2 v + (1-β2) g²
//   master -= lr · wd · master                   (decoupled weight decay)
//   master -= lr · (m / (1-β1^t)) / (sqrt(v / (1-β2^t)) + eps)
//   param = master rounded to the parameter's storage type
// master, m, v are fp32; grad and param are float (exact mode) or bf16.
// This is the plain kernel and codelet; the fast fused SIMD CPU path comes with ZeRO-Offload.
#include <cstddef>

#include "runtime/dtype.hpp"

namespace starzero::optim {

struct AdamWHyper {
  float lr = 1e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int step = 1;  // t, 1-based
};

template <class G, class P>
void adamw_cpu(std::size_t n, const G* grad, float grad_scale, float* master, float* m, float* v, P* param,
               const AdamWHyper& hyper);

#ifdef STARZERO_WITH_CUDA
template <class G, class P>
void adamw_cuda(std::size_t n, const G* grad, const float* grad_scale_device, float* master, float* m, float* v,
                P* param, const AdamWHyper& hyper, void* stream);
// *sum_device = Σ x² of n elements (overwritten), summed in double in a fixed order that depends
// on n alone (no atomics: the same bits on every run), rounded once to float. Two launches; 8 KiB
// of stream-ordered scratch at most.
template <class T>
void sum_of_squares_cuda(std::size_t n, const T* x, float* sum_device, void* stream);
#endif

// Warmup + cosine learning-rate schedule (llm.c): linear from lr/warmup to lr over `warmup`
// steps, then cosine from lr down to lr·final_fraction at `total` steps. step is 1-based.
float learning_rate(int step, float lr, int warmup, int total, float final_fraction);

}  // namespace starzero::optim
