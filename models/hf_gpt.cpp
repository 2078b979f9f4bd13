// GPT-2's Hugging Face folder (GPT2LMHeadModel): its names, shapes and config.json, and how each
// tensor maps to llm.c's layout (models/gpt_layout.hpp). Hugging Face's Conv1D stores weights
// [in, out], the transpose of llm.c's [out, in]; wte has V rows where llm.c pads to Vp with zeros;
// lm_head is tied to wte (a file may hold it; it is not read).
#include <filesystem>
#include <stdexcept>

#include "models/hf_checkpoint.hpp"
#include "models/hf_config.hpp"
#include "models/gpt_files.hpp"

namespace starzero {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// GPT2Config's names; Hugging Face also reads them under the common names, and so does starzero.
constexpr HfConfigKeys kGptConfigKeys = {"GPT2LMHeadModel",
                                         "gpt2",
                                         "GPT-2",
                                         {"n_embd", "hidden_size"},
                                         {"n_layer", "num_hidden_layers"},
                                         {"n_head", "num_attention_heads"},
                                         {"n_positions", "n_ctx", "max_position_embeddings"}};

std::string gpt_config_json(const GptShape& s) {
  const HfConfigCore core{.vocab = s.vocab, .channels = s.channels, .layers = s.layers, .heads = s.heads,
                          .max_positions = s.max_seq};
  return hf_config_text(kGptConfigKeys, core, /*tied_embeddings=*/true,
                        {{"n_ctx", s.max_seq}, {"n_inner", nullptr}, {"activation_function", "gelu_new"},
                         {"layer_norm_epsilon", 1e-5}});
}

}  // namespace

HfModelMap GptHfFolder::map(const GptShape& shape) {
  const GptLayout layout(shape);
  const std::size_t C = std::size_t(shape.channels), V = std::size_t(shape.vocab);
  HfModelMap map;
  map.family = "GPT-2";
  for (int l = 0; l < layout.layers(); ++l) map.layer_params.push_back(layout.layer_params(l));
  map.config_json = gpt_config_json(shape);
  map.prefixes = {"", "transformer."};
  map.ignored_suffixes = {".attn.bias", ".attn.masked_bias", "lm_head.weight"};
  const auto add = [&](std::string name, int layer, GptParam param, std::vector<std::size_t> hf_shape,
                       HfTransform transform = HfTransform::copy) {
    const GptTensor& t = layout[param];
    map.tensors.push_back({std::move(name), std::move(hf_shape), layer, t.layer_offset, t.layer_count, transform, 0});
  };
  add("wte.weight", 0, GptParam::wte, {V, C});  // the region's last Vp - V rows: zeros
  add("wpe.weight", 0, GptParam::wpe, {std::size_t(shape.max_seq), C});
  for (int b = 0; b < shape.layers; ++b) {
    const std::string h = "h." + std::to_string(b) + ".";
    add(h + "ln_1.weight", b + 1, GptParam::ln1w, {C});
    add(h + "ln_1.bias", b + 1, GptParam::ln1b, {C});
    add(h + "attn.c_attn.weight", b + 1, GptParam::qkvw, {C, 3 * C}, HfTransform::transpose);
    add(h + "attn.c_attn.bias", b + 1, GptParam::qkvb, {3 * C});
    add(h + "attn.c_proj.weight", b + 1, GptParam::attprojw, {C, C}, HfTransform::transpose);
    add(h + "attn.c_proj.bias", b + 1, GptParam::attprojb, {C});
    add(h + "ln_2.weight", b + 1, GptParam::ln2w, {C});
    add(h + "ln_2.bias", b + 1, GptParam::ln2b, {C});
    add(h + "mlp.c_fc.weight", b + 1, GptParam::fcw, {C, 4 * C}, HfTransform::transpose);
    add(h + "mlp.c_fc.bias", b + 1, GptParam::fcb, {4 * C});
    add(h + "mlp.c_proj.weight", b + 1, GptParam::fcprojw, {4 * C, C}, HfTransform::transpose);
    add(h + "mlp.c_proj.bias", b + 1, GptParam::fcprojb, {C});
  }
  add("ln_f.weight", shape.layers + 1, GptParam::lnfw, {C});
  add("ln_f.bias", shape.layers + 1, GptParam::lnfb, {C});
  return map;
}

GptShape GptHfFolder::shape_from_config(const fs::path& dir) {
  const auto [config, core] = read_hf_model_config(dir, kGptConfigKeys);
  GptShape shape{.max_seq = core.max_positions, .vocab = core.vocab, .padded_vocab = (core.vocab + 127) / 128 * 128,
                 .layers = core.layers, .heads = core.heads, .channels = core.channels};
  if (config.contains("n_inner") && !config["n_inner"].is_null() &&
      hf_config_int(config, dir, {"n_inner"}) != 4 * shape.channels)
    throw_config_error(dir, "n_inner", "llm.c's GPT-2 has 4·n_embd = " + std::to_string(4 * shape.channels));
  const std::string activation = hf_config_string(config, dir, "activation_function", "gelu_new");
  if (activation != "gelu_new" && activation != "gelu_pytorch_tanh")
    throw_config_error(dir, "activation_function", "'" + activation + "': llm.c's GPT-2 uses gelu_new (tanh)");
  if (config.contains("tie_word_embeddings") && config["tie_word_embeddings"] == false)
    throw_config_error(dir, "tie_word_embeddings", "false: llm.c's GPT-2 ties lm_head to wte");
  try {
    shape.validate();
  } catch (const std::invalid_argument& e) {
    throw_format_error(dir / "config.json", std::string("no valid GPT-2 shape: ") + e.what());
  }
  return shape;
}

}  // namespace starzero
