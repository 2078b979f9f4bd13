// `starzero plan`: the seeds' ZeRO memory and communication formulas per rank, for a parameter
// count, a GPT config or a preset (GPT, or Llama 3 with --model llama3), per stage and
// data-parallel degree, with offload placements and a fit check against given GPU/host memory.
// All numbers come from offload/planner.hpp (a GPT config becomes a model footprint through
// models/gpt_layout.hpp, a preset of either family through the family's entry in
// models/registry.hpp); this file reads the flags and apps/plan_report.cpp prints.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "apps/cli.hpp"
#include "apps/command.hpp"
#include "apps/commands.hpp"
#include "apps/plan_report.hpp"
#include "models/gpt_flops.hpp"
#include "models/gpt_layout.hpp"
#include "models/llama_layout.hpp"
#include "models/registry.hpp"
#include "offload/engine_options.hpp"
#include "offload/footprint.hpp"
#include "offload/planner.hpp"
#include "sim/platform.hpp"

namespace starzero {
namespace {

cli::ArgParser make_parser() {
  cli::ArgParser p("starzero plan");
  p.option("params", "N", "parameter count Ψ: 7e9, 1.5B, 125M, 70B, 7000000000")
      .option("model", "FAMILY", "gpt (default) or llama3: the family of --preset (llama3 needs one)")
      .option("preset", "NAME",
              "a shape instead of the shape flags: gpt2-124M, gpt2-350M, gpt2-774M, gpt2-1558M, tiny (gpt), "
              "llama3-tiny, llama3-1B, llama3-8B, llama3-70B (llama3); --seq (default: its maxT) and --batch "
              "(default 1)")
      .option("layers", "L", "GPT config (all six together, instead of --params): layers")
      .option("hidden", "C", "  hidden size (channels)")
      .option("heads", "NH", "  attention heads (must divide C)")
      .option("vocab", "V", "  vocabulary (padded to a multiple of 128, like llm.c)")
      .option("seq", "T",
              "  sequence length (GPT: = maxT, sizes the position embedding; Llama: tokens per sequence, "
              "<= maxT)")
      .option("batch", "B", "  micro-batch size (activations are per micro-batch)")
      .option("recompute", "MODE", "  none (default), selective or full: what the blocks recompute (as starzero train)")
      .option("recompute-window", "W", "  blocks recomputed or fetched ahead, W + 1 alive (default 1)")
      .option("offload-activations", "WHERE", "  none (default) or cpu: the blocks' kept activations in host memory")
      .option("dp", "LIST", "data-parallel degrees N, e.g. 8 or 1,8,64 (default 1)")
      .option("stage", "S", "ZeRO stage 0..3, or all (default all)")
      .option("precision", "P", "bf16|fp16 (2 bytes) or fp32 (4) for params, grads, activations (default bf16)")
      .option("attention", "auto|cudnn|own",
              "attention kernel on the GPU: cudnn counts cuDNN's workspace on the GPU (an estimate; docs/manual.md, "
              "\"Attention on the GPU\"); auto (default) and own add nothing")
      .option("k", "BYTES", "optimizer state bytes per parameter (default 12: fp32 master + Adam m, v)")
      .flag("fp32-grad-accum", "count an fp32 gradient accumulation buffer (+4Ψ, or +4Ψ/N at stages 2-3)")
      .flag("speculative-update",
            "count the speculative update's second set of optimizer state (+kΨ/N of host memory) where the "
            "optimizer is offloaded to the CPU")
      .option("speculative-fraction", "F|auto",
              "  with --speculative-update: only the last CPU-updated layers holding F of the parameters are "
              "speculative, the rest update after the norm (default 1); auto: as many as --host-mem holds")
      .option("offload-optimizer", "WHERE", "none|cpu|nvme: where the optimizer state lives (default none)")
      .option("offload-optimizer-fraction", "F|auto",
              "  with --offload-optimizer: the state of the last layers holding F of the parameters offloaded, the "
              "rest on the GPU (default 1); auto: as much on the GPU as --gpu-mem (or --platform's GPU) holds")
      .option("offload-params", "WHERE",
              "none|cpu: parameter shards in host memory (ZeRO-3; at dp 1 any stage: the whole model, and with "
              "--offload-optimizer the gradients too, streamed)")
      .option("prefetch-depth", "W",
              "ZeRO-3 layers all-gathered (dp 1 with --offload-params: fetched) ahead of the current one (default 1)")
      .option("grad-window", "G",
              "dp 1 with --offload-params cpu and --offload-optimizer: gradients on the GPU at once (default 2)")
      .option("gpu-mem", "SIZE", "GPU memory per rank for the fit check: 80GB, 24GiB, 80e9")
      .option("host-mem", "SIZE", "host memory per rank for the fit check")
      .option("platform", "NAME|DIR",
              "the step bound of each row on this machine: h200x1, h200x8, a100x1, or a `starzero platform "
              "--out` folder")
      .option("adam-threads", "N", "  the CPU AdamW's threads under optimizer offload (default: as starzero train)")
      .option("grad-accum", "K", "  micro-batches per step in the step bound (default 1; --batch is one micro-batch)")
      .flag("json", "print machine-readable JSON on stdout instead of tables")
      .flag("max-model",
            "the largest GPT (layers L, hidden 64·L, heads L, --vocab/--seq/--batch) that fits "
            "--gpu-mem/--host-mem per stage, offload and --recompute mode; with --model llama3, the "
            "deepest Llama 3 of --preset's width (default llama3-8B)")
      .flag("help", "show this help");
  return p;
}

const CommandHelp kHelp = {
    "starzero plan",
    "starzero plan (--params N | --layers L --hidden C --heads NH --vocab V --seq T --batch B |\n"
    "                     [--model gpt|llama3] --preset NAME [--seq T] [--batch B])\n"
    "                     [--dp LIST] [--stage S] [options]",
    "ZeRO memory and communication per rank (the seeds' formulas): static model states per\n"
    "stage (ZeRO-0 2Ψ+2Ψ+kΨ, ZeRO-1 2Ψ+2Ψ+kΨ/N, ZeRO-2 2Ψ+(2Ψ+kΨ)/N, ZeRO-3 (2Ψ+2Ψ+kΨ)/N),\n"
    "their placement on GPU, host and NVMe under offload, activations and ZeRO-3 temporary\n"
    "layers for a GPT config or a preset (GPT, or Llama 3 with --model llama3), communication\n"
    "(2Ψ, or 3Ψ for ZeRO-3) and, given --gpu-mem and/or --host-mem, which stage and offload\n"
    "combinations fit. GB = 1e9 bytes. With --platform, each row's step bound on that machine:\n"
    "the seconds per step of its compute, CPU AdamW, PCIe each way and disk, the largest bound.\n"
    "\n"
    "Flags take `--name value` or `--name=value`. Counts accept K M B T suffixes (1.5B, 125M),\n"
    "sizes KB MB GB TB or KiB MiB GiB TiB (80GB, 24GiB). Bad input: one error line, exit code 2.\n",
    "  starzero plan --params 7e9 --dp 1,8,64\n"
    "  starzero plan --params 70e9 --dp 4 --gpu-mem 80GB\n"
    "  starzero plan --layers 12 --hidden 768 --heads 12 --vocab 50257 --seq 1024 --batch 4 --dp 8\n"
    "  starzero plan --preset gpt2-124M --batch 4 --dp 8\n"
    "  starzero plan --model llama3 --preset llama3-8B --seq 8192 --batch 1 --dp 8 --gpu-mem 141GB --host-mem 1.5TB\n"
    "  starzero plan --max-model --model llama3 --preset llama3-8B --seq 2048 --gpu-mem 141GB\n"
    "  starzero plan --preset gpt2-1558M --batch 8 --recompute full --offload-optimizer cpu --stage 1 "
    "--platform h200x1\n"};

std::int64_t count_flag(const cli::ArgParser& p, const char* name) { return cli::parse_count(name, *p.value(name)); }

// The GPT config's footprint (models/gpt_layout.hpp), its fields checked first with the
// planner's messages; every failure is a PlanError (one line, exit code 2).
ModelFootprint gpt_model_footprint(const GptArgs& g) {
  const std::pair<const char*, std::int64_t> fields[] = {{"layers", g.layers}, {"hidden", g.hidden},
                                                         {"heads", g.heads},   {"vocab", g.vocab},
                                                         {"seq", g.seq},       {"batch", g.batch}};
  for (const auto& [name, value] : fields)
    if (value <= 0) throw PlanError(std::string("GPT ") + name + " must be > 0, got " + std::to_string(value));
  if (g.hidden % g.heads != 0)
    throw PlanError("GPT heads (" + std::to_string(g.heads) + ") must divide hidden (" + std::to_string(g.hidden) +
                    ")");
  constexpr std::int64_t kMaxField = std::numeric_limits<int>::max();  // llm.c's header holds int32
  for (const auto& [name, value] : fields)
    if (value > kMaxField)
      throw PlanError("model too large: GPT " + std::string(name) + " " + std::to_string(value) + " exceeds " +
                      std::to_string(kMaxField));
  if (g.padded_vocab() > kMaxField)
    throw PlanError("model too large: GPT vocab padded to " + std::to_string(g.padded_vocab()) + " exceeds " +
                    std::to_string(kMaxField));
  GptShape shape;
  shape.max_seq = int(g.seq);
  shape.vocab = int(g.vocab);
  shape.padded_vocab = int(g.padded_vocab());
  shape.layers = int(g.layers);
  shape.heads = int(g.heads);
  shape.channels = int(g.hidden);
  try {
    ModelFootprint footprint = gpt_footprint(shape, int(g.batch), g.activations);
    footprint.training_flops = gpt_training_flops(shape, int(g.batch), int(g.seq), g.activations);
    footprint.training_gpu_kernels_2 = gpt_training_gpu_kernels(shape, DType::bf16, int(g.batch), int(g.seq), g.activations);
    footprint.training_gpu_kernels_4 = gpt_training_gpu_kernels(shape, DType::f32, int(g.batch), int(g.seq), g.activations);
    return footprint;
  } catch (const std::invalid_argument& e) {
    throw PlanError(e.what());
  }
}

// The model family: --model gpt (default) or llama3.
std::string model_family(const cli::ArgParser& p) {
  return cli::parse_choice("model", p.value("model").value_or("gpt"), {"gpt", "llama3"});
}

// --seq (default `max_seq`) and --batch (default 1) of a preset, each 1..int max.
std::pair<std::int64_t, std::int64_t> preset_seq_batch(const cli::ArgParser& p, std::int64_t max_seq) {
  constexpr std::int64_t kMaxField = std::numeric_limits<int>::max();
  const std::int64_t seq = p.given("seq") ? count_flag(p, "seq") : max_seq;
  const std::int64_t batch = p.given("batch") ? count_flag(p, "batch") : 1;
  if (seq < 1 || seq > kMaxField) throw UsageError("--seq must be in 1.." + std::to_string(kMaxField));
  if (batch < 1 || batch > kMaxField) throw UsageError("--batch must be in 1.." + std::to_string(kMaxField));
  return {seq, batch};
}

// A preset gives the whole shape: no --params and no shape flag beside it.
void refuse_with_preset(const cli::ArgParser& p, const std::string& what) {
  if (p.given("params")) throw UsageError("give either --params or " + what + ", not both");
  for (const char* flag : {"layers", "hidden", "heads", "vocab"})
    if (p.given(flag))
      throw UsageError(std::string("--") + flag + ": " + what + " gives the shape; leave --" + flag + " out");
}

// --model llama3 --preset NAME: the preset's shape, --seq (<= its max_seq), --batch and the
// activation policy (--recompute, --recompute-window, --offload-activations), as for GPT.
LlamaArgs llama_args(const cli::ArgParser& p) {
  refuse_with_preset(p, "--model llama3 --preset");
  const ActivationPolicy policy = cli::activation_policy_option(p);
  if (!p.given("preset")) {
    std::string names;
    for (const std::string& n : llama_preset_names()) names += (names.empty() ? "" : "|") + n;
    throw UsageError("--model llama3 needs --preset " + names);
  }
  const std::string name = *p.value("preset");
  PresetModel shape;
  try {
    shape = starzero::model_family("llama3").preset(name);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--preset: ") + e.what());
  }
  const auto [seq, batch] = preset_seq_batch(p, shape.max_seq);
  if (seq > shape.max_seq)
    throw UsageError("--seq " + std::to_string(seq) + " exceeds " + name + "'s max_seq " +
                     std::to_string(shape.max_seq));
  LlamaArgs l;
  l.preset = name;
  l.layers = shape.layers;
  l.channels = shape.channels;
  l.heads = shape.heads;
  l.kv_heads = shape.kv_heads;
  l.ffn_hidden = shape.ffn_hidden;
  l.vocab = shape.vocab;
  l.max_seq = shape.max_seq;
  l.seq = seq;
  l.batch = batch;
  l.activations = policy;
  return l;
}

// --preset NAME with --model gpt: GPT's layers, hidden, heads and vocab from the preset, --seq
// (its maxT unless given: it sizes the position table) and --batch.
GptArgs gpt_preset_args(const cli::ArgParser& p) {
  refuse_with_preset(p, "--preset");
  const std::string name = *p.value("preset");
  PresetModel shape;
  try {
    shape = starzero::model_family("gpt").preset(name);
  } catch (const std::invalid_argument& e) {
    for (const std::string& llama : llama_preset_names())
      if (llama == name) throw UsageError("--preset " + name + " is a Llama 3 preset: add --model llama3");
    throw UsageError(std::string("--preset: ") + e.what());
  }
  const auto [seq, batch] = preset_seq_batch(p, shape.max_seq);
  GptArgs g;
  g.preset = name;
  g.layers = shape.layers;
  g.hidden = shape.channels;
  g.heads = shape.heads;
  g.vocab = shape.vocab;
  g.seq = seq;
  g.batch = batch;
  g.activations = cli::activation_policy_option(p);
  return g;
}

// A preset's footprint, from its family's entry in the registry; failures are PlanErrors.
ModelFootprint preset_footprint(const std::string& family, const std::string& preset, std::int64_t batch,
                                std::int64_t seq, const ActivationPolicy& activations) {
  try {
    return starzero::model_family(family).preset(preset).footprint(int(batch), int(seq), activations);
  } catch (const std::invalid_argument& e) {
    throw PlanError(e.what());
  }
}

// --params N, or the six flags of a GPT config.
void read_gpt_config(const cli::ArgParser& p, PlanRequest& a) {
  static constexpr const char* kGptFlags[] = {"layers", "hidden", "heads", "vocab", "seq", "batch"};
  std::string missing;
  int gpt_given = 0;
  for (const char* f : kGptFlags) {
    if (p.given(f)) {
      ++gpt_given;
    } else {
      missing += std::string(missing.empty() ? "" : " ") + "--" + f;
    }
  }
  if (gpt_given > 0 && gpt_given < 6) {
    throw UsageError("a GPT config needs all of --layers --hidden --heads --vocab --seq --batch (missing " + missing +
                     ")");
  }
  if (gpt_given == 6 && p.given("params")) {
    throw UsageError("give either --params or a GPT config, not both");
  }
  if (gpt_given == 0 && !p.given("params")) {
    throw UsageError(
        "give --params N, a GPT config (--layers --hidden --heads --vocab --seq --batch) or --preset NAME");
  }
  if (gpt_given == 6) {
    GptArgs g;
    g.layers = count_flag(p, "layers");
    g.hidden = count_flag(p, "hidden");
    g.heads = count_flag(p, "heads");
    g.vocab = count_flag(p, "vocab");
    g.seq = count_flag(p, "seq");
    g.batch = count_flag(p, "batch");
    g.activations = cli::activation_policy_option(p);
    a.gpt = g;
  } else {
    a.base.params = count_flag(p, "params");
    if (p.given("recompute") || p.given("recompute-window") || p.given("offload-activations"))
      throw UsageError("--recompute needs a GPT config (--layers --hidden --heads --vocab --seq --batch)");
  }
}

void read_state_options(const cli::ArgParser& p, PlanRequest& a);
void read_machine_options(const cli::ArgParser& p, PlanRequest& a);

PlanRequest read_args(const cli::ArgParser& p) {
  PlanRequest a;
  PlanInput& in = a.base;

  const std::string family = model_family(p);
  if (family == "llama3") {
    a.llama = llama_args(p);
  } else if (p.given("preset")) {
    a.gpt = gpt_preset_args(p);
  } else {
    read_gpt_config(p, a);
  }

  a.dps = p.given("dp") ? cli::parse_count_list("dp", *p.value("dp")) : std::vector<std::int64_t>{1};
  const std::string stage_text = p.value("stage").value_or("all");
  if (stage_text == "all") {
    a.stages = {0, 1, 2, 3};
  } else {
    a.stages = {std::stoi(cli::parse_choice("stage", stage_text, {"0", "1", "2", "3", "all"}))};
  }
  read_state_options(p, a);
  read_machine_options(p, a);
  a.json = p.flag_set("json");
  // After every flag is read: a bad flag is reported before a bad GPT config, as the planner did.
  if (a.gpt)
    in.model = a.gpt->preset.empty() ? gpt_model_footprint(*a.gpt)
                                     : preset_footprint("gpt", a.gpt->preset, a.gpt->batch, a.gpt->seq,
                                                        a.gpt->activations);
  if (a.llama)
    in.model = preset_footprint("llama3", a.llama->preset, a.llama->batch, a.llama->seq, a.llama->activations);
  return a;
}

// Precision, optimizer state, offload and the windows: the PlanInput every row shares.
void read_state_options(const cli::ArgParser& p, PlanRequest& a) {
  PlanInput& in = a.base;
  in.precision = cli::precision_option(p, "precision", in.precision, {"bf16", "fp16", "fp32"});
  if (auto v = p.value("k")) in.k = cli::parse_number("k", *v);
  in.fp32_grad_accum = p.flag_set("fp32-grad-accum");
  // Only an explicit cudnn counts cuDNN's workspace: the plan cannot know whether the machine's
  // build has cuDNN, so auto plans as the own kernel (whose figures the plan has always shown).
  // fp32 with cudnn is the run's error, reported here too.
  const tasks::AttentionRequest attention = cli::attention_option(p);
  try {
    in.cudnn_attention = attention == tasks::AttentionRequest::cudnn &&
                         tasks::resolve_attention(attention, true, in.precision != Precision::fp32, true).kernel ==
                             tasks::AttentionKernel::cudnn;
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  // The step bound charges the attention the GPU would run: cuDNN's unless --attention own (fp32
  // always our own: sim::with_attention).
  in.attention = attention == tasks::AttentionRequest::own ? sim::GpuCostClass::own_attention
                                                           : sim::GpuCostClass::cudnn_attention;
  in.offload = cli::offload_options(p);
  if (auto v = p.value("prefetch-depth")) in.prefetch_depth = cli::parse_count("prefetch-depth", *v);
  if (auto v = p.value("grad-window")) in.grad_window = cli::parse_count("grad-window", *v);
  // The run's rules, from their one homes (offload/placement.hpp, offload/engine_options.hpp), for
  // every row asked for.
  try {
    validate_placement(in.offload);
    for (int stage : a.stages) {
      check_zero_options(stage, in.prefetch_depth, in.grad_window);
      for (std::int64_t dp : a.dps) check_param_offload_stage(in.offload, stage, dp);
    }
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

// The limits of the fit check, the machine of the step bound, and the autos they resolve.
void read_machine_options(const cli::ArgParser& p, PlanRequest& a) {
  const PlanInput& in = a.base;
  if (auto v = p.value("gpu-mem")) {
    a.limits.gpu_bytes = cli::parse_bytes("gpu-mem", *v);
    if (*a.limits.gpu_bytes <= 0) throw UsageError("--gpu-mem: '" + cli::printable(*v) + "' must be > 0");
  }
  if (auto v = p.value("host-mem")) {
    a.limits.host_bytes = cli::parse_bytes("host-mem", *v);
    if (*a.limits.host_bytes <= 0) throw UsageError("--host-mem: '" + cli::printable(*v) + "' must be > 0");
  }
  if (auto v = p.value("platform")) {
    try {
      a.machine = sim::named_or_folder_machine(*v);
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--platform: ") + e.what());
    }
  }
  if (p.given("adam-threads")) {
    if (!a.machine) throw UsageError("--adam-threads needs --platform (the threads' share of its memory bandwidth)");
    a.adam_threads = cli::int_option(p, "adam-threads", 1, 1, sim::kMaxCpus);
  }
  // auto fills the GPU: --gpu-mem, else the --platform's GPU.
  if (a.limits.gpu_bytes)
    a.auto_gpu_bytes = a.limits.gpu_bytes;
  else if (a.machine && a.machine->gpus > 0)
    a.auto_gpu_bytes = a.machine->gpu_memory_bytes;
  if (in.offload.speculative_fraction.automatic && !a.limits.host_bytes)
    throw UsageError("--speculative-fraction auto needs the host's memory: --host-mem");
  if (in.offload.optimizer_fraction.automatic && !a.auto_gpu_bytes)
    throw UsageError("--offload-optimizer-fraction auto needs the GPU's memory: --gpu-mem, or --platform with a GPU");
  if (p.given("grad-accum")) {
    if (!a.machine) throw UsageError("--grad-accum needs --platform (it sets the micro-batches of the step bound)");
    a.micro_batches = int(cli::int_option(p, "grad-accum", 1, 1, 1 << 20));
  }
}

// Whole from 100 up, else three significant digits: "1500", "141", "1.5", "0.124".
std::string short_number(double x) {
  char text[32];
  std::snprintf(text, sizeof text, x >= 100 ? "%.0f" : "%.3g", x);
  return text;
}

// GPT shape of size L in the --max-model family: L layers, hidden 64·L, heads of 64 (L of them),
// the given vocabulary and sequence length (GPT-2 124M is L = 12).
GptShape max_model_shape(int L, std::int64_t vocab, std::int64_t seq) {
  GptShape shape;
  shape.layers = L;
  shape.channels = 64 * L;
  shape.heads = L;
  shape.vocab = int(vocab);
  shape.padded_vocab = int((vocab + 127) / 128 * 128);
  shape.max_seq = int(seq);
  return shape;
}

// `starzero plan --max-model`: for each --recompute mode (and full with activation offload), the
// largest L per stage and offload.
// What both --max-model families read: the memory limits, precision, k, prefetch depth and one dp.
struct MaxModelSettings {
  PlanInput base;
  MemoryLimits limits;
};
MaxModelSettings max_model_settings(const cli::ArgParser& p) {
  for (const char* flag : {"params", "layers", "hidden", "heads", "stage", "offload-optimizer",
                           "offload-optimizer-fraction", "offload-params", "json", "recompute", "recompute-window",
                           "offload-activations"})
    if (p.given(flag)) throw UsageError(std::string("--max-model searches over --") + flag + " itself: leave it out");
  for (const char* flag : {"platform", "adam-threads", "grad-accum"})
    if (p.given(flag)) throw UsageError(std::string("--") + flag + ": --max-model prints no step bound");
  if (!p.given("gpu-mem") && !p.given("host-mem")) throw UsageError("--max-model needs --gpu-mem and/or --host-mem");
  MaxModelSettings m;
  PlanInput& base = m.base;
  MemoryLimits& limits = m.limits;
  if (auto v = p.value("gpu-mem")) limits.gpu_bytes = cli::parse_bytes("gpu-mem", *v);
  if (auto v = p.value("host-mem")) limits.host_bytes = cli::parse_bytes("host-mem", *v);
  base.precision = cli::precision_option(p, "precision", base.precision, {"bf16", "fp16", "fp32"});
  if (auto v = p.value("k")) base.k = cli::parse_number("k", *v);
  if (auto v = p.value("prefetch-depth")) base.prefetch_depth = cli::parse_count("prefetch-depth", *v);
  if (auto v = p.value("grad-window")) {
    base.grad_window = cli::parse_count("grad-window", *v);
    if (base.grad_window < 1) throw UsageError("--grad-window must be >= 1");
  }
  const std::vector<std::int64_t> dps =
      p.given("dp") ? cli::parse_count_list("dp", *p.value("dp")) : std::vector<std::int64_t>{1};
  if (dps.size() != 1 || dps[0] < 1) throw UsageError("--max-model takes one --dp N");
  base.dp = dps[0];
  return m;
}

std::string limits_text(const MemoryLimits& limits) {
  return (limits.gpu_bytes ? ", GPU " + short_number(*limits.gpu_bytes / 1e9) + " GB" : std::string()) +
         (limits.host_bytes ? ", host " + short_number(*limits.host_bytes / 1e9) + " GB" : std::string());
}

constexpr int kMaxLayers = 1024;  // the deepest model --max-model tries

// --max-model's columns: each --recompute mode, then each with --offload-activations cpu; window 1.
const ActivationPolicy kMaxModelPolicies[] = {{Recompute::none, 1},
                                              {Recompute::selective, 1},
                                              {Recompute::full, 1},
                                              {Recompute::none, 1, ActivationOffload::cpu},
                                              {Recompute::selective, 1, ActivationOffload::cpu},
                                              {Recompute::full, 1, ActivationOffload::cpu}};

// --max-model's table: a row per stage and offload, a column per activation policy, each cell the
// largest size L (1..kMaxLayers) whose footprint_of(L, policy) fits, as cell_of(L) says it;
// columns as wide as the longest heading.
template <class FootprintOf, class CellOf>
void print_max_model_table(const MaxModelSettings& settings, FootprintOf&& footprint_of, CellOf&& cell_of) {
  std::vector<std::vector<LargestFit>> results;
  for (const ActivationPolicy& policy : kMaxModelPolicies)
    results.push_back(largest_fitting(
        settings.base, settings.limits, [&](int L) { return footprint_of(L, policy); }, kMaxLayers));
  std::vector<std::string> headings;
  int width = 0;
  for (const ActivationPolicy& policy : kMaxModelPolicies) {
    headings.push_back(std::string(recompute_name(policy.recompute)) +
                       (policy.offload == ActivationOffload::cpu ? " + offload" : ""));
    width = std::max(width, int(headings.back().size()));
  }
  std::printf("%-6s %-9s %-9s", "stage", "optimizer", "params");
  // The last column unpadded: no trailing blanks.
  for (std::size_t c = 0; c < headings.size(); ++c)
    std::printf(" | %-*s", c + 1 < headings.size() ? width : 0, headings[c].c_str());
  std::printf("\n");
  for (std::size_t i = 0; i < results[0].size(); ++i) {
    const FitOption& o = results[0][i].option;
    std::printf("ZeRO-%-1d %-9s %-9s", o.stage, std::string(offload_name(o.offload.optimizer)).c_str(),
                std::string(offload_name(o.offload.params)).c_str());
    for (std::size_t c = 0; c < results.size(); ++c) {
      const LargestFit& fit = results[c][i];
      std::printf(" | %-*s", c + 1 < results.size() ? width : 0,
                  fit.size == 0 ? "none fits" : cell_of(fit.size).c_str());
    }
    std::printf("\n");
  }
}

// `starzero plan --max-model --model llama3`: the deepest Llama 3 of one preset's width (C, NH,
// NKV, H, V; default llama3-8B), L = 1..1024 blocks, per stage, offload and activation policy.
int run_max_model_llama(const cli::ArgParser& p) {
  if (p.given("vocab")) throw UsageError("--vocab: --model llama3 takes V from --preset; leave --vocab out");
  const MaxModelSettings settings = max_model_settings(p);
  const PlanInput& base = settings.base;
  const std::string name = p.value("preset").value_or("llama3-8B");
  LlamaShape width;
  try {
    width = llama_preset(name);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--preset: ") + e.what());
  }
  const auto [seq, batch] = preset_seq_batch(p, width.max_seq);
  if (seq > width.max_seq)
    throw UsageError("--seq " + std::to_string(seq) + " exceeds " + name + "'s max_seq " +
                     std::to_string(width.max_seq));
  auto shape_of = [&](int L) {
    LlamaShape shape = width;
    shape.layers = L;
    return shape;
  };
  std::printf(
      "deepest Llama 3 of %s's width that fits (L blocks of C=%d NH=%d NKV=%d H=%d, V=%d, T=%lld, B=%lld, %s, "
      "dp %lld)%s\n",
      name.c_str(), width.channels, width.heads, width.kv_heads, width.ffn_hidden, width.vocab, (long long)seq,
      (long long)batch, std::string(precision_name(base.precision)).c_str(), (long long)base.dp,
      limits_text(settings.limits).c_str());
  print_max_model_table(
      settings,
      [&](int L, const ActivationPolicy& policy) { return llama_footprint(shape_of(L), int(batch), int(seq), policy); },
      [&](int L) {
        return "L=" + std::to_string(L) + " " + short_number(double(shape_of(L).param_count()) / 1e9) + "B";
      });
  std::printf(
      "(%s itself is L=%d, %sB parameters; columns: --recompute mode, + --offload-activations cpu;\n"
      " window 1; at most L = %d searched; parameters in billions; the fit check is `starzero plan`'s)\n",
      name.c_str(), width.layers, short_number(double(width.param_count()) / 1e9).c_str(), kMaxLayers);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

int run_max_model(const cli::ArgParser& p) {
  if (model_family(p) == "llama3") return run_max_model_llama(p);
  if (p.given("preset"))
    throw UsageError(
        "--preset: --max-model searches GPT shapes of hidden 64·L itself (a --preset is for --model llama3)");
  const MaxModelSettings settings = max_model_settings(p);
  const PlanInput& base = settings.base;
  const std::int64_t vocab = p.given("vocab") ? count_flag(p, "vocab") : 50257;
  const std::int64_t seq = p.given("seq") ? count_flag(p, "seq") : 1024;
  const int batch = p.given("batch") ? int(cli::int_option(p, "batch", 1, 1)) : 1;
  if (vocab < 1 || vocab > (1 << 24) || seq < 1 || seq > (1 << 20))
    throw UsageError("--max-model: --vocab in 1..16777216 and --seq in 1..1048576");
  std::printf("largest GPT that fits (L layers, hidden 64·L, L heads, vocab %lld, T=%lld, B=%d, %s, dp %lld)%s\n",
              (long long)vocab, (long long)seq, batch, std::string(precision_name(base.precision)).c_str(),
              (long long)base.dp, limits_text(settings.limits).c_str());
  print_max_model_table(
      settings,
      [&](int L, const ActivationPolicy& policy) {
        return gpt_footprint(max_model_shape(L, vocab, seq), batch, policy);
      },
      [&](int L) {
        return "L=" + std::to_string(L) + " C=" + std::to_string(64 * L) + " " +
               short_number(double(gpt_footprint(max_model_shape(L, vocab, seq), batch).params) / 1e9) + "B";
      });
  std::printf(
      "(columns: --recompute mode, + --offload-activations cpu; window 1; at most L = %d searched;\n"
      " parameters in billions; the fit check is `starzero plan`'s)\n",
      kMaxLayers);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

int run_plan(const cli::ArgParser& parser) {
  if (parser.flag_set("max-model")) return run_max_model(parser);
  const PlanRequest request = read_args(parser);
  const std::string report = request.json ? plan_report_json(request) : plan_report_text(request);
  std::fputs(report.c_str(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace

int plan_main(int argc, char** argv) {
  cli::ArgParser parser = make_parser();
  return run_command(kHelp, parser, argc, argv, run_plan);
}

}  // namespace starzero
