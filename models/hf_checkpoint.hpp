#pragma once
// Hugging Face model folders (config.json and model.safetensors, or the shards that
// model.safetensors.index.json lists) as checkpoints of the engine's layers, host-side.
//
// A family describes its folder for one shape as an HfModelMap (models/hf_gpt.cpp,
// models/hf_llama.cpp): each Hugging Face tensor, its shape, and the region of an engine layer it
// fills, with the layout change between the two (a transpose, the rotary row permutation,
// padding rows). Everything else here is the same for every family: reading a folder into layers
// or as a LayerSource one tensor at a time, checking it, and writing one from a LayerSource one
// tensor at a time (config.json and model.safetensors, each atomically).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "models/gpt_layout.hpp"
#include "models/llama_layout.hpp"
#include "train/trainable.hpp"

namespace starzero {

// How a Hugging Face tensor's elements sit in the engine's region.
enum class HfTransform {
  copy,       // the same order (the region may be longer: zero padding rows after it)
  transpose,  // Hugging Face [rows, cols] is the engine's [cols, rows] (GPT-2's Conv1D)
  rope_rows,  // rows of `heads` heads: Hugging Face's rotate-half order, the engine's interleaved pairs
};

struct HfTensorMap {
  std::string name;                // Hugging Face's name
  std::vector<std::size_t> shape;  // as Hugging Face stores it
  int layer = 0;                   // the engine layer and where in it
  std::size_t layer_offset = 0;
  std::size_t engine_count = 0;  // elements of the region (more than the tensor's: zero rows)
  HfTransform transform = HfTransform::copy;
  int heads = 0;  // rope_rows
  std::size_t count() const;
};

// One family's folder for one shape.
struct HfModelMap {
  std::string family;                 // "GPT-2", for messages
  std::vector<HfTensorMap> tensors;   // in the order a writer stores them: by increasing layer
  std::vector<std::size_t> layer_params;
  std::string config_json;            // what a writer puts in config.json
  std::vector<std::string> prefixes;  // also accepted before every name on reading ("transformer.")
  // A tensor a folder may leave out, and the one it is read from instead (a tied lm_head).
  std::map<std::string, std::string> fallbacks;
  // Tensors a reader ignores, by the end of their name (GPT-2's attention mask buffers).
  std::vector<std::string> ignored_suffixes;
};

// The Hugging Face tensor's values laid out as the engine's region (engine_count values) and
// back (the padding rows dropped).
void hf_to_engine(const HfTensorMap& map, std::span<const float> hf, std::span<float> engine);
void engine_to_hf(const HfTensorMap& map, std::span<const float> engine, std::span<float> hf);

// FileFormatError unless the folder holds every tensor of `map` with its shape, and nothing
// unknown; its config.json is the family's business (read before the map is made).
void check_hf_folder(const std::filesystem::path& dir, const HfModelMap& map);
// Every layer read into `destination` (each asked once), one tensor in memory at a time.
void read_hf_folder(const std::filesystem::path& dir, const HfModelMap& map, const LayerDestination& destination);
// The folder's layers as a LayerSource that reads the tensors a request needs (one cached).
LayerSource hf_folder_source(const std::filesystem::path& dir, const HfModelMap& map);
// f32 when every tensor is stored as F32 or F16 (fp16 is widened), bf16 when all are BF16.
DType hf_folder_precision(const std::filesystem::path& dir);
// Writes config.json and model.safetensors (F32 or BF16) into `dir` (made if missing), each
// atomically, from `source`, one tensor in memory at a time; a model.safetensors.index.json
// left there by an earlier sharded folder is removed.
void write_hf_folder(const std::filesystem::path& dir, const HfModelMap& map, const LayerSource& source,
                     DType precision);
// The model_type of the folder's config.json ("gpt2", "llama"); FileFormatError when missing.
std::string hf_model_type(const std::filesystem::path& dir);

// A family's folder as a CheckpointFormat (check, read, write: the functions above).
std::unique_ptr<CheckpointFormat> hf_checkpoint_format(HfModelMap map, StateLayout layout);

// A LayerSource reading an llm.c checkpoint file at random, as each request needs: `runs[l]`
// are layer l's runs (GptLayout::layer_runs), the parameters start after `header_bytes`, stored
// fp32 or bf16 (`precision`).
LayerSource llmc_file_source(const std::filesystem::path& path, std::vector<std::vector<LlmcRun>> runs,
                             std::size_t header_bytes, DType precision);

// ---- the families' folders (models/hf_gpt.cpp, models/hf_llama.cpp) ----------------------------
// What a family's folder is, as its traits name it (models/transformer_family.hpp): the
// model_type of its config.json, the shape config.json describes (FileFormatError naming the
// field) and the map of its tensors for a shape.
struct GptHfFolder {
  static constexpr const char* kModelType = "gpt2";
  static GptShape shape_from_config(const std::filesystem::path& dir);  // Vp: V rounded up to 128
  static HfModelMap map(const GptShape& shape);
};
struct LlamaHfFolder {
  static constexpr const char* kModelType = "llama";
  static LlamaShape shape_from_config(const std::filesystem::path& dir);
  static HfModelMap map(const LlamaShape& shape);
};

}  // namespace starzero
