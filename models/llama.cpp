#include "models/llama.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

#include "tasks/elementwise.hpp"
#include "tasks/llama_kernels.hpp"

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

std::string at(const char* what, int index) { return std::string(what) + "[" + std::to_string(index) + "]"; }

}  // namespace

// Activations and their gradients. Per block what its backward reads; one shared set of the
// forward's temporaries and of the backward's gradients inside a block (zeroed at the start of
// each block's backward); per block the gradient of its output (zeroed in its forward).
struct LlamaModel::Buffers {
  struct Block {
    Tensor ln1, rstd1, qkv, atty, att, res2, ln2, rstd2, fc, fc2, sw, out, dout;
  };
  struct Shared {
    Tensor attproj, mlpproj;  // forward temporaries
    Tensor dres2, dln2, dfc, dfc2, dsw, dmlpproj, dattproj, datty, dqkv_rot, dqkv, dln1;
  };
  Tensor tokens, targets, freqs, embedded, dembedded, lnf, rstdf, dlnf, logits, dlogits, probs, losses;
  std::vector<Block> blocks;
  std::unique_ptr<Shared> shared;
  ScratchHandle zeros, dropped, preatt, dpreatt, datt;
  std::size_t bytes = 0;  // of the tensors above and the scratch

  Buffers(const LlamaShape& s, DType dtype, int B, int T)
      : tokens(Tensor::transient(DType::i32, n(B, T), "tokens")),
        targets(Tensor::transient(DType::i32, n(B, T), "targets")),
        freqs(Tensor::host(DType::f32, std::size_t(T) * std::size_t(s.head_size()), "freqs_cis")),
        embedded(act(dtype, B, T, s.channels, "embedded")),
        dembedded(act(dtype, B, T, s.channels, "dembedded")),
        lnf(act(dtype, B, T, s.channels, "lnf")),
        rstdf(act(DType::f32, B, T, 1, "lnf_rstd")),
        dlnf(act(dtype, B, T, s.channels, "dlnf")),
        logits(act(dtype, B, T, s.vocab, "logits")),
        dlogits(act(dtype, B, T, s.vocab, "dlogits")),
        probs(act(DType::f32, B, T, s.vocab, "probs")),
        losses(Tensor::host(DType::f32, n(B, T), "losses")),
        zeros(std::size_t(T) * std::size_t(s.channels), dtype_size(dtype)),
        dropped(std::size_t(T) * std::size_t(s.channels), dtype_size(dtype)),
        preatt(attention(s, B, T), sizeof(float)),
        dpreatt(attention(s, B, T), sizeof(float)),
        datt(attention(s, B, T), sizeof(float)) {
    const int C = s.channels, Q = s.qkv_channels(), H = s.ffn_hidden;
    for (int b = 0; b < s.layers; ++b) {
      auto a = [&](DType type, int width, const char* name) { return act(type, B, T, width, at(name, b)); };
      blocks.push_back(Block{a(dtype, C, "ln1"), a(DType::f32, 1, "ln1_rstd"), a(dtype, Q, "qkv"), a(dtype, C, "atty"),
                             Tensor::transient(DType::f32, attention(s, B, T), at("att", b)), a(dtype, C, "residual2"),
                             a(dtype, C, "ln2"), a(DType::f32, 1, "ln2_rstd"), a(dtype, H, "fc"), a(dtype, H, "fc2"),
                             a(dtype, H, "swiglu"), a(dtype, C, "residual3"), a(dtype, C, "dresidual3")});
    }
    auto a = [&](int width, const char* name) { return act(dtype, B, T, width, name); };
    shared.reset(new Shared{a(C, "attproj"), a(C, "mlpproj"), a(C, "dresidual2"), a(C, "dln2"), a(H, "dfc"),
                            a(H, "dfc2"), a(H, "dswiglu"), a(C, "dmlpproj"), a(C, "dattproj"), a(C, "datty"),
                            a(Q, "dqkv_rotated"), a(Q, "dqkv"), a(C, "dln1")});
    for (const Tensor* t :
         {&tokens, &targets, &freqs, &embedded, &dembedded, &lnf, &rstdf, &dlnf, &logits, &dlogits, &probs, &losses})
      bytes += t->bytes();
    for (const Block& k : blocks)
      for (const Tensor* t : {&k.ln1, &k.rstd1, &k.qkv, &k.atty, &k.att, &k.res2, &k.ln2, &k.rstd2, &k.fc, &k.fc2,
                              &k.sw, &k.out, &k.dout})
        bytes += t->bytes();
    const Shared& g = *shared;
    for (const Tensor* t : {&g.attproj, &g.mlpproj, &g.dres2, &g.dln2, &g.dfc, &g.dfc2, &g.dsw, &g.dmlpproj,
                            &g.dattproj, &g.datty, &g.dqkv_rot, &g.dqkv, &g.dln1})
      bytes += t->bytes();
    for (const ScratchHandle* h : {&zeros, &dropped, &preatt, &dpreatt, &datt}) bytes += h->bytes;
  }
  static std::size_t n(int B, int T) { return std::size_t(B) * std::size_t(T); }
  static std::size_t attention(const LlamaShape& s, int B, int T) {
    return std::size_t(B) * std::size_t(s.heads) * std::size_t(T) * std::size_t(T);
  }
  static Tensor act(DType dtype, int B, int T, int width, std::string name) {
    return Tensor::transient(dtype, n(B, T) * std::size_t(width), std::move(name));
  }
  // The input of block b (and its gradient): the embedding or the block below.
  const Tensor& input(int b) const { return b == 0 ? embedded : blocks[std::size_t(b - 1)].out; }
  const Tensor& input_grad(int b) const { return b == 0 ? dembedded : blocks[std::size_t(b - 1)].dout; }
};

LlamaModel::LlamaModel(const LlamaShape& shape, DType dtype, int B, int T, const ActivationPolicy& activations)
    : shape_(shape),
      layout_(shape),
      dims_{dtype, B, T, shape.channels, shape.heads, shape.vocab, shape.vocab},
      ldims_{dtype, B, T, shape.channels, shape.heads, shape.kv_heads, shape.ffn_hidden, shape.norm_eps} {
  if (B < 1 || T < 1 || T > shape.max_seq)
    throw std::invalid_argument("Llama: need B >= 1 and 1 <= T <= max_seq " + std::to_string(shape.max_seq) +
                                " (B=" + std::to_string(B) + " T=" + std::to_string(T) + ")");
  if (activations.recompute != Recompute::none)
    throw std::invalid_argument("--recompute: the llama3 model keeps its activations (recomputation is GPT's)");
  if (activations.offload != ActivationOffload::none)
    throw std::invalid_argument("--offload-activations: the llama3 model keeps its activations on the device (GPT's)");
  if (dtype != DType::f32 && dtype != DType::bf16)
    throw std::invalid_argument("the llama3 model trains in fp32 or bf16 storage");
  buffers_ = std::make_unique<Buffers>(shape, dtype, B, T);
  auto table = buffers_->freqs.view(Access::write);
  kernels::rope_frequencies(table.as<float>().data(), T, shape.head_size(), shape.rope_theta, shape.use_scaled_rope);
}

LlamaModel::~LlamaModel() = default;

std::string LlamaModel::layer_name(int layer) const {
  switch (layout_.layer_kind(layer)) {
    case LlamaLayerKind::embedding: return "embedding";
    case LlamaLayerKind::block: return at("block", layer - 1);
    case LlamaLayerKind::head: return "head";
  }
  return "?";
}

std::size_t LlamaModel::activation_bytes() const { return buffers_->bytes; }

void LlamaModel::init_layer(int layer, std::span<float> params, std::uint64_t seed) const {
  if (params.size() != layer_params(layer)) throw std::invalid_argument("init_layer: wrong parameter count");
  const LlamaLayerKind kind = layout_.layer_kind(layer);
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

// ---- forward ----------------------------------------------------------------------------------

void LlamaModel::submit_forward(int layer, const GroupHandles& groups) {
  Buffers& buf = *buffers_;
  const LlamaLayerKind kind = layout_.layer_kind(layer);
  if (kind == LlamaLayerKind::embedding) {
    tasks::submit_zero(buf.dembedded.handle(), "zero_dembedded");
    tasks::submit_embedding_forward(ldims_, buf.embedded.handle(), buf.tokens.handle(), groups.param(0),
                                    offset(LlamaParam::wte), buf.zeros.handle, "embedding_fwd");
  } else if (kind == LlamaLayerKind::block) {
    submit_block_forward(layer - 1, groups);
  } else {
    const Tensor& x = buf.input(shape_.layers);
    tasks::submit_zero(buf.dlogits.handle(), "zero_dlogits");
    tasks::submit_zero(buf.dlnf.handle(), "zero_dlnf");
    tasks::submit_rmsnorm_forward(ldims_, buf.lnf.handle(), buf.rstdf.handle(), x.handle(), groups.param(layer),
                                  offset(LlamaParam::lnfw), "lnf_fwd");
    tasks::submit_matmul_forward(dims_, buf.logits.handle(), buf.lnf.handle(),
                                 {groups.param(layer), offset(LlamaParam::lm_head), -1}, shape_.channels, shape_.vocab,
                                 "lm_head_fwd");
    tasks::submit_crossentropy_forward(dims_, buf.losses.handle(), buf.probs.handle(), buf.logits.handle(),
                                       buf.targets.handle(), "crossentropy_fwd");
  }
}

void LlamaModel::submit_block_forward(int b, const GroupHandles& groups) {
  const Buffers::Block& a = buffers_->blocks[std::size_t(b)];
  const Buffers::Shared& g = *buffers_->shared;
  const Tensor& x = buffers_->input(b);
  const starpu_data_handle_t p = groups.param(b + 1);
  const int C = shape_.channels, Q = shape_.qkv_channels(), H = shape_.ffn_hidden;
  auto w = [&](LlamaParam param) { return tasks::WeightRef{p, offset(param), -1}; };
  tasks::submit_zero(a.dout.handle(), "zero_" + a.dout.name());
  tasks::submit_rmsnorm_forward(ldims_, a.ln1.handle(), a.rstd1.handle(), x.handle(), p, offset(LlamaParam::ln1w),
                                at("ln1_fwd", b));
  tasks::submit_matmul_forward(dims_, a.qkv.handle(), a.ln1.handle(), w(LlamaParam::qkvw), C, Q, at("qkv_fwd", b));
  tasks::submit_rope_forward(ldims_, a.qkv.handle(), buffers_->freqs.handle(), at("rope_fwd", b));
  tasks::submit_attention_gqa_forward(ldims_, a.atty.handle(), buffers_->preatt.handle, a.att.handle(), a.qkv.handle(),
                                      at("attention_fwd", b));
  tasks::submit_matmul_forward(dims_, g.attproj.handle(), a.atty.handle(), w(LlamaParam::attprojw), C, C,
                               at("attproj_fwd", b));
  tasks::submit_residual_forward(dims_, a.res2.handle(), x.handle(), g.attproj.handle(), at("residual2_fwd", b));
  tasks::submit_rmsnorm_forward(ldims_, a.ln2.handle(), a.rstd2.handle(), a.res2.handle(), p, offset(LlamaParam::ln2w),
                                at("ln2_fwd", b));
  tasks::submit_matmul_forward(dims_, a.fc.handle(), a.ln2.handle(), w(LlamaParam::fcw), C, H, at("fc_fwd", b));
  tasks::submit_matmul_forward(dims_, a.fc2.handle(), a.ln2.handle(), w(LlamaParam::fc2w), C, H, at("fc2_fwd", b));
  // llm.c: silu(c_fc2(x)) * c_fc(x).
  tasks::submit_swiglu_forward(ldims_, a.sw.handle(), a.fc2.handle(), a.fc.handle(), at("swiglu_fwd", b));
  tasks::submit_matmul_forward(dims_, g.mlpproj.handle(), a.sw.handle(), w(LlamaParam::fcprojw), H, C,
                               at("fcproj_fwd", b));
  tasks::submit_residual_forward(dims_, a.out.handle(), a.res2.handle(), g.mlpproj.handle(), at("residual3_fwd", b));
}

// ---- backward ---------------------------------------------------------------------------------

void LlamaModel::submit_backward(int layer, const GroupHandles& groups) {
  Buffers& buf = *buffers_;
  const LlamaLayerKind kind = layout_.layer_kind(layer);
  if (kind == LlamaLayerKind::embedding) {
    tasks::submit_embedding_backward(ldims_, groups.grad(0), offset(LlamaParam::wte), buf.dembedded.handle(),
                                     buf.tokens.handle(), buf.dropped.handle, "embedding_bwd");
  } else if (kind == LlamaLayerKind::block) {
    submit_block_backward(layer - 1, groups);
  } else {
    const Tensor& x = buf.input(shape_.layers);
    const Tensor& dx = buf.input_grad(shape_.layers);
    tasks::submit_crossentropy_backward(dims_, buf.dlogits.handle(), buf.probs.handle(), buf.targets.handle(),
                                        "crossentropy_bwd");
    tasks::submit_matmul_backward(dims_, buf.dlnf.handle(), groups.grad(layer), buf.dlogits.handle(), buf.lnf.handle(),
                                  {groups.param(layer), offset(LlamaParam::lm_head), -1}, shape_.channels, shape_.vocab,
                                  "lm_head_bwd");
    tasks::submit_rmsnorm_backward_input(ldims_, dx.handle(), buf.dlnf.handle(), x.handle(), groups.param(layer),
                                         offset(LlamaParam::lnfw), buf.rstdf.handle(), "lnf_bwd_input");
    tasks::submit_rmsnorm_backward_params(ldims_, groups.grad(layer), offset(LlamaParam::lnfw), buf.dlnf.handle(),
                                          x.handle(), buf.rstdf.handle(), "lnf_bwd_params");
  }
}

void LlamaModel::submit_block_backward(int b, const GroupHandles& groups) {
  const Buffers::Block& a = buffers_->blocks[std::size_t(b)];
  const Buffers::Shared& g = *buffers_->shared;
  const Tensor& x = buffers_->input(b);
  const Tensor& dx = buffers_->input_grad(b);
  const starpu_data_handle_t p = groups.param(b + 1), grad = groups.grad(b + 1);
  const int C = shape_.channels, Q = shape_.qkv_channels(), H = shape_.ffn_hidden;
  auto w = [&](LlamaParam param) { return tasks::WeightRef{p, offset(param), -1}; };
  for (const Tensor* t :
       {&g.dres2, &g.dln2, &g.dfc, &g.dfc2, &g.dsw, &g.dmlpproj, &g.dattproj, &g.datty, &g.dqkv_rot, &g.dqkv, &g.dln1})
    tasks::submit_zero(t->handle(), at(("zero_" + t->name()).c_str(), b));
  // MLP half.
  tasks::submit_residual_backward(dims_, g.dres2.handle(), g.dmlpproj.handle(), a.dout.handle(),
                                  at("residual3_bwd", b));
  tasks::submit_matmul_backward(dims_, g.dsw.handle(), grad, g.dmlpproj.handle(), a.sw.handle(), w(LlamaParam::fcprojw),
                                H, C, at("fcproj_bwd", b));
  tasks::submit_swiglu_backward(ldims_, g.dfc2.handle(), g.dfc.handle(), g.dsw.handle(), a.fc2.handle(), a.fc.handle(),
                                at("swiglu_bwd", b));
  tasks::submit_matmul_backward(dims_, g.dln2.handle(), grad, g.dfc.handle(), a.ln2.handle(), w(LlamaParam::fcw), C, H,
                                at("fc_bwd", b));
  tasks::submit_matmul_backward(dims_, g.dln2.handle(), grad, g.dfc2.handle(), a.ln2.handle(), w(LlamaParam::fc2w), C,
                                H, at("fc2_bwd", b));
  tasks::submit_rmsnorm_backward_input(ldims_, g.dres2.handle(), g.dln2.handle(), a.res2.handle(), p,
                                       offset(LlamaParam::ln2w), a.rstd2.handle(), at("ln2_bwd_input", b));
  tasks::submit_rmsnorm_backward_params(ldims_, grad, offset(LlamaParam::ln2w), g.dln2.handle(), a.res2.handle(),
                                        a.rstd2.handle(), at("ln2_bwd_params", b));
  // Attention half.
  tasks::submit_residual_backward(dims_, dx.handle(), g.dattproj.handle(), g.dres2.handle(), at("residual2_bwd", b));
  tasks::submit_matmul_backward(dims_, g.datty.handle(), grad, g.dattproj.handle(), a.atty.handle(),
                                w(LlamaParam::attprojw), C, C, at("attproj_bwd", b));
  tasks::submit_attention_gqa_backward(ldims_, g.dqkv_rot.handle(), buffers_->dpreatt.handle, buffers_->datt.handle,
                                       g.datty.handle(), a.qkv.handle(), a.att.handle(), at("attention_bwd", b));
  tasks::submit_rope_backward(ldims_, g.dqkv.handle(), g.dqkv_rot.handle(), buffers_->freqs.handle(),
                              at("rope_bwd", b));
  tasks::submit_matmul_backward(dims_, g.dln1.handle(), grad, g.dqkv.handle(), a.ln1.handle(), w(LlamaParam::qkvw), C,
                                Q, at("qkv_bwd", b));
  tasks::submit_rmsnorm_backward_input(ldims_, dx.handle(), g.dln1.handle(), x.handle(), p, offset(LlamaParam::ln1w),
                                       a.rstd1.handle(), at("ln1_bwd_input", b));
  tasks::submit_rmsnorm_backward_params(ldims_, grad, offset(LlamaParam::ln1w), g.dln1.handle(), x.handle(),
                                        a.rstd1.handle(), at("ln1_bwd_params", b));
}

// ---- data and results -------------------------------------------------------------------------

void LlamaModel::set_batch(std::span<const int> inputs, std::span<const int> targets) {
  const std::size_t n = std::size_t(dims_.N());
  if (inputs.size() != n || targets.size() != n)
    throw std::invalid_argument("set_batch: need " + std::to_string(n) + " inputs and targets");
  for (std::span<const int> tokens : {inputs, targets})
    for (int token : tokens)
      if (token < 0 || token >= shape_.vocab)
        throw std::invalid_argument("set_batch: token " + std::to_string(token) + " outside the vocabulary of " +
                                    std::to_string(shape_.vocab));
  tasks::submit_load_tokens(buffers_->tokens.handle(), inputs.data(), n, "load_tokens");
  tasks::submit_load_tokens(buffers_->targets.handle(), targets.data(), n, "load_targets");
}

double LlamaModel::mean_loss() const {
  auto view = buffers_->losses.view(Access::read);
  double sum = 0;
  for (float loss : view.as<float>()) sum += loss;
  return sum / double(dims_.N());
}

std::vector<float> LlamaModel::probabilities(int b, int t) const {
  if (b < 0 || b >= dims_.B || t < 0 || t >= dims_.T) throw std::out_of_range("probabilities: position out of range");
  auto view = buffers_->probs.view(Access::read);
  const float* row =
      view.as<float>().data() + (std::size_t(b) * std::size_t(dims_.T) + std::size_t(t)) * std::size_t(dims_.V);
  return std::vector<float>(row, row + dims_.V);
}

void LlamaModel::layers_to_file(const std::vector<std::span<const float>>& layer_params, std::span<float> file) const {
  if (layer_params.size() != std::size_t(layers()) || file.size() != layout_.param_count())
    throw std::invalid_argument("layers_to_file: wrong sizes");
  for (int l = 0; l < layers(); ++l)
    for (const LlmcRun& run : layout_.layer_runs(l))
      std::copy_n(layer_params[std::size_t(l)].begin() + std::ptrdiff_t(run.layer_offset), run.count,
                  file.begin() + std::ptrdiff_t(run.llmc_offset));
}

void LlamaModel::file_to_layers(std::span<const float> file, const std::vector<std::span<float>>& layer_values) const {
  if (layer_values.size() != std::size_t(layers()) || file.size() != layout_.param_count())
    throw std::invalid_argument("file_to_layers: wrong sizes");
  for (int l = 0; l < layers(); ++l)
    for (const LlmcRun& run : layout_.layer_runs(l))
      std::copy_n(file.begin() + std::ptrdiff_t(run.llmc_offset), run.count,
                  layer_values[std::size_t(l)].begin() + std::ptrdiff_t(run.layer_offset));
}

}  // namespace starzero
