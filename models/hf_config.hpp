#pragma once
// config.json of a Hugging Face folder, for the families' readers (models/hf_gpt.cpp,
// models/hf_llama.cpp): the JSON object and its fields, each missing or mistyped field a
// FileFormatError naming the file and the field.
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
// FileFormatError naming config.json and `field` with `what`.
[[noreturn]] void throw_config_error(const std::filesystem::path& dir, const std::string& field,
                                     const std::string& what);

}  // namespace starzero
