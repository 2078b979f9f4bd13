// `starzero train` and `starzero eval`: GPT-2 training and evaluation on one rank.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "examples/cli.hpp"
#include "examples/command.hpp"
#include "examples/commands.hpp"
#include "examples/ranks.hpp"
#include "models/data.hpp"
#include "models/gpt.hpp"
#include "models/llmc_files.hpp"
#include "models/sharded_state.hpp"
#include "offload/engine.hpp"
#include "offload/planner.hpp"
#include "runtime/comm.hpp"
#include "optimizers/adamw_simd.hpp"
#include "runtime/disk.hpp"
#include "runtime/host_memory.hpp"
#include "runtime/session.hpp"
#include "runtime/topology.hpp"
#include "runtime/trace.hpp"

namespace starzero {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The text that ships with the checkout: docs and sources, sorted, so the demo needs no download.
std::vector<fs::path> default_training_files() {
  const fs::path root = STARZERO_SOURCE_DIR;
  std::vector<fs::path> files;
  for (const char* dir : {"", "runtime", "tasks", "optimizers", "offload", "models", "examples", "tests", "scripts"}) {
    const fs::path folder = root / dir;
    if (!fs::is_directory(folder)) continue;
    for (const auto& entry : fs::directory_iterator(folder)) {
      const auto ext = entry.path().extension().string();
      if (entry.is_regular_file() && (ext == ".md" || ext == ".cpp" || ext == ".hpp" || ext == ".cu" || ext == ".sh"))
        files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) throw std::runtime_error("no default training text found under " + root.string());
  return files;
}

bool is_token_shard(const fs::path& path) { return path.extension() == ".bin"; }

TokenDataset load_dataset(const std::optional<std::string>& data, double validation_fraction) {
  if (!data) return TokenDataset::from_text_files(default_training_files(), validation_fraction);
  const fs::path path = *data;
  if (!fs::exists(path)) throw UsageError("--data: no such file '" + cli::printable(*data) + "'");
  return is_token_shard(path) ? TokenDataset::from_token_shard(path, validation_fraction)
                              : TokenDataset::from_text_file(path, validation_fraction);
}

DType precision_flag(const cli::ArgParser& p) {
  const std::string precision = cli::parse_choice("--precision", p.value("precision").value_or("bf16"), {"bf16", "fp32"});
  return precision == "fp32" ? DType::f32 : DType::bf16;
}

int int_flag(const cli::ArgParser& p, const char* name, std::int64_t fallback, std::int64_t min_value) {
  const auto v = p.value(name);
  const std::int64_t value = v ? cli::parse_count(std::string("--") + name, *v) : fallback;
  if (value < min_value || value > (std::int64_t{1} << 30))
    throw UsageError(std::string("--") + name + ": " + std::to_string(value) + " is out of range (at least " +
                          std::to_string(min_value) + ")");
  return int(value);
}

float real_flag(const cli::ArgParser& p, const char* name, double fallback) {
  const auto v = p.value(name);
  return float(v ? cli::parse_number(std::string("--") + name, *v) : fallback);
}

SessionOptions session_flags(const cli::ArgParser& p) {
  SessionOptions options;
  options.policy = p.value("sched").value_or("");
  if (p.given("cpu-workers")) options.cpu_workers = int_flag(p, "cpu-workers", 0, 0);
  if (p.given("cuda-workers")) options.cuda_workers = int_flag(p, "cuda-workers", 0, 0);
  options.trace_dir = p.value("trace").value_or("");
  return options;
}

// Sets every layer's fp32 master parameters from an llm.c checkpoint.
void load_checkpoint_into(const LlmcCheckpoint& checkpoint, const GptModel& model, Engine& engine) {
  std::vector<std::vector<float>> layers(std::size_t(model.layers()));
  std::vector<std::span<float>> views;
  for (int l = 0; l < model.layers(); ++l) {
    layers[std::size_t(l)].resize(model.layer_params(l));
    views.push_back(layers[std::size_t(l)]);
  }
  model.llmc_to_layers(checkpoint.params, views);
  engine.set_master_params(layers);
}

std::vector<float> llmc_params(const GptModel& model, const std::vector<std::vector<float>>& layers) {
  std::vector<float> params(model.shape().param_count());
  std::vector<std::span<const float>> views(layers.begin(), layers.end());
  model.layers_to_llmc(views, params);
  return params;
}

void save_checkpoint(const fs::path& path, const GptModel& model, const Engine& engine, int version) {
  write_llmc_checkpoint(path, model.shape(), llmc_params(model, engine.master_params()), version);
}

// Each rank keeps its own optimizer shard: FILE.state with one rank, FILE.rank<r>-of-<N>.state
// with N (models/sharded_state.hpp). Files of another rank count beside it are removed once the
// new ones are written, so a resume never mixes runs.
void save_training_state(const fs::path& checkpoint, const GptModel& model, const Engine& engine, std::uint64_t step,
                         int rank, int ranks) {
  TrainingState state;
  state.step = step;
  state.data_position = step;  // training batches are a function of (seed, step)
  for (const auto& layer : engine.optimizer_state()) {
    state.master.insert(state.master.end(), layer.master.begin(), layer.master.end());
    state.m.insert(state.m.end(), layer.m.begin(), layer.m.end());
    state.v.insert(state.v.end(), layer.v.begin(), layer.v.end());
  }
  write_training_state(training_state_path(checkpoint, rank, ranks), model.shape(), state);
}

void remove_other_training_states(const fs::path& checkpoint, int ranks) {
  const fs::path dir = checkpoint.has_parent_path() ? checkpoint.parent_path() : fs::path(".");
  const std::string prefix = checkpoint.filename().string() + ".";
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || name.size() < 6 || name.substr(name.size() - 6) != ".state") continue;
    bool mine = false;
    for (int r = 0; r < ranks; ++r) mine = mine || entry.path() == training_state_path(checkpoint, r, ranks);
    if (!mine) fs::remove(entry.path());
  }
}

// This rank's part of a saved state, whatever number of ranks wrote it (re-sharding).
std::uint64_t load_training_state(const ShardedTrainingState& saved, const GptModel& model, Engine& engine) {
  std::vector<LayerOptimizerState> layers;
  for (int l = 0; l < model.layers(); ++l) {
    const std::size_t count = model.layer_params(l);
    const std::size_t shard = (count + std::size_t(engine.ranks()) - 1) / std::size_t(engine.ranks());
    const std::size_t begin = engine.sharded() ? shard * std::size_t(engine.rank()) : 0;
    const std::size_t n = engine.sharded() ? shard : count;
    LayerOptimizerState state{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n)};
    saved.read(l, ShardedTrainingState::Array::master, begin, state.master);
    saved.read(l, ShardedTrainingState::Array::m, begin, state.m);
    saved.read(l, ShardedTrainingState::Array::v, begin, state.v);
    layers.push_back(std::move(state));
  }
  engine.set_optimizer_state(layers);
  return saved.step();
}

// Rows [rank·B/N, (rank+1)·B/N) of a global batch: each rank's own slice.
Batch slice_rows(const Batch& global, int T, int rank, int local_batch) {
  const std::size_t begin = std::size_t(rank) * std::size_t(local_batch) * std::size_t(T);
  const std::size_t end = begin + std::size_t(local_batch) * std::size_t(T);
  return Batch{{global.inputs.begin() + std::ptrdiff_t(begin), global.inputs.begin() + std::ptrdiff_t(end)},
               {global.targets.begin() + std::ptrdiff_t(begin), global.targets.begin() + std::ptrdiff_t(end)}};
}

double validation_loss(GptModel& model, Engine& engine, const TokenDataset& data, int batches, const DataParallelRanks& ranks) {
  const int global_batch = model.batch() * ranks.size();
  const std::size_t available = data.sequential_batches(global_batch, model.seq(), Split::validation);
  const std::size_t n = std::min<std::size_t>(std::size_t(batches), available);
  if (n == 0) return std::nan("");
  double sum = 0;
  for (std::size_t b = 0; b < n; ++b) {
    const Batch batch =
        slice_rows(data.sequential_batch(global_batch, model.seq(), b, Split::validation), model.seq(), ranks.rank(),
                   model.batch());
    model.set_batch(batch.inputs, batch.targets);
    engine.submit_forward();
    sum += ranks.average(model.mean_loss());
  }
  return sum / double(n);
}

// `starzero plan`'s input for the configuration this engine runs; `padded`: each layer padded to
// a multiple of N elements, as the collectives see it.
PlanInput plan_input_of(const Engine& engine, const GptModel& model, bool padded) {
  const EngineOptions& options = engine.options();
  PlanInput input;
  input.params = std::int64_t(padded ? engine.padded_parameter_count() : engine.parameter_count());
  input.dp = engine.ranks();
  input.stage = options.stage;
  input.precision = model.dtype() == DType::f32 ? Precision::fp32 : Precision::bf16;
  input.fp32_grad_accum = options.fp32_grad_accum;
  input.offload_optimizer = options.offload_optimizer;
  input.offload_params = options.offload_params;
  input.prefetch_depth = options.prefetch_depth;
  return input;
}

// The end-of-run table: what each rank held and sent, next to `starzero plan`'s prediction for
// this configuration and the same prediction with the collectives' padding accounted.
void print_zero_report(const Engine& engine, const GptModel& model, const DataParallelRanks& ranks, const CommStats& step_traffic) {
  const MemoryLedger& ledger = engine.ledger();
  // After the run every transient buffer is gone: live = what is held for good.
  const std::vector<std::int64_t> mine = {
      ledger.live(MemoryCategory::params),     ledger.live(MemoryCategory::grads),
      ledger.live(MemoryCategory::optimizer),  ledger.peak(MemoryCategory::grads),
      ledger.peak(MemoryCategory::temporaries), ledger.peak_items(MemoryCategory::temporaries),
      std::int64_t(step_traffic[CommOp::all_gather].bytes_sent),
      std::int64_t(step_traffic[CommOp::reduce_scatter].bytes_sent),
      std::int64_t(step_traffic[CommOp::all_reduce].bytes_sent)};
  std::vector<std::int64_t> all(mine.size() * std::size_t(ranks.size()));
  MPI_Gather(mine.data(), int(mine.size()), MPI_INT64_T, all.data(), int(mine.size()), MPI_INT64_T, 0,
             ranks.control()->native());
  if (!ranks.leader()) return;

  const int N = ranks.size(), stage = engine.stage();
  const auto bytes = double(dtype_size(model.dtype()));
  const PlanInput input = plan_input_of(engine, model, false);
  const MemoryPlan plan = plan_memory(input);
  const MemoryPlan padded_plan = plan_memory(plan_input_of(engine, model, true));
  const CommVolume volume = plan_communication(input);

  std::printf("\nZeRO-%d on %d ranks, per rank, bytes held for good (after the run) next to `starzero plan`:\n", stage, N);
  std::printf("  %-5s %12s %12s %12s | %12s %12s %12s | %12s %12s %12s\n", "rank", "params", "grads", "optimizer",
              "plan", "plan", "plan", "plan+pad", "plan+pad", "plan+pad");
  for (int r = 0; r < N; ++r) {
    const std::int64_t* row = all.data() + std::size_t(r) * mine.size();
    std::printf("  %-5d %12lld %12lld %12lld | %12.0f %12.0f %12.0f | %12.0f %12.0f %12.0f\n", r, (long long)row[0],
                (long long)row[1], (long long)row[2], plan.gpu.params, plan.gpu.grads, plan.gpu.optimizer,
                padded_plan.gpu.params, padded_plan.gpu.grads, padded_plan.gpu.optimizer);
  }
  std::printf("  plan+pad: the same formulas with each layer padded to a multiple of N = %d elements (Ψ %zu -> %zu)\n",
              N, engine.parameter_count(), engine.padded_parameter_count());
  for (int r = 0; r < N; ++r) {
    const std::int64_t* row = all.data() + std::size_t(r) * mine.size();
    if (stage >= 2)
      std::printf("  rank %d: peak gradients %lld bytes (its shard plus the full gradients of the layers being "
                  "reduce-scattered, freed right after)\n", r, (long long)row[3]);
    if (stage == 3)
      std::printf("  rank %d: ZeRO-3 temporary full parameters: peak %lld bytes, peak %lld layers in flight "
                  "(prefetch window)\n", r, (long long)row[4], (long long)row[5]);
  }
  const double padded_ring = double(N - 1) / N * double(engine.padded_parameter_count()) * bytes;
  const double regather = double(N - 1) / N * double(engine.regathered_elements_per_step()) * bytes;
  std::printf("collective bytes sent per step (the last), next to (N-1)/N * %dΨ * %g bytes = %.0f:\n",
              volume.psi_multiple, bytes, volume.ring_bytes);
  for (int r = 0; r < N; ++r) {
    const std::int64_t* row = all.data() + std::size_t(r) * mine.size();
    std::printf("  rank %d: all-gather %lld, reduce-scatter %lld, all-reduce %lld\n", r, (long long)row[6],
                (long long)row[7], (long long)row[8]);
  }
  if (stage == 0) {
    std::printf("  all-reduce: the ring sends 2(N-1)/N of the (padded) gradients; over all ranks exactly "
                "2(N-1)*%zu*bytes = %.0f\n", engine.padded_parameter_count(),
                2.0 * (N - 1) * double(engine.padded_parameter_count()) * bytes);
  } else {
    std::printf("  expected with padding: all-gather %.0f, reduce-scatter %.0f per rank%s; all-reduce: a few bytes, the\n"
                "  gradient norm's sum of squares (one fp32 value)\n",
                (stage == 3 ? 2 : 1) * padded_ring + regather, padded_ring,
                regather > 0 ? " (all-gather includes the tied embedding gathered again for the classifier)" : "");
  }
}

std::string format_bytes(double bytes) {
  char text[32];
  if (bytes >= 1e9) std::snprintf(text, sizeof text, "%.2f GB", bytes / 1e9);
  else std::snprintf(text, sizeof text, "%.1f MB", bytes / 1e6);
  return text;
}

struct OffloadFlags {
  OptimizerOffload optimizer = OptimizerOffload::none;
  ParamOffload params = ParamOffload::none;
  std::string nvme_path;
  std::size_t host_mem_limit_mib = 0;
  int delayed_update_warmup = -1;
  bool any() const { return optimizer != OptimizerOffload::none || params != ParamOffload::none; }
};

OffloadFlags offload_flags(const cli::ArgParser& p, int stage) {
  OffloadFlags f;
  const std::string optimizer =
      cli::parse_choice("--offload-optimizer", p.value("offload-optimizer").value_or("none"), {"none", "cpu", "nvme"});
  f.optimizer = *optimizer_offload_from_name(optimizer);
  f.params = *param_offload_from_name(
      cli::parse_choice("--offload-params", p.value("offload-params").value_or("none"), {"none", "cpu"}));
  if (f.params == ParamOffload::cpu && stage != 3)
    throw UsageError("--offload-params cpu needs --stage 3 (stages 0-2 keep full parameters on the device)");
  if (f.optimizer == OptimizerOffload::nvme) {
    if (!p.given("nvme-path")) throw UsageError("--offload-optimizer nvme needs --nvme-path DIR");
    f.nvme_path = *p.value("nvme-path");
    f.host_mem_limit_mib = std::size_t(int_flag(p, "host-mem-limit", 1024, 16));
  } else {
    if (p.given("nvme-path")) throw UsageError("--nvme-path is only for --offload-optimizer nvme");
    if (p.given("host-mem-limit")) throw UsageError("--host-mem-limit is only for --offload-optimizer nvme");
  }
  if (p.given("adam-threads") && f.optimizer == OptimizerOffload::none)
    throw UsageError("--adam-threads is for --offload-optimizer cpu|nvme (on the device AdamW is a GPU kernel)");
  if (p.given("delayed-update")) f.delayed_update_warmup = int_flag(p, "delayed-update", 0, 0);
  return f;
}

// Where the host side of an offload run goes and whether it fits, decided before StarPU starts.
struct HostPlan {
  int adam_threads = 1;
  int numa_node = -1;
  std::size_t disk_bytes = 0;  // the nvme tier's capacity
};

// `gpu`: this rank's GPU (-1: none); `ranks_here`: the ranks on this machine.
HostPlan plan_host(const cli::ArgParser& p, const OffloadFlags& offload, const Topology& topology, int gpu,
                   int ranks_here, SessionOptions& session, const GptShape& shape, DType dtype, int world, int stage,
                   int prefetch_depth, int local_batch) {
  HostPlan plan;
  if (!offload.any()) return plan;
  if (gpu >= 0) plan.numa_node = topology.gpus[std::size_t(gpu)].numa_node;  // nearest to this rank's GPU
  // Cores per rank; under offload the CPU AdamW gets those the GPU worker leaves, minus one CPU
  // worker for collectives and small tasks. Without a GPU the compute needs the cores: 1 thread.
  const int cores = std::max(1, topology.cores / ranks_here);
  const int cuda_workers = gpu >= 0 ? 1 : 0;
  if (offload.optimizer != OptimizerOffload::none)
    plan.adam_threads = p.given("adam-threads") ? int_flag(p, "adam-threads", 1, 1)
                        : cuda_workers > 0      ? std::max(1, cores - cuda_workers - 1)
                                                : 1;
  if (session.cpu_workers < 0)  // StarPU's workers leave the extra Adam threads their cores
    session.cpu_workers = std::max(1, cores - cuda_workers - (plan.adam_threads - 1));

  // The plan's host bytes must fit into what this machine has free, for every rank on it.
  PlanInput input;
  input.gpt = GptConfig{shape.layers, shape.channels, shape.heads, shape.vocab, shape.max_seq, local_batch};
  input.dp = world;
  input.stage = stage;
  input.precision = dtype == DType::f32 ? Precision::fp32 : Precision::bf16;
  input.offload_optimizer = offload.optimizer;
  input.offload_params = offload.params;
  input.prefetch_depth = prefetch_depth;
  const MemoryPlan memory = plan_memory(input);
  const double host_needed =
      offload.optimizer == OptimizerOffload::nvme
          ? memory.host_total() + double(offload.host_mem_limit_mib) * 1048576.0
          : memory.host_total();
  const double available = double(available_host_memory_bytes());
  if (host_needed * ranks_here > available)
    throw UsageError("too little host memory for this offload plan: " + std::to_string(ranks_here) +
                     " rank(s) on this machine need " + format_bytes(host_needed) + " each, " +
                     format_bytes(available) + " is available (MemAvailable); use more ranks, " +
                     (offload.optimizer == OptimizerOffload::nvme ? "a smaller --host-mem-limit"
                                                                   : "--offload-optimizer nvme") +
                     ", or a smaller model");
  if (offload.optimizer == OptimizerOffload::nvme) {
    // The disk node holds the optimizer state plus room for what StarPU evicts.
    plan.disk_bytes = std::size_t(memory.nvme_total()) + std::size_t(offload.host_mem_limit_mib) * 1048576 +
                      (std::size_t(64) << 20);
    std::error_code ec;
    fs::create_directories(offload.nvme_path, ec);
    if (ec) throw UsageError("--nvme-path: cannot create '" + cli::printable(offload.nvme_path) + "': " + ec.message());
    const auto space = fs::space(offload.nvme_path, ec);
    if (ec) throw UsageError("--nvme-path: cannot query '" + cli::printable(offload.nvme_path) + "': " + ec.message());
    if (double(space.available) < memory.nvme_total() * ranks_here)
      throw UsageError("--nvme-path: " + format_bytes(double(space.available)) + " free, the optimizer state of " +
                       std::to_string(ranks_here) + " rank(s) needs " + format_bytes(memory.nvme_total() * ranks_here));
  }
  return plan;
}

// Offload runs: bytes per place (device, host, disk) next to `starzero plan` for this exact
// configuration (the plan with each layer padded to a multiple of N beside it).
void print_placement_report(const Engine& engine, const GptModel& model, const DataParallelRanks& ranks) {
  const MemoryLedger& ledger = engine.ledger();
  std::vector<std::int64_t> mine;
  for (MemoryPlace place : {MemoryPlace::device, MemoryPlace::host, MemoryPlace::disk})
    for (MemoryCategory c : {MemoryCategory::params, MemoryCategory::grads, MemoryCategory::optimizer})
      mine.push_back(ledger.live(c, place));
  std::vector<std::int64_t> all(mine.size() * std::size_t(ranks.size()));
  if (ranks.size() > 1)
    MPI_Gather(mine.data(), int(mine.size()), MPI_INT64_T, all.data(), int(mine.size()), MPI_INT64_T, 0,
               ranks.control()->native());
  else
    all = mine;
  if (!ranks.leader()) return;
  const MemoryPlan padded = plan_memory(plan_input_of(engine, model, true));
  const MemoryPlan plan = plan_memory(plan_input_of(engine, model, false));
  std::printf("\noffload placement per rank, bytes held for good (after the run), next to `starzero plan` "
              "(plan+pad: layers padded to a multiple of N):\n");
  std::printf("  %-5s %-7s %12s %12s %12s | %12s %12s %12s | %12s\n", "rank", "place", "params", "grads", "optimizer",
              "plan", "plan", "plan", "plan+pad sum");
  const ByteSplit* planned[] = {&plan.gpu, &plan.host, &plan.nvme};
  const ByteSplit* planned_pad[] = {&padded.gpu, &padded.host, &padded.nvme};
  const char* names[] = {"device", "host", "disk"};
  for (int r = 0; r < ranks.size(); ++r)
    for (int place = 0; place < 3; ++place) {
      const std::int64_t* row = all.data() + std::size_t(r) * mine.size() + std::size_t(place) * 3;
      std::printf("  %-5d %-7s %12lld %12lld %12lld | %12.0f %12.0f %12.0f | %12.0f\n", r, names[place],
                  (long long)row[0], (long long)row[1], (long long)row[2], planned[place]->params,
                  planned[place]->grads, planned[place]->optimizer, planned_pad[place]->total());
    }
  const HostMemoryStats pins = host_memory_stats();
  std::printf("  pinned host memory: %s pinned, %s pageable (fallbacks: %zu); device = the GPU, or the same RAM on a "
              "CPU-only run\n",
              format_bytes(double(pins.pinned_bytes)).c_str(), format_bytes(double(pins.pageable_bytes)).c_str(),
              pins.failed_pins);
}

// Greedy-free sampling: multinomial from the softmax, with the model's B x T activations (the
// prompt sits in row 0; the rest of the batch is ignored).
std::string sample_text(GptModel& model, Engine& engine, const std::string& prompt, int tokens, std::uint64_t seed) {
  std::vector<int> context = encode_bytes(prompt.empty() ? "\n" : prompt);
  std::mt19937_64 rng(seed);
  std::string out;
  const std::size_t N = std::size_t(model.batch()) * std::size_t(model.seq());
  for (int i = 0; i < tokens; ++i) {
    const std::size_t window = std::min<std::size_t>(context.size(), std::size_t(model.seq()));
    std::vector<int> inputs(N, 0);
    std::copy(context.end() - std::ptrdiff_t(window), context.end(), inputs.begin());
    model.set_batch(inputs, std::vector<int>(N, 0));
    engine.submit_forward();
    const std::vector<float> probs = model.probabilities(0, int(window) - 1);
    std::discrete_distribution<int> pick(probs.begin(), probs.end());
    const int next = pick(rng);
    context.push_back(next);
    // Byte-level samples can cut UTF-8 sequences: show ASCII, '?' for the rest.
    out.push_back(next < 128 ? char(next) : '?');
  }
  return out;
}

cli::ArgParser make_train_parser() {
  cli::ArgParser p("starzero train");
  p.option("preset", "NAME", "model shape: tiny (default), gpt2-124M, gpt2-350M, gpt2-774M, gpt2-1558M")
      .option("layers", "L", "override the preset's number of transformer blocks")
      .option("channels", "C", "override the preset's hidden size")
      .option("heads", "NH", "override the preset's attention heads (must divide C)")
      .option("max-seq", "T", "override the preset's maximum sequence length")
      .option("data", "FILE", "training text (bytes) or llm.c token shard (.bin); default: this checkout's docs and sources")
      .option("batch", "B", "sequences per step (default 8)")
      .option("seq", "T", "tokens per sequence (default: min(64, max-seq))")
      .option("steps", "N", "optimizer steps (default 300)")
      .option("lr", "LR", "peak learning rate (default 1e-3)")
      .option("warmup", "N", "linear warm-up steps (default 20)")
      .option("lr-final", "F", "cosine decay ends at lr*F (default 0.1)")
      .option("weight-decay", "WD", "AdamW decoupled weight decay (default 0)")
      .option("grad-clip", "X", "clip the global gradient norm to X; 0: off (default 1)")
      .option("seed", "S", "initialisation and batch order (default 1337)")
      .option("precision", "P", "bf16 (default: bf16 params/grads/activations, fp32 master and Adam) or fp32 (exact)")
      .option("sched", "POLICY", "StarPU scheduling policy (default $STARPU_SCHED or lws)")
      .option("cpu-workers", "N", "StarPU CPU workers (default: one per core)")
      .option("cuda-workers", "N", "StarPU CUDA workers (default: one per GPU)")
      .option("cuda-mem-limit", "MiB", "GPU memory StarPU may use per GPU (STARPU_LIMIT_CUDA_MEM; default: all)")
      .option("collectives", "KIND", "auto (default: NCCL when ranks have GPUs, else MPI), mpi or nccl")
      .option("stage", "S", "ZeRO stage 0..3 across the ranks of mpirun (default 0; one rank: no collectives)")
      .option("grad-accum", "K", "split each step's batch into K micro-batches whose gradients add up (default 1)")
      .option("prefetch-depth", "W", "ZeRO-3: layers all-gathered ahead (default 1; at most W+1 live)")
      .flag("fp32-grad-accum", "bf16: add micro-batch gradients in an fp32 buffer, rounded once per step (+4 bytes/param)")
      .option("grad-window", "G", "ZeRO-2/3: full gradients alive at once beyond the one computed (default 2)")
      .option("offload-optimizer", "WHERE", "none (default), cpu (pinned host memory, CPU AdamW) or nvme (StarPU disk node)")
      .option("nvme-path", "DIR", "--offload-optimizer nvme: folder for the optimizer state files")
      .option("host-mem-limit", "MiB", "--offload-optimizer nvme: host memory StarPU may use before it evicts to disk")
      .option("offload-params", "WHERE", "none (default) or cpu: ZeRO-3 parameter shards in pinned host memory")
      .option("adam-threads", "T", "CPU AdamW threads under offload (default: cores left by the GPU workers, else 1)")
      .option("delayed-update", "WARMUP", "one-step-delayed parameter update after WARMUP synchronous steps "
                                          "(ZeRO-Offload's DPU: changes the math; see README)")
      .option("checkpoint-in", "FILE", "start from an llm.c checkpoint (resumes exactly when FILE.state exists)")
      .option("checkpoint-out", "FILE", "write an llm.c checkpoint (and FILE.state) at the end")
      .option("save-every", "N", "also write the checkpoint every N steps")
      .option("checkpoint-precision", "P", "fp32 (llm.c version 3, default) or bf16 (version 5)")
      .option("val-every", "N", "validation loss every N steps, 0: never (default 50)")
      .option("val-batches", "N", "validation batches (default 4)")
      .option("sample-every", "N", "print generated text every N steps, 0: never (default: at the end only)")
      .option("sample-tokens", "N", "tokens per sample (default 64)")
      .option("prompt", "TEXT", "sampling prompt (default: a newline)")
      .option("trace", "DIR", "write an FxT trace and its paje.trace (ViTE) into DIR")
      .flag("quiet", "print only the summary")
      .flag("help", "show this help");
  return p;
}

GptShape shape_from_flags(const cli::ArgParser& p, int vocab) {
  GptShape shape = gpt_preset(p.value("preset").value_or("tiny"));
  if (p.given("layers")) shape.layers = int_flag(p, "layers", 0, 1);
  if (p.given("channels")) shape.channels = int_flag(p, "channels", 0, 1);
  if (p.given("heads")) shape.heads = int_flag(p, "heads", 0, 1);
  if (p.given("max-seq")) shape.max_seq = int_flag(p, "max-seq", 0, 1);
  if (vocab != shape.vocab) {
    // The data decides the vocabulary: bytes (256) or GPT-2 tokens (50257).
    shape.vocab = vocab;
    shape.padded_vocab = (vocab + 127) / 128 * 128;
  }
  try {
    shape.validate();
  } catch (const std::exception& e) {
    throw UsageError(std::string("invalid model shape: ") + e.what());
  }
  return shape;
}

struct ProgressLine {
  bool tty = isatty(STDOUT_FILENO) != 0;
  void step(int step, int total, const std::string& text) const {
    if (!tty) {
      std::printf("%s\n", text.c_str());
      return;
    }
    const int width = 24;
    const int filled = int(double(step) / double(total) * width);
    std::printf("\r[%s%s] %s\033[K", std::string(std::size_t(filled), '#').c_str(),
                std::string(std::size_t(width - filled), '.').c_str(), text.c_str());
    if (step == total) std::printf("\n");
    std::fflush(stdout);
  }
  void line(const std::string& text) const {
    if (tty) std::printf("\r\033[K");
    std::printf("%s\n", text.c_str());
    std::fflush(stdout);
  }
};

int run_train(const cli::ArgParser& p) {
  const Clock::time_point start = Clock::now();
  const bool quiet = p.flag_set("quiet");
  const DType dtype = precision_flag(p);
  const TokenDataset data = load_dataset(p.value("data"), 0.1);
  const GptShape shape = shape_from_flags(p, data.vocab());
  const int B = int_flag(p, "batch", 8, 1);
  const int stage = int_flag(p, "stage", 0, 0);
  if (stage > 3) throw UsageError("--stage " + std::to_string(stage) + " is not a ZeRO stage (0..3)");
  const int prefetch_depth = int_flag(p, "prefetch-depth", 1, 0);
  const int grad_window = int_flag(p, "grad-window", 2, 1);
  const int world = DataParallelRanks::world_size();
  const OffloadFlags offload = offload_flags(p, stage);
  const int grad_accum = int_flag(p, "grad-accum", 1, 1);
  if (B % (world * grad_accum) != 0)
    throw UsageError("--batch " + std::to_string(B) + " must be divisible by the " + std::to_string(world) +
                     " ranks times --grad-accum " + std::to_string(grad_accum) +
                     " (each rank trains B/(N*K) sequences per micro-batch)");
  const int local_batch = B / (world * grad_accum);
  if (p.flag_set("fp32-grad-accum") && dtype != DType::bf16)
    throw UsageError("--fp32-grad-accum is for --precision bf16 (fp32 gradients already accumulate in fp32)");

  const int T = int_flag(p, "seq", std::min(64, shape.max_seq), 1);
  if (T > shape.max_seq) throw UsageError("--seq " + std::to_string(T) + " exceeds the model's max-seq " + std::to_string(shape.max_seq));
  const int steps = int_flag(p, "steps", 300, 1);
  const float lr = real_flag(p, "lr", 1e-3);
  const int warmup = int_flag(p, "warmup", 20, 0);
  const float lr_final = real_flag(p, "lr-final", 0.1);
  const int val_every = int_flag(p, "val-every", 50, 0);
  const int val_batches = int_flag(p, "val-batches", 4, 1);
  const int sample_every = int_flag(p, "sample-every", 0, 0);
  const int sample_tokens = int_flag(p, "sample-tokens", 64, 1);
  const int save_every = int_flag(p, "save-every", 0, 0);
  const std::uint64_t seed = std::uint64_t(int_flag(p, "seed", 1337, 0));
  const std::string checkpoint_precision =
      cli::parse_choice("--checkpoint-precision", p.value("checkpoint-precision").value_or("fp32"), {"fp32", "bf16"});
  const int checkpoint_version = checkpoint_precision == "fp32" ? kLlmcCheckpointFp32 : kLlmcCheckpointBf16;
  const auto checkpoint_in = p.value("checkpoint-in");
  const auto checkpoint_out = p.value("checkpoint-out");
  if (checkpoint_in && !fs::exists(*checkpoint_in))
    throw UsageError("--checkpoint-in: no such file '" + cli::printable(*checkpoint_in) + "'");
  if ((save_every > 0) && !checkpoint_out) throw UsageError("--save-every needs --checkpoint-out");
  if (data.split_size(Split::train) < std::size_t(T) + 1)
    throw UsageError("the training data has " + std::to_string(data.split_size(Split::train)) +
                          " tokens: too few for --seq " + std::to_string(T));

  // Read and check the files before StarPU starts: a bad file is an input error, found early.
  std::optional<LlmcCheckpoint> checkpoint;
  std::optional<ShardedTrainingState> training_state;
  if (checkpoint_in) {
    checkpoint = read_llmc_checkpoint(*checkpoint_in, shape);
    training_state = ShardedTrainingState::find(*checkpoint_in, shape);
  }

  DataParallelRanks ranks;
  const bool leader = ranks.leader();
  // With several ranks, an error on one must end them all (the others would wait in a collective
  // forever): MPI_Abort, naming the rank, instead of unwinding into MPI_Finalize.
  try {

  EngineOptions engine_options;
  engine_options.seed = seed;
  engine_options.grad_clip = real_flag(p, "grad-clip", 1.0);
  engine_options.adam.weight_decay = real_flag(p, "weight-decay", 0.0);
  engine_options.stage = stage;
  engine_options.prefetch_depth = prefetch_depth;
  engine_options.grad_window = grad_window;
  engine_options.fp32_grad_accum = p.flag_set("fp32-grad-accum");
  engine_options.comm = ranks.engine_comm();
  engine_options.offload_optimizer = offload.optimizer;
  engine_options.offload_params = offload.params;
  engine_options.delayed_update_warmup = offload.delayed_update_warmup;

  SessionOptions session_options = session_flags(p);
  session_options.trace_rank = ranks.rank();
  // One GPU per rank: the rank's index among the ranks on this machine picks it.
  const Topology topology = Topology::discover();
  const int gpus = session_options.cuda_workers == 0 ? 0 : int(topology.gpus.size());
  const int rank_gpu = gpus > 0 ? ranks.local_rank() % gpus : -1;
  if (world > 1 && rank_gpu >= 0) session_options.cuda_device = rank_gpu;
  const HostPlan host_plan = plan_host(p, offload, topology, rank_gpu, ranks.local_size(), session_options, shape,
                                       dtype, world, stage, prefetch_depth, local_batch);
  if (p.given("cuda-mem-limit")) session_options.cuda_memory_limit_mib = std::size_t(int_flag(p, "cuda-mem-limit", 0, 64));
  engine_options.adam_threads = host_plan.adam_threads;
  engine_options.host_numa_node = host_plan.numa_node;
  if (offload.optimizer == OptimizerOffload::nvme) {
    session_options.cpu_memory_limit_mib = offload.host_mem_limit_mib;
    session_options.background_writeback = false;  // see SessionOptions
  }
  const std::string collectives =
      cli::parse_choice("--collectives", p.value("collectives").value_or("auto"), {"auto", "mpi", "nccl"});
  Session session(session_options);
  const bool use_nccl = world > 1 && (collectives == "nccl" || (collectives == "auto" && session.cuda_workers() > 0));
  if (use_nccl) {
    if (session.cuda_workers() == 0) throw UsageError("--collectives nccl needs a CUDA worker on every rank");
    ranks.use_nccl(std::max(0, session_options.cuda_device));
    engine_options.comm = ranks.engine_comm();
    engine_options.host_comm = ranks.host_comm();
  }
  std::optional<DiskNode> nvme;
  if (offload.optimizer == OptimizerOffload::nvme) {
    // Each rank its own folder under DIR: the files of one rank never collide with another's.
    const fs::path dir = fs::path(offload.nvme_path) / ("rank" + std::to_string(ranks.rank()));
    nvme.emplace(dir.string(), host_plan.disk_bytes);
    engine_options.nvme = &*nvme;
  }
  const std::string trace_file = session.trace_file();
  if (leader) {
    std::printf("starzero train: %s, %zu parameters, %s, B=%d T=%d, %d steps, policy %s, %d CPU + %d CUDA workers\n",
                shape.to_string().c_str(), shape.param_count(), dtype == DType::f32 ? "fp32" : "bf16 (fp32 master)", B,
                T, steps, session.policy().c_str(), session.cpu_workers(), session.cuda_workers());
    if (world > 1)
      std::printf("data parallel: %d ranks (%s collectives), ZeRO-%d, %d sequences per rank and micro-batch%s\n", world,
                  use_nccl ? "NCCL" : "MPI", stage,
                  local_batch,
                  stage == 3 ? (", prefetch depth " + std::to_string(prefetch_depth)).c_str() : "");
    std::printf("data: %zu training and %zu validation tokens (vocabulary %d)\n", data.split_size(Split::train),
                data.split_size(Split::validation), data.vocab());
    if (offload.any())
      std::printf("offload: optimizer %s%s, parameters %s, CPU AdamW %d thread(s) (%s), host memory on NUMA node %s%s\n",
                  std::string(offload_name(offload.optimizer)).c_str(),
                  offload.optimizer == OptimizerOffload::nvme
                      ? (" (" + offload.nvme_path + ", host limit " + std::to_string(offload.host_mem_limit_mib) + " MiB)").c_str()
                      : "",
                  std::string(offload_name(offload.params)).c_str(), host_plan.adam_threads,
                  std::string(optim::simd_path_name(optim::best_simd_path())).c_str(),
                  host_plan.numa_node < 0 ? "any" : std::to_string(host_plan.numa_node).c_str(),
                  offload.delayed_update_warmup >= 0
                      ? (", delayed update after " + std::to_string(offload.delayed_update_warmup) + " steps").c_str()
                      : "");
  }

  GptModel model(shape, dtype, local_batch, T);
  Engine engine(model, engine_options);
  std::uint64_t first_step = 1;
  if (checkpoint) {
    load_checkpoint_into(*checkpoint, model, engine);
    if (training_state) {
      first_step = load_training_state(*training_state, model, engine) + 1;
      if (leader)
        std::printf("resumed from %s at step %llu%s\n", checkpoint_in->c_str(), (unsigned long long)(first_step - 1),
                    training_state->ranks() > 1
                        ? (" (optimizer state of " + std::to_string(training_state->ranks()) + " ranks)").c_str()
                        : "");
    } else if (leader) {
      std::printf("initialised from %s (no .state beside it: fresh optimizer)\n", checkpoint_in->c_str());
    }
  }

  const ProgressLine progress;
  const double tokens_per_step = double(B) * double(T);
  double first_loss = std::nan(""), last_loss = std::nan(""), last_val = std::nan("");
  double train_seconds = 0;
  int steps_done = 0;
  auto save = [&](std::uint64_t step) {
    engine.flush();  // a delayed update is applied first: the files hold the updated state
    const auto params = llmc_params(model, engine.master_params());  // collective when sharded
    if (leader) write_llmc_checkpoint(*checkpoint_out, model.shape(), params, checkpoint_version);
    save_training_state(*checkpoint_out, model, engine, step, ranks.rank(), ranks.size());
    if (ranks.size() > 1) MPI_Barrier(ranks.control()->native());  // every rank's file is written
    if (leader) remove_other_training_states(*checkpoint_out, ranks.size());
  };
  CommStats traffic_before{}, step_traffic{};
  const std::uint64_t last_step = first_step + std::uint64_t(steps) - 1;
  for (std::uint64_t step = first_step; step <= last_step; ++step) {
    const Clock::time_point step_start = Clock::now();
    // Micro-batch m of rank r: rows of the global batch at (m·N + r)·B/(N·K), so any N and K
    // train the same global batch.
    const Batch global_batch = data.train_batch(B, T, seed, step);
    const float step_lr = optim::learning_rate(int(step), lr, warmup, int(last_step), lr_final);
    if (ranks.engine_comm()) traffic_before = ranks.engine_comm()->stats();
    double loss_sum = 0;
    engine.submit_step(step_lr, int(step), grad_accum, [&](int micro) {
      if (micro > 0) loss_sum += ranks.average(model.mean_loss());  // the previous micro-batch's
      const Batch batch = slice_rows(global_batch, T, micro * ranks.size() + ranks.rank(), local_batch);
      model.set_batch(batch.inputs, batch.targets);
    });
    const double loss = (loss_sum + ranks.average(model.mean_loss())) / grad_accum;
    const float norm = engine.last_grad_norm();  // waits for the whole backward
    if (ranks.engine_comm()) {
      starpu_task_wait_for_all();  // this step's collectives, for the byte count
      const CommStats after = ranks.engine_comm()->stats();
      for (std::size_t op = 0; op < kCommOpCount; ++op) {
        step_traffic.ops[op].bytes_sent = after.ops[op].bytes_sent - traffic_before.ops[op].bytes_sent;
        step_traffic.ops[op].calls = after.ops[op].calls - traffic_before.ops[op].calls;
      }
    }
    const double step_seconds = seconds_since(step_start);
    train_seconds += step_seconds;
    ++steps_done;
    if (std::isnan(first_loss)) first_loss = loss;
    last_loss = loss;
    if (!std::isfinite(loss)) throw std::runtime_error("loss is " + std::to_string(loss) + " at step " + std::to_string(step));
    char line[256];
    std::snprintf(line, sizeof line, "step %llu/%llu | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %.0f tok/s",
                  (unsigned long long)step, (unsigned long long)last_step, loss, step_lr, norm, step_seconds * 1e3,
                  tokens_per_step / step_seconds);
    if (!quiet && leader) progress.step(int(step - first_step + 1), steps, line);
    if (val_every > 0 && (step % std::uint64_t(val_every) == 0 || step == last_step)) {
      last_val = validation_loss(model, engine, data, val_batches, ranks);
      if (!quiet && leader) progress.line("  validation loss " + std::to_string(last_val));
    }
    // Every rank samples (ZeRO-3 forwards are collective); the same seed gives the same text.
    if (data.vocab() == 256 && sample_every > 0 && step % std::uint64_t(sample_every) == 0 && !quiet) {
      const std::string text = sample_text(model, engine, p.value("prompt").value_or(""), sample_tokens, seed + step);
      if (leader) progress.line("  sample: " + cli::printable(text, 400));
    }
    if (checkpoint_out && save_every > 0 && step % std::uint64_t(save_every) == 0 && step != last_step) save(step);
  }
  engine.flush();  // the last step's delayed update
  if (checkpoint_out) {
    save(last_step);
    if (leader)
      std::printf("wrote %s (llm.c version %d) and %s\n", checkpoint_out->c_str(), checkpoint_version,
                  training_state_path(*checkpoint_out, 0, ranks.size()).c_str());
  }
  if (data.vocab() == 256 && !quiet) {
    const std::string text = sample_text(model, engine, p.value("prompt").value_or(""), sample_tokens, seed);
    if (leader) std::printf("sample: %s\n", cli::printable(text, 400).c_str());
  }
  if (world > 1) print_zero_report(engine, model, ranks, step_traffic);
  if (offload.any()) print_placement_report(engine, model, ranks);
  const std::string validation = std::isnan(last_val) ? "none" : std::to_string(last_val);
  if (leader) std::printf("summary: %d steps, loss %.4f -> %.4f, validation %s, %.1f s training (%.0f tok/s), %.1f s total\n",
              steps_done, first_loss, last_loss, validation.c_str(), train_seconds,
              tokens_per_step * steps_done / train_seconds, seconds_since(start));
  if (!trace_file.empty()) {
    session.wait_all();
    return -1;  // the caller converts the trace after the session ends
  }
  return 0;
  } catch (const std::exception& e) {
    if (world > 1) {
      const bool usage = dynamic_cast<const UsageError*>(&e) || dynamic_cast<const FileFormatError*>(&e) ||
                         dynamic_cast<const std::invalid_argument*>(&e);
      std::fprintf(stderr, "starzero train: rank %d of %d %s: %s\n", ranks.rank(), world, usage ? "error" : "failed",
                   e.what());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, usage ? 2 : 1);
    }
    throw;
  }
}

cli::ArgParser make_eval_parser() {
  cli::ArgParser p("starzero eval");
  p.option("checkpoint", "FILE", "llm.c checkpoint (version 3 fp32 or 5 bf16)")
      .option("data", "FILE", "llm.c token shard (.bin) or a text file (bytes)")
      .option("batch", "B", "sequences per batch")
      .option("seq", "T", "tokens per sequence")
      .option("batches", "K", "number of batches, read sequentially from the start (default 1)")
      .option("precision", "P", "fp32 (default) or bf16")
      .option("sched", "POLICY", "StarPU scheduling policy")
      .option("cpu-workers", "N", "StarPU CPU workers")
      .option("cuda-workers", "N", "StarPU CUDA workers")
      .flag("help", "show this help");
  return p;
}

int run_eval(const cli::ArgParser& p) {
  for (const char* required : {"checkpoint", "data", "batch", "seq"})
    if (!p.given(required)) throw UsageError(std::string("--") + required + " is required");
  const fs::path checkpoint_path = *p.value("checkpoint");
  if (!fs::exists(checkpoint_path)) throw UsageError("--checkpoint: no such file '" + cli::printable(checkpoint_path.string()) + "'");
  const DType dtype = cli::parse_choice("--precision", p.value("precision").value_or("fp32"), {"fp32", "bf16"}) == "fp32"
                          ? DType::f32
                          : DType::bf16;
  const int B = int_flag(p, "batch", 0, 1), T = int_flag(p, "seq", 0, 1), K = int_flag(p, "batches", 1, 1);
  const LlmcCheckpoint checkpoint = read_llmc_checkpoint(checkpoint_path);
  if (T > checkpoint.shape.max_seq) throw UsageError("--seq exceeds the checkpoint's max-seq " + std::to_string(checkpoint.shape.max_seq));
  const TokenDataset data = load_dataset(p.value("data"), 0.0);
  const int largest_token = *std::max_element(data.tokens().begin(), data.tokens().end());
  if (largest_token >= checkpoint.shape.vocab)
    throw UsageError("the data holds token " + std::to_string(largest_token) + ", outside the checkpoint's vocabulary of " +
                     std::to_string(checkpoint.shape.vocab));
  const std::size_t available = data.sequential_batches(B, T, Split::train);
  if (available < std::size_t(K))
    throw UsageError("--batches " + std::to_string(K) + ": the data holds only " + std::to_string(available) +
                          " whole batches of B*T+1 tokens");

  Session session(session_flags(p));
  GptModel model(checkpoint.shape, dtype, B, T);
  Engine engine(model, EngineOptions{});
  load_checkpoint_into(checkpoint, model, engine);
  double sum = 0;
  for (int b = 0; b < K; ++b) {
    const Batch batch = data.sequential_batch(B, T, std::size_t(b), Split::train);
    model.set_batch(batch.inputs, batch.targets);
    engine.submit_forward();
    sum += model.mean_loss();
  }
  std::printf("eval: %s on %s: mean loss %.6f over %d batches of %dx%d (%s)\n", checkpoint_path.c_str(),
              p.value("data")->c_str(), sum / K, K, B, T, dtype == DType::f32 ? "fp32" : "bf16");
  return 0;
}

}  // namespace

int train_main(int argc, char** argv) {
  std::string trace_dir;
  cli::ArgParser parser = make_train_parser();
  const int status = run_command("starzero train", "starzero train [options]", parser, argc, argv,
                                 [&](const cli::ArgParser& p) {
    trace_dir = p.value("trace").value_or("");
    return run_train(p);
  });
  if (status != -1) return status;
  // The session has ended: its FxT file is complete; turn it into paje.trace for ViTE. Under
  // mpirun every rank converts its own file into <dir>/rank<r>/.
  try {
    const char* rank_env = std::getenv("OMPI_COMM_WORLD_RANK");
    const int rank = rank_env ? std::atoi(rank_env) : 0;
    const std::string fxt = trace_dir + "/starzero_r" + std::to_string(rank) + "_0";
    const std::string out = DataParallelRanks::world_size() > 1 ? trace_dir + "/rank" + std::to_string(rank) : trace_dir;
    convert_fxt_trace(fxt, out);
    std::printf("trace: %s/paje.trace (open with ViTE)\n", out.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "starzero train: failed: trace conversion: %s\n", e.what());
    return 1;
  }
}

int eval_main(int argc, char** argv) {
  cli::ArgParser parser = make_eval_parser();
  return run_command("starzero eval", "starzero eval --checkpoint FILE --data FILE --batch B --seq T [options]", parser,
                     argc, argv, run_eval);
}

}  // namespace starzero
