#pragma once
// Adam's memory traffic without its arithmetic: the ceiling the fused CPU AdamW (adamw_simd.hpp)
// can reach on this machine's memory. `starzero bench adam` compares its kernels with it, and a real
// run's step bound takes the CPU AdamW's rate from it (train/peak_probes.hpp).
#include <cstddef>

#include "runtime/dtype.hpp"

namespace starzero::optim {

// Bytes per parameter Adam moves with bf16 gradients and parameters: the bf16 gradient read, the
// fp32 master, m and v read and written, the bf16 parameter written.
inline constexpr double kAdamTrafficBytes = 28.0;

// Elements [begin, end) of Adam's access pattern: every array loaded and stored back unchanged,
// the gradient's bits written to the parameter, with the widest vectors this CPU has (AVX-512,
// AVX2, else SSE2: a ceiling for every kernel path).
void adam_traffic(std::size_t begin, std::size_t end, const bf16* grad, float* master, float* m, float* v, bf16* param);

// The host memory bandwidth (bytes/s, kAdamTrafficBytes per parameter) that adam_traffic reaches
// over `params` parameters on `threads` threads (a oneTBB arena, chunks of 64 Ki parameters): the
// fastest of `repeats` passes after a warm-up one, which also touches the arrays' pages.
// std::invalid_argument for threads < 1, params < 1 or repeats < 1.
double adam_traffic_Bps(int threads, std::size_t params, int repeats = 3);

}  // namespace starzero::optim
