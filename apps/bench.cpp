// `starzero bench step`: time training steps of a preset (any family's: models/registry.hpp) and
// report model FLOP utilisation against this machine's peak as measured in the same run (a GEMM
// probe on every worker).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "apps/cli.hpp"
#include "apps/command.hpp"
#include "apps/commands.hpp"
#include "models/gpt_layout.hpp"
#include "models/registry.hpp"
#include "offload/engine.hpp"
#include "runtime/session.hpp"
#include "tasks/blas_study.hpp"
#include "tasks/nn.hpp"
#include "train/peak_probes.hpp"
#include "train/run.hpp"

namespace starzero {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Training FLOPs per token (PaLM appendix B): 6 per parameter (forward 2, backward 4) plus the
// attention score and value products, 12·L·C·T.
double flops_per_token(const PresetModel& s, int T) {
  return 6.0 * double(s.parameters) + 12.0 * s.layers * double(s.channels) * T;
}

constexpr int kProbeRepeats = 5;

cli::ArgParser make_parser() {
  cli::ArgParser p("starzero bench");
  p.option("preset", "NAME", "model shape, of any family (default gpt2-124M)")
      .option("batch", "B", "sequences per step (default 4)")
      .option("seq", "T", "tokens per sequence (default 64)")
      .option("precision", "P", "fp32 (default) or bf16")
      .option("steps", "N", "timed steps after one warm-up step (default 3)")
      .option("tiles", "N", "tasks per row-wise op: auto (default) or 1..B, as for starzero train")
      .option("head-groups", "G", "attention tasks per tile: auto (default) or 1..NH, as for starzero train")
      .option("probe-size", "S", "side of the square GEMMs of the peak probe (default 1024)");
  cli::add_session_options(p).flag("help", "show this help");
  return p;
}

int run_step_bench(const cli::ArgParser& p) {
  const PresetModel shape = preset_model(p.value("preset").value_or("gpt2-124M"));
  const int B = cli::int_option(p, "batch", 4, 1), T = cli::int_option(p, "seq", 64, 1);
  const int steps = cli::int_option(p, "steps", 3, 1, 1 << 20),
            probe_size = cli::int_option(p, "probe-size", 1024, 1, 1 << 16);
  if (T > shape.max_seq) throw UsageError("--seq exceeds the preset's max-seq " + std::to_string(shape.max_seq));
  const Precision precision_flag = cli::precision_option(p, "precision", Precision::fp32);
  const DType dtype = storage_dtype(precision_flag);
  // Empty: auto, once the session's workers are known.
  const Tiling given{cli::auto_or_int_option(p, "tiles", 1, B), cli::auto_or_int_option(p, "head-groups", 1, shape.heads)};
  shape.check_tiling(given, B);
  const std::string precision(precision_name(precision_flag));
  Session session(cli::session_options(p));
  const int workers = session.cuda_workers() > 0 ? session.cuda_workers() : session.cpu_workers();
  std::printf("bench step: %s (%zu parameters), %s, B=%d T=%d, policy %s, %s\n", shape.describe.c_str(),
              shape.parameters, precision.c_str(), B, T, session.policy().c_str(),
              session.workers_summary().c_str());

  std::printf("peak probe: %d independent %dx%dx%d GEMMs, fastest of %d runs ...\n", std::max(1, 4 * workers),
              probe_size, probe_size, probe_size, kProbeRepeats);
  std::fflush(stdout);
  const GemmProbe probe = gemm_probe(session, dtype, probe_size, 4, kProbeRepeats);
  std::printf("peak probe: %.1f GFLOP/s (%d GEMMs in %.3f s)\n", probe.flops_per_second / 1e9, probe.tasks,
              probe.seconds);

  const std::unique_ptr<TokenModel> made = shape.make_model(dtype, B, T, resolve_tiling(given, session, B));
  TokenModel& model = *made;
  const Tiling built = model.tiling();
  if (built.head_groups)
    std::printf("tiles: %d per row-wise op, %d attention head group(s) per tile\n", *built.tiles, *built.head_groups);
  else
    std::printf("tiles: %d per row-wise op\n", *built.tiles);
  EngineOptions engine_options;
  Engine engine(model, engine_options);
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> token(0, shape.vocab - 1);
  std::vector<int> inputs(std::size_t(B) * std::size_t(T)), targets(inputs.size());
  std::vector<double> times;
  for (int step = 1; step <= steps + 1; ++step) {
    for (std::size_t i = 0; i < inputs.size(); ++i) inputs[i] = token(rng), targets[i] = token(rng);
    const Clock::time_point start = Clock::now();
    model.set_batch(inputs, targets);
    engine.submit_step(1e-4f, step);
    session.wait_all();
    const double seconds = seconds_since(start);
    std::printf("  step %d%s: %.3f s, loss %.4f\n", step, step == 1 ? " (warm-up)" : "", seconds, model.mean_loss());
    std::fflush(stdout);
    if (step > 1) times.push_back(seconds);
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  const double tokens = double(B) * T;
  const double model_flops = flops_per_token(shape, T) * tokens / median;
  std::printf("\n| metric | value |\n|---|---|\n");
  std::printf("| step time (median of %d) | %.3f s |\n", steps, median);
  std::printf("| tokens/s | %.0f |\n", tokens / median);
  std::printf("| model FLOP/s (6Ψ + 12LCT per token) | %.1f GFLOP/s |\n", model_flops / 1e9);
  std::printf("| peak (GEMM probe, same run) | %.1f GFLOP/s |\n", probe.flops_per_second / 1e9);
  std::printf("| MFU vs probe | %.1f %% |\n", 100.0 * model_flops / probe.flops_per_second);
  return 0;
}

// `starzero bench blas`: tiles of single-threaded sgemms against one multi-threaded sgemm, for
// the matmuls of a GPT step (tasks/blas_study.hpp).
int run_blas_bench(const cli::ArgParser& p) {
  const GptShape shape = gpt_preset(p.value("preset").value_or("gpt2-124M"));
  const int rows = cli::int_option(p, "rows", 256, 1, 1 << 20);
  const int cores = cli::int_option(p, "cores", int(std::max(1u, std::thread::hardware_concurrency())), 1, 1024);
  const int repeats = cli::int_option(p, "repeat", 5, 1, 1000);
  std::printf("bench blas: %s\n", kernels::blas_description().c_str());
  std::printf("bf16 GEMM (cblas_sbgemm): %s; this CPU %s AVX512-BF16\n",
              kernels::blas_has_sbgemm() ? "exported" : "not exported by this library",
              __builtin_cpu_supports("avx512bf16") ? "has" : "lacks");
  std::printf(
      "%s, %d token rows, %d cores: %d tiles of single-threaded sgemm vs one %d-thread sgemm, fastest of %d\n\n",
      shape.to_string().c_str(), rows, cores, cores, cores, repeats);
  const auto results = kernels::compare_tiled_and_threaded(
      kernels::gpt_gemm_shapes(rows, shape.channels, shape.padded_vocab), cores, repeats);
  std::printf(
      "| product | M x N x K | tiles GFLOP/s | threaded GFLOP/s | threaded / tiles |\n|---|---|---:|---:|---:|\n");
  double tiled_total = 0, threaded_total = 0;
  for (const kernels::BlasComparison& r : results) {
    const kernels::GemmShape& s = r.shape;
    tiled_total += r.tiled_seconds;
    threaded_total += r.threaded_seconds;
    std::printf("| %s | %d x %d x %d | %.1f | %.1f | %.2f |\n", s.name.c_str(), s.N, s.OC, s.C,
                s.flops() / r.tiled_seconds / 1e9, s.flops() / r.threaded_seconds / 1e9,
                r.tiled_seconds / r.threaded_seconds);
  }
  std::printf("| all of them | | %.3f s | %.3f s | %.2f |\n", tiled_total, threaded_total,
              tiled_total / threaded_total);
  return 0;
}

cli::ArgParser make_blas_parser() {
  cli::ArgParser p("starzero bench blas");
  p.option("preset", "NAME", "model shape whose matmuls are timed (default gpt2-124M)")
      .option("rows", "N", "token rows B*T of a micro-batch (default 256)")
      .option("cores", "N", "tiles and BLAS threads (default: the hardware threads)")
      .option("repeat", "N", "timings per way, fastest kept (default 5)")
      .flag("help", "show this help");
  return p;
}

}  // namespace

int bench_main(int argc, char** argv) {
  // `starzero bench blas ...`: how the CPU kernels should call BLAS.
  if (argc >= 2 && std::string(argv[1]) == "blas") {
    cli::ArgParser parser = make_blas_parser();
    return run_command({"starzero bench", "starzero bench blas [options]"}, parser, argc - 1, argv + 1, run_blas_bench);
  }
  // `starzero bench adam ...`: the fused CPU AdamW benchmark (bench_adam.cpp).
  if (argc >= 2 && std::string(argv[1]) == "adam") return bench_adam_main(argc - 1, argv + 1);
  if (argc < 2 || std::string(argv[1]) != "step") {
    std::fprintf(stderr,
                 "starzero bench: error: usage: starzero bench step|adam|blas [options] (try `starzero bench step "
                 "--help`)\n");
    return 2;
  }
  cli::ArgParser parser = make_parser();
  return run_command({"starzero bench", "starzero bench step [options]"}, parser, argc - 1, argv + 1, run_step_bench);
}

}  // namespace starzero
