// `starzero plan`: the seeds' ZeRO memory and communication formulas per rank, for a parameter
// count or a GPT config, per stage and data-parallel degree, with offload placements and a fit
// check against given GPU/host memory. All numbers come from offload/planner.hpp (a GPT config
// becomes a model footprint through models/gpt_layout.hpp); this file reads the flags and
// apps/plan_report.cpp prints.
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
#include "models/gpt_layout.hpp"
#include "offload/footprint.hpp"
#include "offload/planner.hpp"

namespace starzero {
namespace {

cli::ArgParser make_parser() {
  cli::ArgParser p("starzero plan");
  p.option("params", "N", "parameter count Ψ: 7e9, 1.5B, 125M, 70B, 7000000000")
      .option("layers", "L", "GPT config (all six together, instead of --params): layers")
      .option("hidden", "C", "  hidden size (channels)")
      .option("heads", "NH", "  attention heads (must divide C)")
      .option("vocab", "V", "  vocabulary (padded to a multiple of 128, like llm.c)")
      .option("seq", "T", "  sequence length (= maxT, sizes the position embedding)")
      .option("batch", "B", "  micro-batch size (activations are per micro-batch)")
      .option("recompute", "MODE", "  none (default), selective or full: what the blocks recompute (as starzero train)")
      .option("recompute-window", "W", "  blocks recomputed or fetched ahead, W + 1 alive (default 1)")
      .option("offload-activations", "WHERE", "  none (default) or cpu: the blocks' kept activations in host memory")
      .option("dp", "LIST", "data-parallel degrees N, e.g. 8 or 1,8,64 (default 1)")
      .option("stage", "S", "ZeRO stage 0..3, or all (default all)")
      .option("precision", "P", "bf16|fp16 (2 bytes) or fp32 (4) for params, grads, activations (default bf16)")
      .option("k", "BYTES", "optimizer state bytes per parameter (default 12: fp32 master + Adam m, v)")
      .flag("fp32-grad-accum", "count an fp32 gradient accumulation buffer (+4Ψ, or +4Ψ/N at stages 2-3)")
      .option("offload-optimizer", "WHERE", "none|cpu|nvme: where the optimizer state lives (default none)")
      .option("offload-params", "WHERE", "none|cpu: parameter shards in host memory (ZeRO-3 only)")
      .option("prefetch-depth", "W", "ZeRO-3 layers all-gathered ahead of the current one (default 1)")
      .option("gpu-mem", "SIZE", "GPU memory per rank for the fit check: 80GB, 24GiB, 80e9")
      .option("host-mem", "SIZE", "host memory per rank for the fit check")
      .flag("json", "print machine-readable JSON on stdout instead of tables")
      .flag("max-model",
            "the largest GPT (layers L, hidden 64·L, heads L, --vocab/--seq/--batch) that fits "
            "--gpu-mem/--host-mem per stage, offload and --recompute mode")
      .flag("help", "show this help");
  return p;
}

const CommandHelp kHelp = {
    "starzero plan",
    "starzero plan (--params N | --layers L --hidden C --heads NH --vocab V --seq T --batch B)\n"
    "                     [--dp LIST] [--stage S] [options]",
    "ZeRO memory and communication per rank (the seeds' formulas): static model states per\n"
    "stage (ZeRO-0 2Ψ+2Ψ+kΨ, ZeRO-1 2Ψ+2Ψ+kΨ/N, ZeRO-2 2Ψ+(2Ψ+kΨ)/N, ZeRO-3 (2Ψ+2Ψ+kΨ)/N),\n"
    "their placement on GPU, host and NVMe under offload, activations and ZeRO-3 temporary\n"
    "layers for a GPT config, communication (2Ψ, or 3Ψ for ZeRO-3) and, given --gpu-mem and/or\n"
    "--host-mem, which stage and offload combinations fit. GB = 1e9 bytes.\n"
    "\n"
    "Flags take `--name value` or `--name=value`. Counts accept K M B T suffixes (1.5B, 125M),\n"
    "sizes KB MB GB TB or KiB MiB GiB TiB (80GB, 24GiB). Bad input: one error line, exit code 2.\n",
    "  starzero plan --params 7e9 --dp 1,8,64\n"
    "  starzero plan --params 70e9 --dp 4 --gpu-mem 80GB\n"
    "  starzero plan --layers 12 --hidden 768 --heads 12 --vocab 50257 --seq 1024 --batch 4 --dp 8\n"};

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
    return gpt_footprint(shape, int(g.batch), g.activations);
  } catch (const std::invalid_argument& e) {
    throw PlanError(e.what());
  }
}

PlanRequest read_args(const cli::ArgParser& p) {
  PlanRequest a;
  PlanInput& in = a.base;

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
    throw UsageError("give --params N or a GPT config (--layers --hidden --heads --vocab --seq --batch)");
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
    in.params = count_flag(p, "params");
    if (p.given("recompute") || p.given("recompute-window") || p.given("offload-activations"))
      throw UsageError("--recompute needs a GPT config (--layers --hidden --heads --vocab --seq --batch)");
  }

  a.dps = p.given("dp") ? cli::parse_count_list("dp", *p.value("dp")) : std::vector<std::int64_t>{1};
  const std::string stage_text = p.value("stage").value_or("all");
  if (stage_text == "all") {
    a.stages = {0, 1, 2, 3};
  } else {
    a.stages = {std::stoi(cli::parse_choice("stage", stage_text, {"0", "1", "2", "3", "all"}))};
  }
  if (auto v = p.value("precision")) {
    in.precision = *precision_from_name(cli::parse_choice("precision", *v, {"bf16", "fp16", "fp32"}));
  }
  if (auto v = p.value("k")) in.k = cli::parse_number("k", *v);
  in.fp32_grad_accum = p.flag_set("fp32-grad-accum");
  if (auto v = p.value("offload-optimizer")) {
    in.offload_optimizer =
        *optimizer_offload_from_name(cli::parse_choice("offload-optimizer", *v, {"none", "cpu", "nvme"}));
  }
  if (auto v = p.value("offload-params")) {
    in.offload_params = *param_offload_from_name(cli::parse_choice("offload-params", *v, {"none", "cpu"}));
  }
  if (in.offload_params == ParamOffload::cpu && !(a.stages.size() == 1 && a.stages[0] == 3)) {
    throw UsageError("--offload-params cpu needs --stage 3 (parameters are sharded only by ZeRO-3)");
  }
  if (auto v = p.value("prefetch-depth")) in.prefetch_depth = cli::parse_count("prefetch-depth", *v);
  if (auto v = p.value("gpu-mem")) {
    a.limits.gpu_bytes = cli::parse_bytes("gpu-mem", *v);
    if (*a.limits.gpu_bytes <= 0) throw UsageError("--gpu-mem: '" + cli::printable(*v) + "' must be > 0");
  }
  if (auto v = p.value("host-mem")) {
    a.limits.host_bytes = cli::parse_bytes("host-mem", *v);
    if (*a.limits.host_bytes <= 0) throw UsageError("--host-mem: '" + cli::printable(*v) + "' must be > 0");
  }
  a.json = p.flag_set("json");
  // After every flag is read: a bad flag is reported before a bad GPT config, as the planner did.
  if (a.gpt) in.model = gpt_model_footprint(*a.gpt);
  return a;
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
int run_max_model(const cli::ArgParser& p) {
  for (const char* flag : {"params", "layers", "hidden", "heads", "stage", "offload-optimizer", "offload-params",
                           "json", "recompute", "recompute-window", "offload-activations"})
    if (p.given(flag)) throw UsageError(std::string("--max-model searches over --") + flag + " itself: leave it out");
  if (!p.given("gpu-mem") && !p.given("host-mem")) throw UsageError("--max-model needs --gpu-mem and/or --host-mem");
  PlanInput base;
  MemoryLimits limits;
  if (auto v = p.value("gpu-mem")) limits.gpu_bytes = cli::parse_bytes("gpu-mem", *v);
  if (auto v = p.value("host-mem")) limits.host_bytes = cli::parse_bytes("host-mem", *v);
  if (auto v = p.value("precision"))
    base.precision = *precision_from_name(cli::parse_choice("precision", *v, {"bf16", "fp16", "fp32"}));
  if (auto v = p.value("k")) base.k = cli::parse_number("k", *v);
  if (auto v = p.value("prefetch-depth")) base.prefetch_depth = cli::parse_count("prefetch-depth", *v);
  const std::vector<std::int64_t> dps =
      p.given("dp") ? cli::parse_count_list("dp", *p.value("dp")) : std::vector<std::int64_t>{1};
  if (dps.size() != 1 || dps[0] < 1) throw UsageError("--max-model takes one --dp N");
  base.dp = dps[0];
  const std::int64_t vocab = p.given("vocab") ? count_flag(p, "vocab") : 50257;
  const std::int64_t seq = p.given("seq") ? count_flag(p, "seq") : 1024;
  const int batch = p.given("batch") ? int(cli::int_option(p, "batch", 1, 1)) : 1;
  if (vocab < 1 || vocab > (1 << 24) || seq < 1 || seq > (1 << 20))
    throw UsageError("--max-model: --vocab in 1..16777216 and --seq in 1..1048576");
  constexpr int kMaxLayers = 1024;
  const ActivationPolicy policies[] = {{Recompute::none, 1},
                                       {Recompute::selective, 1},
                                       {Recompute::full, 1},
                                       {Recompute::none, 1, ActivationOffload::cpu},
                                       {Recompute::selective, 1, ActivationOffload::cpu},
                                       {Recompute::full, 1, ActivationOffload::cpu}};
  std::vector<std::vector<LargestFit>> results;
  for (const ActivationPolicy& policy : policies)
    results.push_back(largest_fitting(
        base, limits, [&](int L) { return gpt_footprint(max_model_shape(L, vocab, seq), batch, policy); }, kMaxLayers));
  std::printf("largest GPT that fits (L layers, hidden 64·L, L heads, vocab %lld, T=%lld, B=%d, %s, dp %lld)%s%s\n",
              (long long)vocab, (long long)seq, batch, std::string(precision_name(base.precision)).c_str(),
              (long long)base.dp,
              limits.gpu_bytes ? (", GPU " + short_number(*limits.gpu_bytes / 1e9) + " GB").c_str() : "",
              limits.host_bytes ? (", host " + short_number(*limits.host_bytes / 1e9) + " GB").c_str() : "");
  std::printf("%-6s %-9s %-9s", "stage", "optimizer", "params");
  for (const ActivationPolicy& policy : policies)
    std::printf(" | %-18s", (std::string(recompute_name(policy.recompute)) +
                             (policy.offload == ActivationOffload::cpu ? " + offload" : ""))
                                .c_str());
  std::printf("\n");
  for (std::size_t i = 0; i < results[0].size(); ++i) {
    const FitOption& o = results[0][i].option;
    std::printf("ZeRO-%-1d %-9s %-9s", o.stage, std::string(offload_name(o.offload_optimizer)).c_str(),
                std::string(offload_name(o.offload_params)).c_str());
    for (const auto& per_policy : results) {
      const LargestFit& fit = per_policy[i];
      const std::string cell =
          fit.size == 0
              ? "none fits"
              : "L=" + std::to_string(fit.size) + " C=" + std::to_string(64 * fit.size) + " " +
                    short_number(double(gpt_footprint(max_model_shape(fit.size, vocab, seq), batch).params) / 1e9) +
                    "B";
      std::printf(" | %-18s", cell.c_str());
    }
    std::printf("\n");
  }
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
