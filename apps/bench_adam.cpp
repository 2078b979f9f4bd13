// `starzero bench adam`: the fused CPU AdamW (optimizers/adamw_simd.hpp) on every SIMD path this
// CPU runs and several thread counts, against what the memory allows, measured in the same run:
//   probe       Adam's exact access pattern with no arithmetic (optimizers/adam_traffic.hpp: read bf16 grad,
//               master, m, v; write master, m, v, bf16 param: 28 B/param): the ceiling;
//   triad       STREAM a = b + s·c at 12 B/element (write-allocate not counted), for reference only;
//   naive       the plain formula as a simple single-threaded loop;
//   three-pass  cast bf16 grad -> fp32 buffer; fp32 Adam; cast fp32 master -> bf16 param, built
//               from the same kernels, same path and threads.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "apps/cli.hpp"
#include "apps/command.hpp"
#include "apps/commands.hpp"
#include "optimizers/adam_traffic.hpp"
#include "optimizers/adamw_simd.hpp"
#include "runtime/dtype.hpp"

namespace starzero {

namespace {

using Clock = std::chrono::steady_clock;
using optim::SimdPath;

constexpr double kAdamBytes = optim::kAdamTrafficBytes;  // per parameter, bf16 grad and param
constexpr double kTriadBytes = 12.0;  // per element, as STREAM counts it
constexpr std::size_t kChunk = std::size_t(1) << 16;

// Median wall time of `steps` calls after one warm-up call; f receives the 1-based step.
double median_seconds(int steps, const std::function<void(int)>& f) {
  f(1);
  std::vector<double> times;
  for (int s = 1; s <= steps; ++s) {
    const Clock::time_point start = Clock::now();
    f(s + 1);
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// [0, n) in chunks of kChunk over an arena of `threads` threads.
void parallel_chunks(tbb::task_arena& arena, std::size_t n, const std::function<void(std::size_t, std::size_t)>& body) {
  const std::size_t chunks = (n + kChunk - 1) / kChunk;
  arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, chunks, 1), [&](const tbb::blocked_range<std::size_t>& r) {
      for (std::size_t c = r.begin(); c != r.end(); ++c) body(c * kChunk, std::min(n, (c + 1) * kChunk));
    });
  });
}

void triad_range(std::size_t b, std::size_t e, float* a, const float* x, const float* y, float s) {
  const __m128 sv = _mm_set1_ps(s);
  std::size_t i = b;
  for (; i + 4 <= e; i += 4) _mm_storeu_ps(a + i, _mm_add_ps(_mm_loadu_ps(x + i), _mm_mul_ps(sv, _mm_loadu_ps(y + i))));
  for (; i < e; ++i) a[i] = x[i] + s * y[i];
}

// The plain formula, written simply, one thread.
void naive_adam(std::size_t n, const bf16* grad, float grad_scale, float* master, float* m, float* v, bf16* param,
                const optim::AdamWHyper& h) {
  const float bc1 = 1.0f - std::pow(h.beta1, float(h.step));
  const float bc2 = 1.0f - std::pow(h.beta2, float(h.step));
  for (std::size_t i = 0; i < n; ++i) {
    const float g = bf16_to_float(grad[i].bits) * grad_scale;
    m[i] = h.beta1 * m[i] + (1.0f - h.beta1) * g;
    v[i] = h.beta2 * v[i] + (1.0f - h.beta2) * g * g;
    master[i] -= h.lr * h.weight_decay * master[i];
    master[i] -= h.lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + h.eps);
    param[i].bits = float_to_bf16(master[i]);
  }
}

// The thread counts of --threads, or 1..hardware threads.
std::vector<int> thread_counts_option(const cli::ArgParser& p, int hardware_threads) {
  std::vector<int> counts;
  if (auto v = p.value("threads")) {
    for (std::int64_t t : cli::parse_count_list("--threads", *v)) {
      if (t < 1 || t > 4096) throw UsageError("--threads: each count must be 1..4096, got " + std::to_string(t));
      counts.push_back(int(t));
    }
  } else {
    for (int t = 1; t <= hardware_threads; ++t) counts.push_back(t);
  }
  return counts;
}

// One shard's arrays, filled with fixed values in AdamW's usual ranges.
struct AdamShard {
  std::vector<bf16> grad, param;
  std::vector<float> master, m, v, grad32;

  explicit AdamShard(std::size_t n) : grad(n), param(n), master(n), m(n), v(n), grad32(n) {
    for (std::size_t i = 0; i < n; ++i) {
      const float x = float(int((i * 2654435761u) % 2001u) - 1000) * 1e-3f;  // [-1, 1]
      grad[i] = from_float<bf16>(x * 1e-2f + 1e-4f);
      master[i] = x;
      m[i] = 1e-3f * x;
      v[i] = 1e-6f * (x * x + 1.0f);
    }
  }
  std::size_t size() const { return grad.size(); }
};

constexpr float kGradScale = 0.9f;

optim::AdamWHyper hyper_at_step(int step) {
  optim::AdamWHyper h;
  h.lr = 1e-4f;
  h.weight_decay = 0.1f;
  h.step = step;
  return h;
}

struct Row {
  SimdPath path;
  int threads;
  double fused_s, three_pass_s, probe_s, triad_s;
};

// Every SIMD path at `threads` threads, with the probe and triad ceilings of the same arena.
std::vector<Row> measure_at_threads(AdamShard& x, int threads, int steps, const std::vector<SimdPath>& paths) {
  const std::size_t n = x.size();
  tbb::task_arena arena(threads);
  const double probe_s = median_seconds(steps, [&](int) {
    parallel_chunks(arena, n, [&](std::size_t b, std::size_t e) {
      optim::adam_traffic(b, e, x.grad.data(), x.master.data(), x.m.data(), x.v.data(), x.param.data());
    });
  });
  const double triad_s = median_seconds(steps, [&](int) {
    parallel_chunks(arena, n, [&](std::size_t b, std::size_t e) {
      triad_range(b, e, x.grad32.data(), x.m.data(), x.v.data(), 0.5f);
    });
  });
  std::vector<Row> rows;
  for (SimdPath path : paths) {
    const double fused_s = median_seconds(steps, [&](int s) {
      optim::adamw_fused_parallel(path, threads, kChunk, n, x.grad.data(), kGradScale, x.master.data(), x.m.data(),
                                  x.v.data(), x.param.data(), hyper_at_step(s));
    });
    const double three_pass_s = median_seconds(steps, [&](int s) {
      optim::cast_bf16_to_f32_parallel(path, threads, kChunk, n, x.grad.data(), x.grad32.data());
      optim::adamw_fused_parallel(path, threads, kChunk, n, x.grad32.data(), kGradScale, x.master.data(), x.m.data(),
                                  x.v.data(), static_cast<float*>(nullptr), hyper_at_step(s));
      optim::cast_f32_to_bf16_parallel(path, threads, kChunk, n, x.master.data(), x.param.data());
    });
    rows.push_back({path, threads, fused_s, three_pass_s, probe_s, triad_s});
    std::printf("  %s, %d threads: fused %.3f s, three-pass %.3f s, probe %.3f s\n",
                std::string(optim::simd_path_name(path)).c_str(), threads, fused_s, three_pass_s, probe_s);
    std::fflush(stdout);
  }
  return rows;
}

void print_results(std::size_t n, const std::vector<Row>& rows, double naive_s) {
  const double N = double(n);
  std::printf(
      "\n| path | threads | fused Mparam/s | fused GB/s | probe GB/s (ceiling) | fused %% of probe "
      "| three-pass Mparam/s | fused × three-pass | triad GB/s (ref.) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  const Row* best = nullptr;
  for (const Row& r : rows) {
    std::printf("| %s | %d | %.1f | %.1f | %.1f | %.1f %% | %.1f | %.2f | %.1f |\n",
                std::string(optim::simd_path_name(r.path)).c_str(), r.threads, N / r.fused_s / 1e6,
                N * kAdamBytes / r.fused_s / 1e9, N * kAdamBytes / r.probe_s / 1e9, 100.0 * r.probe_s / r.fused_s,
                N / r.three_pass_s / 1e6, r.three_pass_s / r.fused_s, N * kTriadBytes / r.triad_s / 1e9);
    if (!best || r.fused_s < best->fused_s) best = &r;
  }
  std::printf("| naive scalar loop | 1 | %.1f | %.1f | | | | | |\n", N / naive_s / 1e6, N * kAdamBytes / naive_s / 1e9);
  std::printf("\nbest: %s with %d threads, %.1f Mparam/s, %.1f GB/s\n",
              std::string(optim::simd_path_name(best->path)).c_str(), best->threads, N / best->fused_s / 1e6,
              N * kAdamBytes / best->fused_s / 1e9);
  std::printf("best vs probe (same threads): %.1f %%\n", 100.0 * best->probe_s / best->fused_s);
  std::printf("best vs three-pass (same path and threads): %.2f ×\n", best->three_pass_s / best->fused_s);
  std::printf("best vs naive scalar loop (1 thread): %.2f ×\n", naive_s / best->fused_s);
}

int run_adam_bench(const cli::ArgParser& p) {
  const std::size_t n = std::size_t(cli::int_option(p, "params", 64000000, 16, 2147483647));
  const int steps = cli::int_option(p, "steps", 5, 1);
  const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
  const std::vector<int> thread_counts = thread_counts_option(p, hw);
  const auto paths = optim::available_simd_paths();

  std::printf(
      "bench adam: %zu parameters (%.2f GB moved per step at 28 B/param), %d timed steps (median), "
      "paths:",
      n, double(n) * kAdamBytes / 1e9, steps);
  for (SimdPath path : paths) std::printf(" %s", std::string(optim::simd_path_name(path)).c_str());
  std::printf(", %d hardware threads\n", hw);
  std::fflush(stdout);

  AdamShard shard(n);
  const double naive_s = median_seconds(steps, [&](int s) {
    naive_adam(n, shard.grad.data(), kGradScale, shard.master.data(), shard.m.data(), shard.v.data(),
               shard.param.data(), hyper_at_step(s));
  });
  std::vector<Row> rows;
  for (int threads : thread_counts) {
    const std::vector<Row> at_threads = measure_at_threads(shard, threads, steps, paths);
    rows.insert(rows.end(), at_threads.begin(), at_threads.end());
  }
  print_results(n, rows, naive_s);
  return 0;
}

}  // namespace

int bench_adam_main(int argc, char** argv) {
  cli::ArgParser parser("bench adam");
  parser.option("params", "N", "parameters in the shard (default 64M)")
      .option("threads", "LIST", "thread counts, e.g. 1,2,4 (default 1..hardware threads)")
      .option("steps", "N", "timed steps per measurement, median reported (default 5)")
      .flag("help", "show this help");
  return run_command({"starzero bench adam", "starzero bench adam [options]"}, parser, argc, argv, run_adam_bench);
}

}  // namespace starzero
