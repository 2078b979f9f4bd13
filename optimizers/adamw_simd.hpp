#pragma once
// Fused CPU AdamW for ZeRO-Offload: one pass that reads the gradient (bf16 or fp32), updates the
// fp32 master weights and the moments m, v (in place, or from one set of buffers into another),
// and writes the parameter copy (bf16, round to nearest even, NaN stays NaN: runtime/dtype.hpp
// float_to_bf16). 28 bytes per parameter with a bf16 gradient and parameter, which makes it
// memory-bound.
//
// Three code paths, chosen at run time from the CPU (never -march=native): scalar, AVX2 and
// AVX-512 (F+BW). Each one performs exactly the operations of the plain kernel adamw_cpu
// (optimizers/adamw.hpp), in the same order, without FMA, so every path is bit-identical to
// adamw_cpu and to the others, and the result of an element does not depend on how the shard is
// split into chunks or threads (the vector body and the scalar tail compute the same thing).
#include <cstddef>
#include <string_view>
#include <vector>

#include "optimizers/adamw.hpp"
#include "runtime/dtype.hpp"
#include "runtime/simd.hpp"

namespace starzero::optim {

// The paths (runtime/simd.hpp).
using starzero::available_simd_paths;
using starzero::best_simd_path;
using starzero::simd_path_available;
using starzero::simd_path_name;
using starzero::SimdPath;

// One fused AdamW step over n elements. `path` must be available (else std::invalid_argument).
// bf16 gradient and parameter copy:
void adamw_fused(SimdPath path, std::size_t n, const bf16* grad, float grad_scale, float* master, float* m, float* v,
                 bf16* param, const AdamWHyper& hyper);
// fp32 gradient and parameter copy; param may be nullptr (no copy: master is the parameter).
void adamw_fused(SimdPath path, std::size_t n, const float* grad, float grad_scale, float* master, float* m, float* v,
                 float* param, const AdamWHyper& hyper);

// The same, split into chunks of `chunk` elements run by a oneTBB arena of `threads` threads
// (threads <= 0: all hardware threads; chunk 0: n). Results are bit-identical for any threads/chunk.
// numa_node >= 0: the arena's threads run on that NUMA node's cores (oneTBB's tbbbind, from hwloc;
// ignored when oneTBB does not know the node), next to the pinned state they update.
void adamw_fused_parallel(SimdPath path, int threads, std::size_t chunk, std::size_t n, const bf16* grad,
                          float grad_scale, float* master, float* m, float* v, bf16* param, const AdamWHyper& hyper,
                          int numa_node = -1);
void adamw_fused_parallel(SimdPath path, int threads, std::size_t chunk, std::size_t n, const float* grad,
                          float grad_scale, float* master, float* m, float* v, float* param, const AdamWHyper& hyper,
                          int numa_node = -1);

// The speculative update's form: the state is read from `from` and written to master, m, v (the
// other set of buffers), with the same arithmetic, so the result is bit-identical to the in-place
// step on a copy of `from`. from and the outputs may also be the same arrays.
struct AdamWStateIn {
  const float* master;
  const float* m;
  const float* v;
};
void adamw_fused_parallel(SimdPath path, int threads, std::size_t chunk, std::size_t n, const bf16* grad,
                          float grad_scale, const AdamWStateIn& from, float* master, float* m, float* v, bf16* param,
                          const AdamWHyper& hyper, int numa_node = -1);
void adamw_fused_parallel(SimdPath path, int threads, std::size_t chunk, std::size_t n, const float* grad,
                          float grad_scale, const AdamWStateIn& from, float* master, float* m, float* v, float* param,
                          const AdamWHyper& hyper, int numa_node = -1);

// Element-type casts with the same paths (bf16 -> fp32 exact; fp32 -> bf16 as float_to_bf16), used
// by the unfused three-pass pipeline the benchmark compares against.
void cast_bf16_to_f32(SimdPath path, std::size_t n, const bf16* src, float* dst);
void cast_f32_to_bf16(SimdPath path, std::size_t n, const float* src, bf16* dst);
void cast_bf16_to_f32_parallel(SimdPath path, int threads, std::size_t chunk, std::size_t n, const bf16* src,
                               float* dst);
void cast_f32_to_bf16_parallel(SimdPath path, int threads, std::size_t chunk, std::size_t n, const float* src,
                               bf16* dst);

// Σ x[i]² in double, for the gradient norm (optimizers/sum_of_squares_simd.cpp). Element i is
// widened to double, squared and added into lane i mod 16; the 16 lanes are then added pairwise.
// Every path does exactly that, so the paths give the same bits.
double sum_of_squares(SimdPath path, const float* x, std::size_t n);
double sum_of_squares(SimdPath path, const bf16* x, std::size_t n);

}  // namespace starzero::optim
