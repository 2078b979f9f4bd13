#pragma once
// AdamW and global-norm clipping as StarPU tasks, per parameter group.
#include <starpu.h>

#include <string>
#include <vector>

#include "optimizers/adamw.hpp"
#include "runtime/dtype.hpp"

namespace starzero::optim {

// A slice [offset, offset + count) of a vector handle (count 0: to the end).
struct Slice {
  std::size_t offset = 0;
  std::size_t count = 0;
};

// sum_of_squares (fp32 [1]) = Σ grad²  over the slice (grad: fp32 or bf16).
void submit_sum_of_squares(starpu_data_handle_t grad, Slice slice, DType dtype, starpu_data_handle_t sum_of_squares,
                           const std::string& name);
// total (fp32 [1]) = Σ partial sums (then all-reduced across ranks when each holds a shard).
void submit_sum_scalars(const std::vector<starpu_data_handle_t>& partial_sums, starpu_data_handle_t total,
                        const std::string& name);
// The gradients summed over `grad_divisor` ranks are divided by it (data-parallel average):
// norm (fp32 [1]) = sqrt(Σ partial sums) / grad_divisor, the global norm of the average;
// scale (fp32 [1]) = min(1, max_norm / norm) / grad_divisor, what AdamW multiplies the summed
// gradient by. max_norm <= 0: no clipping (the norm is still computed). A non-finite norm (an
// inf or NaN gradient anywhere) gives scale NaN, which makes every AdamW task skip the step:
// master weights and moments stay as they were, and the parameter copy is written from them.
void submit_clip_scale(const std::vector<starpu_data_handle_t>& partial_sums, float max_norm, float grad_divisor,
                       starpu_data_handle_t scale, starpu_data_handle_t norm, const std::string& name);
// The scale that makes AdamW leave everything as it was.
bool skips_update(float scale);

// One AdamW step (see adamw.hpp) on master/m/v (n elements each), reading the gradient from
// `grad` at grad_offset and writing the parameter copy into `param` at param_offset (a ZeRO
// shard lives inside the full buffer); gradients multiplied by *scale.
void submit_adamw(starpu_data_handle_t grad, std::size_t grad_offset, starpu_data_handle_t master,
                  starpu_data_handle_t m, starpu_data_handle_t v, starpu_data_handle_t param, std::size_t param_offset,
                  starpu_data_handle_t scale, DType dtype, const AdamWHyper& hyper, const std::string& name);

// ZeRO-Offload's CPU step: the same update, CPU only, with the fused SIMD kernel (optimizers/
// adamw_simd.hpp, best path of this CPU) run by `threads` oneTBB threads. Every such task also
// takes `token` in RW mode, so one runs at a time with all its threads: the cores set aside for
// CPU Adam are never oversubscribed (the step is memory-bound: two at once would not be faster).
// The parameter copy `param_out` (n elements) is written whole (W: nothing is fetched before).
struct CpuAdamPool {
  starpu_data_handle_t token = nullptr;
  int threads = 1;
  int numa_node = -1;  // the threads run on this NUMA node's cores (where the state is pinned)
  // Of the tasks waiting for the token, the one with the highest turn takes it next (the token is
  // taken in STARPU_COMMUTE mode: no order among them from their submission). The submitted
  // task's StarPU priority; under --priorities critical_path, the scheme's rank replaces it.
  int turn = 0;
};
void submit_adamw_cpu(starpu_data_handle_t grad, starpu_data_handle_t master, starpu_data_handle_t m,
                      starpu_data_handle_t v, starpu_data_handle_t param_out, starpu_data_handle_t scale, DType dtype,
                      const AdamWHyper& hyper, const CpuAdamPool& pool, const std::string& name);

// The speculative update (--speculative-update, docs/architecture.md "Exact clipping"): a
// layer's optimizer state lives in two sets of buffers, and a step reads one and writes the other.
struct AdamWStateHandles {
  starpu_data_handle_t master = nullptr, m = nullptr, v = nullptr;
};
// AdamW before the global norm is known: the CPU step from `from` into `to` with the unclipped
// scale (1 / (ranks·micro-batches)), writing the parameter copy; ready as soon as the layer's
// reduced gradient is.
void submit_adamw_cpu_speculative(starpu_data_handle_t grad, const AdamWStateHandles& from,
                                  const AdamWStateHandles& to, starpu_data_handle_t param_out,
                                  starpu_data_handle_t unclipped_scale, DType dtype, const AdamWHyper& hyper,
                                  const CpuAdamPool& pool, const std::string& name);
// What a commit did: it adds 1 to counts[outcome] (fp32 [3], exact to 2^24 commits).
enum class CommitOutcome : int {
  adopted = 0,    // the clip scale equals the unclipped one: the speculative result is the step
  rerun = 1,      // clipped: the step re-run from `from` with the clip scale (a rollback)
  discarded = 2,  // non-finite norm: `to` and the parameter copy get the old state (step skipped)
};
// After clip_scale: one of the three, so that `to` and `param_out` hold exactly what a synchronous
// AdamW (submit_adamw_cpu) on `from` would have left.
void submit_adamw_commit(starpu_data_handle_t clip_scale, starpu_data_handle_t unclipped_scale,
                         starpu_data_handle_t grad, const AdamWStateHandles& from, const AdamWStateHandles& to,
                         starpu_data_handle_t param_out, starpu_data_handle_t counts, DType dtype,
                         const AdamWHyper& hyper, const CpuAdamPool& pool, const std::string& name);

}  // namespace starzero::optim
