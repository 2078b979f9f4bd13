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
      .option("recompute-window", "W", "  blocks recomputed ahead, W + 1 alive (default 1)")
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
    const std::string recompute =
        cli::parse_choice("recompute", p.value("recompute").value_or("none"), {"none", "selective", "full"});
    g.activations.recompute = recompute == "none"        ? Recompute::none
                              : recompute == "selective" ? Recompute::selective
                                                         : Recompute::full;
    if (p.given("recompute-window")) g.activations.window = int(cli::int_option(p, "recompute-window", 1, 0));
    a.gpt = g;
  } else {
    in.params = count_flag(p, "params");
    if (p.given("recompute") || p.given("recompute-window"))
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

int run_plan(const cli::ArgParser& parser) {
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
