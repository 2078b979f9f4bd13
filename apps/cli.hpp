#pragma once
// A small flag parser shared by the `starzero` sub-commands.
//
// Flags are `--name value`, `--name=value`, or boolean `--name` (also `--name=true|false`).
// There are no positional arguments and no short flags. A flag given twice keeps the last value.
// Every failure throws UsageError with a one-line message that names the flag and the bad value.
//
// Number syntax (counts, sizes, lists):
//   counts   7e9, 7000000000, 1.5B, 125M, 70B, 4K, 2T   (K=1e3 M=1e6 B=G=1e9 T=1e12)
//   bytes    80GB, 80e9, 80G, 24GiB, 512MiB, 1.5TB, 4096  (decimal K/M/G/T[B], binary Ki/Mi/Gi/Ti[B];
//            suffixes are case-insensitive)
//   lists    1,8,64 (counts)
// Signs, "nan", "inf", hexadecimal, empty strings and trailing characters are rejected.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "models/jsonl_data.hpp"
#include "offload/footprint.hpp"
#include "offload/placement.hpp"
#include "runtime/precision.hpp"
#include "runtime/session.hpp"
#include "tasks/attention_kernel.hpp"

namespace starzero {

// Bad command-line input: the sub-command prints "<command>: error: <what()>" and exits 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace cli {

// A non-negative finite real with an optional count suffix (K, M, B/G, T).
double parse_number(std::string_view flag, std::string_view text);
// A non-negative whole number (count suffixes allowed: "1.5B" = 1500000000; "1.5" is an error).
std::int64_t parse_count(std::string_view flag, std::string_view text);
// A non-negative byte size: decimal (K/M/G/T, optional B) or binary (Ki/Mi/Gi/Ti, optional B).
double parse_bytes(std::string_view flag, std::string_view text);
// Comma-separated counts, at least one, no empty items.
std::vector<std::int64_t> parse_count_list(std::string_view flag, std::string_view text);
// Comma-separated A:B pairs of counts ("3:1,7:0"), at least one.
std::vector<std::pair<int, int>> parse_pair_list(std::string_view flag, std::string_view text);
// A --priorities scheme (runtime/priorities.hpp) by name.
PriorityScheme parse_priority_scheme_flag(std::string_view flag, std::string_view text);
// A --cpu-compute value (runtime/placement.hpp): on or off.
CpuCompute parse_cpu_compute_flag(std::string_view flag, std::string_view text);
// One of `choices`, returned as given.
std::string parse_choice(std::string_view flag, std::string_view text, std::initializer_list<std::string_view> choices);

class ArgParser {
 public:
  // `command` names the sub-command in messages ("plan").
  explicit ArgParser(std::string command);

  // Registers a boolean flag / an option with a value. Names are given without "--".
  ArgParser& flag(std::string name, std::string help);
  ArgParser& option(std::string name, std::string metavar, std::string help);

  // Parses argv[1..argc-1] (argv[0] is the sub-command name). Throws UsageError.
  void parse(int argc, char** argv);

  // Sets a registered option's value as if it had been given (a config file's flags).
  void set(std::string_view name, std::string value);

  bool given(std::string_view name) const;     // option given, or boolean flag given as true
  bool flag_set(std::string_view name) const;  // same as given(), for boolean flags
  std::optional<std::string> value(std::string_view name) const;

  // "  --name METAVAR   help" lines, aligned, one per registered flag, in registration order.
  std::string options_help() const;

 private:
  struct Spec {
    std::string name;
    std::string metavar;  // empty: boolean flag
    std::string help;
  };
  const Spec* find(std::string_view name) const;

  std::string command_;
  std::vector<Spec> specs_;
  std::map<std::string, std::string, std::less<>> values_;  // booleans: "true" / "false"
};

// ---- typed options of the sub-commands -------------------------------------------------------
// A whole number in [min_value, max_value] (default `fallback` when the option is absent).
int int_option(const ArgParser& p, std::string_view name, std::int64_t fallback, std::int64_t min_value,
               std::int64_t max_value = std::int64_t{1} << 30);
// `auto` (or the option absent): empty; else a whole number in [min_value, max_value].
std::optional<int> auto_or_int_option(const ArgParser& p, std::string_view name, std::int64_t min_value,
                                      std::int64_t max_value = std::int64_t{1} << 30);
// A non-negative real (default `fallback`).
float real_option(const ArgParser& p, std::string_view name, double fallback);
// The training precision (runtime/precision.hpp) by name, one of `choices` (runs: fp32 or bf16;
// the planner also counts fp16).
Precision precision_option(const ArgParser& p, std::string_view name, Precision fallback,
                           std::initializer_list<std::string_view> choices = {"bf16", "fp32"});
// --recompute none|selective|full, --recompute-window W (default: none, window 1) and
// --offload-activations none|cpu; a window needs recomputation or offload (UsageError).
ActivationPolicy activation_policy_option(const ArgParser& p);
// --attention auto|cudnn|own (default auto; tasks/attention_kernel.hpp); anything else: UsageError.
tasks::AttentionRequest attention_option(const ArgParser& p);
// Its help text, the same for `starzero train` and `starzero plan`.
extern const char* const kAttentionHelp;
// --offload-optimizer-fraction F|auto (default 1: all of the state) for `offload`, what
// --offload-optimizer chose: F a number in [0, 1] (no count suffix) or `auto`; given without
// optimizer offload, UsageError.
OffloadFraction offload_fraction_option(const ArgParser& p, OptimizerOffload offload);
// --speculative-fraction F|auto (default 1): UsageError without --speculative-update.
OffloadFraction speculative_fraction_option(const ArgParser& p, bool speculative_update);
// The offload flags `train` and `plan` share, read into the one OffloadOptions
// (offload/placement.hpp) both hand on: --offload-optimizer none|cpu|nvme, its fraction,
// --offload-params none|cpu, --speculative-update and its fraction. `train` adds its own
// (--nvme-path, --adam-threads, ...) and validates the whole.
OffloadOptions offload_options(const ArgParser& p);
// Registers StarPU's options common to the sub-commands that run tasks: --sched, --cpu-workers,
// --cuda-workers, --cpu-compute, ...
ArgParser& add_session_options(ArgParser& p);
// --loss-on completion|all, --long-records split|drop, --bad-records fail|skip: how JSONL records
// become tokens and a loss mask (models/jsonl_data.hpp), for tokenize, train and eval.
ArgParser& add_jsonl_options(ArgParser& p);
// Those flags' values (seq: --seq when given, 0 otherwise); UsageError for a bad choice, or drop
// without --seq.
JsonlOptions jsonl_options(const ArgParser& p);
// On a terminal, "WHAT: 42.0 % of 12.3 MB" rewritten in place while a JSONL file is read; nothing
// into a file or pipe.
JsonlProgress jsonl_progress(const char* what);
// Reads them, and --trace when the sub-command registers it.
SessionOptions session_options(const ArgParser& p);

// A command line with positional arguments (`starzero trace DIR`): the words that are neither a
// flag nor the value of one of `with_values`, and the rest for ArgParser::parse (argv[0] first).
struct Positionals {
  std::vector<std::string> words;
  std::vector<char*> flags;
  // The one positional argument, named `what` in messages; UsageError for none or several.
  std::string single(std::string_view what, std::string_view usage) const;
};
Positionals split_positionals(int argc, char** argv, std::initializer_list<std::string_view> with_values);

// `text` with control characters replaced by '?' and cut to `max_chars` (then "..." follows),
// for messages that must stay on one line.
std::string printable(std::string_view text, std::size_t max_chars = 80);

}  // namespace cli
}  // namespace starzero
