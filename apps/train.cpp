// `starzero train` and `starzero eval`: flags to a ModelRequest and RunOptions, then one library
// call (train/run.hpp, train/evaluate.hpp).
#include <cstdio>
#include <string>

#include "apps/cli.hpp"
#include "apps/command.hpp"
#include "apps/commands.hpp"
#include "apps/deepspeed_config.hpp"
#include "comm/ranks.hpp"
#include "models/hf_checkpoint.hpp"
#include "models/registry.hpp"
#include "models/tokenizer.hpp"
#include "optimizers/lr_schedule.hpp"
#include "runtime/sim.hpp"
#include "train/checkpoint_sets.hpp"
#include "train/evaluate.hpp"
#include "train/run.hpp"

namespace starzero {

namespace {

using cli::int_option;
using cli::real_option;

std::string model_names() {
  std::string names;
  for (const ModelFamily& family : model_families()) names += (names.empty() ? "" : ", ") + family.name;
  return names;
}

// Each family's presets, its default first: "gpt: tiny (default), gpt2-124M, ...; llama3: ...".
std::string preset_names() {
  std::string text;
  for (const ModelFamily& family : model_families()) {
    if (family.preset_names.empty()) continue;
    text += (text.empty() ? "" : "; ") + family.name + ": ";
    for (std::size_t i = 0; i < family.preset_names.size(); ++i)
      text += (i == 0 ? "" : ", ") + family.preset_names[i] + (i == 0 ? " (default)" : "");
  }
  return text;
}

// Model, data, learning-rate schedule and AdamW.
void add_model_and_optimizer_options(cli::ArgParser& p) {
  p.option("model", "NAME", "model family: " + model_names() + " (default gpt)")
      .option("preset", "NAME", "model shape of the --model family: " + preset_names())
      .option("layers", "L", "override the preset's number of transformer blocks (mlp: residual blocks)")
      .option("channels", "C", "override the preset's hidden size")
      .option("heads", "NH", "override the preset's attention heads (must divide C)")
      .option("max-seq", "T", "override the preset's maximum sequence length")
      .option("data", "PATH",
              "training text (bytes; tokens with a tokenizer.json), fine-tuning records (.jsonl, with --tokenizer), "
              "or llm.c token shards (.bin): a file, a folder of them or a glob ('fineweb_train_*.bin'), streamed; "
              "default: this checkout's docs and sources")
      .option("val-data", "PATH", "validation token shards (file, folder or glob) or .jsonl; default: the last "
                                  "--val-fraction of --data")
      .option("val-fraction", "F", "the share of --data held out for validation without --val-data, in (0, 1) (default 0.1)")
      .option("tokenizer", "FILE",
              "a token model's tokenizer: llm.c's gpt2_tokenizer.bin decodes samples; a Hugging Face tokenizer.json "
              "(byte-level BPE, GPT-2 or Llama 3) also encodes text --data and --prompt; samples start from its "
              "end-of-text token without --prompt")
      .option("batch", "B", "sequences per step (default 8)")
      .option("seq", "T", "tokens per sequence (default: min(64, max-seq))")
      .option("steps", "N", "optimizer steps (default 300)")
      .option("lr", "LR", "peak learning rate (default 1e-3)")
      .option("warmup", "N", "linear warm-up steps (default 20)")
      .option("lr-final", "F", "cosine decay ends at lr*F (default 0.1; ds-warmup-cosine: cos_min_ratio)")
      .option("lr-schedule", "KIND",
              "cosine (default: linear warm-up, cosine decay) or DeepSpeed's ds-warmup, ds-warmup-decay, "
              "ds-warmup-cosine (formulas: optimizers/lr_schedule.hpp)")
      .option("warmup-type", "T", "DeepSpeed schedules: log (default) or linear warm-up")
      .option("warmup-min", "X", "DeepSpeed schedules: warm-up start (warmup_min_lr; ds-warmup-cosine: the ratio)")
      .option("lr-total", "N", "the step where the decay ends (default: the run's last step)")
      .option("adam-beta1", "B1", "AdamW beta1 (default 0.9)")
      .option("adam-beta2", "B2", "AdamW beta2 (default 0.999)")
      .option("adam-eps", "EPS", "AdamW epsilon (default 1e-8)")
      .option("deepspeed-config", "FILE",
              "take batch, precision, ZeRO stage, offload, AdamW and schedule from a DeepSpeed ds_config.json "
              "(docs/deepspeed-config.md; a flag that contradicts it is an error)")
      .option("weight-decay", "WD", "AdamW decoupled weight decay (default 0)")
      .option("grad-clip", "X", "clip the global gradient norm to X; 0: off (default 1)")
      .option("seed", "S", "initialisation and batch order (default 1337)")
      .option("precision", "P", "bf16 (default: bf16 params/grads/activations, fp32 master and Adam) or fp32 (exact)")
      .option("attention", "auto|cudnn|own", cli::kAttentionHelp);
}

// The StarPU session, ZeRO and the shape of the task graph.
void add_parallelism_options(cli::ArgParser& p) {
  cli::add_session_options(p)
      .option("cuda-mem-limit", "MiB", "GPU memory StarPU may use per GPU (STARPU_LIMIT_CUDA_MEM; default: all)")
      .option("collectives", "KIND", "auto (default: NCCL when ranks have GPUs, else MPI), mpi or nccl")
      .option("stage", "S", "ZeRO stage 0..3 across the ranks of mpirun (default 0; one rank: no collectives)")
      .option("sim-ranks", "N",
              sim::predicts_times ? "simulate rank 0 of N data-parallel ranks, collectives costed as ring volume over "
                                    "the platform's GPU link (default 1; docs/sim.md)"
                                  : "starzero-sim only: simulate rank 0 of N data-parallel ranks")
      .option("tiles", "N",
              "tasks per row-wise op, each a group of whole sequences: auto (default: 1 with a GPU, "
              "else one per CPU worker) or 1..micro-batch")
      .option("head-groups", "N",
              "GPT: attention tasks per tile, each a group of consecutive heads: auto (default: 1 with a GPU, else "
              "enough that tiles x groups >= CPU workers) or 1..heads")
      .option("recompute", "MODE",
              "none (default), selective (layernorms, attention, GELU run again before each block's backward) or "
              "full (a block keeps only its output; its forward runs again): docs/activation-memory.md")
      .option("recompute-window", "W",
              "blocks recomputed or fetched ahead of the backward, W + 1 alive at once (default 1)")
      .option("offload-activations", "WHERE",
              "none (default) or cpu: what the blocks keep lives in pinned host memory between forward and "
              "backward, W + 1 blocks on the device")
      .option("grad-accum", "K", "split each step's batch into K micro-batches whose gradients add up (default 1)")
      .option("prefetch-depth", "W",
              "ZeRO-3 (one rank with --offload-params cpu: any stage): layers all-gathered (fetched) ahead "
              "(default 1; at most W+1 live)")
      .flag("fp32-grad-accum",
            "bf16: add micro-batch gradients in an fp32 buffer, rounded once per step (+4 bytes/param)")
      .option("grad-window", "G",
              "full gradients alive at once: ZeRO-2/3 beyond the one computed; one rank with --offload-params "
              "cpu and --offload-optimizer, on the device (default 2)");
}

// Where the state lives (optimizer and parameter offload) and how the update overlaps.
void add_offload_options(cli::ArgParser& p) {
  p.option("offload-optimizer", "WHERE",
              "none (default), cpu (pinned host memory, CPU AdamW) or nvme (StarPU disk node)")
      .option("offload-optimizer-fraction", "F|auto",
              "--offload-optimizer cpu|nvme: offload the state of the last layers holding F of the parameters "
              "(rounded up to whole layers), the first ones keep it on the GPU and run the device AdamW; "
              "auto: as much on the GPU as its memory holds beside the rest (default 1: all)")
      .option("nvme-path", "DIR", "--offload-optimizer nvme: folder for the optimizer state files")
      .option("host-mem-limit", "MiB", "--offload-optimizer nvme: host memory StarPU may use before it evicts to disk")
      .option("offload-params", "WHERE",
              "none (default) or cpu: ZeRO-3 parameter shards in pinned host memory; with one rank (any "
              "--stage) the whole model, fetched per layer, and with --offload-optimizer its gradients too")
      .option("adam-threads", "T", "CPU AdamW threads under offload (default: cores left by the GPU workers, else 1)")
      .option("delayed-update", "WARMUP",
              "one-step-delayed parameter update after WARMUP synchronous steps "
              "(ZeRO-Offload's DPU: changes the math; docs/architecture.md)")
      .flag("speculative-update",
            "--offload-optimizer cpu: each CPU AdamW runs as soon as its gradient is reduced and is committed, "
            "re-run clipped or discarded once the global norm is known: exact, +12 bytes/param of host memory")
      .option("speculative-fraction", "F|auto",
              "--speculative-update: only the last CPU-updated layers holding F of the parameters are speculative "
              "(+12 bytes/param for those), the others update after the norm; auto: as many as host memory holds "
              "(default 1: all)");
}

// Checkpoints, robustness, validation, samples and what the run writes.
void add_run_options(cli::ArgParser& p) {
  p.option("checkpoint-in", "FILE|DIR",
              "start from a checkpoint, which defines the model's shape (resumes exactly when FILE.state exists); "
              "a --checkpoint-dir folder: its latest set")
      .option("checkpoint-out", "FILE|DIR", "write a checkpoint (and FILE.state) at the end")
      .option("checkpoint-format", "F",
              "--checkpoint-out as llmc (llm.c's file, default) or hf (a Hugging Face folder DIR: config.json and "
              "model.safetensors, GPT-2 and Llama 3)")
      .option("checkpoint-dir", "DIR",
              "write each save as a crash-safe set DIR/step_N/ and then DIR/latest (a kill never leaves "
              "an incomplete set named)")
      .option("keep-checkpoints", "K", "--checkpoint-dir: keep the newest K sets (default 0: all)")
      .flag("resume",
            "--checkpoint-dir: continue from DIR's latest set if there is one (else start), with --steps the "
            "total: the same command line continues a killed run")
      .option("save-every", "N", "also write the checkpoint every N steps")
      .option("checkpoint-precision", "P", "fp32 (llm.c version 3, default) or bf16 (version 5)")
      .option("max-skipped-steps", "K",
              "stop after K steps in a row whose gradient norm is not finite (each skips its update; default 5)")
      .option("watchdog", "SECONDS",
              "when nothing (a step, a validation, a save) finishes for this long, every rank prints what its "
              "threads wait on and the job ends with exit code 3; 0: off (default 600)")
      .option("debug-hang", "STEP[:RANK]", "testing: at STEP a task on RANK (default 0) never ends")
      .option("debug-nan-gradient", "STEP:LAYER,...",
              "testing: make LAYER's gradient NaN at STEP (fp32), to see non-finite steps handled")
      .option("val-every", "N", "validation loss every N steps, 0: never (default 50)")
      .option("val-batches", "N", "validation batches (default 4)")
      .option("sample-every", "N", "print generated text every N steps, 0: never (default: at the end only)")
      .option("sample-tokens", "N", "tokens per sample (default 64)")
      .option("prompt", "TEXT", "sampling prompt (default: a newline; a token model's end-of-text token)")
      .option("metrics", "FILE", "append one JSON line per step and validation to FILE (see `starzero plot`)")
      .option("trace", "DIR", "write an FxT trace and its paje.trace (ViTE) into DIR")
      .flag("quiet", "print only the summary")
      .option("progress", "HOW",
              "auto (default): a progress bar on a terminal, one line per step in a file or pipe and under "
              "mpirun/srun; bar; lines")
      .flag("help", "show this help");
}

cli::ArgParser make_train_parser() {
  cli::ArgParser p("starzero train");
  add_model_and_optimizer_options(p);
  cli::add_jsonl_options(p);
  add_parallelism_options(p);
  add_offload_options(p);
  add_run_options(p);
  return p;
}

// "DIR/" as "DIR": a Hugging Face folder's state files are DIR.state beside it, however it is spelled.
std::filesystem::path folder_name(const std::filesystem::path& path) {
  return path.has_filename() || !path.has_parent_path() ? path : path.parent_path();
}

ModelRequest model_request(const cli::ArgParser& p) {
  ModelRequest r;
  r.family = p.value("model").value_or("gpt");
  r.preset = p.value("preset");
  if (p.given("layers")) r.layers = int_option(p, "layers", 0, 1);
  if (p.given("channels")) r.channels = int_option(p, "channels", 0, 1);
  if (p.given("heads")) r.heads = int_option(p, "heads", 0, 1);
  if (p.given("max-seq")) r.max_seq = int_option(p, "max-seq", 0, 1);
  if (p.given("seq")) r.seq = int_option(p, "seq", 0, 1);
  if (const auto data = p.value("data")) r.data = *data;
  if (const auto val = p.value("val-data")) {
    if (!r.data) throw UsageError("--val-data goes with --data");
    if (p.given("val-fraction")) throw UsageError("give --val-data or --val-fraction, not both");
    r.validation_data = *val;
  }
  if (p.given("val-fraction")) {
    const double f = cli::parse_number("val-fraction", *p.value("val-fraction"));
    if (!(f > 0 && f < 1))  // 0 would be `eval`'s whole-data split; --val-every 0 skips validation
      throw UsageError("--val-fraction must be in (0, 1), not " + *p.value("val-fraction"));
    r.validation_fraction = f;
  }
  if (const auto tokenizer = p.value("tokenizer")) {
    if (p.given("prompt"))
      if (const Tokenizer t = Tokenizer::load(*tokenizer); !t.can_encode())
        throw UsageError("--prompt with --tokenizer " + *tokenizer + ": it cannot encode text: " + t.encoding_unavailable());
    r.tokenizer = *tokenizer;
  }
  if (const auto checkpoint = p.value("checkpoint-in")) {
    if (p.flag_set("resume"))
      throw UsageError("--resume takes the checkpoint from --checkpoint-dir: no --checkpoint-in");
    if (!std::filesystem::exists(*checkpoint))
      throw UsageError("--checkpoint-in: no such file '" + cli::printable(*checkpoint) + "'");
    r.checkpoint = resolve_checkpoint_in(folder_name(*checkpoint));
  }
  if (p.flag_set("resume")) {
    if (!p.given("checkpoint-dir")) throw UsageError("--resume needs --checkpoint-dir DIR");
    r.checkpoint = CheckpointSets(*p.value("checkpoint-dir")).latest();  // none yet: a fresh start
  }
  r.seed = std::uint64_t(int_option(p, "seed", 1337, 0));
  r.jsonl = cli::jsonl_options(p);
  r.data_progress = cli::jsonl_progress("data");
  return r;
}

TrainerOptions trainer_options(const cli::ArgParser& p, std::uint64_t seed) {
  TrainerOptions t;
  t.global_batch = int_option(p, "batch", 8, 1);
  t.micro_batches = int_option(p, "grad-accum", 1, 1);
  t.steps = int_option(p, "steps", 300, 1);
  optim::LrSchedule& schedule = t.schedule;
  const std::string kind = p.value("lr-schedule").value_or("cosine");
  if (!optim::lr_schedule_from_name(kind, schedule.kind))
    throw UsageError("--lr-schedule: '" + cli::printable(kind) +
                     "' is not cosine, ds-warmup, ds-warmup-decay or ds-warmup-cosine");
  const bool deepspeed = schedule.kind != optim::LrScheduleKind::cosine;
  for (const char* flag : {"warmup-type", "warmup-min"})
    if (p.given(flag) && !deepspeed)
      throw UsageError(std::string("--") + flag + " is for the ds-* --lr-schedule kinds");
  schedule.lr = real_option(p, "lr", 1e-3);
  schedule.warmup = int_option(p, "warmup", 20, 0);
  schedule.final = real_option(p, "lr-final", 0.1);
  schedule.warmup_min = real_option(p, "warmup-min", 0.0);
  schedule.log_warmup =
      cli::parse_choice("--warmup-type", p.value("warmup-type").value_or("log"), {"log", "linear"}) == "log";
  schedule.total = p.given("lr-total") ? int_option(p, "lr-total", 0, 1) : 0;
  t.seed = seed;
  t.val_every = int_option(p, "val-every", 50, 0);
  t.val_batches = int_option(p, "val-batches", 4, 1);
  t.sample_every = int_option(p, "sample-every", 0, 0);
  t.sample_tokens = int_option(p, "sample-tokens", 64, 1);
  t.prompt = p.value("prompt").value_or("");
  t.save_every = int_option(p, "save-every", 0, 0);
  t.max_skipped_steps = int_option(p, "max-skipped-steps", 5, 1);
  t.quiet = p.flag_set("quiet");
  const std::string progress =
      cli::parse_choice("--progress", p.value("progress").value_or("auto"), {"auto", "bar", "lines"});
  t.progress = progress == "bar"     ? ProgressStyle::bar
               : progress == "lines" ? ProgressStyle::lines
                                     : ProgressStyle::automatic;
  return t;
}

// The offload options, read here once: the run checks them (run_training), and the host plan, the
// engine and the reports all read this object (RunOptions::offload).
OffloadOptions train_offload_options(const cli::ArgParser& p) {
  OffloadOptions o = cli::offload_options(p);
  if (p.given("nvme-path")) o.nvme_path = *p.value("nvme-path");  // only for nvme: the run's check says so
  if (o.optimizer == OptimizerOffload::nvme)
    o.host_mem_limit_mib = std::size_t(int_option(p, "host-mem-limit", 1024, 16));
  else if (p.given("host-mem-limit"))
    throw UsageError("--host-mem-limit is only for --offload-optimizer nvme");
  if (p.given("adam-threads")) o.adam_threads = int_option(p, "adam-threads", 1, 1);
  if (p.given("delayed-update")) o.delayed_update_warmup = int_option(p, "delayed-update", 0, 0);
  return o;  // checked with the rest of the run (check_engine_options, by run_training)
}

RunOptions run_options(const cli::ArgParser& p, const ModelSpec& spec, const ModelRequest& request) {
  RunOptions o;
  o.precision = cli::precision_option(p, "precision", spec.default_precision());
  o.trainer = trainer_options(p, request.seed);
  o.grad_clip = real_option(p, "grad-clip", 1.0);
  o.adam.weight_decay = real_option(p, "weight-decay", 0.0);
  o.adam.beta1 = real_option(p, "adam-beta1", 0.9);
  o.adam.beta2 = real_option(p, "adam-beta2", 0.999);
  o.adam.eps = real_option(p, "adam-eps", 1e-8);
  if (o.adam.beta1 >= 1 || o.adam.beta2 >= 1) throw UsageError("--adam-beta1 and --adam-beta2 must be below 1");
  o.zero.stage = int_option(p, "stage", 0, 0, 3);
  o.zero.prefetch_depth = int_option(p, "prefetch-depth", 1, 0);
  o.zero.grad_window = int_option(p, "grad-window", 2, 1);
  o.fp32_grad_accum = p.flag_set("fp32-grad-accum");
  o.watchdog_seconds = int_option(p, "watchdog", 600, 0);
  if (const auto hang = p.value("debug-hang")) {
    const std::string text = hang->find(':') == std::string::npos ? *hang + ":0" : *hang;
    const auto pairs = cli::parse_pair_list("--debug-hang", text);
    if (pairs.size() != 1 || pairs[0].first < 1) throw UsageError("--debug-hang: expected STEP[:RANK], STEP >= 1");
    o.hang_at_step = pairs[0].first;
    o.hang_rank = pairs[0].second;
  }
  if (const auto pairs = p.value("debug-nan-gradient"))
    o.nan_gradients = cli::parse_pair_list("--debug-nan-gradient", *pairs);
  if (p.given("sim-ranks")) {
    if (!sim::predicts_times)
      throw UsageError("--sim-ranks is starzero-sim's: run ranks for real with mpirun (docs/sim.md)");
    o.sim_ranks = cli::int_option(p, "sim-ranks", 1, 1, 4096);
  }
  const std::string collectives =
      cli::parse_choice("--collectives", p.value("collectives").value_or("auto"), {"auto", "mpi", "nccl"});
  o.collectives = collectives == "auto"  ? Collectives::automatic
                  : collectives == "mpi" ? Collectives::mpi
                                         : Collectives::nccl;
  o.offload = train_offload_options(p);
  o.tiling = {cli::auto_or_int_option(p, "tiles", 1), cli::auto_or_int_option(p, "head-groups", 1)};
  o.activations = cli::activation_policy_option(p);
  o.session = cli::session_options(p);
  o.attention = cli::attention_option(p);
  if (p.given("cuda-mem-limit")) o.session.cuda_memory_limit_mib = std::size_t(int_option(p, "cuda-mem-limit", 0, 64));
  o.checkpoint_in = request.checkpoint;
  if (const auto out = p.value("checkpoint-out")) o.checkpoint_out = folder_name(*out);
  if (const auto dir = p.value("checkpoint-dir")) o.checkpoint_dir = *dir;
  o.keep_checkpoints = int_option(p, "keep-checkpoints", 0, 0);
  o.steps_are_total = p.flag_set("resume");
  o.checkpoint_precision = cli::precision_option(p, "checkpoint-precision", Precision::fp32);
  const std::string format = p.value("checkpoint-format").value_or("llmc");
  if (format != "llmc" && format != "hf")
    throw UsageError("--checkpoint-format: '" + cli::printable(format) + "' is not llmc or hf");
  if (p.given("checkpoint-format") && !o.checkpoint_out) throw UsageError("--checkpoint-format is for --checkpoint-out");
  o.checkpoint_hf = format == "hf";
  if (o.checkpoint_hf && !spec.checkpoint_format().hugging_face())
    throw UsageError("--checkpoint-format hf: this model has no Hugging Face format (GPT-2 and Llama 3 have)");
  if (const auto metrics = p.value("metrics")) o.metrics = *metrics;
  return o;
}

// Two spellings of one value: equal as numbers when both are numbers, else as text.
bool same_value(const std::string& a, const std::string& b) {
  try {
    return cli::parse_number("", a) == cli::parse_number("", b);
  } catch (const UsageError&) {
    return a == b;
  }
}

// --deepspeed-config FILE: its flags join the command line's (apps/deepspeed_config.hpp).
void apply_deepspeed_config(cli::ArgParser& p) {
  const auto file = p.value("deepspeed-config");
  if (!file) return;
  const DeepSpeedFlags config = read_deepspeed_config(*file, DataParallelRanks::world_size());
  std::string applied;
  for (const ConfigFlag& f : config.flags) {
    if (p.given(f.flag)) {
      if (!f.implied && !same_value(*p.value(f.flag), f.value))
        throw UsageError("--" + f.flag + " " + cli::printable(*p.value(f.flag)) + " contradicts " + *file + ": " +
                         f.key + " gives " + f.value);
      continue;
    }
    p.set(f.flag, f.value);
    applied += " --" + f.flag + " " + f.value;
  }
  if (DataParallelRanks::world_rank() != 0) return;
  std::printf("deepspeed config %s:%s\n", file->c_str(),
              applied.empty() ? " (nothing beyond the flags)" : applied.c_str());
  if (!config.ignored.empty()) {
    std::string keys;
    for (const std::string& key : config.ignored) keys += (keys.empty() ? "" : ", ") + key;
    std::fprintf(stderr, "warning: %s: ignored, no equivalent here: %s\n", file->c_str(), keys.c_str());
  }
}

int run_train(const cli::ArgParser& given, RunMeasurements* measurements) {
  cli::ArgParser p = given;
  apply_deepspeed_config(p);
  if constexpr (!sim::kernels_run) {
    // No kernel runs on a simulated machine: there are no values to save, validate or sample.
    for (const char* flag : {"checkpoint-out", "checkpoint-dir", "save-every", "resume", "sample-every"})
      if (p.given(flag)) throw UsageError(std::string("--") + flag + ": a simulation computes no values (no saves, samples)");
    if (p.given("val-every") && p.value("val-every") != "0")
      throw UsageError("--val-every: a simulation computes no values (no validation)");
    p.set("val-every", "0");
  }
  const ModelRequest request = model_request(p);
  const std::unique_ptr<ModelSpec> spec = prepare_model(request);
  RunOptions options = run_options(p, *spec, request);
  options.measurements = measurements;
  return run_training(*spec, options);
}

cli::ArgParser make_eval_parser() {
  cli::ArgParser p("starzero eval");
  p.option("checkpoint", "PATH",
           "llm.c checkpoint (GPT-2 or Llama 3, version 3 fp32 or 5 bf16) or a Hugging Face folder (GPT-2, Llama 3)")
      .option("data", "PATH", "llm.c token shards (.bin: a file, a folder or a glob), records (.jsonl, with "
                              "--tokenizer) or a text file (bytes; tokens with --tokenizer)")
      .option("tokenizer", "FILE", "a Hugging Face tokenizer.json (byte-level BPE, GPT-2 or Llama 3) that encodes a "
                                   "text --data; its vocabulary must be the checkpoint's")
      .option("batch", "B", "sequences per batch")
      .option("seq", "T", "tokens per sequence")
      .option("batches", "K", "number of batches, read sequentially from the start (default 1)")
      .option("precision", "P", "fp32 (default) or bf16");
  cli::add_jsonl_options(p);
  cli::add_session_options(p).flag("help", "show this help");
  return p;
}

int run_eval(const cli::ArgParser& p) {
  for (const char* required : {"checkpoint", "data", "batch", "seq"})
    if (!p.given(required)) throw UsageError(std::string("--") + required + " is required");
  ModelRequest request;
  request.checkpoint = *p.value("checkpoint");
  if (!std::filesystem::exists(*request.checkpoint))
    throw UsageError("--checkpoint: no such file '" + cli::printable(request.checkpoint->string()) + "'");
  request.family = checkpoint_model_family(*request.checkpoint).name;
  request.data = *p.value("data");
  if (const auto tokenizer = p.value("tokenizer")) request.tokenizer = *tokenizer;
  request.seq = int_option(p, "seq", 0, 1);
  request.validation_fraction = 0;  // the whole file is evaluation data
  request.jsonl = cli::jsonl_options(p);
  request.data_progress = cli::jsonl_progress("data");
  EvaluationOptions options;
  options.checkpoint = *request.checkpoint;
  options.batch = int_option(p, "batch", 0, 1);
  options.batches = int_option(p, "batches", 1, 1);
  options.precision = cli::precision_option(p, "precision", Precision::fp32);
  options.session = cli::session_options(p);
  const std::unique_ptr<ModelSpec> spec = prepare_model(request);
  const double loss = evaluate_checkpoint(*spec, options);
  std::printf("eval: %s on %s: mean loss %.6f over %d batches of %dx%d (%s)\n", options.checkpoint.c_str(),
              request.data->c_str(), loss, options.batches, options.batch, *request.seq,
              std::string(precision_name(options.precision)).c_str());
  return 0;
}

}  // namespace

int train_main(int argc, char** argv, RunMeasurements* measurements) {
  cli::ArgParser parser = make_train_parser();
  return run_command({"starzero train", "starzero train [options]"}, parser, argc, argv,
                     [measurements](const cli::ArgParser& p) { return run_train(p, measurements); });
}

int train_main(int argc, char** argv) { return train_main(argc, argv, nullptr); }

int eval_main(int argc, char** argv) {
  cli::ArgParser parser = make_eval_parser();
  return run_command({"starzero eval", "starzero eval --checkpoint PATH --data FILE --batch B --seq T [options]"},
                     parser, argc, argv, run_eval);
}

}  // namespace starzero
