#include "models/llama.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <random>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "models/block_activations.hpp"
#include "models/transformer_model.hpp"
#include "tasks/elementwise.hpp"
#include "tasks/nn_llama_kernels.hpp"
#include "tasks/prefetch.hpp"

namespace starzero {

namespace {

// A scratch handle: no home buffer; StarPU allocates it for each task that uses it (SCRATCH).
struct ScratchHandle {
  starpu_data_handle_t handle = nullptr;
  std::size_t bytes = 0;
  ScratchHandle(std::size_t count, std::size_t elem_size) : bytes(count * elem_size) {
    starpu_vector_data_register(&handle, -1, 0, uint32_t(count), elem_size);
  }
  ScratchHandle(const ScratchHandle&) = delete;
  ScratchHandle& operator=(const ScratchHandle&) = delete;
  ~ScratchHandle() { starpu_data_unregister_submit(handle); }
};

std::string at(const std::string& what, int index) { return what + "[" + std::to_string(index) + "]"; }

// A task name: `op` with the block index ("[b]"), or alone for block -1.
std::string indexed(const std::string& op, int block) { return block < 0 ? op : at(op, block); }


// Per sequence: the attention's log-sum-exp of each query row of each query head, [NH, T] fp32.
std::size_t attention_size(const LlamaShape& s, int T) { return std::size_t(s.heads) * std::size_t(T); }

// The width of a block's tensor per token: C, Q = (NH + 2·NKV)·hs or H elements of the storage
// type, one fp32 (RMSNorm's rstd), or the attention's fp32 log-sum-exp per query head (NH).
enum class Width { C, Q, H, stat, attention };

std::size_t per_sequence(const LlamaShape& s, int T, Width width) {
  switch (width) {
    case Width::C: return std::size_t(T) * std::size_t(s.channels);
    case Width::Q: return std::size_t(T) * std::size_t(s.qkv_channels());
    case Width::H: return std::size_t(T) * std::size_t(s.ffn_hidden);
    case Width::stat: return std::size_t(T);
    case Width::attention: return attention_size(s, T);
  }
  return 0;
}

// A block's forward tensors, and what each policy keeps per block (the rest lives in shared
// slots). No backward task reads attproj or mlpproj (only the residual adds of the forward): no
// policy keeps them. Selective keeps the matmul outputs the backward reads (qkv after RoPE, fc,
// fc2) and the residual stream (residual2, residual3); full keeps the block's output.
struct ActivationKind {
  const char* name;
  Width width;
  bool none_keeps, selective_keeps;
};
constexpr ActivationKind kBlockActivations[] = {
    {"ln1", Width::C, true, false},      {"ln1_rstd", Width::stat, true, false}, {"qkv", Width::Q, true, true},
    {"atty", Width::C, true, false},     {"att_lse", Width::attention, true, false}, {"attproj", Width::C, false, false},
    {"residual2", Width::C, true, true}, {"ln2", Width::C, true, false},         {"ln2_rstd", Width::stat, true, false},
    {"fc", Width::H, true, true},        {"fc2", Width::H, true, true},          {"swiglu", Width::H, true, false},
    {"mlpproj", Width::C, false, false}, {"residual3", Width::C, true, true},
};
// The gradients inside a block and of its output (dresidual3, which the block above writes).
constexpr std::pair<const char*, Width> kBlockGradients[] = {
    {"dresidual2", Width::C},   {"dln2", Width::C},     {"dfc", Width::H},      {"dfc2", Width::H},
    {"dswiglu", Width::H},      {"dmlpproj", Width::C}, {"dattproj", Width::C}, {"datty", Width::C},
    {"dqkv_rotated", Width::Q}, {"dqkv", Width::Q},     {"dln1", Width::C},     {"dresidual3", Width::C},
};
bool kept_per_block(const ActivationKind& kind, Recompute recompute) {
  switch (recompute) {
    case Recompute::none: return kind.none_keeps;
    case Recompute::selective: return kind.selective_keeps;
    case Recompute::full: return std::string_view(kind.name) == "residual3";
  }
  return true;
}

// Output channels [first, end) of piece k of n of a weight with `rows` output channels.
int piece_first_row(int rows, int n, int k) { return int(std::int64_t(rows) * k / n); }

}  // namespace

// The activations of one block and their gradients, as references into the buffers that hold
// them (Buffers): the block's own tensors, or one of the shared slots.
struct LlamaModel::Block {
  Tensor &ln1, &rstd1, &qkv, &atty, &att_lse, &attproj, &res2, &ln2, &rstd2, &fc, &fc2, &sw, &mlpproj, &out;
  Tensor &dres2, &dln2, &dfc, &dfc2, &dsw, &dmlpproj, &dattproj, &datty, &dqkv_rot, &dqkv, &dln1, &dout;

  // The gradients the block's backward accumulates into, but dout (the block above writes it):
  // zeroed at the start of the block's backward.
  std::vector<const Tensor*> own_gradients() const {
    return {&dres2, &dmlpproj, &dsw, &dfc2, &dfc, &dln2, &dattproj, &datty, &dqkv_rot, &dqkv, &dln1};
  }
};

// Every activation buffer of a micro-batch. Per block what the policy keeps (with a pinned host
// home for the first storage.offloaded() blocks); the tensors it does not keep in min(L, W + 1)
// shared slots (one slot with --recompute none, for attproj and mlpproj), block b in slot b mod
// slots; the gradients in two slots. Row-wise tensors are split into one piece per tile.
struct LlamaModel::Buffers {
  BlockActivationStorage storage;  // every tensor below, and what the blocks keep
  Tensor &tokens, &targets, &freqs, &embedded, &dembedded, &lnf, &rstdf, &dlnf, &logits, &dlogits, &probs, &losses;
  std::vector<Block> blocks;
  ScratchHandle zeros, dropped;  // the embedding's T·C position scratch
  std::size_t scratch_bytes = 0;

  Buffers(const LlamaShape& s, DType dtype, int T, const SequenceTiles& t, const ActivationPolicy& policy)
      : storage(s.layers, policy),
        tokens(storage.keep(t.make(DType::i32, std::size_t(T), "tokens"))),
        targets(storage.keep(t.make(DType::i32, std::size_t(T), "targets"))),
        freqs(storage.keep(Tensor::host(DType::f32, std::size_t(T) * std::size_t(s.head_size()), "freqs_cis"))),
        embedded(storage.keep(t.make(dtype, per_sequence(s, T, Width::C), "embedded"))),
        dembedded(storage.keep(t.make(dtype, per_sequence(s, T, Width::C), "dembedded"))),
        lnf(storage.keep(t.make(dtype, per_sequence(s, T, Width::C), "lnf"))),
        rstdf(storage.keep(t.make(DType::f32, std::size_t(T), "lnf_rstd"))),
        dlnf(storage.keep(t.make(dtype, per_sequence(s, T, Width::C), "dlnf"))),
        logits(storage.keep(t.make(dtype, std::size_t(T) * std::size_t(s.vocab), "logits"))),
        dlogits(storage.keep(t.make(dtype, std::size_t(T) * std::size_t(s.vocab), "dlogits"))),
        probs(storage.keep(t.make(DType::f32, std::size_t(T) * std::size_t(s.vocab), "probs"))),
        losses(storage.keep(t.host(DType::f32, std::size_t(T), "losses"))),  // read on the host every step
        zeros(std::size_t(T) * std::size_t(s.channels), dtype_size(dtype)),
        dropped(std::size_t(T) * std::size_t(s.channels), dtype_size(dtype)) {
    const int L = s.layers;
    const int slots = policy.recompute == Recompute::none ? 1 : std::min(L, policy.window + 1);
    auto make = [&](Width width, const std::string& name, bool host) {
      const DType type = width == Width::stat || width == Width::attention ? DType::f32 : dtype;
      return host ? t.host(type, per_sequence(s, T, width), name) : t.make(type, per_sequence(s, T, width), name);
    };
    const auto made = storage.make_blocks(
        kBlockActivations, kBlockGradients, slots,
        [&](const ActivationKind& kind) { return kept_per_block(kind, policy.recompute); },
        [&](std::size_t kind, const std::string& name, bool host) {
          return make(kBlockActivations[kind].width, name, host);
        },
        [&](std::size_t gradient, const std::string& name) {
          return make(kBlockGradients[gradient].second, name, false);
        });
    blocks.reserve(std::size_t(L));
    for (const auto& [f, g] : made)
      blocks.push_back(Block{*f[0], *f[1],  *f[2],  *f[3],  *f[4],  *f[5], *f[6],  *f[7], *f[8],
                             *f[9], *f[10], *f[11], *f[12], *f[13], *g[0], *g[1],  *g[2], *g[3],
                             *g[4], *g[5],  *g[6],  *g[7],  *g[8],  *g[9], *g[10], *g[11]});
    scratch_bytes = zeros.bytes + dropped.bytes;
  }

  // The input of block b (and its gradient): the embedding or the block below.
  const Tensor& input(int b) const { return b == 0 ? embedded : blocks[std::size_t(b - 1)].out; }
  const Tensor& input_grad(int b) const { return b == 0 ? dembedded : blocks[std::size_t(b - 1)].dout; }
};

// How a layer kind's gradient is cut (gradient_pieces): consecutive pieces in layout order, and
// the first piece of each of its tensors.
struct LlamaModel::GradientSplit {
  std::vector<std::size_t> counts;
  std::array<std::size_t, kLlamaParamCount> first_piece{};
};

namespace {

bool is_rmsnorm_weight(LlamaParam p) { return p == LlamaParam::ln1w || p == LlamaParam::ln2w || p == LlamaParam::lnfw; }
// A linear weight is [(L,) OC, C]: its input and output widths.
int in_features(const LlamaTensor& weight) { return int(weight.dims.back()); }
int out_features(const LlamaTensor& weight) { return int(weight.dims[weight.dims.size() - 2]); }
// Pieces of a linear weight's gradient: one per tile, at most one per output channel.
int weight_pieces(const LlamaTensor& weight, int tiles) { return std::min(tiles, out_features(weight)); }

// The micro-batch's tiles, once B and T are checked (std::invalid_argument).
SequenceTiles checked_tiles(const LlamaShape& shape, int B, int T, int tiles) {
  if (B < 1 || T < 1 || T > shape.max_seq)
    throw std::invalid_argument("Llama: need B >= 1 and 1 <= T <= max_seq " + std::to_string(shape.max_seq) +
                                " (B=" + std::to_string(B) + " T=" + std::to_string(T) + ")");
  return SequenceTiles(B, tiles);
}

}  // namespace

LlamaModel::LlamaModel(const LlamaShape& shape, DType dtype, int B, int T, int tiles,
                       const ActivationPolicy& activations)
    : TransformerModel(shape, checked_tiles(shape, B, T, tiles),
                       tasks::Dims{dtype, B, T, shape.channels, shape.heads, shape.vocab, shape.vocab}, activations,
                       "load_tokens"),
      ldims_{dtype, B, T, shape.channels, shape.heads, shape.kv_heads, shape.ffn_hidden, shape.norm_eps} {
  if (activations.window < 0)
    throw std::invalid_argument("recompute window " + std::to_string(activations.window) + " must be >= 0");
  if (dtype != DType::f32 && dtype != DType::bf16)
    throw std::invalid_argument("the llama3 model trains in fp32 or bf16 storage");
  for (int n : tiles_.sequences()) {
    tile_ldims_.push_back(ldims_);
    tile_ldims_.back().B = n;
  }
  buffers_ = std::make_unique<Buffers>(shape, dtype, T, tiles_, activations);
  {
    auto table = buffers_->freqs.view(Access::write);
    kernels::rope_frequencies(table.as<float>().data(), T, shape.head_size(), shape.rope_theta, shape.use_scaled_rope);
  }
  if (tiles == 1) return;
  for (LlmcLayerKind kind : {LlmcLayerKind::block, LlmcLayerKind::head}) {
    GradientSplit split;
    std::size_t next_offset = 0;
    for (const LlamaTensor* t : layout_.kind_tensors(kind)) {
      if (t->layer_offset != next_offset)
        throw std::logic_error("gradient split: the layout is not the consecutive table it assumes");
      split.first_piece[std::size_t(t->id)] = split.counts.size();
      next_offset = t->layer_offset + t->layer_count;
      if (is_rmsnorm_weight(t->id)) {
        split.counts.push_back(t->layer_count);
        continue;
      }
      const int rows = out_features(*t), n = weight_pieces(*t, tiles);
      for (int k = 0; k < n; ++k)
        split.counts.push_back(std::size_t(piece_first_row(rows, n, k + 1) - piece_first_row(rows, n, k)) *
                               std::size_t(in_features(*t)));
    }
    gradient_splits_.push_back(std::move(split));
  }
}

LlamaModel::~LlamaModel() = default;

std::string LlamaModel::layer_name(int layer) const {
  switch (layout_.layer_kind(layer)) {
    case LlmcLayerKind::embedding: return "embedding";
    case LlmcLayerKind::block: return at("block", layer - 1);
    case LlmcLayerKind::head: return "head";
  }
  return "?";
}

LlamaModel::TokenIo LlamaModel::token_io() const {
  const Buffers& buf = *buffers_;
  return {buf.tokens, buf.targets, buf.losses, buf.probs, buf.storage, buf.scratch_bytes};
}

const LlamaModel::GradientSplit* LlamaModel::gradient_split(int layer) const {
  switch (layout_.layer_kind(layer)) {
    case LlmcLayerKind::embedding: return nullptr;
    case LlmcLayerKind::block: return gradient_splits_.empty() ? nullptr : &gradient_splits_[0];
    case LlmcLayerKind::head: return gradient_splits_.empty() ? nullptr : &gradient_splits_[1];
  }
  return nullptr;
}

std::vector<std::size_t> LlamaModel::gradient_pieces(int layer) const {
  const GradientSplit* split = gradient_split(layer);
  return split ? split->counts : std::vector<std::size_t>{};
}

void LlamaModel::init_layer(int layer, std::span<float> params, std::uint64_t seed) const {
  if (params.size() != layer_params(layer)) throw std::invalid_argument("init_layer: wrong parameter count");
  const LlmcLayerKind kind = layout_.layer_kind(layer);
  std::mt19937_64 rng(seed * 1000003u + std::uint64_t(layer) * 7919u + 17u);
  const float projection = 0.02f / std::sqrt(2.0f * float(shape_.layers));
  for (const LlamaTensor& tensor : layout_.tensors()) {
    if (tensor.layer_kind != kind) continue;
    const std::span<float> values = params.subspan(tensor.layer_offset, tensor.layer_count);
    if (tensor.id == LlamaParam::ln1w || tensor.id == LlamaParam::ln2w || tensor.id == LlamaParam::lnfw) {
      std::fill(values.begin(), values.end(), 1.0f);
      continue;
    }
    const bool output = tensor.id == LlamaParam::attprojw || tensor.id == LlamaParam::fcprojw;
    std::normal_distribution<float> normal(0.0f, output ? projection : 0.02f);
    for (float& v : values) v = normal(rng);
  }
}

// Row-wise ops run once per tile: tile k's shapes are tile_dims_[k] / tile_ldims_[k] (its
// sequences), its handles each tensor's piece k. Ops over all rows (the parameter gradients, the
// embedding's scatter-add, zeroing) take the whole tensors; StarPU switches a tensor between its
// pieces and the whole as needed.

// ---- forward ----------------------------------------------------------------------------------

void LlamaModel::submit_forward(int layer, const GroupHandles& groups) {
  Buffers& buf = *buffers_;
  const LlmcLayerKind kind = layout_.layer_kind(layer);
  if (kind == LlmcLayerKind::embedding) {
    for (int k = 0; k < tiles(); ++k)
      submit(tasks::llama::embedding_forward,
             {buf.embedded.piece(k), buf.tokens.piece(k), groups.param(0), buf.zeros.handle},
             {.d = tile_ldims_[k], .weight = offset(LlamaParam::wte)}, tile_name("embedding_fwd", k));
    return;
  }
  if (kind == LlmcLayerKind::block) return submit_block_pass(layer - 1, groups, Pass::forward);
  const Tensor& x = buf.input(shape_.layers);
  const starpu_data_handle_t head = groups.param(layer);
  tasks::submit_zero(buf.dlogits.handle(), "zero_dlogits");
  tasks::submit_zero(buf.dlnf.handle(), "zero_dlnf");
  for (int k = 0; k < tiles(); ++k) {
    submit(tasks::llama::rmsnorm_forward, {buf.lnf.piece(k), buf.rstdf.piece(k), x.piece(k), head},
           {.d = tile_ldims_[k], .weight = offset(LlamaParam::lnfw)}, tile_name("lnf_fwd", k));
    tasks::submit_matmul_forward(tile_dims_[k], buf.logits.piece(k), buf.lnf.piece(k),
                                 {head, offset(LlamaParam::lm_head), -1}, shape_.channels, shape_.vocab,
                                 tile_name("lm_head_fwd", k));
    tasks::submit_crossentropy_forward(tile_dims_[k], buf.losses.piece(k), buf.probs.piece(k), buf.logits.piece(k),
                                       buf.targets.piece(k), tile_name("crossentropy_fwd", k));
  }
}

// The recompute pass runs the same kernels on the same inputs, so the same bits: selective
// recomputes the RMSNorms, the attention and SwiGLU from the kept qkv, residual2, fc and fc2; full
// everything but mlpproj and the block's output, which no backward task reads.
void LlamaModel::submit_block_pass(int b, const GroupHandles& groups, Pass pass) {
  using enum LlamaParam;
  Buffers& buf = *buffers_;
  const Block& a = buf.blocks[std::size_t(b)];
  const Tensor& x = buf.input(b);
  const starpu_data_handle_t p = groups.param(b + 1);
  const int C = shape_.channels, Q = shape_.qkv_channels(), H = shape_.ffn_hidden;
  auto w = [&](LlamaParam param) { return tasks::WeightRef{p, offset(param), -1}; };
  const bool forward = pass == Pass::forward, full = activations_.recompute == Recompute::full;
  const bool matmuls = forward || full;  // the matmuls and residual adds run again only with full
  auto name = [&](const char* op, int k) {
    return tile_name(at(std::string(op) + (forward ? "_fwd" : "_recompute"), b), k);
  };
  for (int k = 0; k < tiles(); ++k) {
    const tasks::Dims& d = tile_dims_[k];
    const tasks::LlamaDims& ld = tile_ldims_[k];
    submit(tasks::llama::rmsnorm_forward, {a.ln1.piece(k), a.rstd1.piece(k), x.piece(k), p},
           {.d = ld, .weight = offset(ln1w)}, name("ln1", k));
    if (matmuls) {
      tasks::submit_matmul_forward(d, a.qkv.piece(k), a.ln1.piece(k), w(qkvw), C, Q, name("qkv", k));
      submit(tasks::llama::rope_forward, {a.qkv.piece(k), buf.freqs.handle()}, {.d = ld}, name("rope", k));
    }
    submit(tasks::llama::attention_gqa_forward, {a.atty.piece(k), a.att_lse.piece(k), a.qkv.piece(k)}, {.d = ld},
           name("attention", k));
    if (matmuls) {
      tasks::submit_matmul_forward(d, a.attproj.piece(k), a.atty.piece(k), w(attprojw), C, C, name("attproj", k));
      tasks::submit_residual_forward(d, a.res2.piece(k), x.piece(k), a.attproj.piece(k), name("residual2", k));
    }
    submit(tasks::llama::rmsnorm_forward, {a.ln2.piece(k), a.rstd2.piece(k), a.res2.piece(k), p},
           {.d = ld, .weight = offset(ln2w)}, name("ln2", k));
    if (matmuls) {
      tasks::submit_matmul_forward(d, a.fc.piece(k), a.ln2.piece(k), w(fcw), C, H, name("fc", k));
      tasks::submit_matmul_forward(d, a.fc2.piece(k), a.ln2.piece(k), w(fc2w), C, H, name("fc2", k));
    }
    // llm.c: silu(c_fc2(x)) * c_fc(x).
    submit(tasks::llama::swiglu_forward, {a.sw.piece(k), a.fc2.piece(k), a.fc.piece(k)}, {.d = ld}, name("swiglu", k));
    if (!forward) continue;
    tasks::submit_matmul_forward(d, a.mlpproj.piece(k), a.sw.piece(k), w(fcprojw), H, C, name("fcproj", k));
    tasks::submit_residual_forward(d, a.out.piece(k), a.res2.piece(k), a.mlpproj.piece(k), name("residual3", k));
  }
  if (forward) submit_block_write_back(buf.storage, b, x, a.out);
}

// ---- backward ---------------------------------------------------------------------------------

void LlamaModel::submit_backward(int layer, const GroupHandles& groups) {
  Buffers& buf = *buffers_;
  const LlmcLayerKind kind = layout_.layer_kind(layer);
  if (kind == LlmcLayerKind::embedding) {
    submit(tasks::llama::embedding_backward,
           {groups.grad(0), buf.dembedded.handle(), buf.tokens.handle(), buf.dropped.handle},
           {.d = ldims_, .weight = offset(LlamaParam::wte)}, "embedding_bwd");
    return;
  }
  if (kind == LlmcLayerKind::block) return submit_block_backward(layer - 1, groups);
  const Tensor& x = buf.input(shape_.layers);
  const Tensor& dx = buf.input_grad(shape_.layers);
  // dloss: 1/N of the whole micro-batch, not of the tile (with masked targets, its share of the
  // global batch's mean: TokenModel::set_batch).
  for (int k = 0; k < tiles(); ++k)
    tasks::submit_crossentropy_backward(tile_dims_[k], buf.dlogits.piece(k), buf.probs.piece(k), buf.targets.piece(k),
                                        tile_name("crossentropy_bwd", k), dloss());
  submit_linear_backward("lm_head", -1, groups, layer, LlamaParam::lm_head, buf.dlnf, buf.dlogits, buf.lnf);
  tasks::submit_zero(dx.handle(), "zero_" + dx.name());
  submit_rmsnorm_backward("lnf", -1, groups, layer, LlamaParam::lnfw, dx, buf.dlnf, x, buf.rstdf);
}

void LlamaModel::submit_linear_backward(const std::string& op, int block, const GroupHandles& groups, int group,
                                        LlamaParam weight, const Tensor& dinp, const Tensor& dout, const Tensor& inp) {
  const LlamaTensor& w = layout_[weight];
  const int C = in_features(w), OC = out_features(w);
  const tasks::WeightRef ref{groups.param(group), w.layer_offset, -1};
  for (int k = 0; k < tiles(); ++k)
    tasks::submit_matmul_backward_input(tile_dims_[k], dinp.piece(k), dout.piece(k), ref, C, OC,
                                        tile_name(indexed(op + "_bwd_input", block), k));
  const std::string name = indexed(op + "_bwd_weight", block);
  const GradientSplit* split = gradient_split(group);
  if (!split || groups.grad_piece(group, 0) == nullptr)
    return tasks::submit_matmul_backward_weight(dims_, groups.grad(group), dout.handle(), inp.handle(), ref, C, OC,
                                                name);
  // Split: per tile k (its rows of dout and inp) and per piece r of output channels, dW_r +=
  // dout_kᵀ·inp_k, the tiles added in order; each task waits only for its tile's rows.
  const std::size_t first_piece = split->first_piece[std::size_t(weight)];
  const int n = weight_pieces(w, tiles());
  for (int k = 0; k < tiles(); ++k)
    for (int r = 0; r < n; ++r) {
      const int first = piece_first_row(OC, n, r), end = piece_first_row(OC, n, r + 1);
      tasks::submit_matmul_backward_weight_rows(tile_dims_[k], groups.grad_piece(group, first_piece + std::size_t(r)),
                                                dout.piece(k), inp.piece(k), C, OC, first, end - first,
                                                tile_name(at(name, r), k));
    }
}

void LlamaModel::submit_rmsnorm_backward(const std::string& op, int block, const GroupHandles& groups, int group,
                                         LlamaParam weight, const Tensor& dinp, const Tensor& dout, const Tensor& inp,
                                         const Tensor& rstd) {
  for (int k = 0; k < tiles(); ++k)
    submit(tasks::llama::rmsnorm_backward_input,
           {dinp.piece(k), dout.piece(k), inp.piece(k), groups.param(group), rstd.piece(k)},
           {.d = tile_ldims_[k], .weight = offset(weight)}, tile_name(indexed(op + "_bwd_input", block), k));
  const std::string name = indexed(op + "_bwd_params", block);
  const GradientSplit* split = gradient_split(group);
  if (!split || groups.grad_piece(group, 0) == nullptr)
    return submit(tasks::llama::rmsnorm_backward_params,
                  {groups.grad(group), dout.handle(), inp.handle(), rstd.handle()},
                  {.d = ldims_, .weight = offset(weight)}, name);
  // Split: the weight's own piece, one task per tile, the tiles added in order.
  const starpu_data_handle_t piece = groups.grad_piece(group, split->first_piece[std::size_t(weight)]);
  for (int k = 0; k < tiles(); ++k)
    submit(tasks::llama::rmsnorm_backward_params, {piece, dout.piece(k), inp.piece(k), rstd.piece(k)},
           {.d = tile_ldims_[k], .weight = 0}, tile_name(name, k));
}

void LlamaModel::submit_block_backward(int b, const GroupHandles& groups) {
  using enum LlamaParam;
  Buffers& buf = *buffers_;
  const Block& a = buf.blocks[std::size_t(b)];
  const Tensor& x = buf.input(b);
  const Tensor& dx = buf.input_grad(b);
  auto name = [&](const char* op, int k) { return tile_name(at(op, b), k); };
  auto linear = [&](const char* op, LlamaParam weight, const Tensor& dinp, const Tensor& dout, const Tensor& inp) {
    submit_linear_backward(op, b, groups, b + 1, weight, dinp, dout, inp);
  };
  auto rmsnorm = [&](const char* op, LlamaParam weight, const Tensor& dinp, const Tensor& dout, const Tensor& inp,
                     const Tensor& rstd) {
    submit_rmsnorm_backward(op, b, groups, b + 1, weight, dinp, dout, inp, rstd);
  };

  begin_block_backward(a.own_gradients(), dx, [&] { submit_block_pass(b, groups, Pass::recompute); });
  // MLP half.
  submit_residual_backward("residual3_bwd", b, a.dres2, a.dmlpproj, a.dout);
  linear("fcproj", fcprojw, a.dsw, a.dmlpproj, a.sw);
  for (int k = 0; k < tiles(); ++k)
    submit(tasks::llama::swiglu_backward,
           {a.dfc2.piece(k), a.dfc.piece(k), a.dsw.piece(k), a.fc2.piece(k), a.fc.piece(k)}, {.d = tile_ldims_[k]},
           name("swiglu_bwd", k));
  linear("fc", fcw, a.dln2, a.dfc, a.ln2);
  linear("fc2", fc2w, a.dln2, a.dfc2, a.ln2);
  rmsnorm("ln2", ln2w, a.dres2, a.dln2, a.res2, a.rstd2);
  // Attention half.
  submit_residual_backward("residual2_bwd", b, dx, a.dattproj, a.dres2);
  linear("attproj", attprojw, a.datty, a.dattproj, a.atty);
  for (int k = 0; k < tiles(); ++k) {
    submit(tasks::llama::attention_gqa_backward,
           {a.dqkv_rot.piece(k), a.datty.piece(k), a.qkv.piece(k), a.att_lse.piece(k)}, {.d = tile_ldims_[k]},
           name("attention_bwd", k));
    // dqkv must not be dqkv_rot: rope_backward accumulates the unrotated gradient into a buffer of its own.
    submit(tasks::llama::rope_backward, {a.dqkv.piece(k), a.dqkv_rot.piece(k), buf.freqs.handle()},
           {.d = tile_ldims_[k]}, name("rope_bwd", k));
  }
  linear("qkv", qkvw, a.dln1, a.dqkv, a.ln1);
  rmsnorm("ln1", ln1w, dx, a.dln1, x, a.rstd1);

  submit_block_fetch(
      buf.storage, b, activations_.window, [&](int block) -> const Tensor& { return buf.blocks[std::size_t(block)].out; },
      dx);
}

}  // namespace starzero
