#include "models/registry.hpp"

#include <optional>
#include <stdexcept>

#include "models/hf_checkpoint.hpp"
#include "models/hf_config.hpp"
#include "models/llmc_format.hpp"

namespace starzero {

const std::vector<ModelFamily>& model_families() {
  // One line per model family.
  static const std::vector<ModelFamily> families = {
      gpt_family(),
      mlp_family(),
      llama3_family(),
  };
  return families;
}

const ModelFamily& model_family(std::string_view name) {
  std::string names;
  for (const ModelFamily& family : model_families()) {
    if (family.name == name) return family;
    names += (names.empty() ? "" : ", ") + family.name;
  }
  throw std::invalid_argument("unknown model '" + std::string(name) + "'; valid: " + names);
}

std::unique_ptr<ModelSpec> prepare_model(const ModelRequest& request) {
  return model_family(request.family).prepare(request);
}

PresetModel preset_model(std::string_view name) {
  std::optional<std::invalid_argument> first;
  for (const ModelFamily& family : model_families()) {
    if (!family.preset) continue;
    try {
      return family.preset(name);
    } catch (const std::invalid_argument& e) {
      if (!first) first = e;
    }
  }
  if (first) throw *first;
  throw std::invalid_argument("no model family has presets");
}

const ModelFamily& checkpoint_model_family(const std::filesystem::path& path) {
  const std::vector<ModelFamily>& families = model_families();
  const auto with_files = [](const ModelFamily& family) { return family.format_of_checkpoint != nullptr; };
  if (std::filesystem::is_directory(path)) {
    const std::string type = hf_model_type(path);
    std::string types;
    for (const ModelFamily& family : families) {
      if (!with_files(family) || family.hf_model_type.empty()) continue;
      if (family.hf_model_type == type) return family;
      types += (types.empty() ? "\"" : ", \"") + family.hf_model_type + "\"";
    }
    throw_config_error(path, "model_type", "'" + type + "' is none of " + types);
  }
  const std::int32_t magic = file_magic(path);
  const ModelFamily* first = nullptr;
  for (const ModelFamily& family : families) {
    if (!with_files(family)) continue;
    if (family.file_magic == magic) return family;
    if (!first) first = &family;
  }
  if (!first) throw std::invalid_argument("no model family reads checkpoint files");
  return *first;
}

std::unique_ptr<CheckpointFormat> checkpoint_format_of_state(const StateShapeFields& fields) {
  for (const ModelFamily& family : model_families())
    if (auto format = family.format_of_state(fields)) return format;
  std::string text;
  for (std::int32_t field : fields) text += (text.empty() ? "" : " ") + std::to_string(field);
  throw std::invalid_argument("training-state shape fields [" + text + "] belong to no model family");
}

}  // namespace starzero
