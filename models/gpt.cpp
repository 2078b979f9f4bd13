#include "models/gpt.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>

#include "models/block_activations.hpp"
#include "models/sequence_tiles.hpp"
#include "models/transformer_model.hpp"
#include "tasks/prefetch.hpp"

namespace starzero {

namespace {

std::string at(const char* what, int index) { return std::string(what) + "[" + std::to_string(index) + "]"; }

// A linear layer's weight is [(L,) OC, C] in llm.c: its input and output widths.
int in_features(const GptTensor& weight) { return int(weight.dims.back()); }
int out_features(const GptTensor& weight) { return int(weight.dims[weight.dims.size() - 2]); }

// A counter-based N(0, 1) generator: splitmix64 of (stream, pair index) gives two 24-bit
// uniforms, Box-Muller turns them into two normals (element 2j and 2j+1 of a pair). About 4x
// cheaper than std::normal_distribution over mt19937_64, and any element can be computed alone.
std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// values[k] = stddev · N(0, 1) at index first + k of `stream`.
void fill_normal_at(std::span<float> values, float stddev, std::uint64_t stream, std::size_t first) {
  constexpr float kTwoPi = 6.28318530717958647692f;
  constexpr float kUnit = 1.0f / 16777216.0f;  // 2^-24
  const std::uint64_t key = splitmix64(stream);
  const std::size_t end = first + values.size();
  for (std::size_t pair = first / 2; 2 * pair < end; ++pair) {
    const std::uint64_t bits = splitmix64(key ^ (std::uint64_t(pair) * 0xd1b54a32d192ed03ull));
    const float u1 = float((bits >> 40) + 1) * kUnit;  // (0, 1]: the logarithm is finite
    const float u2 = float(bits & 0xffffffu) * kUnit;  // [0, 1)
    const float radius = std::sqrt(-2.0f * std::log(u1));
    const float angle = kTwoPi * u2;
    const std::size_t even = 2 * pair, odd = even + 1;
    if (even >= first) values[even - first] = stddev * radius * std::cos(angle);
    if (odd >= first && odd < end) values[odd - first] = stddev * radius * std::sin(angle);
  }
}

}  // namespace

// Groups of consecutive heads (`head_groups`): group g holds heads [NH·g/G, NH·(g+1)/G), so the
// counts differ by at most one. With more than one group, attention forward and backward run as
// one task per (tile, group), and the tensors they write are split, per tile, into each group's
// blocks of columns (Tensor::split_columns): no task declares columns it does not write.
struct GptModel::HeadGroups {
  int heads;
  int count;

  tasks::HeadGroup group(int g) const {
    const int first = heads * g / count;
    return {first, heads * (g + 1) / count - first};
  }
  // Rows made of `parts` runs of every head's `per_head` elements (dqkv: its q, k and v parts):
  // block p·count + g holds group g's heads of part p.
  std::vector<Tensor::Columns> columns(std::size_t per_head, int parts) const {
    std::vector<Tensor::Columns> blocks;
    for (int p = 0; p < parts; ++p)
      for (int g = 0; g < count; ++g)
        blocks.push_back({(std::size_t(p) * heads + std::size_t(group(g).first)) * per_head,
                          std::size_t(group(g).count) * per_head});
    return blocks;
  }
  // Splits every tile piece of `tensor` into those blocks.
  void split(Tensor& tensor, std::size_t per_head, int parts) const {
    const std::vector<Tensor::Columns> blocks = columns(per_head, parts);
    for (std::size_t k = 0; k < tensor.pieces(); ++k)
      tensor.split_columns(k, std::size_t(parts) * std::size_t(heads) * per_head, blocks);
  }
};

// How a layer kind's gradient is cut (gradient_pieces): consecutive pieces in layout order, and the
// first piece of each tensor of the kind.
struct GptModel::GradientSplit {
  std::vector<std::size_t> counts;
  std::array<std::size_t, kGptParamCount> first_piece{};
};

namespace {

bool is_linear_weight(GptParam p) {
  using enum GptParam;
  return p == wte || p == qkvw || p == attprojw || p == fcw || p == fcprojw;
}
bool is_layernorm_weight(GptParam p) { return p == GptParam::ln1w || p == GptParam::ln2w || p == GptParam::lnfw; }

// Output channels [first, end) of piece k of n of a weight with `rows` output channels.
int piece_first_row(int rows, int n, int k) { return int(std::int64_t(rows) * k / n); }

}  // namespace

// Activations of one transformer block and their gradients (llm.c's names), as references into
// the buffers that hold them (Buffers): the block's own tensors, or one of the shared slots.
struct GptModel::BlockActivations {
  Tensor &ln1, &ln1_mean, &ln1_rstd, &qkv, &atty, &att_lse, &attproj, &residual2, &ln2, &ln2_mean, &ln2_rstd, &fch,
      &fch_gelu, &fcproj, &residual3;
  Tensor &dln1, &dqkv, &datty, &dattproj, &dresidual2, &dln2, &dfch, &dfch_gelu, &dfcproj, &dresidual3;

  // The gradients a block's backward accumulates into, but dresidual3 (the block above writes it):
  // zeroed at the start of the block's backward.
  std::vector<const Tensor*> own_gradients() const {
    return {&dln1, &dqkv, &datty, &dattproj, &dresidual2, &dln2, &dfch, &dfch_gelu, &dfcproj};
  }
};

namespace {

// Per sequence: the attention's log-sum-exps [NH, T].
std::size_t attention_size(const tasks::Dims& d) { return std::size_t(d.NH) * std::size_t(d.T); }

// A block's forward tensors: name, elements per sequence, and whether each policy keeps it per
// block (else it lives in a slot). attproj and fcproj are read by no backward task (only by the
// residuals in the forward): selective keeps neither.
struct ActivationKind {
  const char* name;
  bool stat;       // fp32 [T] (layernorm mean and rstd)
  bool attention;  // fp32 [NH, T] (the attention's per-row log-sum-exp)
  int width;       // in C (activations [T, width·C])
  bool selective_keeps;
  bool by_heads = false;  // written by the attention, per head group
};
constexpr ActivationKind kBlockActivations[] = {
    {"ln1", false, false, 1, false},        {"ln1_mean", true, false, 0, false},
    {"ln1_rstd", true, false, 0, false},    {"qkv", false, false, 3, true},
    {"atty", false, false, 1, false, true}, {"att_lse", false, true, 0, false, true},
    {"attproj", false, false, 1, false},
    {"residual2", false, false, 1, true},   {"ln2", false, false, 1, false},
    {"ln2_mean", true, false, 0, false},    {"ln2_rstd", true, false, 0, false},
    {"fch", false, false, 4, true},         {"fch_gelu", false, false, 4, false},
    {"fcproj", false, false, 1, false},     {"residual3", false, false, 1, true},
};
constexpr std::pair<const char*, int> kBlockGradients[] = {
    {"dln1", 1}, {"dqkv", 3}, {"datty", 1},     {"dattproj", 1}, {"dresidual2", 1},
    {"dln2", 1}, {"dfch", 4}, {"dfch_gelu", 4}, {"dfcproj", 1},  {"dresidual3", 1},
};
// The gradient the attention backward writes per head group, in its q, k and v parts.
constexpr std::string_view kAttentionInputGradient = "dqkv";

bool kept_per_block(const ActivationKind& kind, Recompute recompute) {
  switch (recompute) {
    case Recompute::none: return true;
    case Recompute::selective: return kind.selective_keeps;
    case Recompute::full: return std::string_view(kind.name) == "residual3";
  }
  return true;
}

}  // namespace

struct GptModel::Buffers {
  // Every activation tensor below, what the blocks keep and which blocks are offloaded
  // (--offload-activations cpu: the first storage.offloaded(), whose kept tensors have a pinned
  // host home).
  BlockActivationStorage storage;
  Tensor &tokens, &targets;
  Tensor &encoded, &dencoded;
  std::vector<BlockActivations> blocks;
  Tensor &lnf, &lnf_mean, &lnf_rstd, &logits, &probs, &losses, &dlnf, &dlogits;

  Buffers(const tasks::Dims& d, const SequenceTiles& t, const HeadGroups& h, int L, const ActivationPolicy& policy)
      : storage(L, policy),
        tokens(storage.keep(t.make(DType::i32, std::size_t(d.T), "tokens"))),
        targets(storage.keep(t.make(DType::i32, std::size_t(d.T), "targets"))),
        encoded(storage.keep(act(d, t, d.C, at("encoded", 0)))),
        dencoded(storage.keep(act(d, t, d.C, at("dencoded", 0)))),
        lnf(storage.keep(act(d, t, d.C, at("lnf", 0)))),
        lnf_mean(storage.keep(stat(d, t, at("lnf_mean", 0)))),
        lnf_rstd(storage.keep(stat(d, t, at("lnf_rstd", 0)))),
        logits(storage.keep(act(d, t, d.Vp, at("logits", 0)))),
        probs(storage.keep(t.make(DType::f32, std::size_t(d.T) * std::size_t(d.Vp), "probs"))),
        losses(storage.keep(t.host(DType::f32, std::size_t(d.T), "losses"))),  // read on the host every step
        dlnf(storage.keep(act(d, t, d.C, at("dlnf", 0)))),
        dlogits(storage.keep(act(d, t, d.Vp, at("dlogits", 0)))) {
    // With --recompute none every kind is kept per block: no forward slots.
    const int slots = policy.recompute == Recompute::none ? 0 : std::min(L, policy.window + 1);  // W + 1 <= L
    const auto made = storage.make_blocks(
        kBlockActivations, kBlockGradients, slots,
        [&](const ActivationKind& kind) { return kept_per_block(kind, policy.recompute); },
        [&](std::size_t kind, const std::string& name, bool host) {
          return forward_tensor(d, t, h, kBlockActivations[kind], name, host);
        },
        [&](std::size_t gradient, const std::string& name) {
          const auto& [gradient_name, width] = kBlockGradients[gradient];
          if (gradient_name != kAttentionInputGradient || h.count == 1) return act(d, t, width * d.C, name);
          // A host tensor, so that its tiles can be split into the groups' columns of q, k and v.
          Tensor split = t.host(d.dtype, std::size_t(d.T) * std::size_t(width * d.C), name);
          h.split(split, std::size_t(d.C / d.NH), 3);
          return split;
        });
    blocks.reserve(std::size_t(L));
    for (const auto& [f, g] : made)
      blocks.push_back(BlockActivations{*f[0],  *f[1],  *f[2],  *f[3],  *f[4],  *f[5],  *f[6],  *f[7],
                                        *f[8],  *f[9],  *f[10], *f[11], *f[12], *f[13], *f[14], *g[0],
                                        *g[1],  *g[2],  *g[3],  *g[4],  *g[5],  *g[6],  *g[7],  *g[8],
                                        *g[9]});
  }

 private:
  static Tensor act(const tasks::Dims& d, const SequenceTiles& t, int width, const std::string& name) {
    return t.make(d.dtype, std::size_t(d.T) * std::size_t(width), name);
  }
  static Tensor stat(const tasks::Dims& d, const SequenceTiles& t, const std::string& name) {
    return t.make(DType::f32, std::size_t(d.T), name);
  }
  // `host`: with a home in main memory (pinned when there are CUDA workers), even with one tile.
  // What the attention writes per head group is split into the groups' columns (a host tensor,
  // to be split): atty's rows of C by hs per head, att_lse's rows of NH·T (one per sequence) by T
  // per head.
  static Tensor forward_tensor(const tasks::Dims& d, const SequenceTiles& t, const HeadGroups& h,
                               const ActivationKind& kind, const std::string& name, bool host = false) {
    const DType dtype = kind.stat || kind.attention ? DType::f32 : d.dtype;
    const std::size_t per_sequence = kind.stat        ? std::size_t(d.T)
                                     : kind.attention ? attention_size(d)
                                                      : std::size_t(d.T) * std::size_t(kind.width * d.C);
    const bool by_heads = kind.by_heads && h.count > 1;
    Tensor tensor = host || by_heads ? t.host(dtype, per_sequence, name) : t.make(dtype, per_sequence, name);
    if (by_heads) h.split(tensor, kind.attention ? std::size_t(d.T) : std::size_t(d.C / d.NH), 1);
    return tensor;
  }
};

namespace {

// The micro-batch's tiles, once the dtype, B and T are checked (std::invalid_argument).
SequenceTiles checked_tiles(const GptShape& shape, DType dtype, int B, int T, int tiles) {
  if (dtype != DType::f32 && dtype != DType::bf16) throw std::invalid_argument("GPT model dtype must be fp32 or bf16");
  if (B <= 0 || T <= 0 || T > shape.max_seq)
    throw std::invalid_argument("batch " + std::to_string(B) + " x seq " + std::to_string(T) +
                                ": need B > 0 and 0 < T <= max_seq = " + std::to_string(shape.max_seq));
  return SequenceTiles(B, tiles);  // checks 1 <= tiles <= B
}

}  // namespace

GptModel::GptModel(const GptShape& shape, DType dtype, int B, int T, int tiles, const ActivationPolicy& activations,
                   int head_groups)
    : TransformerModel(shape, checked_tiles(shape, dtype, B, T, tiles),
                       tasks::Dims{dtype, B, T, shape.channels, shape.heads, shape.vocab, shape.padded_vocab},
                       activations, "load_inputs") {
  if (head_groups < 1 || head_groups > shape.heads)
    throw std::invalid_argument(std::to_string(head_groups) + " head groups for a model of " +
                                std::to_string(shape.heads) + " heads: 1 <= head groups <= heads");
  head_groups_ = std::make_unique<HeadGroups>(HeadGroups{shape.heads, head_groups});
  if (activations.window < 0)
    throw std::invalid_argument("recompute window " + std::to_string(activations.window) + " must be >= 0");
  buffers_ = std::make_unique<Buffers>(dims_, tiles_, *head_groups_, shape.layers, activations);
  if (tiles == 1) return;
  for (LlmcLayerKind kind : {LlmcLayerKind::embedding, LlmcLayerKind::block, LlmcLayerKind::head}) {
    GradientSplit split;
    std::size_t next_offset = 0;
    for (const GptTensor* t : layout_.kind_tensors(kind)) {
      if (t->layer_offset < next_offset) continue;  // a layernorm bias, in its weight's piece
      if (t->layer_offset != next_offset)
        throw std::logic_error("gradient split: the layout is not the consecutive table it assumes");
      split.first_piece[std::size_t(t->id)] = split.counts.size();
      next_offset = t->layer_offset + t->layer_count;
      if (is_linear_weight(t->id)) {
        const int rows = out_features(*t);
        for (int k = 0; k < tiles; ++k)
          split.counts.push_back(std::size_t(piece_first_row(rows, tiles, k + 1) - piece_first_row(rows, tiles, k)) *
                                 std::size_t(in_features(*t)));
      } else if (is_layernorm_weight(t->id)) {
        const GptTensor& bias = layout_[GptParam(std::size_t(t->id) + 1)];
        split.first_piece[std::size_t(bias.id)] = split.counts.size();
        split.counts.push_back(t->layer_count + bias.layer_count);
        next_offset = bias.layer_offset + bias.layer_count;
      } else {
        split.counts.push_back(t->layer_count);
      }
    }
    gradient_splits_.push_back(std::move(split));
  }
}

int GptModel::head_groups() const { return head_groups_->count; }

int auto_head_groups(int heads, int tiles) {
  if (starpu_cuda_worker_get_count() > 0) return 1;
  const int workers = int(starpu_cpu_worker_get_count());
  return std::clamp((workers + tiles - 1) / std::max(tiles, 1), 1, std::max(heads, 1));
}

GptModel::TokenIo GptModel::token_io() const {
  const Buffers& buf = *buffers_;
  return {buf.tokens, buf.targets, buf.losses, buf.probs, buf.storage, 0};
}

std::string GptModel::head_group_name(const std::string& op, int block, int group, int tile) const {
  const std::string name = at(op.c_str(), block);
  return tile_name(head_groups() == 1 ? name : name + "[" + std::to_string(group) + "]", tile);
}

GptModel::~GptModel() = default;

std::string GptModel::layer_name(int layer) const {
  if (layer == 0) return "embedding";
  if (layer <= shape_.layers) return "block" + std::to_string(layer - 1);
  return "lnf+classifier";
}

const GptModel::GradientSplit& GptModel::gradient_split(int layer) const {
  return gradient_splits_.at(std::size_t(layout_.layer_kind(layer)));
}

std::vector<std::size_t> GptModel::gradient_pieces(int layer) const {
  // The final layernorm is one piece: nothing to gain.
  if (tiles() == 1 || layout_.layer_kind(layer) == LlmcLayerKind::head) return {};
  return gradient_split(layer).counts;
}

std::vector<int> GptModel::shared_groups(int layer) const {
  if (layer == shape_.layers + 1) return {0};  // the classifier is tied to wte
  return {};
}

void GptModel::init_layer(int layer, std::span<float> params, std::uint64_t seed) const {
  if (params.size() != layer_params(layer)) throw std::invalid_argument("init_layer: wrong parameter count");
  // GPT-2's initialisation: N(0, 0.02) weights, N(0, 0.01) positions, residual projections
  // scaled by 1/sqrt(2L), zero biases, unit layernorm gains. Element i of the layer's array is a
  // function of (seed, layer, i) alone (fill_normal_at), so the values do not depend on how the
  // work is split.
  const std::uint64_t stream = seed * 1000003u + std::uint64_t(layer);
  const float residual_std = 0.02f / std::sqrt(2.0f * float(shape_.layers));
  const LlmcLayerKind kind = layout_.layer_kind(layer);
  for (const GptTensor& tensor : layout_.tensors()) {
    if (tensor.layer_kind != kind) continue;
    const std::span<float> values = params.subspan(tensor.layer_offset, tensor.layer_count);
    auto fill_normal = [&](float stddev) { fill_normal_at(values, stddev, stream, tensor.layer_offset); };
    switch (tensor.id) {
      case GptParam::wte: {
        fill_normal(0.02f);
        // Padding rows [V, Vp) of wte are never a target: keep them zero like llm.c.
        const std::size_t row = tensor.dims.back();
        std::fill(values.begin() + std::ptrdiff_t(std::size_t(shape_.vocab) * row), values.end(), 0.0f);
        break;
      }
      case GptParam::wpe: fill_normal(0.01f); break;
      case GptParam::qkvw:
      case GptParam::fcw: fill_normal(0.02f); break;
      case GptParam::attprojw:
      case GptParam::fcprojw: fill_normal(residual_std); break;
      case GptParam::ln1w:
      case GptParam::ln2w:
      case GptParam::lnfw: std::ranges::fill(values, 1.0f); break;
      default: std::ranges::fill(values, 0.0f); break;  // biases
    }
  }
}

// Row-wise ops run once per tile: tile k's shapes are tile_dims_[k] (its sequences), its handles
// each tensor's piece k. Ops over all rows (the parameter gradients, the encoder's scatter-add)
// take the whole tensors; StarPU switches a tensor between its pieces and the whole as needed.

void GptModel::submit_forward(int layer, const GroupHandles& groups) {
  Buffers& buf = *buffers_;
  const GptTensor &wte = layout_[GptParam::wte], &lnfw = layout_[GptParam::lnfw], &lnfb = layout_[GptParam::lnfb];
  if (layer == 0) {
    for (int k = 0; k < tiles(); ++k)
      tasks::submit_encoder_forward(tile_dims_[k], buf.encoded.piece(k), buf.tokens.piece(k), groups.param(0),
                                    wte.layer_offset, layout_[GptParam::wpe].layer_offset, tile_name("encoder_fwd", k));
    return;
  }
  if (layer <= shape_.layers) return submit_block_forward(layer - 1, groups);
  // Final layernorm, classifier tied to wte, softmax cross-entropy.
  const BlockActivations& top = buf.blocks[std::size_t(shape_.layers - 1)];
  const starpu_data_handle_t head = groups.param(shape_.layers + 1);
  tasks::submit_zero(buf.dlnf.handle(), "zero_dlnf");
  tasks::submit_zero(buf.dlogits.handle(), "zero_dlogits");
  for (int k = 0; k < tiles(); ++k) {
    const tasks::Dims& d = tile_dims_[k];
    tasks::submit_layernorm_forward(d, buf.lnf.piece(k), buf.lnf_mean.piece(k), buf.lnf_rstd.piece(k),
                                    top.residual3.piece(k), {head, lnfw.layer_offset, (long long)lnfb.layer_offset},
                                    tile_name("lnf_fwd", k));
    tasks::submit_matmul_forward(d, buf.logits.piece(k), buf.lnf.piece(k), {groups.param(0), wte.layer_offset, -1},
                                 in_features(wte), out_features(wte), tile_name("classifier_fwd", k));
    tasks::submit_crossentropy_forward(d, buf.losses.piece(k), buf.probs.piece(k), buf.logits.piece(k),
                                       buf.targets.piece(k), tile_name("crossentropy_fwd", k));
  }
}

void GptModel::submit_backward(int layer, const GroupHandles& groups) {
  Buffers& buf = *buffers_;
  const GptTensor& wte = layout_[GptParam::wte];
  if (layer == 0) {
    tasks::submit_encoder_backward(dims_, groups.grad(0), wte.layer_offset, layout_[GptParam::wpe].layer_offset,
                                   buf.dencoded.handle(), buf.tokens.handle(), "encoder_bwd");
    return;
  }
  if (layer <= shape_.layers) return submit_block_backward(layer - 1, groups);
  const int head = shape_.layers + 1;
  BlockActivations& top = buf.blocks[std::size_t(shape_.layers - 1)];
  // dloss: 1/N of the whole micro-batch, not of the tile (with masked targets, its share of the
  // global batch's mean: TokenModel::set_batch).
  for (int k = 0; k < tiles(); ++k)
    tasks::submit_crossentropy_backward(tile_dims_[k], buf.dlogits.piece(k), buf.probs.piece(k), buf.targets.piece(k),
                                        tile_name("crossentropy_bwd", k), dloss());
  submit_linear_backward("classifier", -1, groups, 0, GptParam::wte, std::nullopt, buf.dlnf, buf.dlogits, buf.lnf);
  tasks::submit_zero(top.dresidual3.handle(), "zero_" + top.dresidual3.name());
  submit_layernorm_backward("lnf", -1, groups, head, GptParam::lnfw, GptParam::lnfb, top.dresidual3, buf.dlnf,
                            top.residual3, buf.lnf_mean, buf.lnf_rstd);
}

namespace {

// A task name: `op` with the block index ("[b]"), or alone for block -1.
std::string indexed(const std::string& op, int block) { return block < 0 ? op : at(op.c_str(), block); }

}  // namespace

void GptModel::submit_linear_backward(const std::string& op, int block, const GroupHandles& groups, int group,
                                      GptParam weight, std::optional<GptParam> bias, const Tensor& dinp,
                                      const Tensor& dout, const Tensor& inp) {
  const GptTensor& w = layout_[weight];
  const int C = in_features(w), OC = out_features(w);
  const tasks::WeightRef ref{groups.param(group), w.layer_offset, bias ? (long long)layout_[*bias].layer_offset : -1};
  for (int k = 0; k < tiles(); ++k)
    tasks::submit_matmul_backward_input(tile_dims_[k], dinp.piece(k), dout.piece(k), ref, C, OC,
                                        tile_name(indexed(op + "_bwd_input", block), k));
  const std::string name = indexed(op + "_bwd_weight", block);
  if (groups.grad_piece(group, 0) == nullptr)
    return tasks::submit_matmul_backward_weight(dims_, groups.grad(group), dout.handle(), inp.handle(), ref, C, OC,
                                                name);
  // Split: per tile k (its rows of dout and inp) and per piece r of output channels, dW_r += dout_kᵀ·inp_k,
  // the tiles added in order; each task waits only for its tile's rows.
  const GradientSplit& split = gradient_split(group);
  const std::size_t weight_piece = split.first_piece[std::size_t(weight)];
  for (int k = 0; k < tiles(); ++k) {
    for (int r = 0; r < tiles(); ++r) {
      const int first = piece_first_row(OC, tiles(), r), end = piece_first_row(OC, tiles(), r + 1);
      tasks::submit_matmul_backward_weight_rows(tile_dims_[k], groups.grad_piece(group, weight_piece + std::size_t(r)),
                                                dout.piece(k), inp.piece(k), C, OC, first, end - first,
                                                tile_name(name + "[" + std::to_string(r) + "]", k));
    }
    if (bias)
      tasks::submit_bias_backward(tile_dims_[k], groups.grad_piece(group, split.first_piece[std::size_t(*bias)]),
                                  dout.piece(k), OC, tile_name(indexed(op + "_bwd_bias", block), k));
  }
}

void GptModel::submit_layernorm_backward(const std::string& op, int block, const GroupHandles& groups, int group,
                                         GptParam weight, GptParam bias, const Tensor& dinp, const Tensor& dout,
                                         const Tensor& inp, const Tensor& mean, const Tensor& rstd) {
  const std::size_t w_offset = layout_[weight].layer_offset, b_offset = layout_[bias].layer_offset;
  const tasks::WeightRef ref{groups.param(group), w_offset, (long long)b_offset};
  for (int k = 0; k < tiles(); ++k)
    tasks::submit_layernorm_backward_input(tile_dims_[k], dinp.piece(k), dout.piece(k), inp.piece(k), ref,
                                           mean.piece(k), rstd.piece(k),
                                           tile_name(indexed(op + "_bwd_input", block), k));
  const std::string name = indexed(op + "_bwd_params", block);
  if (groups.grad_piece(group, 0) == nullptr)
    return tasks::submit_layernorm_backward_params(dims_, groups.grad(group), dout.handle(), inp.handle(), ref,
                                                   mean.handle(), rstd.handle(), name);
  // Split: the piece holds the weight then the bias (offsets from its start); one task per tile,
  // the tiles added in order.
  const tasks::WeightRef in_piece{ref.group, 0, (long long)(b_offset - w_offset)};
  const starpu_data_handle_t piece = groups.grad_piece(group, gradient_split(group).first_piece[std::size_t(weight)]);
  for (int k = 0; k < tiles(); ++k)
    tasks::submit_layernorm_backward_params(tile_dims_[k], piece, dout.piece(k), inp.piece(k), in_piece, mean.piece(k),
                                            rstd.piece(k), tile_name(name, k));
}

void GptModel::submit_block_forward(int block, const GroupHandles& groups) {
  submit_block_pass(block, groups, Pass::forward);
}

// The block's forward tasks; a recompute pass runs again, before the backward, those whose
// outputs the policy does not keep (tasks named "<op>_recompute[b]"): the same kernels on the
// same inputs, so the same bits.
void GptModel::submit_block_pass(int block, const GroupHandles& groups, Pass pass) {
  using enum GptParam;
  Buffers& buf = *buffers_;
  BlockActivations& a = buf.blocks[std::size_t(block)];
  const Tensor& input = block == 0 ? buf.encoded : buf.blocks[std::size_t(block - 1)].residual3;
  const starpu_data_handle_t params = groups.param(block + 1);
  auto weight = [&](GptParam w, GptParam b) {
    return tasks::WeightRef{params, layout_[w].layer_offset, (long long)layout_[b].layer_offset};
  };
  auto in = [&](GptParam w) { return in_features(layout_[w]); };
  auto out = [&](GptParam w) { return out_features(layout_[w]); };
  const bool forward = pass == Pass::forward, full = activations_.recompute == Recompute::full;
  auto name = [&](const char* op, int k) {
    return tile_name(at((std::string(op) + (forward ? "_fwd" : "_recompute")).c_str(), block), k);
  };

  for (int k = 0; k < tiles(); ++k) {
    const tasks::Dims& d = tile_dims_[k];
    tasks::submit_layernorm_forward(d, a.ln1.piece(k), a.ln1_mean.piece(k), a.ln1_rstd.piece(k), input.piece(k),
                                    weight(ln1w, ln1b), name("ln1", k));
    if (forward || full)
      tasks::submit_matmul_forward(d, a.qkv.piece(k), a.ln1.piece(k), weight(qkvw, qkvb), in(qkvw), out(qkvw),
                                   name("qkv", k));
    submit_attention_forward(block, k, forward ? "attention_fwd" : "attention_recompute");
    if (forward || full) {
      tasks::submit_matmul_forward(d, a.attproj.piece(k), a.atty.piece(k), weight(attprojw, attprojb), in(attprojw),
                                   out(attprojw), name("attproj", k));
      tasks::submit_residual_forward(d, a.residual2.piece(k), input.piece(k), a.attproj.piece(k), name("residual2", k));
    }
    tasks::submit_layernorm_forward(d, a.ln2.piece(k), a.ln2_mean.piece(k), a.ln2_rstd.piece(k), a.residual2.piece(k),
                                    weight(ln2w, ln2b), name("ln2", k));
    if (forward || full)
      tasks::submit_matmul_forward(d, a.fch.piece(k), a.ln2.piece(k), weight(fcw, fcb), in(fcw), out(fcw),
                                   name("fc", k));
    tasks::submit_gelu_forward(d, a.fch_gelu.piece(k), a.fch.piece(k), name("gelu", k));
    if (!forward) continue;  // the backward reads neither fcproj nor the block's output's recomputation
    tasks::submit_matmul_forward(d, a.fcproj.piece(k), a.fch_gelu.piece(k), weight(fcprojw, fcprojb), in(fcprojw),
                                 out(fcprojw), name("fcproj", k));
    tasks::submit_residual_forward(d, a.residual3.piece(k), a.residual2.piece(k), a.fcproj.piece(k),
                                   name("residual3", k));
  }
  if (forward) submit_block_write_back(buf.storage, block, input, a.residual3);
}

// Attention of tile k: one task, or one per head group writing its own blocks of columns (all
// reading the tile's whole qkv); the same kernel calls per head either way.
void GptModel::submit_attention_forward(int block, int k, const std::string& op) {
  const BlockActivations& a = buffers_->blocks[std::size_t(block)];
  const tasks::Dims& d = tile_dims_[k];
  if (head_groups() == 1)
    return tasks::submit_attention_forward(d, a.atty.piece(k), a.att_lse.piece(k), a.qkv.piece(k),
                                           head_group_name(op, block, 0, k));
  for (int g = 0; g < head_groups(); ++g)
    tasks::submit_attention_forward_heads(d, head_groups_->group(g), a.atty.column_block(k, g),
                                          a.att_lse.column_block(k, g), a.qkv.piece(k),
                                          head_group_name(op, block, g, k));
}

// dqkv's blocks of tile k are (part, group) = q, k, v of every group: group g's are g, G + g, 2G + g.
void GptModel::submit_attention_backward(int block, int k) {
  const BlockActivations& a = buffers_->blocks[std::size_t(block)];
  const tasks::Dims& d = tile_dims_[k];
  const int G = head_groups();
  if (G == 1)
    return tasks::submit_attention_backward(d, a.dqkv.piece(k), a.datty.piece(k), a.qkv.piece(k), a.att_lse.piece(k),
                                            head_group_name("attention_bwd", block, 0, k));
  for (int g = 0; g < G; ++g)
    tasks::submit_attention_backward_heads(d, head_groups_->group(g), a.dqkv.column_block(k, g),
                                           a.dqkv.column_block(k, G + g), a.dqkv.column_block(k, 2 * G + g),
                                           a.datty.piece(k), a.qkv.piece(k), a.att_lse.column_block(k, g),
                                           head_group_name("attention_bwd", block, g, k));
}

void GptModel::submit_block_backward(int block, const GroupHandles& groups) {
  using enum GptParam;
  Buffers& buf = *buffers_;
  BlockActivations& a = buf.blocks[std::size_t(block)];
  const Tensor& input = block == 0 ? buf.encoded : buf.blocks[std::size_t(block - 1)].residual3;
  const Tensor& dinput = block == 0 ? buf.dencoded : buf.blocks[std::size_t(block - 1)].dresidual3;
  auto name = [&](const char* op, int k) { return tile_name(at(op, block), k); };
  auto linear = [&](const char* op, GptParam w, GptParam b, const Tensor& dinp, const Tensor& dout, const Tensor& inp) {
    submit_linear_backward(op, block, groups, block + 1, w, b, dinp, dout, inp);
  };
  auto layernorm = [&](const char* op, GptParam w, GptParam b, const Tensor& dinp, const Tensor& dout,
                       const Tensor& inp, const Tensor& mean, const Tensor& rstd) {
    submit_layernorm_backward(op, block, groups, block + 1, w, b, dinp, dout, inp, mean, rstd);
  };

  begin_block_backward(a.own_gradients(), dinput, [&] { submit_block_pass(block, groups, Pass::recompute); });
  submit_residual_backward("residual3_bwd", block, a.dresidual2, a.dfcproj, a.dresidual3);
  linear("fcproj", fcprojw, fcprojb, a.dfch_gelu, a.dfcproj, a.fch_gelu);
  for (int k = 0; k < tiles(); ++k)
    tasks::submit_gelu_backward(tile_dims_[k], a.dfch.piece(k), a.fch.piece(k), a.dfch_gelu.piece(k),
                                name("gelu_bwd", k));
  linear("fc", fcw, fcb, a.dln2, a.dfch, a.ln2);
  layernorm("ln2", ln2w, ln2b, a.dresidual2, a.dln2, a.residual2, a.ln2_mean, a.ln2_rstd);
  submit_residual_backward("residual2_bwd", block, dinput, a.dattproj, a.dresidual2);
  linear("attproj", attprojw, attprojb, a.datty, a.dattproj, a.atty);
  for (int k = 0; k < tiles(); ++k) submit_attention_backward(block, k);
  linear("qkv", qkvw, qkvb, a.dln1, a.dqkv, a.ln1);
  layernorm("ln1", ln1w, ln1b, dinput, a.dln1, input, a.ln1_mean, a.ln1_rstd);

  submit_block_fetch(
      buf.storage, block, activations_.window,
      [&](int b) -> const Tensor& { return buf.blocks[std::size_t(b)].residual3; }, dinput);
}

}  // namespace starzero
