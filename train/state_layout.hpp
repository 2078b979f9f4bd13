#pragma once
// What a model's training-state files (.state, train/state_files.hpp and train/sharded_state.hpp)
// hold, in terms that know no model: the six int32 shape fields of the header and the parameter
// count of each layer, in the order the layers are stored. A model provides its own (GPT:
// GptLayout::state_layout, models/llmc_layout.hpp).
#include <array>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

namespace starzero {

// The six int32 shape fields of a .state header (GPT: maxT, V, L, NH, C, Vp, llm.c's order).
using StateShapeFields = std::array<std::int32_t, 6>;

struct StateLayout {
  StateShapeFields shape_fields{};
  std::vector<std::size_t> layer_params;  // elements of each layer, in storage order
  // How error messages print shape fields (GPT: "maxT=8 V=10 ..."); null: the six numbers.
  std::string (*print_fields)(const StateShapeFields&) = nullptr;

  std::size_t param_count() const { return std::accumulate(layer_params.begin(), layer_params.end(), std::size_t{0}); }
  std::string describe(const StateShapeFields& fields) const {
    if (print_fields) return print_fields(fields);
    std::string text = "[";
    for (std::int32_t field : fields) text += (text.size() > 1 ? " " : "") + std::to_string(field);
    return text + "]";
  }
};

}  // namespace starzero
