#include "models/gpt_layout.hpp"

#include <algorithm>
#include <array>
#include <initializer_list>
#include <limits>
#include <stdexcept>

#include "offload/footprint.hpp"

namespace starzero {

namespace {

// ---- shapes as functions of the model's sizes -------------------------------------------------

// The sizes a dimension is a multiple of: the shape's, and a micro-batch's B and T.
enum class Size { layers, padded_vocab, max_seq, channels, heads, batch, seq };

struct Extent {
  Size size = Size::layers;
  std::int64_t multiple = 1;
};

// A tensor's dimensions, outermost first (at most 5).
struct Dims {
  std::array<Extent, 5> extents{};
  std::size_t rank = 0;
  constexpr Dims(std::initializer_list<Extent> list) {
    for (const Extent& extent : list) extents[rank++] = extent;
  }
  constexpr const Extent* begin() const { return extents.data(); }
  constexpr const Extent* end() const { return extents.data() + rank; }
};

struct ParamDef {
  GptParam id;
  std::string_view name;
  LlmcLayerKind layer_kind;
  Dims dims;  // block tensors lead with L
};

struct ActivationDef {
  std::string_view name;
  Dims dims;
};

namespace dim {
constexpr Extent L{Size::layers}, Vp{Size::padded_vocab}, maxT{Size::max_seq}, NH{Size::heads};
constexpr Extent C{Size::channels}, C3{Size::channels, 3}, C4{Size::channels, 4};
constexpr Extent B{Size::batch}, T{Size::seq};

constexpr LlmcLayerKind kEmbedding = LlmcLayerKind::embedding, kBlock = LlmcLayerKind::block,
                        kFinal = LlmcLayerKind::head;

// THE table: llm.c's parameter tensors in its file order. A block holds one L-slice of each
// block tensor, 12C² + 13C elements.
constexpr ParamDef kParams[] = {
    {GptParam::wte, "wte", kEmbedding, {Vp, C}},
    {GptParam::wpe, "wpe", kEmbedding, {maxT, C}},
    {GptParam::ln1w, "ln1w", kBlock, {L, C}},
    {GptParam::ln1b, "ln1b", kBlock, {L, C}},
    {GptParam::qkvw, "qkvw", kBlock, {L, C3, C}},
    {GptParam::qkvb, "qkvb", kBlock, {L, C3}},
    {GptParam::attprojw, "attprojw", kBlock, {L, C, C}},
    {GptParam::attprojb, "attprojb", kBlock, {L, C}},
    {GptParam::ln2w, "ln2w", kBlock, {L, C}},
    {GptParam::ln2b, "ln2b", kBlock, {L, C}},
    {GptParam::fcw, "fcw", kBlock, {L, C4, C}},
    {GptParam::fcb, "fcb", kBlock, {L, C4}},
    {GptParam::fcprojw, "fcprojw", kBlock, {L, C, C4}},
    {GptParam::fcprojb, "fcprojb", kBlock, {L, C}},
    {GptParam::lnfw, "lnfw", kFinal, {C}},
    {GptParam::lnfb, "lnfb", kFinal, {C}},
};

// One micro-batch's activations in llm.c train_gpt2.c's order (ActivationTensors).
constexpr ActivationDef kActivations[] = {
    {"encoded", {B, T, C}},      {"ln1", {L, B, T, C}},       {"ln1_mean", {L, B, T}},      {"ln1_rstd", {L, B, T}},
    {"qkv", {L, B, T, C3}},      {"atty", {L, B, T, C}},      {"att_lse", {L, B, NH, T}},
    {"attproj", {L, B, T, C}},   {"residual2", {L, B, T, C}}, {"ln2", {L, B, T, C}},        {"ln2_mean", {L, B, T}},
    {"ln2_rstd", {L, B, T}},     {"fch", {L, B, T, C4}},      {"fch_gelu", {L, B, T, C4}},  {"fcproj", {L, B, T, C}},
    {"residual3", {L, B, T, C}}, {"lnf", {B, T, C}},          {"lnf_mean", {B, T}},         {"lnf_rstd", {B, T}},
    {"logits", {B, T, Vp}},      {"probs", {B, T, Vp}},       {"losses", {B, T}},
};
}  // namespace dim

using dim::kActivations;
using dim::kParams;

// The table's invariants: llm.c's order, and exactly the block tensors lead with L.
constexpr bool table_is_consistent() {
  if (std::size(kParams) != kGptParamCount) return false;
  for (std::size_t i = 0; i < std::size(kParams); ++i) {
    const ParamDef& def = kParams[i];
    if (std::size_t(def.id) != i || def.dims.rank == 0) return false;
    const bool leads_with_layers = def.dims.extents[0].size == Size::layers;
    if (leads_with_layers != (def.layer_kind == LlmcLayerKind::block)) return false;
  }
  return true;
}
static_assert(table_is_consistent());

// ---- overflow-checked int64 arithmetic --------------------------------------------------------

std::int64_t checked_mul(std::int64_t a, std::int64_t b) { return llmc_checked_mul(a, b, "GPT"); }
std::int64_t checked_add(std::int64_t a, std::int64_t b) { return llmc_checked_add(a, b, "GPT"); }

// The values of Size for one shape and micro-batch.
class Sizes {
 public:
  Sizes(const GptShape& s, std::int64_t batch, std::int64_t seq)
      : values_{s.layers, s.padded_vocab, s.max_seq, s.channels, s.heads, batch, seq} {}
  std::int64_t operator()(const Extent& extent) const {
    return checked_mul(extent.multiple, values_[std::size_t(extent.size)]);
  }
  // Elements of dims[skip..]: skip = 1 drops a leading layer dimension.
  std::int64_t elements(const Dims& dims, std::size_t skip = 0) const {
    std::int64_t count = 1;
    for (const Extent* e = dims.begin() + skip; e < dims.end(); ++e) count = checked_mul(count, (*this)(*e));
    return count;
  }

 private:
  std::array<std::int64_t, 7> values_;
};

// Elements of one engine layer of each kind (a block: one L-slice of each block tensor).
std::array<std::int64_t, 3> layer_kind_elements(const Sizes& sizes) {
  std::array<std::int64_t, 3> per_kind{};
  for (const ParamDef& def : kParams) {
    const bool per_layer = def.layer_kind == LlmcLayerKind::block;
    std::int64_t& total = per_kind[std::size_t(def.layer_kind)];
    total = checked_add(total, sizes.elements(def.dims, per_layer ? 1 : 0));
  }
  return per_kind;
}

// Ψ: the embedding, L blocks and the final layernorm.
std::int64_t total_params(const GptShape& shape, const std::array<std::int64_t, 3>& per_kind) {
  const std::int64_t blocks = checked_mul(shape.layers, per_kind[std::size_t(LlmcLayerKind::block)]);
  return checked_add(checked_add(per_kind[std::size_t(LlmcLayerKind::embedding)], blocks),
                     per_kind[std::size_t(LlmcLayerKind::head)]);
}

void validate_dimensions(const GptShape& s) {
  if (s.max_seq <= 0 || s.vocab <= 0 || s.padded_vocab <= 0 || s.layers <= 0 || s.heads <= 0 || s.channels <= 0)
    throw std::invalid_argument("every dimension must be positive (" + s.to_string() + ")");
  if (s.channels % s.heads != 0)
    throw std::invalid_argument("channels C=" + std::to_string(s.channels) +
                                " is not a multiple of heads NH=" + std::to_string(s.heads));
  if (s.padded_vocab < s.vocab)
    throw std::invalid_argument("padded vocab Vp=" + std::to_string(s.padded_vocab) +
                                " is smaller than vocab V=" + std::to_string(s.vocab));
}

// {max_seq, vocab, padded_vocab, layers, heads, channels}
constexpr GptPreset kPresets[] = {
    {"tiny", {64, 256, 256, 4, 4, 128}},
    {"gpt2-124M", {1024, 50257, 50304, 12, 12, 768}},
    {"gpt2-350M", {1024, 50257, 50304, 24, 16, 1024}},
    {"gpt2-774M", {1024, 50257, 50304, 36, 20, 1280}},
    {"gpt2-1558M", {1024, 50257, 50304, 48, 25, 1600}},
};

}  // namespace

// ---- GptShape ---------------------------------------------------------------------------------

std::size_t GptShape::param_count() const {
  const Sizes sizes(*this, 0, 0);
  return std::size_t(total_params(*this, layer_kind_elements(sizes)));
}

void GptShape::validate() const {
  validate_dimensions(*this);
  // Layouts hold one entry per layer (GptLayout::state_layout), built from a file's header before the
  // file's size can be checked against it: a corrupt L must not allocate gigabytes.
  constexpr int kMaxLayers = 1 << 16;
  if (layers > kMaxLayers)
    throw std::invalid_argument("L=" + std::to_string(layers) + " layers, more than " + std::to_string(kMaxLayers));
  // A corrupt header must not wrap around into a plausible size; the bytes must fit in 63 bits.
  std::int64_t count = -1;
  try {
    count = total_params(*this, layer_kind_elements(Sizes(*this, 0, 0)));
  } catch (const std::invalid_argument&) {
  }
  if (count < 0 || count > std::numeric_limits<std::int64_t>::max() / 4)
    throw std::invalid_argument("parameter count too large (" + to_string() + ")");
}

std::string GptShape::to_string() const {
  return "maxT=" + std::to_string(max_seq) + " V=" + std::to_string(vocab) + " Vp=" + std::to_string(padded_vocab) +
         " L=" + std::to_string(layers) + " NH=" + std::to_string(heads) + " C=" + std::to_string(channels);
}

StateShapeFields GptShape::fields() const { return {max_seq, vocab, layers, heads, channels, padded_vocab}; }

GptShape GptShape::from_fields(const StateShapeFields& f) {
  return {.max_seq = f[0], .vocab = f[1], .padded_vocab = f[5], .layers = f[2], .heads = f[3], .channels = f[4]};
}

std::string GptShape::print_fields(const StateShapeFields& fields) { return from_fields(fields).to_string(); }

GptShape GptShape::gpt2_124m() { return gpt_preset("gpt2-124M"); }

// ---- presets ----------------------------------------------------------------------------------

std::span<const GptPreset> gpt_presets() { return kPresets; }

GptShape gpt_preset(std::string_view name) { return llmc_preset(gpt_presets(), name, "model preset"); }

std::vector<std::string> gpt_preset_names() { return llmc_preset_names(gpt_presets()); }

// ---- GptLayout --------------------------------------------------------------------------------

template <>
GptLayout::LlmcLayout(const GptShape& shape) : LlmcLayout(shape, "GPT") {
  shape.validate();  // every count below then fits (Ψ < 2^61)
  const Sizes sizes(shape, 0, 0);
  place(kParams, [&](const Extent& extent) { return sizes(extent); });
}

// ---- derived views ----------------------------------------------------------------------------

StateLayout gpt_state_layout_from_fields(const StateShapeFields& fields) {
  return GptLayout(GptShape::from_fields(fields)).state_layout();
}

ModelFootprint gpt_footprint(const GptShape& shape, int batch, const ActivationPolicy& activations) {
  validate_dimensions(shape);
  if (batch <= 0) throw std::invalid_argument("GPT batch must be > 0, got " + std::to_string(batch));
  const Sizes sizes(shape, batch, shape.max_seq);
  const auto per_kind = layer_kind_elements(sizes);
  ModelFootprint footprint;
  footprint.params = total_params(shape, per_kind);
  footprint.attention = {batch, shape.max_seq, shape.heads, shape.heads, shape.channels / shape.heads};
  footprint.layer_kinds = {{"embedding", per_kind[std::size_t(LlmcLayerKind::embedding)]},
                           {"block", per_kind[std::size_t(LlmcLayerKind::block)]},
                           {"final layernorm", per_kind[std::size_t(LlmcLayerKind::head)]}};
  // The engine's layers: the embedding, the blocks, the final layernorm (GptLayout's order).
  footprint.layer_params.push_back(per_kind[std::size_t(LlmcLayerKind::embedding)]);
  footprint.layer_params.insert(footprint.layer_params.end(), std::size_t(shape.layers),
                                per_kind[std::size_t(LlmcLayerKind::block)]);
  footprint.layer_params.push_back(per_kind[std::size_t(LlmcLayerKind::head)]);
  std::int64_t activation_total = 0;  // checked here so that activation_elements() cannot wrap
  for (const ActivationDef& def : kActivations) {
    const std::int64_t count = sizes.elements(def.dims);
    activation_total = checked_add(activation_total, count);
    footprint.activation_tensors.push_back({std::string(def.name), count});
  }
  // The buffers' bytes, in double first: a shape that passed the checks above may still not fit 63 bits.
  const double per_element_4 = double(gpt_activation_bytes(shape, 4, 1, 1, activations));
  if (per_element_4 * double(batch) * double(shape.max_seq) > 9e18)  // linear in T: no T×T buffer
    throw std::invalid_argument("GPT activations too large: bytes overflow 63 bits");
  footprint.activation_bytes_2 = std::int64_t(gpt_activation_bytes(shape, 2, batch, shape.max_seq, activations));
  footprint.activation_bytes_4 = std::int64_t(gpt_activation_bytes(shape, 4, batch, shape.max_seq, activations));
  footprint.offloaded_activation_bytes_2 =
      std::int64_t(gpt_offloaded_activation_bytes(shape, 2, batch, shape.max_seq, activations));
  footprint.offloaded_activation_bytes_4 =
      std::int64_t(gpt_offloaded_activation_bytes(shape, 4, batch, shape.max_seq, activations));
  footprint.activations = activations;
  return footprint;
}

namespace {

// Per token of one block: everything its forward writes, and what `policy` keeps of it.
struct BlockBytes {
  std::size_t all, kept;
};
BlockBytes block_bytes(const GptShape& shape, std::size_t e, const ActivationPolicy& policy) {
  const std::size_t C = std::size_t(shape.channels);
  const std::size_t attention = std::size_t(shape.heads) * 4;  // att_lse, fp32, per token
  const std::size_t stats = 4 * 4;                             // ln1/ln2 mean and rstd, fp32
  BlockBytes b{18 * C * e + stats + attention, 0};
  b.kept = b.all;
  if (policy.recompute == Recompute::selective) b.kept = (3 + 1 + 4 + 1) * C * e;  // qkv, residual2, fch, residual3
  if (policy.recompute == Recompute::full) b.kept = C * e;                       // residual3
  return b;
}

}  // namespace

std::size_t gpt_activation_bytes(const GptShape& shape, std::size_t e, int B, int T, const ActivationPolicy& policy) {
  const std::size_t C = std::size_t(shape.channels), L = std::size_t(shape.layers), Vp = std::size_t(shape.padded_vocab);
  const BlockBytes block = block_bytes(shape, e, policy);
  const std::size_t on_device = L - std::size_t(offloaded_blocks(policy, shape.layers));  // blocks keeping theirs here
  const std::size_t slots = policy.recompute == Recompute::none ? 0 : std::min(L, std::size_t(policy.window) + 1);
  const std::size_t gradient_slots = std::min<std::size_t>(L, 2);
  const std::size_t per_token = on_device * block.kept + slots * (block.all - block.kept) +
                                gradient_slots * 18 * C * e +
                                2 * 4 +                    // tokens, targets (int32)
                                4 * C * e + 2 * 4 +        // encoded, dencoded, lnf, dlnf; lnf mean and rstd
                                2 * Vp * e + Vp * 4 + 4;   // logits, dlogits; probs, losses (fp32)
  return std::size_t(B) * std::size_t(T) * per_token;
}

std::size_t gpt_offloaded_activation_bytes(const GptShape& shape, std::size_t e, int B, int T,
                                           const ActivationPolicy& policy) {
  return std::size_t(B) * std::size_t(T) * std::size_t(offloaded_blocks(policy, shape.layers)) *
         block_bytes(shape, e, policy).kept;
}

}  // namespace starzero
