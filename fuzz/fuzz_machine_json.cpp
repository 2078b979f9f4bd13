// libFuzzer harness: the machine file (bus/NAME.machine.json) that `starzero-sim --platform DIR`
// and `starzero calibrate --out DIR` read (sim/platform.cpp's machine_from_json). Bad input may
// only throw std::invalid_argument. An accepted machine validates, writes back to JSON that reads
// as the same machine (the same text again), and gives per-task overheads to charge that are
// finite and non-negative, the "" entry between the smallest and largest policy's.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <string_view>

#include "fuzz/fuzz_common.hpp"
#include "sim/platform.hpp"

using namespace starzero;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  sim::MachineSpec machine;
  try {
    machine = sim::machine_from_json(text);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  try {
    sim::validate(machine);
  } catch (const std::invalid_argument&) {
    FUZZ_CHECK(!"an accepted machine does not validate");
  }
  const std::string written = sim::machine_json(machine);
  sim::MachineSpec back;
  try {
    back = sim::machine_from_json(written);
  } catch (const std::invalid_argument&) {
    FUZZ_CHECK(!"the machine's own JSON is refused");
  }
  FUZZ_CHECK(sim::machine_json(back) == written);
  const auto charged = sim::task_overheads_to_charge(machine);
  double lowest = INFINITY, highest = -INFINITY;
  for (const auto& [policy, overhead] : charged) {
    FUZZ_CHECK(std::isfinite(overhead.us_per_task) && overhead.us_per_task >= 0);
    FUZZ_CHECK(std::isfinite(overhead.wake_us) && overhead.wake_us >= 0);
    if (policy.empty()) continue;
    if (overhead.tasks > 0) {
      lowest = std::min(lowest, overhead.us_per_task);
      highest = std::max(highest, overhead.us_per_task);
    }
  }
  if (const auto mean = charged.find(""); mean != charged.end())
    FUZZ_CHECK(mean->second.us_per_task >= lowest * (1 - 1e-12) && mean->second.us_per_task <= highest * (1 + 1e-12));
  return 0;
}
