#pragma once
// How the CPU matmul kernels should call BLAS (tasks/nn_kernels_cpu.cpp), measured: a row-wise
// op cut into tiles, each tile one single-threaded sgemm on its own core (what StarPU's CPU
// workers run), against one multi-threaded sgemm over all rows on the same cores; and whether
// the BLAS library offers a bf16 GEMM (OpenBLAS's cblas_sbgemm, for AVX512-BF16 or AMX CPUs).
// `starzero bench blas` prints it. Outside StarPU: no Session may be running.
#include <string>
#include <vector>

namespace starzero::kernels {

// One matrix product of the GPT step, row-major as the kernels call it:
//   forward  out[N,OC] = inp[N,C]·W[OC,C]ᵀ           (rows: N; cut into tiles of rows)
//   input    dinp[N,C] += dout[N,OC]·W[OC,C]          (rows: N)
//   weight   dW[OC,C] += dout[N,OC]ᵀ·inp[N,C]          (cut into pieces of the OC output rows)
struct GemmShape {
  std::string name;  // e.g. "fc forward"
  enum class Kind { forward, input, weight } kind;
  int N, C, OC;
  double flops() const { return 2.0 * N * C * double(OC); }
};

// The products of a GPT-2 step of `rows` token rows with C channels and a vocabulary Vp.
std::vector<GemmShape> gpt_gemm_shapes(int rows, int C, int Vp);

struct BlasComparison {
  GemmShape shape;
  double tiled_seconds;     // `cores` threads at once, each one single-threaded sgemm on its tile
  double threaded_seconds;  // one sgemm over everything with `cores` BLAS threads
};

// Fastest of `repeats` timings of each way, for every shape, on random data.
std::vector<BlasComparison> compare_tiled_and_threaded(const std::vector<GemmShape>& shapes, int cores, int repeats);

// The BLAS library's name and configuration (OpenBLAS: version, core kernels, threading).
std::string blas_description();
// Whether the loaded BLAS exports cblas_sbgemm (a bf16 GEMM with fp32 accumulation).
bool blas_has_sbgemm();

}  // namespace starzero::kernels
