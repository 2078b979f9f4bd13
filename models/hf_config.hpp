#pragma once
// config.json of a Hugging Face folder, for the families' readers (models/hf_gpt.cpp,
// models/hf_llama.cpp): the JSON object and its fields, each missing or mistyped field a
// FileFormatError naming the file and the field.
#include <array>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace starzero {

// DIR/config.json as a JSON object.
nlohmann::json read_hf_config(const std::filesystem::path& dir);
// A positive integer field (the first of `names` present; they are a field's spellings).
int hf_config_int(const nlohmann::json& config, const std::filesystem::path& dir,
                  std::initializer_list<const char*> names);
// A number field, or `fallback` when absent (nullopt: required).
double hf_config_number(const nlohmann::json& config, const std::filesystem::path& dir, const char* name,
                        std::optional<double> fallback = std::nullopt);
// A string field, or `fallback` when absent.
std::string hf_config_string(const nlohmann::json& config, const std::filesystem::path& dir, const char* name,
                             const std::string& fallback);

// ---- the fields every transformer's config.json has ----------------------------------------
// Under the names its model_type gives them (GPT-2's n_embd is Llama's hidden_size). A field's
// spellings: the first is written, any is read (the first present); unused slots are null.
using HfFieldNames = std::array<const char*, 3>;
struct HfConfigKeys {
  const char* architecture;  // "GPT2LMHeadModel"
  const char* model_type;    // "gpt2"
  const char* family;        // "GPT-2", in messages
  HfFieldNames channels, layers, heads, max_positions;
};
// The values of those fields; `vocab` is vocab_size under every model_type.
struct HfConfigCore {
  int vocab = 0, channels = 0, layers = 0, heads = 0, max_positions = 0;
};
// config.json's text: `core` under `keys`' names, the architecture and model_type,
// tie_word_embeddings, torch_dtype float32, and the model's own fields `extra`.
std::string hf_config_text(const HfConfigKeys& keys, const HfConfigCore& core, bool tied_embeddings,
                           nlohmann::json extra);
// DIR/config.json, which must be of `keys.model_type`, and its core fields.
struct HfConfig {
  nlohmann::json json;
  HfConfigCore core;
};
HfConfig read_hf_model_config(const std::filesystem::path& dir, const HfConfigKeys& keys);

// FileFormatError naming config.json and `field` with `what`.
[[noreturn]] void throw_config_error(const std::filesystem::path& dir, const std::string& field,
                                     const std::string& what);

}  // namespace starzero
