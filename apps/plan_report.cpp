// The `starzero plan` report: formatting, every row computed first, then the human tables or JSON
// (nlohmann-json).
#include "apps/plan_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "offload/footprint.hpp"
#include "offload/step_work.hpp"
#include "sim/step_bound.hpp"

namespace starzero {
namespace {

// ---- Formatting --------------------------------------------------------------------------------

std::string strf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string strf(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string out(n > 0 ? std::size_t(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, args);
  va_end(args);
  return out;
}

std::string with_commas(std::int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

// A whole number `units` shown with `decimals` digits after the point: (26250, 3) -> "26.250".
std::string shift_point(long long units, int decimals) {
  std::string digits = std::to_string(units);
  if (decimals == 0) return digits;
  if (int(digits.size()) <= decimals) digits.insert(0, std::size_t(decimals + 1 - int(digits.size())), '0');
  digits.insert(digits.size() - std::size_t(decimals), ".");
  return digits;
}

constexpr double kMaxExact = 9.0e18;  // llround's range, with margin

// bytes in GB (1e9) with `decimals` digits, ties rounded up (26.25 -> "26.3", as the seeds
// print it; printf would round the exact tie to even, "26.2").
std::string gb_rounded(double bytes, int decimals) {
  const double scale = std::pow(10.0, 9 - decimals);
  const double units = bytes / scale;
  if (!(std::fabs(units) < kMaxExact)) return strf("%.*f", decimals, bytes / 1e9);
  return shift_point(std::llround(units), decimals);
}

// The seeds' table format: "%.1f" from 10 GB up, "%.2f" below.
std::string gb_table(double bytes) { return gb_rounded(bytes, bytes >= 10e9 ? 1 : 2); }

// Exact GB (to the byte), trailing zeros dropped but one decimal kept: "112.0", "29.3125",
// "0.248951808"; zero is "0".
std::string gb_exact(double bytes) {
  if (bytes == 0) return "0";
  if (!(std::fabs(bytes) < kMaxExact)) return strf("%.6g", bytes / 1e9);
  std::string s = shift_point(std::llround(bytes), 9);
  while (s.back() == '0' && s[s.size() - 2] != '.') s.pop_back();
  return s;
}

std::string pad(std::string s, std::size_t width) {
  // Width in characters; "Ψ", "×", "→" and friends are 2-3 bytes but one column.
  std::size_t columns = 0;
  for (unsigned char c : s) columns += (c & 0xC0) != 0x80;
  if (columns < width) s.append(width - columns, ' ');
  return s;
}
std::string rpad(std::string s, std::size_t width) {
  std::size_t columns = 0;
  for (unsigned char c : s) columns += (c & 0xC0) != 0x80;
  if (columns < width) s.insert(0, width - columns, ' ');
  return s;
}

std::string k_text(double k) { return strf("%g", k); }

std::string stage_name(int stage) { return "ZeRO-" + std::to_string(stage); }

// ", optimizer state fraction 0.5" (or auto) when --offload-optimizer-fraction splits the state.
std::string fraction_text(const PlanInput& in) {
  if (in.offload.optimizer == OptimizerOffload::none) return "";
  if (in.offload.optimizer_fraction.automatic) return ", optimizer state fraction auto";
  if (in.offload.optimizer_fraction.value == 1) return "";
  return strf(", optimizer state fraction %g", in.offload.optimizer_fraction.value);
}

// " (F = 0.514)": an option's offloaded share when it is not all of the state.
std::string split_note(const MemoryPlan& plan, OptimizerOffload opt) {
  if (opt == OptimizerOffload::none || plan.optimizer_split.offloaded_params == plan.params) return "";
  return strf(" (F = %.3g)", plan.optimizer_split.fraction());
}

std::string option_name(int stage, OptimizerOffload opt, ParamOffload par) {
  std::string s = stage_name(stage);
  if (opt != OptimizerOffload::none) s += " + offload optimizer " + std::string(offload_name(opt));
  if (par != ParamOffload::none) s += " + offload params " + std::string(offload_name(par));
  return s;
}

// ---- Everything computed before anything is printed (errors leave stdout empty) --------------

// A row's step bound on the --platform machine.
struct RowBound {
  sim::StepWork work;
  sim::ResourceRates rates;
  sim::StepBound bound;
};

struct Row {
  std::int64_t dp = 1;
  int stage = 0;
  MemoryPlan mem;
  CommVolume comm;
  std::optional<RowBound> bound;  // with --platform
};

struct Results {
  std::int64_t params = 0;
  std::vector<Row> rows;        // dp-major, then stage
  std::vector<FitReport> fits;  // one per dp, when limits are given
};

Results compute(const PlanRequest& a) {
  Results r;
  for (std::int64_t dp : a.dps) {
    for (int stage : a.stages) {
      PlanInput in = a.base;
      in.dp = dp;
      in.stage = stage;
      in = resolve_offload_fraction(in, a.auto_gpu_bytes);  // auto: per row, what its GPU holds
      in = resolve_speculative_fraction(in, a.limits.host_bytes);  // and what its host holds
      Row row{dp, stage, plan_memory(in), plan_communication(in), std::nullopt};
      if (a.machine) {
        try {
          RowBound b;
          b.work = plan_step_work(in, a.micro_batches, a.machine->gpus > 0);
          b.rates = planned_rates(*a.machine, in, a.adam_threads);
          b.bound = sim::step_bound(b.work, b.rates);
          row.bound = std::move(b);
        } catch (const std::invalid_argument& e) {
          throw PlanError(e.what());
        }
      }
      r.rows.push_back(std::move(row));
    }
  }
  r.params = r.rows.front().mem.params;
  if (a.limits.gpu_bytes || a.limits.host_bytes) {
    for (std::int64_t dp : a.dps) {
      PlanInput in = a.base;
      in.dp = dp;
      in.stage = 0;
      in.offload.optimizer = OptimizerOffload::none;
      in.offload.params = ParamOffload::none;
      r.fits.push_back(check_fit(in, a.limits));
    }
  }
  return r;
}

const Row& row_at(const Results& r, std::int64_t dp, int stage) {
  for (const Row& row : r.rows) {
    if (row.dp == dp && row.stage == stage) return row;
  }
  throw std::logic_error("missing row");
}

// ---- Human output ----------------------------------------------------------------------------------

std::string formula(int stage, const PlanInput& in) {
  const std::string p = std::to_string(precision_bytes(in.precision)) + "Ψ";
  const std::string g = in.fp32_grad_accum ? p + " + 4Ψ" : p;
  const std::string k = k_text(in.k) + "Ψ";
  switch (stage) {
    case 0: return p + " + " + (in.fp32_grad_accum ? "(" + g + ")" : g) + " + " + k;
    case 1: return p + " + " + (in.fp32_grad_accum ? "(" + g + ")" : g) + " + " + k + "/N";
    case 2: return p + " + (" + g + " + " + k + ")/N";
    default: return "(" + p + " + " + g + " + " + k + ")/N";
  }
}

// The recommendation for one dp, in words.
std::string fit_verdict(const FitReport& f) {
  const auto& plain3 = f.min_dp_without_offload[3];
  const std::string more_gpus = plain3 ? "plain ZeRO-3 fits from dp " + std::to_string(*plain3)
                                       : "plain ZeRO-3 fits at no dp (what remains per rank is too large)";
  if (!f.recommended) {
    return "nothing fits at dp " + std::to_string(f.dp) + ", not even with offload; " + more_gpus + ".";
  }
  const FitOption& o = f.options[*f.recommended];
  const std::string where = "GPU " + gb_exact(o.plan.gpu_total()) + " GB" +
                            (o.offloaded() ? ", host " + gb_exact(o.plan.host_total()) + " GB" : "") +
                            (o.plan.nvme_total() > 0 ? ", NVMe " + gb_exact(o.plan.nvme_total()) + " GB" : "") +
                            " per rank";
  if (!o.offloaded()) return "fits without offload: " + stage_name(o.stage) + " (" + where + ").";
  return "does not fit without offload at dp " + std::to_string(f.dp) + "; use " +
         option_name(o.stage, o.offload.optimizer, o.offload.params) + " (" + where +
         "),\n             or more GPUs: " + more_gpus + ".";
}

// The header and the seeds' table of static GPU memory.
void print_header(const PlanRequest& a, const Results& r, std::string& out) {
  const PlanInput& in = a.base;
  const int prec = precision_bytes(in.precision);
  const bool offload = in.offload.anything_offloaded();
  out += "starzero plan: ZeRO memory and communication per rank\n";
  if (a.gpt) {
    const GptArgs& g = *a.gpt;
    const NamedCount largest = in.model->largest_layer();
    out +=
        strf("model: GPT%s L=%lld C=%lld NH=%lld V=%lld (padded Vp=%lld) T=%lld B=%lld\n",
             g.preset.empty() ? "" : (" " + g.preset + ":").c_str(), (long long)g.layers, (long long)g.hidden,
             (long long)g.heads, (long long)g.vocab, (long long)g.padded_vocab(), (long long)g.seq, (long long)g.batch);
    out += "       Ψ = Vp·C + T·C + L·(12C² + 13C) + 2C = " + with_commas(r.params) +
           " parameters; largest layer: " + largest.name + " (" + with_commas(largest.count) + ")\n";
  } else if (a.llama) {
    const LlamaArgs& l = *a.llama;
    const NamedCount largest = in.model->largest_layer();
    out +=
        strf("model: Llama 3 %s: L=%lld C=%lld NH=%lld NKV=%lld H=%lld V=%lld maxT=%lld, T=%lld B=%lld\n",
             l.preset.c_str(), (long long)l.layers, (long long)l.channels, (long long)l.heads, (long long)l.kv_heads,
             (long long)l.ffn_hidden, (long long)l.vocab, (long long)l.max_seq, (long long)l.seq, (long long)l.batch);
    out += "       Ψ = 2·V·C + C + L·(2C + Q·C + C² + 3·C·H), Q = (NH + 2·NKV)·C/NH = " +
           std::to_string(l.qkv_channels()) + ": " + with_commas(r.params) +
           " parameters;\n       largest layer: " + largest.name + " (" + with_commas(largest.count) + ")\n";
  } else {
    out += "model: Ψ = " + with_commas(r.params) + " parameters\n";
  }
  out += strf("precision: %s parameters, gradients and activations (%d bytes); optimizer state k = %s bytes/param\n",
              std::string(precision_name(in.precision)).c_str(), prec, k_text(in.k).c_str());
  if (in.fp32_grad_accum) out += "fp32 gradient accumulation buffer: counted under gradients\n";
  if (offload) {
    out += "offload: optimizer " + std::string(offload_name(in.offload.optimizer)) + ", parameters " +
           std::string(offload_name(in.offload.params)) + fraction_text(in) + "\n";
  }
  out += "GB = 1e9 bytes; N = data-parallel degree (dp); all memory is per rank.\n\n";

  // The seeds' table.
  out += offload ? "Static GPU memory per rank, GB (model states left on the GPU after offload):\n"
                 : "Static GPU memory per rank, GB (model states: parameters + gradients + optimizer state):\n";
  out += "  " + rpad("dp", 6);
  for (int s : a.stages) out += rpad(stage_name(s), 9);
  out += "\n";
  for (std::int64_t dp : a.dps) {
    out += "  " + rpad(std::to_string(dp), 6);
    for (int s : a.stages) out += rpad(gb_table(row_at(r, dp, s).mem.gpu.total()), 9);
    out += "\n";
  }
  out += "  formulas (bytes):";
  bool first = true;
  for (int s : a.stages) {
    out += (first ? " " : "\n                    ") + pad(stage_name(s), 8) + formula(s, in);
    first = false;
  }
  out += "\n\n";
}

// The model's --recompute/--offload-activations policy (GPT or Llama 3 alike); null without a
// model shape.
const ActivationPolicy* activation_policy(const PlanRequest& a) {
  return a.gpt ? &a.gpt->activations : a.llama ? &a.llama->activations : nullptr;
}

// Under optimizer offload with a fraction: each row's split of the optimizer state, the layers
// (the footprint's, 0 = the embedding) and bytes per rank on each side.
void print_optimizer_split(const PlanRequest& a, const Results& r, std::string& out) {
  const PlanInput& in = a.base;
  if (!in.offload.optimizer_fraction.automatic && in.offload.optimizer_fraction.value == 1) return;
  out += "Optimizer state split (--offload-optimizer-fraction " +
         (in.offload.optimizer_fraction.automatic
              ? "auto: as much on the GPU as " + gb_exact(*a.auto_gpu_bytes) + " GB holds beside the rest, less " +
                    strf("%g", 100 * kAutoGpuMargin) + " %"
              : strf("%g", in.offload.optimizer_fraction.value)) +
         "): the last layers' state offloaded (CPU AdamW),\nthe first layers' on the GPU (device AdamW); "
         "GB per rank:\n";
  const std::string where = in.offload.optimizer == OptimizerOffload::nvme ? "NVMe" : "host";
  out += "  " + rpad("dp", 6) + "  " + pad("stage", 8) + rpad("F", 8) + rpad("GPU GB", 12) + rpad(where + " GB", 12) +
         "  layers\n";
  for (const Row& row : r.rows) {
    const OptimizerSplit& split = row.mem.optimizer_split;
    const double on_host =
        in.offload.optimizer == OptimizerOffload::nvme ? row.mem.nvme.optimizer : row.mem.host.optimizer;
    out += "  " + rpad(std::to_string(row.dp), 6) + "  " + pad(stage_name(row.stage), 8) +
           rpad(strf("%.4g", split.fraction()), 8) + rpad(gb_exact(row.mem.gpu.optimizer), 12) +
           rpad(gb_exact(on_host), 12) + "  " + describe_split(split, where) + "\n";
  }
}

// Under --speculative-update: each row's speculative layers (a second set of optimizer state in
// host memory) and those left synchronous.
void print_speculative_split(const PlanRequest& a, const Results& r, std::string& out) {
  const PlanInput& in = a.base;
  if (!in.offload.speculative_update || in.offload.optimizer != OptimizerOffload::cpu) return;
  out += "Speculative update (--speculative-fraction " +
         (in.offload.speculative_fraction.automatic
              ? "auto: as much as " + gb_exact(*a.limits.host_bytes) + " GB of host holds"
              : strf("%g", in.offload.speculative_fraction.value)) +
         "):\nthe last CPU-updated layers' AdamW runs during the backward (a second set of optimizer state\n"
         "on the host); the other CPU layers' waits for the norm:\n";
  out += "  " + rpad("dp", 6) + "  " + pad("stage", 8) + rpad("F", 8) + rpad("host GB", 16) + "  layers\n";
  for (const Row& row : r.rows) {
    const OptimizerSplit& split = row.mem.speculative_split;
    out += "  " + rpad(std::to_string(row.dp), 6) + "  " + pad(stage_name(row.stage), 8) +
           rpad(strf("%.4g", split.fraction()), 8) + rpad(gb_exact(row.mem.host_total()), 16) + "  " +
           describe_speculative_split(split, row.mem.optimizer_split) + "\n";
  }
}

// Breakdown per dp, stages as columns.
void print_breakdown(const PlanRequest& a, const Results& r, std::string& out) {
  const PlanInput& in = a.base;
  const bool offload = in.offload.anything_offloaded();
  const bool any_nvme = in.offload.optimizer == OptimizerOffload::nvme;
  const ActivationPolicy* policy = activation_policy(a);
  std::string activations_label;
  if (policy) {
    const std::int64_t batch = a.gpt ? a.gpt->batch : a.llama->batch, seq = a.gpt ? a.gpt->seq : a.llama->seq;
    const bool all_kept = policy->recompute == Recompute::none && policy->offload == ActivationOffload::none;
    activations_label = strf(
        "      activations (B=%lld, T=%lld%s%s%s)", (long long)batch, (long long)seq,
        policy->recompute == Recompute::none ? "" : strf(", recompute %s", recompute_name(policy->recompute)).c_str(),
        all_kept ? "" : strf(", window %d", policy->window).c_str(), all_kept && a.llama ? ", all kept" : "");
  }
  const bool activations_offloaded = policy && policy->offload == ActivationOffload::cpu;
  // Columns as wide as the widest figure of any row, plus two blanks (a host total of a 70B model
  // in exact GB is 14 characters: with a fixed width the columns ran together).
  std::size_t widest = 0;
  for (const Row& row : r.rows) {
    const MemoryPlan& m = row.mem;
    for (double v : {m.gpu.params, m.gpu.grads, m.gpu.optimizer, m.gpu.total(), m.activations.value_or(0.0),
                     m.temporaries.value_or(0.0), m.grads_in_flight.value_or(0.0), m.gpu_total(), m.host.params,
                     m.host.grads, m.host.optimizer, m.host_total(), m.host_activations, m.nvme_total(),
                     m.offload_transfer_bytes})
      widest = std::max(widest, gb_exact(v).size());
  }
  const std::size_t label_w = std::max<std::size_t>(34, activations_label.size() + 2),
                    col_w = std::max<std::size_t>(14, widest + 2);
  for (std::int64_t dp : a.dps) {
    out += "Breakdown at dp " + std::to_string(dp) + ", GB (exact):\n";
    out += "  " + pad("", label_w);
    for (int s : a.stages) out += rpad(stage_name(s), col_w);
    out += "\n";
    auto line = [&](const std::string& label, auto&& value) {
      out += "  " + pad(label, label_w);
      for (int s : a.stages) out += rpad(value(row_at(r, dp, s).mem), col_w);
      out += "\n";
    };
    line("GPU   parameters", [](const MemoryPlan& m) { return gb_exact(m.gpu.params); });
    line("      gradients", [](const MemoryPlan& m) { return gb_exact(m.gpu.grads); });
    line("      optimizer state", [](const MemoryPlan& m) { return gb_exact(m.gpu.optimizer); });
    line("      model states", [](const MemoryPlan& m) { return gb_exact(m.gpu.total()); });
    if (in.model) {
      line(activations_label, [](const MemoryPlan& m) { return gb_exact(*m.activations); });
      const bool fetched =
          in.offload.params == ParamOffload::cpu && std::find(a.dps.begin(), a.dps.end(), 1) != a.dps.end();
      line(strf(fetched ? "      ZeRO-3 full layers / fetched (W+1=%lld)" : "      ZeRO-3 full layers (W+1=%lld)",
                (long long)(in.prefetch_depth + 1)),
           [](const MemoryPlan& m) { return gb_exact(*m.temporaries); });
      if (fetched && in.offload.optimizer != OptimizerOffload::none)
        line(strf("      gradients in flight (G=%lld)", (long long)in.grad_window),
             [](const MemoryPlan& m) { return gb_exact(*m.grads_in_flight); });
      if (in.cudnn_attention)
        line("      cuDNN attention workspace (estimate)",
             [](const MemoryPlan& m) { return gb_exact(m.attention_workspace); });
      line("      total", [](const MemoryPlan& m) { return gb_exact(m.gpu_total()); });
    }
    if (activations_offloaded)
      line("host  activations (offloaded)", [](const MemoryPlan& m) { return gb_exact(m.host_activations); });
    if (offload) {
      line("host  parameters", [](const MemoryPlan& m) { return gb_exact(m.host.params); });
      line("      gradients (staging)", [](const MemoryPlan& m) { return gb_exact(m.host.grads); });
      line("      optimizer state", [](const MemoryPlan& m) { return gb_exact(m.host.optimizer); });
      line("      total", [](const MemoryPlan& m) { return gb_exact(m.host_total()); });
      if (any_nvme) line("NVMe  optimizer state", [](const MemoryPlan& m) { return gb_exact(m.nvme_total()); });
      line("host<->GPU traffic per step", [](const MemoryPlan& m) { return gb_exact(m.offload_transfer_bytes); });
    } else {
      line(activations_offloaded ? "      total" : "host  total (no offload)",
           [](const MemoryPlan& m) { return gb_exact(m.host_total()); });
      if (activations_offloaded)
        line("host<->GPU traffic per step", [](const MemoryPlan& m) { return gb_exact(m.offload_transfer_bytes); });
    }
    out += "\n";
  }
}

// Notes on what is and is not counted.
void print_notes(const PlanRequest& a, const Results& r, std::string& out) {
  const PlanInput& in = a.base;
  const int prec = precision_bytes(in.precision);
  if (a.gpt) {
    const double act = *r.rows.front().mem.activations;
    out += "Activations: " + gb_exact(act) + " GB per micro-batch: what starzero's GPT allocates with --recompute " +
           recompute_name(a.gpt->activations.recompute) +
           " (the blocks' kept activations,\nrecomputation slots, two slots of activation gradients, logits/probs; "
           "no T×T attention matrix;\ndocs/activation-memory.md). ZeRO does not shard activations: every rank holds "
           "its own\nmicro-batch's, at every stage and dp.\n";
  } else if (a.llama) {
    const LlamaArgs& l = *a.llama;
    const double act = *r.rows.front().mem.activations;
    out += "Activations: " + gb_exact(act) +
           " GB per micro-batch: what starzero's Llama 3 allocates with --recompute " +
           recompute_name(l.activations.recompute) + "\n(docs/llama.md, \"Activation memory\"). ";
    out += "ZeRO does not shard activations: every rank holds its own\nmicro-batch's, at every stage and dp.\n";
  } else {
    out +=
        "Not included: activations (ZeRO does not shard them; each rank holds its own micro-batch's) and\n"
        "ZeRO-3's temporary full layers; give a GPT config (--layers --hidden --heads --vocab --seq --batch)\n"
        "or a --preset to count them.\n";
  }
  const ActivationPolicy* policy = activation_policy(a);
  if (policy && policy->offload == ActivationOffload::cpu)
    out += "Activation offload: the kept activations of all blocks but the last W+1 (" +
           gb_exact(r.rows.front().mem.host_activations) +
           " GB) live in pinned host memory\nand cross the bus twice per micro-batch; W+1 blocks of them "
           "stay on the GPU.\n";
  if (in.model) {
    const NamedCount largest = in.model->largest_layer();
    out += "ZeRO-3 full layers: (W+1) × largest layer (" + largest.name + ", " + with_commas(largest.count) +
           " params) × " + std::to_string(prec) + " bytes,\ngathered for compute and prefetch; 0 at dp 1 " +
           "without parameter offload (the shard is the whole model).\n";
  }
  if (in.offload.optimizer != OptimizerOffload::none) {
    out += std::string("Optimizer offload: the optimizer state lives in ") +
           (in.offload.optimizer == OptimizerOffload::cpu ? "host memory" : "NVMe") +
           ";\nhost memory also holds the gradient shard that comes down and the updated parameter shard\n"
           "that goes up (" +
           std::to_string(prec) + "Ψ/N bytes each; " + std::to_string(prec) +
           "Ψ at ZeRO-0), the ZeRO-Offload minimum transfer.\n";
    print_optimizer_split(a, r, out);
    print_speculative_split(a, r, out);
  }
  if (in.offload.params == ParamOffload::cpu) {
    out +=
        "Parameter offload: the ZeRO-3 parameter shard lives in host memory; the GPU keeps only the\n"
        "full layers being computed and prefetched. At dp 1 (any stage) the whole model lives there and\n"
        "the same window of layers is fetched to the GPU, the device copy dropped after use.\n";
    if (in.offload.optimizer != OptimizerOffload::none)
      out += "With the optimizer offloaded too, at dp 1 the full gradients live in host memory: each layer's\n"
             "comes to the GPU for its backward (zeroed there, or fetched back for a later micro-batch) and\n"
             "goes home after it; at most G = " + std::to_string(in.grad_window) +
             " (the gradient window) × largest layer are on the GPU.\n";
  }
  out +=
      "Never counted, and left however large dp gets: the full gradient of the layer being\n"
      "reduce-scattered (ZeRO-2/3), communication buckets, kernel workspaces,\n"
      "the CUDA context and allocator fragmentation.\n\n";
}

// Communication per rank and step, and the exact ring figures.
void print_communication(const PlanRequest& a, const Results& r, std::string& out) {
  const PlanInput& in = a.base;
  const int prec = precision_bytes(in.precision);
  const std::size_t col_w = 14;
  out += strf("Communication per rank per step (%s: %d bytes per element):\n",
              std::string(precision_name(in.precision)).c_str(), prec);
  const std::size_t what_w = 58;
  for (int s : a.stages) {
    const CommVolume& c = row_at(r, a.dps.front(), s).comm;
    std::string what;
    switch (s) {
      case 0: what = "all-reduce of gradients"; break;
      case 1:
      case 2: what = "reduce-scatter of gradients + all-gather of parameters"; break;
      default: what = "all-gather fwd + all-gather bwd + reduce-scatter grads"; break;
    }
    out += "  " + pad(stage_name(s), 8) + pad(what, what_w) + std::to_string(c.psi_multiple) +
           "Ψ = " + with_commas(std::llround(c.elements)) + " elements = " + gb_exact(c.bytes) + " GB\n";
  }
  if (a.stages.size() > 1) {
    out += "  ZeRO-1/2 move the same as DDP; ZeRO-3 moves 1.5× (its optimizer step needs none).\n";
  }
  out += "  Exact ring figures, × (N-1)/N, GB:\n";
  out += "  " + rpad("dp", 6);
  for (int s : a.stages) out += rpad(stage_name(s), col_w);
  out += "\n";
  for (std::int64_t dp : a.dps) {
    out += "  " + rpad(std::to_string(dp), 6);
    for (int s : a.stages) out += rpad(gb_exact(row_at(r, dp, s).comm.ring_bytes), col_w);
    if (dp == 1) out += "   (N = 1: no collectives)";
    out += "\n";
  }
}

// Which stage and offload combinations fit the given memory, per dp.
void print_fit_check(const PlanRequest& a, const Results& r, std::string& out) {
  const PlanInput& in = a.base;
  out += "\nFit check per rank: GPU " +
         (a.limits.gpu_bytes ? gb_exact(*a.limits.gpu_bytes) + " GB" : std::string("not limited")) + ", host " +
         (a.limits.host_bytes ? gb_exact(*a.limits.host_bytes) + " GB" : std::string("not limited")) +
         ", NVMe not limited.\n";
  out += in.model ? "  GPU figures include activations and ZeRO-3 full layers.\n"
                  : "  GPU figures are model states only (no model shape: activations and ZeRO-3 full layers "
                    "unknown).\n";
  for (const FitReport& f : r.fits) {
    out += "  dp " + std::to_string(f.dp) + ":\n";
    // Each number column as wide as its widest figure (at least 12), two blanks between columns.
    std::size_t gpu_w = 12, host_w = 12, nvme_w = 12;
    for (const FitOption& o : f.options) {
      gpu_w = std::max(gpu_w, gb_exact(o.plan.gpu_total()).size());
      host_w = std::max(host_w, gb_exact(o.plan.host_total()).size());
      nvme_w = std::max(nvme_w, gb_exact(o.plan.nvme_total()).size());
    }
    out += "    " + pad("option", 52) + rpad("GPU GB", gpu_w + 2) + rpad("host GB", host_w + 2) +
           rpad("NVMe GB", nvme_w + 2) + "  fits\n";
    for (const FitOption& o : f.options) {
      std::string verdict = "yes";
      if (!o.fits()) {
        verdict = std::string("no (") + (o.fits_gpu ? "" : "GPU") + (!o.fits_gpu && !o.fits_host ? ", " : "") +
                  (o.fits_host ? "" : "host") + ")";
      }
      out += "    " +
             pad(option_name(o.stage, o.offload.optimizer, o.offload.params) + split_note(o.plan, o.offload.optimizer),
                 52) +
             rpad(gb_exact(o.plan.gpu_total()), gpu_w + 2) + rpad(gb_exact(o.plan.host_total()), host_w + 2) +
             rpad(gb_exact(o.plan.nvme_total()), nvme_w + 2) + "  " + verdict + "\n";
    }
    out += "    verdict: " + fit_verdict(f) + "\n";
  }
  out += "  minimum dp at which each stage fits without offload:\n";
  const FitReport& f0 = r.fits.front();
  for (int s = 0; s <= 3; ++s) {
    out += "    " + pad(stage_name(s), 8);
    if (const auto& m = f0.min_dp_without_offload[s]) {
      out += "dp " + std::to_string(*m);
    } else {
      // What stays per rank however large dp gets.
      PlanInput plain = in;
      plain.stage = s;
      plain.offload.optimizer = OptimizerOffload::none;
      plain.offload.params = ParamOffload::none;
      out += "never: at least " + gb_exact(gpu_floor_bytes(plain)) + " GB per rank stay on the GPU at any dp";
    }
    out += "\n";
  }
}

// With --platform: each row's step bound, the resources as columns, the binding one starred.
void print_step_bound(const PlanRequest& a, const Results& r, std::string& out) {
  const sim::MachineSpec& m = *a.machine;
  const RowBound& first = *r.rows.front().bound;
  const sim::ResourceRates& rates = first.rates;
  out += strf("\nStep bound per rank and step (%s) on %s: %d CPU cores, %d GPU(s)\n",
              a.micro_batches == 1 ? "one micro-batch" : strf("%d micro-batches", a.micro_batches).c_str(),
              m.name.c_str(), m.cpus, m.gpus);
  out += "  rates: " + rates.source + ":\n    " + rates.compute_device + " compute " +
         strf("%.4g TFLOP/s", rates.compute_flops_per_s / 1e12);
  if (a.base.offload.optimizer != OptimizerOffload::none)
    out += strf(", CPU AdamW %.4g GB/s (%d threads)", rates.adam_bytes_per_s / 1e9, rates.adam_threads);
  if (m.gpus > 0)
    out += strf(", PCIe %.4g GB/s host->GPU, %.4g GB/s GPU->host", rates.host_to_gpu_Bps / 1e9,
                rates.gpu_to_host_Bps / 1e9);
  if (a.base.offload.optimizer == OptimizerOffload::nvme)
    out += strf(", disk %.4g GB/s read, %.4g GB/s write", rates.disk_read_Bps / 1e9, rates.disk_write_Bps / 1e9);
  out += "\n";
  if (first.work.compute_flops) {
    const double tokens =
        a.gpt ? double(a.gpt->batch) * double(a.gpt->seq) : double(a.llama->batch) * double(a.llama->seq);
    out += strf(
        "  compute: %.4g FLOP per micro-batch, %.3gΨ per token: the matmuls and attention of the model's\n"
        "  tasks, recomputation included\n",
        *first.work.compute_flops / a.micro_batches, *first.work.compute_flops / a.micro_batches / tokens /
                                                           double(r.params));
    // On a GPU the time is the kernels' by cost class, not the FLOPs at the rate above.
    if (first.bound.compute_by_class)
      out += "  GPU compute per step by cost class (docs/sim.md, \"GPU cost classes\"): " +
             sim::gpu_class_text(*first.bound.compute_by_class) + "\n";
  } else {
    out += "  compute: unknown without a model shape (--layers ... or --preset): its time is left out\n";
  }
  const std::size_t col_w = 16;
  out += "  " + rpad("dp", 6) + "  " + pad("stage", 8);
  for (sim::Resource res : sim::kResources) out += rpad(sim::resource_label(res, rates.compute_device), col_w);
  out += "  bound\n";
  for (const Row& row : r.rows) {
    const sim::StepBound& b = row.bound->bound;
    out += "  " + rpad(std::to_string(row.dp), 6) + "  " + pad(stage_name(row.stage), 8);
    for (const sim::ResourceTime& t : b.resources)
      out += rpad(sim::seconds_text(t.seconds) + (b.binding == t.resource ? "*" : " "), col_w);
    out += "  " + sim::seconds_text(b.bound_s()) +
           (b.binding ? " (" + sim::resource_label(*b.binding, b.compute_device) + ")" : std::string()) + "\n";
  }
  out +=
      "  (*: the binding resource. No schedule makes a step shorter than its bound; a run's summary\n"
      "  prints its efficiency, bound / steady step. docs/sim.md, \"Step bound\")\n";
}

void print_human(const PlanRequest& a, const Results& r, std::string& out) {
  print_header(a, r, out);
  print_breakdown(a, r, out);
  print_notes(a, r, out);
  print_communication(a, r, out);
  if (a.machine) print_step_bound(a, r, out);
  if (!r.fits.empty()) print_fit_check(a, r, out);
}

// ---- JSON output (nlohmann::ordered_json: keys in the order written here) -------------------------

using Json = nlohmann::ordered_json;

// A figure: null when not finite; a whole number a double holds exactly as an integer (byte
// counts print as 26250000000, not 26250000000.0); any other value as the double.
Json json_number(double v) {
  if (!std::isfinite(v)) return nullptr;
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) return std::int64_t(v);
  return v;
}
Json json_number(std::optional<double> v) { return v ? json_number(*v) : Json(nullptr); }
Json json_or_null(bool present, std::int64_t v) { return present ? Json(v) : Json(nullptr); }

Json json_split(const ByteSplit& s) {
  return {{"params", json_number(s.params)},
          {"grads", json_number(s.grads)},
          {"optimizer", json_number(s.optimizer)},
          {"total", json_number(s.total())}};
}

Json json_largest_layer(const PlanInput& in) {
  const NamedCount largest = in.model->largest_layer();
  return {{"name", largest.name}, {"params", largest.count}};
}

// "model": Ψ and the shape the plan was given (GPT or Llama 3).
Json json_model(const PlanRequest& a, const Results& r) {
  const PlanInput& in = a.base;
  Json gpt = nullptr, llama = nullptr;
  if (a.gpt) {
    const GptArgs& g = *a.gpt;
    gpt = {{"layers", g.layers},
           {"hidden", g.hidden},
           {"heads", g.heads},
           {"vocab", g.vocab},
           {"padded_vocab", g.padded_vocab()},
           {"seq", g.seq},
           {"batch", g.batch},
           {"activation_elements", in.model->activation_elements()},
           {"preset", g.preset.empty() ? Json(nullptr) : Json(g.preset)},
           {"largest_layer", json_largest_layer(in)}};
  }
  if (a.llama) {
    const LlamaArgs& l = *a.llama;
    llama = {{"preset", l.preset},
             {"layers", l.layers},
             {"channels", l.channels},
             {"heads", l.heads},
             {"kv_heads", l.kv_heads},
             {"ffn_hidden", l.ffn_hidden},
             {"vocab", l.vocab},
             {"max_seq", l.max_seq},
             {"seq", l.seq},
             {"batch", l.batch},
             {"activation_elements", in.model->activation_elements()},
             {"largest_layer", json_largest_layer(in)}};
  }
  return {{"params", json_number(double(r.params))}, {"gpt", gpt}, {"llama", llama}};
}

// A fraction flag: "auto" or its value.
Json json_fraction(const OffloadFraction& f) { return f.automatic ? Json("auto") : json_number(f.value); }

// "settings": the flags that shaped every row.
Json json_settings(const PlanRequest& a) {
  const PlanInput& in = a.base;
  return {{"precision", precision_name(in.precision)},
          {"precision_bytes", precision_bytes(in.precision)},
          {"k", json_number(in.k)},
          {"fp32_grad_accum", in.fp32_grad_accum},
          {"attention", in.cudnn_attention ? "cudnn" : "own"},
          {"offload_optimizer", offload_name(in.offload.optimizer)},
          {"offload_optimizer_fraction", json_fraction(in.offload.optimizer_fraction)},
          {"speculative_update", in.offload.speculative_update},
          {"speculative_fraction", json_fraction(in.offload.speculative_fraction)},
          {"offload_params", offload_name(in.offload.params)},
          {"prefetch_depth", in.prefetch_depth},
          {"grad_window", in.grad_window},
          {"micro_batches", a.micro_batches},
          {"bytes_unit", "byte"}};
}

// A row's bound: sim::bound_json_fields' fields (JSON texts) as values.
Json json_bound(const RowBound& b) {
  Json bound = Json::object();
  for (const auto& [key, value] : sim::bound_json_fields(b.bound, b.work, b.rates, std::nullopt))
    bound[key] = Json::parse(value);
  return bound;
}

// One row of "plans": a configuration's placement, communication and bound.
Json json_plan_row(const Row& row) {
  const MemoryPlan& m = row.mem;
  const OptimizerSplit& opt = m.optimizer_split;
  const OptimizerSplit& spec = m.speculative_split;
  const Json gpu = {{"params", json_number(m.gpu.params)},
                    {"grads", json_number(m.gpu.grads)},
                    {"optimizer", json_number(m.gpu.optimizer)},
                    {"static", json_number(m.gpu.total())},
                    {"activations", json_number(m.activations)},
                    {"temporaries", json_number(m.temporaries)},
                    {"grads_in_flight", json_number(m.grads_in_flight)},
                    {"attention_workspace", json_number(m.attention_workspace)},
                    {"total", json_number(m.gpu_total())}};
  const Json optimizer_split = {{"fraction", json_number(opt.fraction())},
                                {"offloaded_params", json_number(double(opt.offloaded_params))},
                                {"device_params", json_number(double(opt.device_params()))},
                                {"layers", opt.layers},
                                {"first_offloaded_layer", json_or_null(opt.layers > 0, opt.first_offloaded)}};
  const Json speculative_split = {{"fraction", json_number(spec.fraction())},
                                  {"speculative_params", json_number(double(spec.offloaded_params))},
                                  {"first_speculative_layer", json_or_null(spec.layers > 0, spec.first_offloaded)}};
  const Json communication = {{"psi_multiple", row.comm.psi_multiple},
                              {"elements", json_number(row.comm.elements)},
                              {"bytes", json_number(row.comm.bytes)},
                              {"ring_elements", json_number(row.comm.ring_elements)},
                              {"ring_bytes", json_number(row.comm.ring_bytes)}};
  return {{"dp", row.dp},
          {"stage", row.stage},
          {"static", json_split(m.seeds)},
          {"gpu", gpu},
          {"host", json_split(m.host)},
          {"host_activations", json_number(m.host_activations)},
          {"nvme", json_split(m.nvme)},
          {"offload_transfer_bytes", json_number(m.offload_transfer_bytes)},
          {"optimizer_split", optimizer_split},
          {"speculative_split", speculative_split},
          {"communication", communication},
          {"bound", row.bound ? json_bound(*row.bound) : Json(nullptr)}};
}

// Where an option or the recommendation puts the state.
Json json_placement(const FitOption& o) {
  return {{"stage", o.stage},
          {"offload_optimizer", offload_name(o.offload.optimizer)},
          {"offload_params", offload_name(o.offload.params)}};
}

// One dp of "fit": which options fit the limits, and the recommendation.
Json json_fit_report(const FitReport& f) {
  Json options = Json::array();
  for (const FitOption& o : f.options) {
    Json option = json_placement(o);
    option["gpu_total"] = json_number(o.plan.gpu_total());
    option["host_total"] = json_number(o.plan.host_total());
    option["nvme_total"] = json_number(o.plan.nvme_total());
    option["fits_gpu"] = o.fits_gpu;
    option["fits_host"] = o.fits_host;
    option["fits"] = o.fits();
    options.push_back(std::move(option));
  }
  Json min_dp = Json::array();
  for (const std::optional<std::int64_t>& m : f.min_dp_without_offload) min_dp.push_back(m ? Json(*m) : Json(nullptr));
  return {{"dp", f.dp},
          {"options", options},
          {"recommended", f.recommended ? json_placement(f.options[*f.recommended]) : Json(nullptr)},
          {"min_dp_without_offload", min_dp}};
}

Json json_fit(const PlanRequest& a, const Results& r) {
  if (r.fits.empty()) return nullptr;
  Json per_dp = Json::array();
  for (const FitReport& f : r.fits) per_dp.push_back(json_fit_report(f));
  return {{"gpu_mem", json_number(a.limits.gpu_bytes)},
          {"host_mem", json_number(a.limits.host_bytes)},
          {"per_dp", per_dp}};
}

std::string report_json(const PlanRequest& a, const Results& r) {
  Json plans = Json::array();
  for (const Row& row : r.rows) plans.push_back(json_plan_row(row));
  const Json report = {{"model", json_model(a, r)},
                       {"settings", json_settings(a)},
                       {"platform", a.machine ? Json(a.machine->name) : Json(nullptr)},
                       {"plans", plans},
                       {"fit", json_fit(a, r)}};
  // A name that is not UTF-8 (a --platform folder's) comes out with U+FFFD, not as an exception.
  return report.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace

std::string plan_report_text(const PlanRequest& request) {
  std::string out;
  print_human(request, compute(request), out);
  return out;
}

std::string plan_report_json(const PlanRequest& request) { return report_json(request, compute(request)); }

}  // namespace starzero
