#include "profile/task_kinds.hpp"

#include <array>

namespace starzero::profile {

std::string task_kind(std::string_view name) {
  std::string kind;
  kind.reserve(name.size());
  int depth = 0;  // inside [...]
  for (char c : name) {
    if (c == '[') ++depth;
    if (depth == 0) kind += c;
    if (c == ']' && depth > 0) --depth;
  }
  const std::size_t dot = kind.rfind(".t");
  if (dot != std::string::npos && dot + 2 < kind.size() &&
      kind.find_first_not_of("0123456789", dot + 2) == std::string::npos)
    kind.erase(dot);
  return kind;
}

bool is_collective_kind(std::string_view kind) {
  return kind.starts_with("all_gather") || kind.starts_with("reduce_scatter") || kind.starts_with("all_reduce");
}

bool is_compute_kind(std::string_view kind) {
  if (is_collective_kind(kind)) return false;
  constexpr std::array<std::string_view, 6> suffixes = {"_fwd",        "_bwd",      "_bwd_input",
                                                        "_bwd_weight", "_bwd_bias", "_bwd_params"};
  for (std::string_view suffix : suffixes)
    if (kind.ends_with(suffix)) return true;
  return false;
}

bool is_adamw_kind(std::string_view kind) { return kind.starts_with("adamw"); }

bool is_cpu_adamw_model(std::string_view model) { return model == "adamw_cpu"; }

}  // namespace starzero::profile
