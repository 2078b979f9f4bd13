#include <algorithm>
#include <cmath>

#include "optimizers/adamw.hpp"

namespace starzero::optim {

template <class G, class P>
void adamw_cpu(std::size_t n, const G* grad, float grad_scale, float* master, float* m, float* v, P* param,
               const AdamWHyper& hyper) {
  const float bias_correction1 = 1.0f - std::pow(hyper.beta1, float(hyper.step));
  const float bias_correction2 = 1.0f - std::pow(hyper.beta2, float(hyper.step));
  for (std::size_t i = 0; i < n; ++i) {
    const float g = to_float(grad[i]) * grad_scale;
    m[i] = hyper.beta1 * m[i] + (1.0f - hyper.beta1) * g;
    v[i] = hyper.beta2 * v[i] + (1.0f - hyper.beta2) * g * g;
    const float m_hat = m[i] / bias_correction1;
    const float v_hat = v[i] / bias_correction2;
    float w = master[i];
    w -= hyper.lr * hyper.weight_decay * w;
    w -= hyper.lr * m_hat / (std::sqrt(v_hat) + hyper.eps);
    master[i] = w;
    param[i] = from_float<P>(w);
  }
}

template void adamw_cpu<float, float>(std::size_t, const float*, float, float*, float*, float*, float*,
                                      const AdamWHyper&);
template void adamw_cpu<bf16, bf16>(std::size_t, const bf16*, float, float*, float*, float*, bf16*, const AdamWHyper&);

float learning_rate(int step, float lr, int warmup, int total, float final_fraction) {
  if (warmup > 0 && step <= warmup) return lr * float(step) / float(warmup);
  if (total <= warmup) return lr;
  const float progress = std::min(1.0f, float(step - warmup) / float(total - warmup));
  const float cosine = 0.5f * (1.0f + std::cos(float(M_PI) * progress));
  const float min_lr = lr * final_fraction;
  return min_lr + cosine * (lr - min_lr);
}

}  // namespace starzero::optim
