#include "apps/cli.hpp"

#include <unistd.h>

#include <cstdio>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <system_error>

#include "runtime/sim.hpp"

namespace starzero::cli {
namespace {

std::string flag_label(std::string_view flag) {
  return flag.starts_with("--") ? std::string(flag) : "--" + std::string(flag);
}

[[noreturn]] void bad_value(std::string_view flag, std::string_view text, std::string_view why) {
  throw UsageError(flag_label(flag) + ": '" + printable(text) + "' " + std::string(why));
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A decimal number split into mantissa ("1.5"), exponent (from "e-3", 0 if none) and the
// characters after it (the suffix). Only plain unsigned decimal syntax is accepted.
struct SplitNumber {
  std::string_view mantissa;
  int exponent = 0;
  std::string_view suffix;
};

std::optional<SplitNumber> split_number(std::string_view s) {
  std::size_t i = 0;
  std::size_t digits = 0;
  while (i < s.size() && is_digit(s[i])) ++i, ++digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && is_digit(s[i])) ++i, ++digits;
  }
  if (digits == 0) return std::nullopt;
  SplitNumber out;
  out.mantissa = s.substr(0, i);
  // An exponent only when 'e' is followed by digits; otherwise the 'e' is part of the suffix
  // (and then rejected as an unknown suffix: "1e").
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    std::size_t j = i + 1;
    if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
    std::size_t k = j;
    while (k < s.size() && is_digit(s[k])) ++k;
    if (k > j) {
      if (k - j > 4) return std::nullopt;  // absurd exponents
      const std::string_view exp_text = s.substr(i + 1, k - i - 1);
      const std::string_view digits_text = exp_text.front() == '+' ? exp_text.substr(1) : exp_text;
      int e = 0;
      auto [ptr, ec] = std::from_chars(digits_text.data(), digits_text.data() + digits_text.size(), e);
      if (ec != std::errc() || ptr != digits_text.data() + digits_text.size()) return std::nullopt;
      out.exponent = e;
      i = k;
    }
  }
  out.suffix = s.substr(i);
  return out;
}

// mantissa × 10^exponent, correctly rounded (from_chars of "<mantissa>e<exponent>"), so that
// "1.1B" is exactly 1100000000.
std::optional<double> to_double(std::string_view mantissa, int exponent) {
  const std::string text = std::string(mantissa) + "e" + std::to_string(exponent);
  double value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value, std::chars_format::general);
  if (ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

int count_suffix_exponent(std::string_view suffix, bool& ok) {
  ok = true;
  const std::string s = lower(suffix);
  if (s.empty()) return 0;
  if (s == "k") return 3;
  if (s == "m") return 6;
  if (s == "b" || s == "g") return 9;
  if (s == "t") return 12;
  ok = false;
  return 0;
}

constexpr std::string_view kNumberHint = "is not a valid number (examples: 7e9, 7000000000, 1.5B, 125M, 4K)";
constexpr std::string_view kBytesHint = "is not a valid byte size (examples: 80GB, 80e9, 24GiB, 512MiB)";

}  // namespace

std::string printable(std::string_view text, std::size_t max_chars) {
  std::string out;
  for (char c : text.substr(0, max_chars)) out += std::iscntrl(static_cast<unsigned char>(c)) ? '?' : c;
  if (text.size() > max_chars) out += "...";
  return out;
}

Positionals split_positionals(int argc, char** argv, std::initializer_list<std::string_view> with_values) {
  Positionals out;
  out.flags.push_back(argv[0]);
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (!arg.starts_with("-")) {
      out.words.emplace_back(arg);
      continue;
    }
    out.flags.push_back(argv[i]);
    if (std::find(with_values.begin(), with_values.end(), arg) != with_values.end() && i + 1 < argc)
      out.flags.push_back(argv[++i]);
  }
  return out;
}

std::string Positionals::single(std::string_view what, std::string_view usage) const {
  if (words.empty()) throw UsageError(std::string(what) + " is required: " + std::string(usage));
  if (words.size() > 1)
    throw UsageError("one " + std::string(what) + " only, got '" + printable(words[0]) + "' and '" +
                     printable(words[1]) + "'");
  return words.front();
}

double parse_number(std::string_view flag, std::string_view text) {
  const auto split = split_number(text);
  if (!split) bad_value(flag, text, kNumberHint);
  bool ok = false;
  const int suffix_exp = count_suffix_exponent(split->suffix, ok);
  if (!ok) bad_value(flag, text, kNumberHint);
  const auto value = to_double(split->mantissa, split->exponent + suffix_exp);
  if (!value) bad_value(flag, text, "is out of range");
  return *value;
}

std::int64_t parse_count(std::string_view flag, std::string_view text) {
  const double value = parse_number(flag, text);
  if (value != std::floor(value)) bad_value(flag, text, "is not a whole number");
  if (value >= 9223372036854775808.0) bad_value(flag, text, "is out of range");
  return std::int64_t(value);
}

double parse_bytes(std::string_view flag, std::string_view text) {
  const auto split = split_number(text);
  if (!split) bad_value(flag, text, kBytesHint);
  struct Unit {
    std::string_view name;  // lower case
    int decimal_exp;
    double binary_factor;
  };
  static constexpr Unit kUnits[] = {
      {"", 0, 1},         {"b", 0, 1},        {"k", 3, 1},        {"kb", 3, 1},       {"m", 6, 1},
      {"mb", 6, 1},       {"g", 9, 1},        {"gb", 9, 1},       {"t", 12, 1},       {"tb", 12, 1},
      {"ki", 0, 0x1p10},  {"kib", 0, 0x1p10}, {"mi", 0, 0x1p20},  {"mib", 0, 0x1p20}, {"gi", 0, 0x1p30},
      {"gib", 0, 0x1p30}, {"ti", 0, 0x1p40},  {"tib", 0, 0x1p40},
  };
  const std::string unit = lower(split->suffix);
  const Unit* match = nullptr;
  for (const Unit& u : kUnits) {
    if (u.name == unit) match = &u;
  }
  if (!match) bad_value(flag, text, kBytesHint);
  const int decimal_exp = match->decimal_exp;
  const double binary_factor = match->binary_factor;
  const auto value = to_double(split->mantissa, split->exponent + decimal_exp);
  if (!value || !std::isfinite(*value * binary_factor)) bad_value(flag, text, "is out of range");
  return *value * binary_factor;
}

std::vector<std::int64_t> parse_count_list(std::string_view flag, std::string_view text) {
  std::vector<std::int64_t> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    const std::string_view item = text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    if (item.empty()) bad_value(flag, text, "is not a valid list (expected e.g. 1,8,64)");
    out.push_back(parse_count(flag, item));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<std::pair<int, int>> parse_pair_list(std::string_view flag, std::string_view text) {
  std::vector<std::pair<int, int>> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    const std::string_view item = text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    const std::size_t colon = item.find(':');
    if (item.empty() || colon == std::string_view::npos)
      bad_value(flag, text, "is not a list of A:B pairs (e.g. 3:0,7:1)");
    const std::int64_t a = parse_count(flag, item.substr(0, colon)), b = parse_count(flag, item.substr(colon + 1));
    if (a > (1 << 30) || b > (1 << 30)) bad_value(flag, text, "is out of range");
    out.emplace_back(int(a), int(b));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

PriorityScheme parse_priority_scheme_flag(std::string_view flag, std::string_view text) {
  const auto scheme = parse_priority_scheme(text);
  if (!scheme)
    throw UsageError(std::string(flag) + ": unknown scheme '" + std::string(text) +
                     "' (valid: " + priority_scheme_names() + ")");
  return *scheme;
}

tasks::AttentionRequest attention_option(const ArgParser& p) {
  const std::string text = p.value("attention").value_or("auto");
  const auto request = tasks::parse_attention_request(text);
  if (!request) bad_value("--attention", text, "is not one of auto|cudnn|own");
  return *request;
}

const char* const kAttentionHelp =
    "attention kernel of the CUDA workers: auto (default: cuDNN's flash attention with a GPU, bf16 and a "
    "cuDNN build, else the own kernel), cudnn (an error where it cannot run) or own (docs/manual.md, "
    "\"Attention on the GPU\")";

CpuCompute parse_cpu_compute_flag(std::string_view flag, std::string_view text) {
  const auto value = parse_cpu_compute(text);
  if (!value) bad_value(flag, text, "is not one of on|off");
  return *value;
}

std::string parse_choice(std::string_view flag, std::string_view text,
                         std::initializer_list<std::string_view> choices) {
  if (std::find(choices.begin(), choices.end(), text) != choices.end()) return std::string(text);
  std::string expected;
  for (std::string_view c : choices) expected += (expected.empty() ? "" : "|") + std::string(c);
  bad_value(flag, text, "is not one of " + expected);
}

// ---- ArgParser -------------------------------------------------------------------------------

ArgParser::ArgParser(std::string command) : command_(std::move(command)) {}

ArgParser& ArgParser::flag(std::string name, std::string help) {
  specs_.push_back({std::move(name), "", std::move(help)});
  return *this;
}

ArgParser& ArgParser::option(std::string name, std::string metavar, std::string help) {
  specs_.push_back({std::move(name), std::move(metavar), std::move(help)});
  return *this;
}

const ArgParser::Spec* ArgParser::find(std::string_view name) const {
  for (const Spec& s : specs_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

void ArgParser::parse(int argc, char** argv) {
  values_.clear();
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (!arg.starts_with("--") || arg.size() == 2) {
      throw UsageError("unexpected argument '" + printable(arg) + "' (flags are --name or --name=value)");
    }
    const std::size_t eq = arg.find('=');
    const std::string_view name = arg.substr(2, eq == arg.npos ? arg.npos : eq - 2);
    const Spec* spec = find(name);
    if (!spec) {
      throw UsageError("unknown flag '--" + printable(name) + "' (see " + command_ + " --help)");
    }
    if (spec->metavar.empty()) {  // boolean
      std::string v = "true";
      if (eq != arg.npos) {
        v = lower(arg.substr(eq + 1));
        if (v == "1" || v == "yes") v = "true";
        if (v == "0" || v == "no") v = "false";
        if (v != "true" && v != "false") {
          throw UsageError("--" + spec->name + ": '" + printable(arg.substr(eq + 1)) +
                           "' is not a boolean (true|false)");
        }
      }
      values_[spec->name] = v;
      continue;
    }
    if (eq != arg.npos) {
      values_[spec->name] = std::string(arg.substr(eq + 1));
    } else {
      // The next argument is the value, unless there is none or it is another flag.
      if (i + 1 >= argc || std::string_view(argv[i + 1]).starts_with("--")) {
        throw UsageError("--" + spec->name + " needs a value (" + spec->metavar + ")");
      }
      values_[spec->name] = argv[++i];
    }
  }
}

void ArgParser::set(std::string_view name, std::string value) {
  const Spec* spec = find(name);
  if (!spec) throw std::logic_error("ArgParser::set: unregistered flag --" + std::string(name));
  values_[spec->name] = std::move(value);
}

bool ArgParser::given(std::string_view name) const {
  const auto it = values_.find(name);
  if (it == values_.end()) return false;
  const Spec* spec = find(name);
  return !(spec && spec->metavar.empty() && it->second == "false");
}

bool ArgParser::flag_set(std::string_view name) const { return given(name); }

std::optional<std::string> ArgParser::value(std::string_view name) const {
  const auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string ArgParser::options_help() const {
  std::size_t width = 0;
  for (const Spec& s : specs_) width = std::max(width, s.name.size() + (s.metavar.empty() ? 0 : s.metavar.size() + 1));
  std::string out;
  for (const Spec& s : specs_) {
    std::string left = "--" + s.name + (s.metavar.empty() ? "" : " " + s.metavar);
    left.resize(width + 4, ' ');
    out += "  " + left + s.help + "\n";
  }
  return out;
}

int int_option(const ArgParser& p, std::string_view name, std::int64_t fallback, std::int64_t min_value,
               std::int64_t max_value) {
  const std::string flag = "--" + std::string(name);
  const auto v = p.value(name);
  const std::int64_t value = v ? parse_count(flag, *v) : fallback;
  if (value < min_value || value > max_value)
    throw UsageError(flag + ": " + std::to_string(value) + " is out of range (at least " + std::to_string(min_value) +
                     (max_value < (std::int64_t{1} << 30) ? ", at most " + std::to_string(max_value) : "") + ")");
  return int(value);
}

std::optional<int> auto_or_int_option(const ArgParser& p, std::string_view name, std::int64_t min_value,
                                      std::int64_t max_value) {
  const auto v = p.value(name);
  if (!v || *v == "auto") return std::nullopt;
  return int_option(p, name, min_value, min_value, max_value);
}

float real_option(const ArgParser& p, std::string_view name, double fallback) {
  const auto v = p.value(name);
  const double value = v ? parse_number("--" + std::string(name), *v) : fallback;
  // Past float's range the value would become infinity.
  if (v && value > std::numeric_limits<float>::max()) bad_value(name, *v, "is out of range");
  return float(value);
}

ActivationPolicy activation_policy_option(const ArgParser& p) {
  const std::string mode =
      parse_choice("--recompute", p.value("recompute").value_or("none"), {"none", "selective", "full"});
  ActivationPolicy policy;
  policy.recompute = mode == "none" ? Recompute::none : mode == "selective" ? Recompute::selective : Recompute::full;
  policy.window = int_option(p, "recompute-window", 1, 0);
  policy.offload =
      parse_choice("--offload-activations", p.value("offload-activations").value_or("none"), {"none", "cpu"}) == "cpu"
          ? ActivationOffload::cpu
          : ActivationOffload::none;
  if (p.given("recompute-window") && policy.recompute == Recompute::none && policy.offload == ActivationOffload::none)
    throw UsageError("--recompute-window is for --recompute selective|full or --offload-activations cpu");
  return policy;
}

namespace {

// F|auto: a share of the parameters in [0, 1], or auto (resolved later).
OffloadFraction fraction_or_auto(std::string_view flag, const std::string& v, const std::string& what) {
  if (v == "auto") return {1.0, true};
  // Digits, a point and an exponent only: "0.5", "1", "2.5e-1" (parse_number's suffixes are counts).
  if (v.empty() || v.find_first_not_of("0123456789.eE-+") != std::string::npos)
    bad_value(flag, v, "is not a number in [0, 1] or auto");
  const double value = parse_number("--" + std::string(flag), v);
  if (!(value <= 1.0)) bad_value(flag, v, "is not in [0, 1] (" + what + ")");
  return {value, false};
}

}  // namespace

OffloadFraction offload_fraction_option(const ArgParser& p, OptimizerOffload offload) {
  constexpr std::string_view flag = "offload-optimizer-fraction";
  const auto v = p.value(flag);
  if (!v) return {};
  if (offload == OptimizerOffload::none)
    throw UsageError("--offload-optimizer-fraction is for --offload-optimizer cpu|nvme (the share of the state offloaded)");
  return fraction_or_auto(flag, *v, "the share of the parameters whose state is offloaded");
}

OffloadFraction speculative_fraction_option(const ArgParser& p, bool speculative_update) {
  constexpr std::string_view flag = "speculative-fraction";
  const auto v = p.value(flag);
  if (!v) return {};
  if (!speculative_update)
    throw UsageError("--speculative-fraction is for --speculative-update (the share of the CPU AdamW run speculatively)");
  return fraction_or_auto(flag, *v, "the share of the parameters whose CPU AdamW is speculative");
}

Precision precision_option(const ArgParser& p, std::string_view name, Precision fallback,
                           std::initializer_list<std::string_view> choices) {
  const auto v = p.value(name);
  if (!v) return fallback;
  return *precision_from_name(parse_choice("--" + std::string(name), *v, choices));
}

OffloadOptions offload_options(const ArgParser& p) {
  OffloadOptions o;
  o.optimizer = *optimizer_offload_from_name(
      parse_choice("--offload-optimizer", p.value("offload-optimizer").value_or("none"), {"none", "cpu", "nvme"}));
  o.optimizer_fraction = offload_fraction_option(p, o.optimizer);
  o.params = *param_offload_from_name(
      parse_choice("--offload-params", p.value("offload-params").value_or("none"), {"none", "cpu"}));
  o.speculative_update = p.flag_set("speculative-update");
  o.speculative_fraction = speculative_fraction_option(p, o.speculative_update);
  return o;
}

ArgParser& add_session_options(ArgParser& p) {
  return p
      .option("sched", "POLICY", "StarPU scheduling policy (default $STARPU_SCHED or lws); `--sched help` lists them")
      .option("sched-plugin", "FILE",
              "shared library of scheduling policies usable with --sched (examples/central_priority_policy.cpp)")
      .option("priorities", "SCHEME",
              "task priorities: none (default) or critical-path (upward rank from the performance models)")
      .option("sched-alpha", "X", "dmda family: weight of expected compute time (STARPU_SCHED_ALPHA, default 1)")
      .option("sched-beta", "X", "dmda family: weight of expected transfer time (STARPU_SCHED_BETA, default 1)")
      .option("sched-gamma", "X", "dmda family: weight of energy (STARPU_SCHED_GAMMA, default 1000)")
      .option("cpu-workers", "N", "StarPU CPU workers (default: one per core)")
      .option("cuda-workers", "N", "StarPU CUDA workers (default: one per GPU)")
      .option("cpu-compute", "on|off",
              "with CUDA workers, whether CPU workers may also run the model's forward/backward tasks "
              "(default off: on the GPU only; without a GPU they run on the CPU; docs/scheduling.md)")
      .option("platform", "NAME|DIR",
              sim::predicts_times
                  ? "the simulated machine: h200x1 (default), h200x8, a100x1, this-machine (the committed "
                    "calibration), or a `starzero platform --out` or `starzero calibrate --out` folder"
                  : "starzero-sim only: the simulated machine (docs/sim.md)");
}

SessionOptions session_options(const ArgParser& p) {
  // starzero-sim reads --platform before StarPU starts (apps/sim_platform.cpp).
  if (!sim::predicts_times && p.given("platform"))
    throw UsageError("--platform is starzero-sim's: this program runs on this machine (docs/sim.md)");
  SessionOptions options;
  options.policy = p.value("sched").value_or("");
  options.policy_plugin = p.value("sched-plugin").value_or("");
  if (const auto scheme = p.value("priorities"))
    options.priorities = parse_priority_scheme_flag("--priorities", *scheme);
  const auto weight = [&](const char* name) -> std::optional<double> {
    const auto v = p.value(name);
    if (!v) return std::nullopt;
    return parse_number("--" + std::string(name), *v);
  };
  options.sched_alpha = weight("sched-alpha");
  options.sched_beta = weight("sched-beta");
  options.sched_gamma = weight("sched-gamma");
  if (p.given("cpu-workers")) options.cpu_workers = int_option(p, "cpu-workers", 0, 0);
  if (p.given("cuda-workers")) options.cuda_workers = int_option(p, "cuda-workers", 0, 0);
  if (const auto v = p.value("cpu-compute")) options.cpu_compute = parse_cpu_compute_flag("--cpu-compute", *v);
  options.trace_dir = p.value("trace").value_or("");
  return options;
}

ArgParser& add_jsonl_options(ArgParser& p) {
  return p
      .option("loss-on", "WHAT",
              "JSONL: completion (default: the prompt's tokens are not learned) or all (every token but the "
              "begin-of-text)")
      .option("long-records", "HOW",
              "JSONL: a record of more than --seq + 1 tokens is split (default: kept, across training windows) or "
              "dropped; both are counted")
      .option("bad-records", "HOW", "JSONL: fail (default: the first one is an error) or skip (counted)");
}

JsonlOptions jsonl_options(const ArgParser& p) {
  JsonlOptions o;
  o.loss_on = parse_choice("--loss-on", p.value("loss-on").value_or("completion"), {"completion", "all"}) == "all"
                  ? LossOn::all
                  : LossOn::completion;
  o.long_records = parse_choice("--long-records", p.value("long-records").value_or("split"), {"split", "drop"}) == "drop"
                       ? LongRecords::drop
                       : LongRecords::split;
  o.bad_records = parse_choice("--bad-records", p.value("bad-records").value_or("fail"), {"fail", "skip"}) == "skip"
                      ? BadRecords::skip
                      : BadRecords::fail;
  o.seq = p.given("seq") ? std::size_t(int_option(p, "seq", 0, 1)) : 0;
  if (o.long_records == LongRecords::drop && o.seq == 0)
    throw UsageError("--long-records drop needs --seq T (a record is long past T + 1 tokens)");
  return o;
}

JsonlProgress jsonl_progress(const char* what) {
  if (::isatty(STDOUT_FILENO) == 0) return {};
  return [what](std::uint64_t done, std::uint64_t total) {
    std::printf("\r%s: %.1f %% of %.1f MB", what, total ? 100.0 * double(done) / double(total) : 100.0,
                double(total) / 1e6);
    if (done >= total) std::printf("\r\033[K");
    std::fflush(stdout);
  };
}

}  // namespace starzero::cli
