#include "tasks/blas_study.hpp"

#include <cblas.h>
#include <dlfcn.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstddef>
#include <random>
#include <thread>
#include <vector>

namespace starzero::kernels {

namespace {

using Clock = std::chrono::steady_clock;

// Operands of one product, filled with uniform values in [-1, 1).
struct Operands {
  std::vector<float> a, b, c;
  Operands(const GemmShape& s) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    const std::size_t n = std::size_t(s.N), c_ = std::size_t(s.C), oc = std::size_t(s.OC);
    const auto fill = [&](std::vector<float>& v, std::size_t size) {
      v.resize(size);
      for (float& x : v) x = value(rng);
    };
    switch (s.kind) {
      case GemmShape::Kind::forward: fill(a, n * c_), fill(b, oc * c_), fill(c, n * oc); break;  // inp, W, out
      case GemmShape::Kind::input: fill(a, n * oc), fill(b, oc * c_), fill(c, n * c_); break;    // dout, W, dinp
      case GemmShape::Kind::weight: fill(a, n * oc), fill(b, n * c_), fill(c, oc * c_); break;   // dout, inp, dW
    }
  }
};

// The product restricted to rows [first, first + count) of its cut: token rows for forward and
// input, output rows (OC) for weight. Single call, with whatever BLAS thread count is set.
void gemm_part(const GemmShape& s, Operands& o, int first, int count) {
  const int C = s.C, OC = s.OC, N = s.N;
  switch (s.kind) {
    case GemmShape::Kind::forward:
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, count, OC, C, 1.0f, o.a.data() + std::size_t(first) * C, C,
                  o.b.data(), C, 0.0f, o.c.data() + std::size_t(first) * OC, OC);
      break;
    case GemmShape::Kind::input:
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, count, C, OC, 1.0f, o.a.data() + std::size_t(first) * OC,
                  OC, o.b.data(), C, 1.0f, o.c.data() + std::size_t(first) * C, C);
      break;
    case GemmShape::Kind::weight:
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, count, C, N, 1.0f, o.a.data() + first, OC, o.b.data(), C,
                  1.0f, o.c.data() + std::size_t(first) * C, C);
      break;
  }
}

int cut_rows(const GemmShape& s) { return s.kind == GemmShape::Kind::weight ? s.OC : s.N; }

double seconds_of(const auto& f) {
  const Clock::time_point start = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

std::vector<GemmShape> gpt_gemm_shapes(int rows, int C, int Vp) {
  using K = GemmShape::Kind;
  std::vector<GemmShape> shapes;
  const struct {
    const char* name;
    int in, out;
  } linears[] = {{"qkv", C, 3 * C}, {"attproj", C, C}, {"fc", C, 4 * C}, {"fcproj", 4 * C, C}, {"classifier", C, Vp}};
  for (const auto& l : linears) {
    shapes.push_back({std::string(l.name) + " forward", K::forward, rows, l.in, l.out});
    shapes.push_back({std::string(l.name) + " input grad", K::input, rows, l.in, l.out});
    shapes.push_back({std::string(l.name) + " weight grad", K::weight, rows, l.in, l.out});
  }
  return shapes;
}

std::vector<BlasComparison> compare_tiled_and_threaded(const std::vector<GemmShape>& shapes, int cores, int repeats) {
  std::vector<BlasComparison> out;
  for (const GemmShape& s : shapes) {
    Operands o(s);
    const int total = cut_rows(s);
    // Tiles: `cores` threads started once, each one single-threaded call on its consecutive share of
    // the rows per run. A run is timed from the barrier that releases all threads to the one they
    // all reach after their call, stamped by the barrier's completion step (the last arrival).
    openblas_set_num_threads(1);
    double best_tiled = 1e300;
    {
      std::vector<Clock::time_point> stamps(2 * std::size_t(repeats + 1));
      std::size_t phase = 0;
      auto stamp = [&]() noexcept { stamps[phase++] = Clock::now(); };
      std::barrier sync(cores, stamp);
      std::vector<std::jthread> threads;
      for (int t = 0; t < cores; ++t) {
        const int first = int(std::int64_t(total) * t / cores), end = int(std::int64_t(total) * (t + 1) / cores);
        threads.emplace_back([&, first, end] {
          for (int r = 0; r <= repeats; ++r) {  // run 0: warm-up
            sync.arrive_and_wait();
            gemm_part(s, o, first, end - first);
            sync.arrive_and_wait();
          }
        });
      }
      threads.clear();  // joins
      for (int r = 1; r <= repeats; ++r)
        best_tiled = std::min(
            best_tiled,
            std::chrono::duration<double>(stamps[2 * std::size_t(r) + 1] - stamps[2 * std::size_t(r)]).count());
    }
    auto threaded = [&] { gemm_part(s, o, 0, total); };
    openblas_set_num_threads(cores);
    threaded();
    double best_threaded = seconds_of(threaded);
    for (int r = 1; r < repeats; ++r) best_threaded = std::min(best_threaded, seconds_of(threaded));
    out.push_back({s, best_tiled, best_threaded});
  }
  openblas_set_num_threads(1);  // what the kernels expect
  return out;
}

std::string blas_description() {
  std::string d = openblas_get_config();
  d += ", core ";
  d += openblas_get_corename();
  return d;
}

bool blas_has_sbgemm() {
  // The header declares cblas_sbgemm whatever the build; only a library built with BFLOAT16
  // support exports it, so ask the dynamic linker rather than link against it.
  return dlsym(RTLD_DEFAULT, "cblas_sbgemm") != nullptr;
}

}  // namespace starzero::kernels
