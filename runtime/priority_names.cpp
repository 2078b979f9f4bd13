// The names of the priority schemes, apart from the rest of runtime/priorities.cpp so that
// programs without StarPU's library (the fuzz harness of the flag parser) link them.
#include "runtime/priorities.hpp"

namespace starzero {

const char* priority_scheme_name(PriorityScheme scheme) {
  switch (scheme) {
    case PriorityScheme::none: return "none";
    case PriorityScheme::critical_path: return "critical-path";
  }
  return "?";
}

std::optional<PriorityScheme> parse_priority_scheme(std::string_view text) {
  for (PriorityScheme s : {PriorityScheme::none, PriorityScheme::critical_path})
    if (text == priority_scheme_name(s)) return s;
  return std::nullopt;
}

std::string priority_scheme_names() { return "none, critical-path"; }

}  // namespace starzero
