// libFuzzer harness: the DeepSpeed config reader of `starzero train --deepspeed-config`
// (apps/deepspeed_config.hpp). The input is the JSON text; the first byte also picks the rank count
// (1..4) the batch sizes are split over. Bad input may only throw UsageError; an accepted config
// gives each flag once, non-empty, and numbers the flag parser itself accepts.
#include <set>
#include <string>
#include <string_view>

#include "apps/cli.hpp"
#include "apps/deepspeed_config.hpp"
#include "fuzz/fuzz_common.hpp"

using namespace starzero;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const int ranks = size > 0 ? 1 + data[0] % 4 : 1;
  DeepSpeedFlags flags;
  try {
    flags = deepspeed_flags(text, "fuzz.json", ranks);
  } catch (const UsageError&) {
    return 0;
  }
  static const std::set<std::string, std::less<>> numeric{"batch", "grad-accum", "grad-clip", "stage", "lr",
                                                          "weight-decay", "adam-eps", "adam-beta1", "adam-beta2",
                                                          "warmup", "lr-total", "warmup-min", "lr-final"};
  std::set<std::string> seen;
  for (const ConfigFlag& f : flags.flags) {
    FUZZ_CHECK(!f.flag.empty() && !f.value.empty() && !f.key.empty());
    FUZZ_CHECK(seen.insert(f.flag).second);  // each flag once
    if (numeric.count(f.flag)) {
      try {
        cli::parse_number("--" + f.flag, f.value);
      } catch (const UsageError&) {
        FUZZ_CHECK(!"a config gave a number the flag parser refuses");
      }
    }
  }
  for (const std::string& key : flags.ignored) FUZZ_CHECK(!key.empty());
  return 0;
}
