#pragma once
// Element-wise fp32 codelets: y += alpha * x (axpy) and x *= alpha (scale).
// Each has a CPU and a CUDA implementation and a history-based performance model; the task
// name given at submission shows in traces.
#include <cstddef>
#include <string>

#include "runtime/tensor.hpp"
#include "tasks/elementwise_kernels.hpp"

namespace starzero::tasks {

// Asynchronous submission; StarPU orders tasks by their data accesses.
void submit_axpy(float alpha, const Tensor& x, const Tensor& y, const std::string& name = "axpy");
void submit_scale(float alpha, const Tensor& x, const std::string& name = "scale");
// Any vector handle set to zero bytes (a W task: it also allocates a transient handle).
void submit_zero(starpu_data_handle_t x, const std::string& name);
// The same on a CPU worker: for a buffer that lives in host memory (offloaded optimizer state).
void submit_zero_on_host(starpu_data_handle_t x, const std::string& name);
// dst = src, two vector handles of one size in bytes (any dtype).
void submit_copy(starpu_data_handle_t src, starpu_data_handle_t dst, const std::string& name);
// The fp32 gradient-accumulation buffer: dst (fp32) += src (bf16); dst (bf16) = src (fp32).
void submit_accumulate_widen(starpu_data_handle_t src, starpu_data_handle_t dst, const std::string& name);
void submit_narrow(starpu_data_handle_t src, starpu_data_handle_t dst, const std::string& name);
// dst += src, two vector handles of one size and dtype (fp32 or bf16).
void submit_accumulate(starpu_data_handle_t src, starpu_data_handle_t dst, DType dtype, const std::string& name);

}  // namespace starzero::tasks
