// The two functions of runtime/priorities.cpp that apps/cli.cpp calls, for the fuzz_cli harness:
// the rest of that file needs StarPU's library, which the fuzz build does not link. Keep them
// the same as runtime/priorities.cpp's.
#include "runtime/priorities.hpp"

namespace starzero {

std::optional<PriorityScheme> parse_priority_scheme(std::string_view text) {
  if (text == "none") return PriorityScheme::none;
  if (text == "critical-path") return PriorityScheme::critical_path;
  return std::nullopt;
}

std::string priority_scheme_names() { return "none, critical-path"; }

}  // namespace starzero
