#pragma once
// AdamW and global-norm clipping as StarPU tasks, per parameter group.
#include <starpu.h>

#include <string>
#include <vector>

#include "optimizers/adamw.hpp"
#include "runtime/dtype.hpp"

namespace starzero::optim {

// sum_of_squares (fp32 [1]) = Σ grad²  (grad: fp32 or bf16).
void submit_sum_of_squares(starpu_data_handle_t grad, DType dtype, starpu_data_handle_t sum_of_squares,
                           const std::string& name);
// scale (fp32 [1]) = min(1, max_norm / sqrt(Σ partial sums)); norm (fp32 [1]) = the global norm.
// max_norm <= 0: scale = 1 (no clipping), the norm is still computed.
void submit_clip_scale(const std::vector<starpu_data_handle_t>& partial_sums, float max_norm,
                       starpu_data_handle_t scale, starpu_data_handle_t norm, const std::string& name);
// One AdamW step on a group (see adamw.hpp), gradients multiplied by *scale.
void submit_adamw(starpu_data_handle_t grad, starpu_data_handle_t master, starpu_data_handle_t m,
                  starpu_data_handle_t v, starpu_data_handle_t param, starpu_data_handle_t scale, DType dtype,
                  const AdamWHyper& hyper, const std::string& name);

}  // namespace starzero::optim
