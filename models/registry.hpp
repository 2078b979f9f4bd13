#pragma once
// The model families `starzero train --model NAME` can train, and how a request becomes a model:
// each family turns a ModelRequest (shape flags, data, a checkpoint that defines the shape) into
// a checked ModelSpec (train/trainable.hpp) before StarPU starts, and recognises its own
// checkpoint files. Adding a model: docs/adding-a-model.md (its files in models/, one line in
// registry.cpp).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/jsonl_data.hpp"
#include "models/token_model.hpp"
#include "offload/footprint.hpp"
#include "train/trainable.hpp"

namespace starzero {

// What the command line asks of a model. A family rejects (std::invalid_argument) what it cannot
// use, and a checkpoint whose shape contradicts a given shape flag (naming both).
struct ModelRequest {
  std::string family = "gpt";
  std::optional<std::string> preset;
  std::optional<int> layers, channels, heads, max_seq;
  std::optional<std::filesystem::path> data;        // training (or evaluation) data: a file, folder or glob
  std::optional<std::filesystem::path> validation_data;  // --val-data: the validation split's (token shards)
  std::optional<std::filesystem::path> tokenizer;   // decodes a token model's samples (--tokenizer)
  std::optional<int> seq;                           // tokens per row
  std::optional<std::filesystem::path> checkpoint;  // defines the shape when given
  double validation_fraction = 0.1;                 // 0: the whole data is evaluation data (starzero eval)
  std::uint64_t seed = 1337;                        // data drawn from a seed
  // A JSONL --data or --val-data (models/jsonl_data.hpp): how its records become tokens and a
  // loss mask (seq: --seq when given), and what reports the reading's progress.
  JsonlOptions jsonl;
  JsonlProgress data_progress;
};

// A family's preset without data, for `starzero plan` and `bench step`: its shape and what it
// takes (the vocabulary is the preset's, not a data set's).
struct PresetModel {
  std::string describe;  // the shape in words ("L=12 NH=12 C=768 ...")
  std::size_t parameters = 0;
  int layers = 0, channels = 0, heads = 0, kv_heads = 0, ffn_hidden = 0, vocab = 0, max_seq = 0;
  // The footprint of micro-batches of `batch` sequences of `seq` tokens (GPT: `seq` also sizes the
  // position table); std::invalid_argument for what the shape cannot take.
  std::function<ModelFootprint(int batch, int seq, const ActivationPolicy&)> footprint;
  // std::invalid_argument for a tiling the model cannot take with `batch` sequences per
  // micro-batch (ModelSpec::check_tiling's checks), before StarPU starts.
  std::function<void(const Tiling& tiling, int batch)> check_tiling;
  // The model, on the running StarPU session, cut as `tiling` says (tiles set; head groups empty:
  // the family's choice, which TokenModel::tiling() tells).
  std::function<std::unique_ptr<TokenModel>(DType, int batch, int seq, const Tiling& tiling)> make_model;
};

struct ModelFamily {
  std::string name;
  std::string summary;  // one line for --help
  std::function<std::unique_ptr<ModelSpec>(const ModelRequest&)> prepare;
  // This family's checkpoint format for a model whose training-state files record these shape
  // fields, or null when they are not this family's (`starzero consolidate` works from the
  // state files alone).
  std::function<std::unique_ptr<CheckpointFormat>(const StateShapeFields&)> format_of_state;
  // The preset of that name (std::invalid_argument naming the family's presets when it has
  // none); empty for a family without presets.
  std::function<PresetModel(std::string_view name)> preset;
  // Their names, the one a run takes without --preset first (for --help); empty without presets.
  std::vector<std::string> preset_names;
  // Its checkpoints, for `starzero eval` and `starzero convert`: the model_type of their Hugging
  // Face config.json and the magic of their llm.c files (empty and 0 for a family without), and
  // the family's checkpoint format for the checkpoint at a path, a file or a Hugging Face folder
  // (FileFormatError when it is none of this family's); its hugging_face() gives the other.
  std::string hf_model_type;
  std::int32_t file_magic = 0;
  std::function<std::unique_ptr<CheckpointFormat>(const std::filesystem::path&)> format_of_checkpoint;
};

const std::vector<ModelFamily>& model_families();
// std::invalid_argument listing the names for an unknown one.
const ModelFamily& model_family(std::string_view name);
std::unique_ptr<ModelSpec> prepare_model(const ModelRequest& request);
// The first family's preset of that name; std::invalid_argument (the first family's message)
// when no family has it.
PresetModel preset_model(std::string_view name);
// The family of a checkpoint: a folder's by its config.json model_type, a file's by its magic
// (another magic: the first family with files, whose reader names what is wrong).
// FileFormatError for a folder of a model_type no family has.
const ModelFamily& checkpoint_model_family(const std::filesystem::path& path);
// The checkpoint format of whichever family's state files record `fields`; std::invalid_argument
// when none does.
std::unique_ptr<CheckpointFormat> checkpoint_format_of_state(const StateShapeFields& fields);

// The families (each defined in its own file).
ModelFamily gpt_family();     // models/gpt_family.cpp
ModelFamily mlp_family();     // models/mlp_family.cpp
ModelFamily llama3_family();  // models/llama_family.cpp

}  // namespace starzero
