#pragma once
// Element-wise fp32 kernels with explicit shapes: what the axpy and scale codelets run.
// Plain C++17 (the CUDA file includes it too).
#include <cstddef>

#include "runtime/dtype.hpp"

namespace starzero::tasks {

void axpy_cpu(std::size_t n, float alpha, const float* x, float* y);  // y += alpha * x
void scale_cpu(std::size_t n, float alpha, float* x);                 // x *= alpha
// y += x for fp32 or bf16 storage (bf16: summed in fp32, rounded once).
void accumulate_cpu(std::size_t n, const float* x, float* y);
void accumulate_cpu(std::size_t n, const bf16* x, bf16* y);
// The fp32 gradient-accumulation buffer: y (fp32) += x (bf16), exactly; y (bf16) = x (fp32),
// rounded to nearest even.
void accumulate_widen_cpu(std::size_t n, const bf16* x, float* y);
void narrow_cpu(std::size_t n, const float* x, bf16* y);
#ifdef STARZERO_WITH_CUDA
// Launched on `stream` (a cudaStream_t: the StarPU worker's), asynchronously.
void axpy_cuda(std::size_t n, float alpha, const float* x, float* y, void* stream);
void scale_cuda(std::size_t n, float alpha, float* x, void* stream);
void accumulate_cuda(std::size_t n, const float* x, float* y, void* stream);
void accumulate_cuda(std::size_t n, const bf16* x, bf16* y, void* stream);
void accumulate_widen_cuda(std::size_t n, const bf16* x, float* y, void* stream);
void narrow_cuda(std::size_t n, const float* x, bf16* y, void* stream);
#endif

}  // namespace starzero::tasks
