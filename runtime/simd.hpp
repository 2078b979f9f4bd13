#pragma once
// The SIMD code paths of the CPU kernels that have several (the fused AdamW, the vectorised
// element-wise nn kernels), chosen at run time from the CPU: never -march=native. A kernel with
// paths takes a SimdPath; each path performs the same operations in the same order, without FMA,
// so the paths give the same bits unless the kernel documents otherwise.
#include <string_view>
#include <vector>

namespace starzero {

enum class SimdPath { scalar, avx2, avx512 };

// The widest path this CPU runs (AVX-512 needs F and BW; AVX2 needs AVX2).
SimdPath best_simd_path();
// Every path this CPU runs, scalar first.
std::vector<SimdPath> available_simd_paths();
bool simd_path_available(SimdPath path);
// Throws std::invalid_argument when this CPU cannot run `path`.
void require_simd_path(SimdPath path);
std::string_view simd_path_name(SimdPath path);  // "scalar", "avx2", "avx512"

}  // namespace starzero
