#pragma once
// Where a model's compute tasks may run (docs/scheduling.md, "Placement with a GPU").
//
// A codelet declares what its tasks are (Work). A session's policy (SessionOptions::cpu_compute)
// is turned once, when the Session starts, into the StarPU `where` mask of model tasks; submit()
// (runtime/codelet.hpp) gives that mask to every task of a Work::model codelet that has a CUDA
// function. With CUDA workers and --cpu-compute off (the default), model tasks run on CUDA
// workers only: StarPU's dm* policies otherwise hand small model kernels to idle CPU workers (a
// 13B's ln1_fwd: 22 ms there, 0.06 ms on the GPU) and the GPU waits for their results.
// Support work (optimizer steps, copies, fills, collectives, transfers) stays where the
// scheduler puts it. Without CUDA workers every task runs on the CPU workers, as before.
#include <cstdint>
#include <optional>
#include <string_view>

namespace starzero {

// What a codelet's tasks do, as far as their placement goes.
enum class Work {
  model,    // a model's forward, backward or recomputation kernel (and its loss, its embedding)
  support,  // optimizer steps, element-wise copies, fills and conversions: the scheduler decides
};

// Whether CPU workers may run model tasks in a session that has CUDA workers (--cpu-compute).
enum class CpuCompute { off, on };

// "off" or "on"; nullopt for anything else.
std::optional<CpuCompute> parse_cpu_compute(std::string_view text);

// The `where` mask of a model task in a session with `cuda_workers` CUDA workers: STARPU_CUDA
// when there is one and `cpu_compute` is off, else 0 (the codelet's own: every worker its
// functions allow).
std::uint32_t model_task_where(CpuCompute cpu_compute, int cuda_workers);

// The running session's mask (0 outside a session): Session sets it when StarPU has started and
// clears it at shutdown; submit() reads it.
std::uint32_t session_model_where();
void set_session_model_where(std::uint32_t where);

}  // namespace starzero
