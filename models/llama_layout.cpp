#include "models/llama_layout.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <stdexcept>

#include "tasks/nn_llama_kernels.hpp"

namespace starzero {

namespace {

// ---- the table ----------------------------------------------------------------------------------

// The sizes a dimension is one of.
enum class Size { layers, vocab, channels, qkv, hidden };

struct ParamDef {
  LlamaParam id;
  std::string_view name;
  LlmcLayerKind layer_kind;
  std::vector<Size> dims;  // block tensors lead with L
};

const std::vector<ParamDef>& param_table() {
  using enum Size;
  constexpr LlmcLayerKind kEmbedding = LlmcLayerKind::embedding, kBlock = LlmcLayerKind::block,
                          kHead = LlmcLayerKind::head;
  // llm.c's train_llama3.py write_tensors order.
  static const std::vector<ParamDef> table = {
      {LlamaParam::wte, "transformer.wte.weight", kEmbedding, {vocab, channels}},
      {LlamaParam::ln1w, "ln_1.weight", kBlock, {layers, channels}},
      {LlamaParam::qkvw, "attn.c_attn.weight", kBlock, {layers, qkv, channels}},
      {LlamaParam::attprojw, "attn.c_proj.weight", kBlock, {layers, channels, channels}},
      {LlamaParam::ln2w, "ln_2.weight", kBlock, {layers, channels}},
      {LlamaParam::fcw, "mlp.c_fc.weight", kBlock, {layers, hidden, channels}},
      {LlamaParam::fc2w, "mlp.c_fc2.weight", kBlock, {layers, hidden, channels}},
      {LlamaParam::fcprojw, "mlp.c_proj.weight", kBlock, {layers, channels, hidden}},
      {LlamaParam::lnfw, "transformer.ln_f.weight", kHead, {channels}},
      {LlamaParam::lm_head, "lm_head.weight", kHead, {vocab, channels}},
  };
  return table;
}

std::int64_t size_of(const LlamaShape& s, Size size) {
  switch (size) {
    case Size::layers: return s.layers;
    case Size::vocab: return s.vocab;
    case Size::channels: return s.channels;
    case Size::qkv:
      return (std::int64_t(s.heads) + 2 * std::int64_t(s.kv_heads)) * (s.heads > 0 ? s.channels / s.heads : 0);
    case Size::hidden: return s.ffn_hidden;
  }
  return 0;
}

std::int64_t checked_mul(std::int64_t a, std::int64_t b) { return llmc_checked_mul(a, b, "Llama"); }
std::int64_t checked_add(std::int64_t a, std::int64_t b) { return llmc_checked_add(a, b, "Llama"); }

// Elements of dims[skip..].
std::int64_t elements(const LlamaShape& s, const std::vector<Size>& dims, std::size_t skip = 0) {
  std::int64_t count = 1;
  for (std::size_t i = skip; i < dims.size(); ++i) count = checked_mul(count, size_of(s, dims[i]));
  return count;
}

// Elements of one layer of each kind.
std::array<std::int64_t, 3> kind_elements(const LlamaShape& s) {
  std::array<std::int64_t, 3> per_kind{};
  for (const ParamDef& def : param_table()) {
    std::int64_t& total = per_kind[std::size_t(def.layer_kind)];
    total = checked_add(total, elements(s, def.dims, def.layer_kind == LlmcLayerKind::block ? 1 : 0));
  }
  return per_kind;
}

std::int64_t total_params(const LlamaShape& s) {
  const auto k = kind_elements(s);
  return checked_add(checked_add(k[0], checked_mul(s.layers, k[1])), k[2]);
}

// ---- presets ----------------------------------------------------------------------------------


// Meta's published configurations (params.json) in llm.c's untied layout. The 1B is Llama 3.2
// 1B's shape; Meta ties its embedding, llm.c's format keeps lm_head apart, and the kernels' RoPE
// scaling is Llama 3.1's (factor 8; Meta's 3.2 uses 32): docs/llama.md.
const std::vector<LlamaPreset>& presets() {
  static const std::vector<LlamaPreset> list = {
      // H = llama_ffn_hidden(64, none, 32) = 192; hs = 16.
      {"llama3-tiny", llama_shape(4, 64, 4, 2, 256, 64, 10000.0f, false, 0.0f, 32, 3, 1)},
      // H = 8192.
      {"llama3-1B", llama_shape(16, 2048, 32, 8, 128256, 8192, 500000.0f, true, 1.5f, 256, 3, 2)},
      // H = 14336.
      {"llama3-8B", llama_shape(32, 4096, 32, 8, 128256, 8192, 500000.0f, true, 1.3f, 1024, 3, 1)},
      // H = 28672.
      {"llama3-70B", llama_shape(80, 8192, 64, 8, 128256, 8192, 500000.0f, true, 1.3f, 4096, 3, 1)},
  };
  return list;
}

}  // namespace

LlamaShape llama_shape(int L, int C, int NH, int NKV, int V, int maxT, float theta, bool scaled, float multiplier,
                       int multiple_of, int major, int minor) {
  return {.layers = L, .channels = C, .heads = NH, .kv_heads = NKV,
          .ffn_hidden = kernels::llama_ffn_hidden(C, multiplier, multiple_of), .vocab = V, .max_seq = maxT,
          .norm_eps = 1e-5f, .rope_theta = theta, .use_scaled_rope = scaled, .ffn_dim_multiplier = multiplier,
          .multiple_of = multiple_of, .major_version = major, .minor_version = minor};
}

// ---- LlamaShape ---------------------------------------------------------------------------------

std::size_t LlamaShape::param_count() const { return std::size_t(total_params(*this)); }

void LlamaShape::validate() const {
  if (layers <= 0 || channels <= 0 || heads <= 0 || kv_heads <= 0 || ffn_hidden <= 0 || vocab <= 0 || max_seq <= 0)
    throw std::invalid_argument("every dimension must be positive (" + to_string() + ")");
  if (channels % heads != 0)
    throw std::invalid_argument("channels C=" + std::to_string(channels) +
                                " is not a multiple of heads NH=" + std::to_string(heads));
  if ((channels / heads) % 2 != 0)
    throw std::invalid_argument("head size C/NH=" + std::to_string(channels / heads) + " must be even (RoPE)");
  if (heads % kv_heads != 0)
    throw std::invalid_argument("heads NH=" + std::to_string(heads) +
                                " is not a multiple of kv heads NKV=" + std::to_string(kv_heads));
  if (!(norm_eps > 0) || !(rope_theta > 0))
    throw std::invalid_argument("norm_eps and rope_theta must be positive (" + to_string() + ")");
  constexpr int kMaxLayers = 1 << 16;
  if (layers > kMaxLayers)
    throw std::invalid_argument("L=" + std::to_string(layers) + " layers, more than " + std::to_string(kMaxLayers));
  std::int64_t count = -1;
  try {
    count = total_params(*this);
  } catch (const std::invalid_argument&) {
  }
  if (count < 0 || count > std::numeric_limits<std::int64_t>::max() / 4)
    throw std::invalid_argument("parameter count too large (" + to_string() + ")");
}

std::string LlamaShape::to_string() const {
  return "L=" + std::to_string(layers) + " C=" + std::to_string(channels) + " NH=" + std::to_string(heads) +
         " NKV=" + std::to_string(kv_heads) + " H=" + std::to_string(ffn_hidden) + " V=" + std::to_string(vocab) +
         " maxT=" + std::to_string(max_seq);
}

bool LlamaShape::same_model(const LlamaShape& o) const {
  return layers == o.layers && channels == o.channels && heads == o.heads && kv_heads == o.kv_heads &&
         ffn_hidden == o.ffn_hidden && vocab == o.vocab && max_seq == o.max_seq && norm_eps == o.norm_eps &&
         rope_theta == o.rope_theta && use_scaled_rope == o.use_scaled_rope;
}

std::span<const LlamaPreset> llama_presets() { return presets(); }

LlamaShape llama_preset(std::string_view name) { return llmc_preset(llama_presets(), name, "Llama preset"); }

std::vector<std::string> llama_preset_names() { return llmc_preset_names(llama_presets()); }

// ---- LlamaLayout --------------------------------------------------------------------------------

template <>
LlamaLayout::LlmcLayout(const LlamaShape& shape) : LlmcLayout(shape, "Llama") {
  shape.validate();
  place(param_table(), [&](Size size) { return size_of(shape, size); });
}

// ---- derived views ------------------------------------------------------------------------------

StateShapeFields LlamaShape::fields() const { return {vocab, channels, layers, heads, kv_heads, -ffn_hidden}; }

LlamaShape LlamaShape::from_fields(const StateShapeFields& f) {
  if (f[5] >= 0 || f[5] == std::numeric_limits<std::int32_t>::min())
    throw std::invalid_argument("not Llama shape fields (the last must be -H)");
  LlamaShape shape;
  bool found = false;
  for (const LlamaPreset& preset : presets()) {
    const LlamaShape& p = preset.shape;
    if (p.channels == f[1] && p.heads == f[3] && p.kv_heads == f[4] && p.ffn_hidden == -f[5]) {
      shape = p;
      found = true;
      break;
    }
  }
  if (!found) {  // llm.c's LlamaConfig defaults
    shape.max_seq = 8192;
    shape.norm_eps = 1e-5f;
    shape.rope_theta = 500000.0f;
    shape.use_scaled_rope = true;
  }
  shape.vocab = f[0];
  shape.channels = f[1];
  shape.layers = f[2];
  shape.heads = f[3];
  shape.kv_heads = f[4];
  shape.ffn_hidden = -f[5];
  if (!found ||
      kernels::llama_ffn_hidden(shape.channels, shape.ffn_dim_multiplier, shape.multiple_of) != shape.ffn_hidden) {
    // The header records no multiplier that gives H: H itself as the multiple.
    shape.ffn_dim_multiplier = 0.0f;
    shape.multiple_of = shape.ffn_hidden;
  }
  shape.validate();
  return shape;
}

std::string LlamaShape::print_fields(const StateShapeFields& f) {
  return "V=" + std::to_string(f[0]) + " C=" + std::to_string(f[1]) + " L=" + std::to_string(f[2]) +
         " NH=" + std::to_string(f[3]) + " NKV=" + std::to_string(f[4]) + " H=" + std::to_string(-std::int64_t(f[5]));
}

namespace {

// Per token, the bytes of LlamaModel's buffers (docs/llama.md), e bytes per stored element.
struct TokenBytes {
  double all, kept;  // everything one block's forward writes, and what the policy keeps per block
  double slot, gradient_slot, rest;
};
TokenBytes token_bytes(const LlamaShape& s, double e, const ActivationPolicy& policy) {
  const double C = s.channels, Q = s.qkv_channels(), H = s.ffn_hidden, V = s.vocab,
               attention = 4.0 * s.heads;  // att_lse: one fp32 log-sum-exp per query head
  TokenBytes b{};
  // ln1, atty, attproj, residual2, ln2, mlpproj, residual3 (C each), qkv (Q), fc, fc2, swiglu
  // (H each); the two fp32 rstd; att_lse.
  b.all = (7 * C + Q + 3 * H) * e + 8 + attention;
  switch (policy.recompute) {
    case Recompute::none: b.kept = b.all - 2 * C * e; break;             // all but attproj, mlpproj
    case Recompute::selective: b.kept = (2 * C + Q + 2 * H) * e; break;  // qkv, residual2, fc, fc2, residual3
    case Recompute::full: b.kept = C * e; break;                         // residual3
  }
  b.slot = b.all - b.kept;
  // dresidual2, dln2, dmlpproj, dattproj, datty, dln1, dresidual3 (C each), dqkv_rotated, dqkv (Q),
  // dfc, dfc2, dswiglu (H).
  b.gradient_slot = (7 * C + 2 * Q + 3 * H) * e;
  // Tokens and targets; embedded, dembedded; lnf, dlnf, its rstd; logits, dlogits; probs and
  // losses fp32.
  b.rest = 8 + 2 * C * e + 2 * C * e + 4 + 2 * V * e + 4 * V + 4;
  return b;
}

// Blocks in the shared slots: one with --recompute none (attproj and mlpproj only), else W + 1
// (at most L).
double slots(const LlamaShape& s, const ActivationPolicy& policy) {
  if (policy.recompute == Recompute::none) return 1;
  return double(std::min(s.layers, policy.window + 1));
}

}  // namespace

std::size_t llama_activation_bytes(const LlamaShape& s, std::size_t element, int B, int T,
                                   const ActivationPolicy& policy) {
  const TokenBytes b = token_bytes(s, double(element), policy);
  const double tokens = double(B) * double(T);
  const double on_device = double(s.layers - offloaded_blocks(policy, s.layers));
  const double per_token =
      on_device * b.kept + slots(s, policy) * b.slot + double(std::min(s.layers, 2)) * b.gradient_slot + b.rest;
  // The embedding's two scratch buffers of T·C elements (position zeros, dropped gradient) and
  // the fp32 RoPE table [T, hs/2, 2].
  const double scratch = 2.0 * double(T) * s.channels * double(element) + 4.0 * double(T) * s.head_size();
  const double total = tokens * per_token + scratch;
  if (!(total < 9e18)) throw std::invalid_argument("Llama activations too large: bytes overflow 63 bits");
  return std::size_t(total);
}

std::size_t llama_offloaded_activation_bytes(const LlamaShape& s, std::size_t element, int B, int T,
                                             const ActivationPolicy& policy) {
  const double total = double(B) * double(T) * double(offloaded_blocks(policy, s.layers)) *
                       token_bytes(s, double(element), policy).kept;
  if (!(total < 9e18)) throw std::invalid_argument("Llama activations too large: bytes overflow 63 bits");
  return std::size_t(total);
}

double llama_training_flops(const LlamaShape& s, int batch, int seq, const ActivationPolicy& activations) {
  if (batch < 1 || seq < 1)
    throw std::invalid_argument("Llama FLOPs need B and T >= 1, got B=" + std::to_string(batch) +
                                " T=" + std::to_string(seq));
  const double B = batch, T = seq, N = B * T, L = s.layers, C = s.channels, Q = s.qkv_channels(), H = s.ffn_hidden,
               V = s.vocab;
  const double block_matmul_forward = 2.0 * N * (C * Q + C * C + 3.0 * C * H);
  const double attention_forward = 4.0 * B * T * T * C, attention_backward = 10.0 * B * T * T * C;
  double recompute = 0;
  if (activations.recompute == Recompute::full) recompute = 2.0 * N * (C * Q + C * C + 2.0 * C * H) + attention_forward;
  if (activations.recompute == Recompute::selective) recompute = attention_forward;
  return L * (3.0 * block_matmul_forward + attention_forward + attention_backward + recompute) + 3.0 * 2.0 * N * C * V;
}

ModelFootprint llama_footprint(const LlamaShape& shape, int batch, int seq, const ActivationPolicy& activations) {
  shape.validate();
  const int T = seq > 0 ? seq : shape.max_seq;
  if (batch <= 0) throw std::invalid_argument("Llama batch must be > 0, got " + std::to_string(batch));
  const auto per_kind = kind_elements(shape);
  ModelFootprint f;
  f.params = total_params(shape);
  f.attention = {batch, T, shape.heads, shape.kv_heads, shape.head_size()};
  f.layer_kinds = {{"embedding", per_kind[0]}, {"block", per_kind[1]}, {"head", per_kind[2]}};
  // The engine's layers: the embedding, the blocks, the head (LlamaLayout's order).
  f.layer_params.push_back(per_kind[0]);
  f.layer_params.insert(f.layer_params.end(), std::size_t(shape.layers), per_kind[1]);
  f.layer_params.push_back(per_kind[2]);
  const std::int64_t N = checked_mul(batch, T), L = shape.layers, C = shape.channels, Q = shape.qkv_channels(),
                     H = shape.ffn_hidden, V = shape.vocab;
  const std::int64_t att_lse = checked_mul(N, shape.heads);
  f.activation_tensors = {
      {"embedded", N * C},      {"ln1", L * N * C}, {"ln1_rstd", L * N},      {"qkv", L * N * Q},
      {"atty", L * N * C},      {"att_lse", L * att_lse},   {"residual2", L * N * C}, {"ln2", L * N * C},
      {"ln2_rstd", L * N},      {"fc", L * N * H},  {"fc2", L * N * H},       {"swiglu", L * N * H},
      {"residual3", L * N * C}, {"lnf", N * C},     {"lnf_rstd", N},          {"logits", N * V},
      {"probs", N * V},         {"losses", N},
  };
  std::int64_t total = 0;
  for (const NamedCount& t : f.activation_tensors) total = checked_add(total, t.count);
  f.activation_bytes_2 = std::int64_t(llama_activation_bytes(shape, 2, batch, T, activations));
  f.activation_bytes_4 = std::int64_t(llama_activation_bytes(shape, 4, batch, T, activations));
  f.offloaded_activation_bytes_2 = std::int64_t(llama_offloaded_activation_bytes(shape, 2, batch, T, activations));
  f.offloaded_activation_bytes_4 = std::int64_t(llama_offloaded_activation_bytes(shape, 4, batch, T, activations));
  f.activations = activations;
  f.training_flops = llama_training_flops(shape, batch, T, activations);
  return f;
}

}  // namespace starzero
