#include "models/hf_checkpoint.hpp"

#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "models/hf_config.hpp"
#include "models/llama_files.hpp"
#include "models/gpt_files.hpp"
#include "models/safetensors.hpp"
#include "runtime/dtype.hpp"

namespace starzero {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::size_t HfTensorMap::count() const {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  return n;
}

// ---- layouts ------------------------------------------------------------------------------------

namespace {

// Rows of a [rows, cols] tensor, as (rows, cols) for transpose and rope_rows.
std::size_t rows_of(const HfTensorMap& map) { return map.shape.empty() ? 1 : map.shape[0]; }
std::size_t cols_of(const HfTensorMap& map) { return map.count() / std::max<std::size_t>(rows_of(map), 1); }

// Row r of a head-major [heads·hs, cols] tensor in Hugging Face's rotate-half order holds the
// engine's (Meta's interleaved) row: within a head, HF row j·hs/2 + i is engine row 2i + j.
std::size_t engine_row_of_hf_row(std::size_t r, std::size_t head_size) {
  const std::size_t head = r / head_size, within = r % head_size, half = head_size / 2;
  return head * head_size + 2 * (within % half) + within / half;
}

// Calls run(hf_offset, engine_offset, count) for each run of elements contiguous in both layouts.
template <class Run>
void for_each_run(const HfTensorMap& map, Run&& run) {
  const std::size_t rows = rows_of(map), cols = cols_of(map);
  switch (map.transform) {
    case HfTransform::copy:
      run(0, 0, map.count());
      break;
    case HfTransform::transpose:
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c) run(r * cols + c, c * rows + r, 1);
      break;
    case HfTransform::rope_rows:
      for (std::size_t r = 0; r < rows; ++r)
        run(r * cols, engine_row_of_hf_row(r, rows / std::size_t(map.heads)) * cols, cols);
      break;
  }
}

}  // namespace

void hf_to_engine(const HfTensorMap& map, std::span<const float> hf, std::span<float> engine) {
  std::fill(engine.begin(), engine.end(), 0.0f);  // the padding rows
  for_each_run(map, [&](std::size_t h, std::size_t e, std::size_t n) { std::copy_n(hf.data() + h, n, engine.data() + e); });
}

void engine_to_hf(const HfTensorMap& map, std::span<const float> engine, std::span<float> hf) {
  for_each_run(map, [&](std::size_t h, std::size_t e, std::size_t n) { std::copy_n(engine.data() + e, n, hf.data() + h); });
}

// ---- config.json --------------------------------------------------------------------------------

void throw_config_error(const fs::path& dir, const std::string& field, const std::string& what) {
  throw_format_error(dir / "config.json", field + ": " + what);
}

namespace {

// A JSON file (config.json, the index); FileFormatError naming it when it does not parse.
json read_json_file(const fs::path& path) {
  json root;
  try {
    root = json::parse(read_whole_file(path));
  } catch (const json::exception& e) {
    throw_format_error(path, std::string("not valid JSON: ") + e.what());
  }
  return root;
}

}  // namespace

json read_hf_config(const fs::path& dir) {
  const fs::path path = dir / "config.json";
  if (!fs::is_regular_file(path)) throw_format_error(dir, "a Hugging Face folder needs config.json");
  json config = read_json_file(path);
  if (!config.is_object()) throw_format_error(path, "not a JSON object");
  return config;
}

namespace {

// The first of a field's spellings present (null ones skipped), a positive integer.
template <class Names>
int first_positive_int(const json& config, const fs::path& dir, const Names& names) {
  for (const char* name : names) {
    if (!name || !config.contains(name)) continue;
    const json& value = config[name];
    if (!value.is_number_integer() || value.get<std::int64_t>() < 1 || value.get<std::int64_t>() > (1 << 30))
      throw_config_error(dir, name, "not a positive integer (up to 2^30)");
    return value.get<int>();
  }
  throw_config_error(dir, *names.begin(), "missing");
}

}  // namespace

int hf_config_int(const json& config, const fs::path& dir, std::initializer_list<const char*> names) {
  return first_positive_int(config, dir, names);
}

double hf_config_number(const json& config, const fs::path& dir, const char* name, std::optional<double> fallback) {
  if (!config.contains(name) || config[name].is_null()) {
    if (fallback) return *fallback;
    throw_config_error(dir, name, "missing");
  }
  if (!config[name].is_number()) throw_config_error(dir, name, "not a number");
  return config[name].get<double>();
}

std::string hf_config_string(const json& config, const fs::path& dir, const char* name, const std::string& fallback) {
  if (!config.contains(name)) return fallback;
  if (!config[name].is_string()) throw_config_error(dir, name, "not a string");
  return config[name].get<std::string>();
}

std::string hf_config_text(const HfConfigKeys& keys, const HfConfigCore& core, bool tied_embeddings, json extra) {
  extra["architectures"] = {keys.architecture};
  extra["model_type"] = keys.model_type;
  extra["vocab_size"] = core.vocab;
  extra[keys.channels[0]] = core.channels;
  extra[keys.layers[0]] = core.layers;
  extra[keys.heads[0]] = core.heads;
  extra[keys.max_positions[0]] = core.max_positions;
  extra["tie_word_embeddings"] = tied_embeddings;
  extra["torch_dtype"] = "float32";
  return extra.dump(2) + "\n";
}

HfConfig read_hf_model_config(const fs::path& dir, const HfConfigKeys& keys) {
  HfConfig config{read_hf_config(dir), {}};
  const std::string type = hf_config_string(config.json, dir, "model_type", "");
  if (type != keys.model_type)
    throw_config_error(dir, "model_type",
                       "'" + type + "' is not a " + keys.family + " model (\"" + keys.model_type + "\")");
  config.core.vocab = hf_config_int(config.json, dir, {"vocab_size"});
  config.core.channels = first_positive_int(config.json, dir, keys.channels);
  config.core.layers = first_positive_int(config.json, dir, keys.layers);
  config.core.heads = first_positive_int(config.json, dir, keys.heads);
  config.core.max_positions = first_positive_int(config.json, dir, keys.max_positions);
  return config;
}

std::string hf_model_type(const fs::path& dir) {
  const std::string type = hf_config_string(read_hf_config(dir), dir, "model_type", "");
  if (type.empty()) throw_config_error(dir, "model_type", "missing (a string such as \"gpt2\" or \"llama\")");
  return type;
}

// ---- reading a folder ---------------------------------------------------------------------------

namespace {

// The tensors of a folder's safetensors files by name.
class HfFolder {
 public:
  struct Found {
    const SafetensorsFile* file;
    const SafeTensorInfo* tensor;
  };

  explicit HfFolder(const fs::path& dir) {
    const fs::path index = dir / "model.safetensors.index.json";
    if (fs::exists(index))
      open_index(dir, index);
    else if (fs::exists(dir / "model.safetensors"))
      add_single(add_file(dir / "model.safetensors"));
    else
      throw_format_error(dir, "neither model.safetensors nor model.safetensors.index.json");
  }

  const std::map<std::string, Found>& tensors() const { return tensors_; }
  std::optional<Found> find(const std::string& name) const {
    const auto it = tensors_.find(name);
    return it == tensors_.end() ? std::nullopt : std::optional<Found>(it->second);
  }

 private:
  const SafetensorsFile& add_file(const fs::path& path) {
    files_.push_back(std::make_unique<SafetensorsFile>(path));
    return *files_.back();
  }
  void open_index(const fs::path& dir, const fs::path& index) {
    json root = read_json_file(index);
    if (!root.is_object() || !root.contains("weight_map") || !root["weight_map"].is_object())
      throw_format_error(index, "no weight_map object");
    std::map<std::string, const SafetensorsFile*> opened;
    for (const auto& [name, file] : root["weight_map"].items()) {
      if (!file.is_string()) throw_format_error(index, "weight_map '" + name + "' is not a file name");
      const std::string file_name = file.get<std::string>();
      if (file_name.empty() || file_name.find('/') != std::string::npos || file_name == "..")
        throw_format_error(index, "weight_map '" + name + "': '" + file_name + "' is not a file of the folder");
      if (!opened.count(file_name)) opened[file_name] = &add_file(dir / file_name);
      const SafeTensorInfo* tensor = opened[file_name]->find(name);
      if (!tensor) throw_format_error(dir / file_name, "no tensor '" + name + "', which the index places there");
      tensors_[name] = {opened[file_name], tensor};
    }
    for (const auto& [file_name, file] : opened)
      for (const SafeTensorInfo& t : file->tensors())
        if (!tensors_.count(t.name) || tensors_[t.name].file != file)
          throw_format_error(dir / file_name, "tensor '" + t.name + "' is not in the index's weight_map for this file");
  }
  void add_single(const SafetensorsFile& file) {
    for (const SafeTensorInfo& t : file.tensors()) tensors_[t.name] = {&file, &t};
  }

  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Found> tensors_;
};

std::string shape_text(const std::vector<std::size_t>& shape) {
  std::string text = "[";
  for (std::size_t d : shape) text += (text.size() > 1 ? ", " : "") + std::to_string(d);
  return text + "]";
}

// Where a map's tensor is in the folder: its name, with an accepted prefix, or its fallback's.
HfFolder::Found locate(const HfFolder& folder, const HfModelMap& map, const HfTensorMap& tensor, const fs::path& dir) {
  std::vector<std::string> names = {tensor.name};
  if (const auto it = map.fallbacks.find(tensor.name); it != map.fallbacks.end()) names.push_back(it->second);
  for (const std::string& name : names)
    for (const std::string& prefix : map.prefixes)
      if (const auto found = folder.find(prefix + name)) {
        if (found->tensor->shape != tensor.shape)
          throw_format_error(found->file->path(), "tensor '" + prefix + name + "' has shape " +
                                                      shape_text(found->tensor->shape) + " where config.json's " +
                                                      map.family + " shape needs " + shape_text(tensor.shape));
        return *found;
      }
  throw_format_error(dir, "missing tensor '" + tensor.name + "' (" + map.family + ")");
}

bool known_name(const HfModelMap& map, const std::string& name) {
  for (const std::string& suffix : map.ignored_suffixes)
    if (name.ends_with(suffix)) return true;
  for (const std::string& prefix : map.prefixes) {
    if (!name.starts_with(prefix)) continue;
    const std::string bare = name.substr(prefix.size());
    for (const HfTensorMap& t : map.tensors)
      if (t.name == bare) return true;
  }
  return false;
}

std::vector<HfFolder::Found> locate_all(const HfFolder& folder, const HfModelMap& map, const fs::path& dir) {
  std::vector<HfFolder::Found> found;
  for (const HfTensorMap& tensor : map.tensors) found.push_back(locate(folder, map, tensor, dir));
  for (const auto& [name, where] : folder.tensors())
    if (!known_name(map, name))
      throw_format_error(where.file->path(), "unexpected tensor '" + name + "' (not a " + map.family + " tensor)");
  return found;
}

// The engine's region of tensor `index` read from the folder.
void read_region(const HfModelMap& map, std::size_t index, const HfFolder::Found& where, std::span<float> region) {
  std::vector<float> hf(map.tensors[index].count());
  where.file->read(*where.tensor, hf);
  hf_to_engine(map.tensors[index], hf, region);
}

}  // namespace

void check_hf_folder(const fs::path& dir, const HfModelMap& map) { locate_all(HfFolder(dir), map, dir); }

void read_hf_folder(const fs::path& dir, const HfModelMap& map, const LayerDestination& destination) {
  const HfFolder folder = HfFolder(dir);
  const std::vector<HfFolder::Found> found = locate_all(folder, map, dir);
  std::vector<std::span<float>> layers;
  for (std::size_t l = 0; l < map.layer_params.size(); ++l) layers.push_back(destination(int(l), map.layer_params[l]));
  for (std::size_t i = 0; i < map.tensors.size(); ++i) {
    const HfTensorMap& t = map.tensors[i];
    read_region(map, i, found[i], layers[std::size_t(t.layer)].subspan(t.layer_offset, t.engine_count));
  }
}

LayerSource hf_folder_source(const fs::path& dir, const HfModelMap& map) {
  struct State {
    HfFolder folder;
    HfModelMap map;
    std::vector<HfFolder::Found> found;
    std::size_t cached = SIZE_MAX;
    std::vector<float> region;
  };
  auto state = std::make_shared<State>(State{HfFolder(dir), map, {}, SIZE_MAX, {}});
  state->found = locate_all(state->folder, state->map, dir);
  return [state](int layer, std::size_t begin, std::span<float> out) {
    const std::size_t end = begin + out.size();
    for (std::size_t i = 0; i < state->map.tensors.size(); ++i) {
      const HfTensorMap& t = state->map.tensors[i];
      const std::size_t first = std::max(begin, t.layer_offset), last = std::min(end, t.layer_offset + t.engine_count);
      if (t.layer != layer || first >= last) continue;
      if (state->cached != i) {
        state->region.assign(t.engine_count, 0.0f);
        read_region(state->map, i, state->found[i], state->region);
        state->cached = i;
      }
      std::copy(state->region.begin() + std::ptrdiff_t(first - t.layer_offset),
                state->region.begin() + std::ptrdiff_t(last - t.layer_offset),
                out.begin() + std::ptrdiff_t(first - begin));
    }
  };
}

DType hf_folder_precision(const fs::path& dir) {
  const HfFolder folder = HfFolder(dir);
  for (const auto& [name, where] : folder.tensors())
    if (where.tensor->dtype != SafeDType::bf16) return DType::f32;
  return DType::bf16;
}

// ---- writing a folder ---------------------------------------------------------------------------

void write_hf_folder(const fs::path& dir, const HfModelMap& map, const LayerSource& source, DType precision) {
  if (precision != DType::f32 && precision != DType::bf16)
    throw std::invalid_argument("Hugging Face folders are written as fp32 or bf16");
  fs::create_directories(dir);
  std::vector<SafeTensorSpec> specs;
  for (const HfTensorMap& t : map.tensors)
    specs.push_back({t.name, precision == DType::bf16 ? SafeDType::bf16 : SafeDType::f32, t.shape});
  std::vector<float> region;
  write_safetensors(dir / "model.safetensors", specs, {{"format", "pt"}}, [&](std::size_t i, std::span<float> hf) {
    const HfTensorMap& t = map.tensors[i];
    region.assign(t.engine_count, 0.0f);
    source(t.layer, t.layer_offset, region);
    engine_to_hf(t, region, hf);
  });
  write_text_atomically(dir / "config.json", map.config_json);
  fs::remove(dir / "model.safetensors.index.json");
}

// ---- as a CheckpointFormat ----------------------------------------------------------------------

namespace {

class HfCheckpointFormat final : public CheckpointFormat {
 public:
  HfCheckpointFormat(HfModelMap map, StateLayout layout) : map_(std::move(map)), layout_(std::move(layout)) {}

  StateLayout state_layout() const override { return layout_; }
  void write(const fs::path& path, const LayerSource& source, DType precision) const override {
    write_hf_folder(path, map_, source, precision);
  }
  void check(const fs::path& path) const override {
    if (!fs::is_directory(path)) throw_format_error(path, "not a Hugging Face folder");
    check_hf_folder(path, map_);
  }
  void read(const fs::path& path, const LayerDestination& destination) const override {
    read_hf_folder(path, map_, destination);
  }
  DType stored_precision(const fs::path& path) const override { return hf_folder_precision(path); }
  LayerSource source(const fs::path& path) const override { return hf_folder_source(path, map_); }
  bool writes_layers_in_order() const override { return true; }  // the maps list the tensors layer by layer
  std::string describe(DType precision) const override {
    return "Hugging Face " + map_.family + " folder, " + (precision == DType::bf16 ? "BF16" : "F32");
  }

 private:
  HfModelMap map_;
  StateLayout layout_;
};

}  // namespace

std::unique_ptr<CheckpointFormat> hf_checkpoint_format(HfModelMap map, StateLayout layout) {
  return std::make_unique<HfCheckpointFormat>(std::move(map), std::move(layout));
}

// ---- an llm.c file read at random ---------------------------------------------------------------

LayerSource llmc_file_source(const fs::path& path, std::vector<std::vector<LlmcRun>> runs, std::size_t header_bytes,
                             DType precision) {
  const std::size_t element = dtype_size(precision);
  return [=](int layer, std::size_t begin, std::span<float> out) {
    const std::size_t end = begin + out.size();
    std::vector<std::uint16_t> narrow;
    for (const LlmcRun& run : runs.at(std::size_t(layer))) {
      const std::size_t first = std::max(begin, run.layer_offset), last = std::min(end, run.layer_offset + run.count);
      if (first >= last) continue;
      const std::uint64_t at = header_bytes + (run.llmc_offset + (first - run.layer_offset)) * element;
      float* to = out.data() + (first - begin);
      if (precision == DType::f32) {
        read_file_at(path, at, to, (last - first) * 4);
        continue;
      }
      narrow.resize(last - first);
      read_file_at(path, at, narrow.data(), narrow.size() * 2);
      for (std::size_t k = 0; k < narrow.size(); ++k) to[k] = bf16_to_float(narrow[k]);
    }
  };
}

}  // namespace starzero
