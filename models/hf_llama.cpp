// Llama 3's Hugging Face folder (LlamaForCausalLM): its names, shapes and config.json, and how
// each tensor maps to llm.c's layout (models/llama_layout.hpp). Both store linear weights
// [out, in]. starzero's RoPE (tasks/nn_llama_kernels.hpp) rotates interleaved pairs (x[2i],
// x[2i+1]) as Meta's and llm.c's code does; Hugging Face's converter permuted q_proj's and
// k_proj's rows within each head for its rotate-half RoPE (row 2i + j becomes row j·hs/2 + i), so
// those rows are permuted back on reading and again on writing (HfTransform::rope_rows). The
// SwiGLU's gate_proj is llm.c's c_fc2 (the silu'd one), up_proj c_fc, down_proj c_proj. A folder
// with tied embeddings (no lm_head.weight) gives lm_head the embedding's values.
#include <cmath>
#include <filesystem>
#include <stdexcept>

#include "models/hf_checkpoint.hpp"
#include "models/hf_config.hpp"
#include "models/llama_files.hpp"

namespace starzero {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Llama 3.1's RoPE scaling, the one rule starzero's kernels implement (use_scaled_rope).
json llama31_rope_scaling() {
  return {{"rope_type", "llama3"},
          {"factor", 8.0},
          {"low_freq_factor", 1.0},
          {"high_freq_factor", 4.0},
          {"original_max_position_embeddings", 8192}};
}

constexpr HfConfigKeys kLlamaConfigKeys = {"LlamaForCausalLM",    "llama",
                                           "Llama",               {"hidden_size"},
                                           {"num_hidden_layers"}, {"num_attention_heads"},
                                           {"max_position_embeddings"}};

std::string llama_config_json(const LlamaShape& s) {
  const HfConfigCore core{.vocab = s.vocab, .channels = s.channels, .layers = s.layers, .heads = s.heads,
                          .max_positions = s.max_seq};
  return hf_config_text(kLlamaConfigKeys, core, /*tied_embeddings=*/false,
                        {{"intermediate_size", s.ffn_hidden},
                         {"num_key_value_heads", s.kv_heads},
                         {"head_dim", s.head_size()},
                         {"rms_norm_eps", double(s.norm_eps)},
                         {"rope_theta", double(s.rope_theta)},
                         {"rope_scaling", s.use_scaled_rope ? llama31_rope_scaling() : json(nullptr)},
                         {"hidden_act", "silu"},
                         {"attention_bias", false},
                         {"mlp_bias", false}});
}

bool scaled_rope(const json& config, const fs::path& dir) {
  if (!config.contains("rope_scaling") || config["rope_scaling"].is_null()) return false;
  const json& scaling = config["rope_scaling"];
  const json expected = llama31_rope_scaling();
  for (const auto& [key, value] : expected.items())
    if (!scaling.is_object() || !scaling.contains(key) || scaling[key] != value)
      throw_config_error(dir, "rope_scaling", "only Llama 3.1's scaling is supported: " + expected.dump());
  return true;
}

// The fields the layout and the math do not depend on follow the preset of the same width
// (LlamaShape::from_fields), as for a run's state files.
LlamaShape llama_shape_from_config(const json& config, const HfConfigCore& core, const fs::path& dir) {
  const int kv_heads =
      config.contains("num_key_value_heads") ? hf_config_int(config, dir, {"num_key_value_heads"}) : core.heads;
  const StateShapeFields fields = {core.vocab,  core.channels, core.layers,
                                   core.heads, kv_heads,      -hf_config_int(config, dir, {"intermediate_size"})};
  LlamaShape shape;
  try {
    shape = LlamaShape::from_fields(fields);
  } catch (const std::invalid_argument& e) {
    throw_format_error(dir / "config.json", std::string("no valid Llama shape: ") + e.what());
  }
  shape.max_seq = core.max_positions;
  shape.norm_eps = float(hf_config_number(config, dir, "rms_norm_eps", 1e-5));
  shape.rope_theta = float(hf_config_number(config, dir, "rope_theta", 10000.0));
  shape.use_scaled_rope = scaled_rope(config, dir);
  if (!(shape.norm_eps > 0) || !(shape.rope_theta > 0) || !std::isfinite(shape.rope_theta))
    throw_config_error(dir, "rms_norm_eps / rope_theta", "must be positive");
  if (config.contains("head_dim") && !config["head_dim"].is_null() &&
      hf_config_int(config, dir, {"head_dim"}) != shape.head_size())
    throw_config_error(dir, "head_dim", "differs from hidden_size / num_attention_heads = " +
                                            std::to_string(shape.head_size()));
  for (const char* bias : {"attention_bias", "mlp_bias"})
    if (config.contains(bias) && config[bias] == true) throw_config_error(dir, bias, "true: Llama 3 has no biases");
  return shape;
}

}  // namespace

HfModelMap LlamaHfFolder::map(const LlamaShape& shape) {
  const LlamaLayout layout(shape);
  const std::size_t C = std::size_t(shape.channels), V = std::size_t(shape.vocab), H = std::size_t(shape.ffn_hidden);
  const std::size_t hs = std::size_t(shape.head_size()), NH = std::size_t(shape.heads), NKV = std::size_t(shape.kv_heads);
  HfModelMap map;
  map.family = "Llama 3";
  for (int l = 0; l < layout.layers(); ++l) map.layer_params.push_back(layout.layer_params(l));
  map.config_json = llama_config_json(shape);
  map.prefixes = {""};
  map.ignored_suffixes = {".rotary_emb.inv_freq"};
  map.fallbacks = {{"lm_head.weight", "model.embed_tokens.weight"}};
  // `rows` rows of C starting at row `row` of the tensor `param`'s region.
  const auto add = [&](std::string name, int layer, LlamaParam param, std::vector<std::size_t> hf_shape,
                       std::size_t row = 0, HfTransform transform = HfTransform::copy, std::size_t heads = 0) {
    const LlamaTensor& t = layout[param];
    const std::size_t count = hf_shape[0] * (hf_shape.size() > 1 ? hf_shape[1] : 1);
    map.tensors.push_back({std::move(name), std::move(hf_shape), layer, t.layer_offset + row * C, count, transform,
                           int(heads)});
  };
  add("model.embed_tokens.weight", 0, LlamaParam::wte, {V, C});
  for (int b = 0; b < shape.layers; ++b) {
    const std::string p = "model.layers." + std::to_string(b) + ".";
    add(p + "input_layernorm.weight", b + 1, LlamaParam::ln1w, {C});
    add(p + "self_attn.q_proj.weight", b + 1, LlamaParam::qkvw, {NH * hs, C}, 0, HfTransform::rope_rows, NH);
    add(p + "self_attn.k_proj.weight", b + 1, LlamaParam::qkvw, {NKV * hs, C}, NH * hs, HfTransform::rope_rows, NKV);
    add(p + "self_attn.v_proj.weight", b + 1, LlamaParam::qkvw, {NKV * hs, C}, (NH + NKV) * hs);
    add(p + "self_attn.o_proj.weight", b + 1, LlamaParam::attprojw, {C, C});
    add(p + "post_attention_layernorm.weight", b + 1, LlamaParam::ln2w, {C});
    add(p + "mlp.gate_proj.weight", b + 1, LlamaParam::fc2w, {H, C});
    add(p + "mlp.up_proj.weight", b + 1, LlamaParam::fcw, {H, C});
    add(p + "mlp.down_proj.weight", b + 1, LlamaParam::fcprojw, {C, H});
  }
  add("model.norm.weight", shape.layers + 1, LlamaParam::lnfw, {C});
  add("lm_head.weight", shape.layers + 1, LlamaParam::lm_head, {V, C});
  return map;
}

LlamaShape LlamaHfFolder::shape_from_config(const fs::path& dir) {
  const auto [config, core] = read_hf_model_config(dir, kLlamaConfigKeys);
  return llama_shape_from_config(config, core, dir);
}

}  // namespace starzero
