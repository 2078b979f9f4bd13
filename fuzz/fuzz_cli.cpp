// libFuzzer harness: the command-line flag parser of the `starzero` sub-commands (apps/cli.hpp):
// cli::ArgParser::parse and the typed accessors, and the number parsers parse_number,
// parse_count, parse_bytes, parse_count_list and parse_pair_list.
//
// The input is split on NUL bytes into argv[1..] (argv[0] is the sub-command). The parser knows a
// few options and flags like a sub-command's, StarPU's session options included; after a
// successful parse every accessor is called. Every argument (and its part after '=') is also given
// to each number parser directly. Bad input may only throw UsageError; accepted numbers must be
// finite, non-negative and consistent with each other.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "apps/cli.hpp"
#include "fuzz/fuzz_common.hpp"

using namespace starzero;

namespace {

cli::ArgParser make_parser() {
  cli::ArgParser p("fuzz");
  p.option("steps", "N", "training steps")
      .option("batch", "B", "micro-batch size")
      .option("lr", "X", "learning rate")
      .option("memory", "BYTES", "memory budget")
      .option("params", "N", "parameter count")
      .option("ranks", "LIST", "rank counts")
      .option("precision", "P", "fp32 or bf16")
      .option("accumulate", "N|auto", "micro-batches per step")
      .option("offload-optimizer-fraction", "F|auto", "share of the optimizer state offloaded")
      .option("trace", "DIR", "trace directory")
      .flag("verbose", "print more")
      .flag("resume", "resume from the checkpoint");
  return cli::add_session_options(p);
}

// Each number parser on one text: UsageError, or a value that fits its promises.
void parse_numbers(std::string_view text) {
  double number = -1;
  try {
    number = cli::parse_number("--x", text);
    FUZZ_CHECK(std::isfinite(number) && number >= 0);
  } catch (const UsageError&) {
  }
  try {
    const std::int64_t count = cli::parse_count("--x", text);
    FUZZ_CHECK(count >= 0 && double(count) == number);
  } catch (const UsageError&) {
  }
  try {
    const double bytes = cli::parse_bytes("--x", text);
    FUZZ_CHECK(std::isfinite(bytes) && bytes >= 0);
  } catch (const UsageError&) {
  }
  try {
    const std::vector<std::int64_t> list = cli::parse_count_list("--x", text);
    FUZZ_CHECK(list.size() == std::size_t(std::count(text.begin(), text.end(), ',')) + 1);
    for (std::int64_t v : list) FUZZ_CHECK(v >= 0);
  } catch (const UsageError&) {
  }
  try {
    const std::vector<std::pair<int, int>> pairs = cli::parse_pair_list("--x", text);
    FUZZ_CHECK(pairs.size() == std::size_t(std::count(text.begin(), text.end(), ',')) + 1);
    for (const auto& [a, b] : pairs) FUZZ_CHECK(a >= 0 && b >= 0);
  } catch (const UsageError&) {
  }
  try {
    cli::parse_choice("--x", text, {"bf16", "fp32"});
  } catch (const UsageError&) {
  }
  try {
    cli::parse_priority_scheme_flag("--x", text);
  } catch (const UsageError&) {
  }
  try {
    const CpuCompute value = cli::parse_cpu_compute_flag("--x", text);
    FUZZ_CHECK(text == (value == CpuCompute::on ? "on" : "off"));
  } catch (const UsageError&) {
  }
  const std::string shown = cli::printable(text, 16);
  FUZZ_CHECK(shown.size() <= 19);
}

void use_accessors(const cli::ArgParser& p) {
  for (const char* name : {"steps", "batch", "lr", "memory", "params", "ranks", "precision", "accumulate", "trace",
                           "verbose", "resume", "sched", "cpu-workers", "nonexistent"}) {
    const auto value = p.value(name);
    if (!p.given(name)) FUZZ_CHECK(!value || *value == "false");
    FUZZ_CHECK(p.flag_set(name) == p.given(name));
  }
  const auto call = [](auto&& f) {
    try {
      f();
    } catch (const UsageError&) {
    }
  };
  call([&] {
    const int steps = cli::int_option(p, "steps", 10, 1);
    FUZZ_CHECK(steps >= 1);
  });
  call([&] {
    const int batch = cli::int_option(p, "batch", 4, 1, 1024);
    FUZZ_CHECK(batch >= 1 && batch <= 1024);
  });
  call([&] {
    const auto accumulate = cli::auto_or_int_option(p, "accumulate", 1);
    FUZZ_CHECK(!accumulate || *accumulate >= 1);
  });
  call([&] {
    const float lr = cli::real_option(p, "lr", 3e-4);
    FUZZ_CHECK(std::isfinite(lr) && lr >= 0);
  });
  call([&] {
    const OffloadFraction f = cli::offload_fraction_option(p, OptimizerOffload::cpu);
    FUZZ_CHECK(f.value >= 0 && f.value <= 1);
  });
  call([&] { cli::precision_option(p, "precision", Precision::fp32); });
  call([&] {
    if (const auto v = p.value("memory")) cli::parse_bytes("--memory", *v);
  });
  call([&] {
    if (const auto v = p.value("params")) cli::parse_count("--params", *v);
  });
  call([&] {
    if (const auto v = p.value("ranks")) cli::parse_count_list("--ranks", *v);
  });
  call([&] {
    const SessionOptions options = cli::session_options(p);
    FUZZ_CHECK(!options.sched_alpha || (std::isfinite(*options.sched_alpha) && *options.sched_alpha >= 0));
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const cli::ArgParser proto = make_parser();
  // argv: the sub-command, then the input's NUL-separated words (each a string of its own).
  std::vector<std::string> words{"fuzz"};
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  for (std::size_t start = 0; start <= input.size() && words.size() < 64;) {
    const std::size_t nul = input.find('\0', start);
    words.emplace_back(input.substr(start, nul == input.npos ? input.npos : nul - start));
    if (nul == input.npos) break;
    start = nul + 1;
  }
  if (size == 0) words.pop_back();  // no arguments at all
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);

  for (std::size_t i = 1; i < words.size(); ++i) {
    const std::string_view w = words[i];
    parse_numbers(w);
    if (const std::size_t eq = w.find('='); eq != w.npos) parse_numbers(w.substr(eq + 1));
  }

  cli::ArgParser p = proto;
  try {
    p.parse(int(words.size()), argv.data());
  } catch (const UsageError&) {
    return 0;
  }
  use_accessors(p);
  FUZZ_CHECK(!p.options_help().empty());
  return 0;
}
