#include "offload/optimizer_split.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace starzero {

namespace {

void check_fraction(double fraction) {
  if (!(fraction >= 0.0 && fraction <= 1.0))
    throw std::invalid_argument("the offloaded fraction of the optimizer state must be in [0, 1], got " +
                                std::to_string(fraction));
}

std::string layer_range(int first, int last) {
  return first == last ? "layer " + std::to_string(first)
                       : "layers " + std::to_string(first) + "-" + std::to_string(last);
}

}  // namespace

OptimizerSplit split_optimizer_state(std::span<const std::int64_t> layer_params, double fraction) {
  check_fraction(fraction);
  OptimizerSplit split;
  split.layers = int(layer_params.size());
  for (std::int64_t count : layer_params) {
    if (count < 0) throw std::invalid_argument("a layer's parameter count must be >= 0");
    split.params += count;
  }
  // From the last layer down, while fewer than F·Ψ parameters are taken. F·Ψ less a relative 1e-12
  // (below one parameter up to 10^12): an F computed as a ratio of parameters (auto, a report's
  // achieved share) lands on its layer in spite of its rounding.
  const double wanted = fraction * double(split.params) * (1.0 - 1e-12);
  split.first_offloaded = split.layers;
  while (split.first_offloaded > 0 && double(split.offloaded_params) < wanted)
    split.offloaded_params += layer_params[std::size_t(--split.first_offloaded)];
  return split;
}

OptimizerSplit split_optimizer_state(std::int64_t params, double fraction) {
  check_fraction(fraction);
  if (params < 0) throw std::invalid_argument("the parameter count must be >= 0");
  OptimizerSplit split;
  split.params = params;
  split.offloaded_params = std::min(params, std::int64_t(std::llround(fraction * double(params))));
  return split;
}

std::string describe_split(const OptimizerSplit& split, const std::string& host) {
  char share[96];
  std::snprintf(share, sizeof share, "%lld of %lld parameters, F = %.4g", (long long)split.offloaded_params,
                (long long)split.params, split.fraction());
  if (split.layers == 0) return std::string(share) + " offloaded to the " + host;
  std::string text;
  if (split.offloaded_layers() > 0)
    text = layer_range(split.first_offloaded, split.layers - 1) + " on the " + host + " (CPU AdamW; " + share + ")";
  else
    text = "no layer on the " + host + " (" + share + ")";
  text += split.first_offloaded > 0 ? ", " + layer_range(0, split.first_offloaded - 1) + " on the device (device AdamW)"
                                    : ", none on the device";
  return text;
}

double speculative_share(const OptimizerSplit& offloaded, double fraction) {
  return std::min(offloaded.fraction(), fraction);
}

std::string describe_speculative_split(const OptimizerSplit& speculative, const OptimizerSplit& offloaded) {
  char share[96];
  std::snprintf(share, sizeof share, "%lld of %lld parameters, F = %.4g", (long long)speculative.offloaded_params,
                (long long)speculative.params, speculative.fraction());
  if (speculative.layers == 0) return std::string(share) + " speculative";
  std::string text = speculative.offloaded_layers() > 0
                         ? layer_range(speculative.first_offloaded, speculative.layers - 1) + " speculative (" +
                               share + ")"
                         : "no layer speculative (" + std::string(share) + ")";
  if (offloaded.first_offloaded < speculative.first_offloaded)
    text += ", " + layer_range(offloaded.first_offloaded, speculative.first_offloaded - 1) +
            " synchronous (CPU AdamW after the norm)";
  return text;
}

}  // namespace starzero
