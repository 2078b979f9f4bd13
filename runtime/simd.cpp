#include "runtime/simd.hpp"

#include <stdexcept>
#include <string>

namespace starzero {

bool simd_path_available(SimdPath path) {
  __builtin_cpu_init();
  switch (path) {
    case SimdPath::scalar: return true;
    case SimdPath::avx2: return __builtin_cpu_supports("avx2");
    case SimdPath::avx512: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  }
  return false;
}

void require_simd_path(SimdPath path) {
  if (!simd_path_available(path))
    throw std::invalid_argument("SIMD path " + std::string(simd_path_name(path)) + " is not supported by this CPU");
}

SimdPath best_simd_path() {
  if (simd_path_available(SimdPath::avx512)) return SimdPath::avx512;
  if (simd_path_available(SimdPath::avx2)) return SimdPath::avx2;
  return SimdPath::scalar;
}

std::vector<SimdPath> available_simd_paths() {
  std::vector<SimdPath> paths;
  for (SimdPath p : {SimdPath::scalar, SimdPath::avx2, SimdPath::avx512})
    if (simd_path_available(p)) paths.push_back(p);
  return paths;
}

std::string_view simd_path_name(SimdPath path) {
  switch (path) {
    case SimdPath::scalar: return "scalar";
    case SimdPath::avx2: return "avx2";
    case SimdPath::avx512: return "avx512";
  }
  return "unknown";
}

}  // namespace starzero
