#pragma once
// What the op codelets of tasks/nn.cpp and tasks/nn_llama.cpp share: one generic lambda per op that,
// for the task's storage type T, reads the task's buffers by their declared meaning and hands
// them to launch(cpu_kernel, cuda_kernel, arguments...), which runs the kernel of the worker's
// device; and the declaration of a codelet whose CPU and CUDA functions run such an op, with its
// FLOP and byte counts from the op's cost per row (tasks/op_costs.hpp). Private to tasks/ (no model,
// no other folder includes it).
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <utility>

#ifdef STARZERO_WITH_CUDA
#include <cuda_runtime.h>
#include <starpu_cublas_v2.h>
#endif

#include "runtime/codelet.hpp"
#include "runtime/dtype.hpp"
#include "tasks/op_costs.hpp"

namespace starzero::tasks::op_codelets {

enum class Device { cpu, cuda };

// The CUDA worker's stream and cuBLAS handle (a build without CUDA has no CUDA worker).
#ifdef STARZERO_WITH_CUDA
inline void* cuda_stream() { return starpu_cuda_get_local_stream(); }
inline void* cublas_handle() { return starpu_cublas_get_local_handle(); }
#else
[[maybe_unused]] inline void* cuda_stream() { return nullptr; }
[[maybe_unused]] inline void* cublas_handle() { return nullptr; }
#endif

// Runs the CPU kernel with `args`, or the CUDA kernel with `args` then the worker's stream (the
// matmuls: its cuBLAS handle, then its stream). `cuda` is STARZERO_CUDA_FUNC(kernel), so that a
// build without CUDA never names a CUDA kernel (they are declared there, not defined).
template <Device device>
struct Launch {
  template <class... Params>
  void operator()(void (*cpu)(Params...), [[maybe_unused]] auto cuda, std::type_identity_t<Params>... args) const {
    if constexpr (device == Device::cpu)
      cpu(args...);
    else if constexpr (std::is_invocable_v<decltype(cuda), Params..., void*>)
      cuda(args..., cuda_stream());
    else
      cuda(args..., cublas_handle(), cuda_stream());
  }
  // Sets `bytes` bytes at `data` to zero, on the worker's device.
  void zero(void* data, std::size_t bytes) const {
    if constexpr (device == Device::cpu) {
      std::memset(data, 0, bytes);
    } else {
#ifdef STARZERO_WITH_CUDA
      cudaMemsetAsync(data, 0, bytes, static_cast<cudaStream_t>(cuda_stream()));
#endif
    }
  }
};

// An op as a codelet function: on `device`, for the storage type of the task (`a.d.dtype`).
template <auto op, Device device, class Args>
void run(const TaskBuffers& b, const Args& a) {
  if (a.d.dtype == DType::f32)
    op.template operator()<float>(Launch<device>{}, b, a);
  else
    op.template operator()<bf16>(Launch<device>{}, b, a);
}

// A declaration completed with the CPU and CUDA functions that run `op`.
template <auto op, class Args>
typename Codelet<Args>::Declaration running(typename Codelet<Args>::Declaration declaration) {
  declaration.cpu = run<op, Device::cpu, Args>;
#ifdef STARZERO_WITH_CUDA
  declaration.cuda = run<op, Device::cuda, Args>;
#endif
  return declaration;
}

// The arguments of a cost function, a lambda op_costs::RowCost (const Args&).
template <class Cost>
struct CostArgs : CostArgs<decltype(&Cost::operator())> {};
template <class Lambda, class Args>
struct CostArgs<op_costs::RowCost (Lambda::*)(const Args&) const> {
  using type = Args;
};

// A declaration completed with the functions that run `op` and the FLOP and byte counts of `cost`,
// the op's op_costs::RowCost from the task's arguments.
template <auto op, auto cost, class Args = typename CostArgs<decltype(cost)>::type>
typename Codelet<Args>::Declaration declared(typename Codelet<Args>::Declaration declaration) {
  declaration.flops = op_costs::row_flops<cost, Args>;
  declaration.bytes = op_costs::row_bytes<cost, Args>;
  // Our own row kernel unless the declaration says what it is on a GPU.
  if (!declaration.gpu) declaration.gpu = op_costs::row_streaming<cost, Args>;
  return running<op, Args>(std::move(declaration));
}

}  // namespace starzero::tasks::op_codelets
