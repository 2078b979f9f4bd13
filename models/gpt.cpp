#include "models/gpt.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

namespace starzero {

namespace {

// A scratch handle: no home buffer; StarPU allocates it for each task that uses it (SCRATCH).
struct ScratchHandle {
  starpu_data_handle_t handle = nullptr;
  ScratchHandle(std::size_t count, std::size_t elem_size) {
    starpu_vector_data_register(&handle, -1, 0, uint32_t(count), elem_size);
  }
  ScratchHandle(const ScratchHandle&) = delete;
  ScratchHandle& operator=(const ScratchHandle&) = delete;
  ~ScratchHandle() { starpu_data_unregister_submit(handle); }
};

std::string at(const char* what, int index) { return std::string(what) + "[" + std::to_string(index) + "]"; }

// A linear layer's weight is [(L,) OC, C] in llm.c: its input and output widths.
int in_features(const GptTensor& weight) { return int(weight.dims.back()); }
int out_features(const GptTensor& weight) { return int(weight.dims[weight.dims.size() - 2]); }

}  // namespace

// Activations of one transformer block and their gradients (llm.c's names).
struct GptModel::BlockActivations {
  Tensor ln1, ln1_mean, ln1_rstd, qkv, atty, preatt, att, attproj, residual2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu,
      fcproj, residual3;
  Tensor dln1, dqkv, datty, dattproj, dresidual2, dln2, dfch, dfch_gelu, dfcproj, dresidual3;

  BlockActivations(const tasks::Dims& d, int block)
      : ln1(act(d, d.C, "ln1", block)),
        ln1_mean(stat(d, "ln1_mean", block)),
        ln1_rstd(stat(d, "ln1_rstd", block)),
        qkv(act(d, 3 * d.C, "qkv", block)),
        atty(act(d, d.C, "atty", block)),
        preatt(Tensor::transient(DType::f32, attention_size(d), at("preatt", block))),
        att(Tensor::transient(DType::f32, attention_size(d), at("att", block))),
        attproj(act(d, d.C, "attproj", block)),
        residual2(act(d, d.C, "residual2", block)),
        ln2(act(d, d.C, "ln2", block)),
        ln2_mean(stat(d, "ln2_mean", block)),
        ln2_rstd(stat(d, "ln2_rstd", block)),
        fch(act(d, 4 * d.C, "fch", block)),
        fch_gelu(act(d, 4 * d.C, "fch_gelu", block)),
        fcproj(act(d, d.C, "fcproj", block)),
        residual3(act(d, d.C, "residual3", block)),
        dln1(act(d, d.C, "dln1", block)),
        dqkv(act(d, 3 * d.C, "dqkv", block)),
        datty(act(d, d.C, "datty", block)),
        dattproj(act(d, d.C, "dattproj", block)),
        dresidual2(act(d, d.C, "dresidual2", block)),
        dln2(act(d, d.C, "dln2", block)),
        dfch(act(d, 4 * d.C, "dfch", block)),
        dfch_gelu(act(d, 4 * d.C, "dfch_gelu", block)),
        dfcproj(act(d, d.C, "dfcproj", block)),
        dresidual3(act(d, d.C, "dresidual3", block)) {}

  static std::size_t attention_size(const tasks::Dims& d) {
    return std::size_t(d.B) * std::size_t(d.NH) * std::size_t(d.T) * std::size_t(d.T);
  }
  static Tensor act(const tasks::Dims& d, int width, const char* name, int block) {
    return Tensor::transient(d.dtype, std::size_t(d.N()) * std::size_t(width), at(name, block));
  }
  static Tensor stat(const tasks::Dims& d, const char* name, int block) {
    return Tensor::transient(DType::f32, std::size_t(d.N()), at(name, block));
  }
  // The gradients a block's backward accumulates into (zeroed every step).
  std::vector<const Tensor*> gradients() const {
    return {&dln1, &dqkv, &datty, &dattproj, &dresidual2, &dln2, &dfch, &dfch_gelu, &dfcproj, &dresidual3};
  }
};

struct GptModel::Buffers {
  Tensor tokens, targets;
  Tensor encoded, dencoded;
  std::vector<BlockActivations> blocks;
  Tensor lnf, lnf_mean, lnf_rstd, logits, probs, losses, dlnf, dlogits;
  ScratchHandle dpreatt, datt;

  Buffers(const tasks::Dims& d, int L)
      : tokens(Tensor::transient(DType::i32, std::size_t(d.N()), "tokens")),
        targets(Tensor::transient(DType::i32, std::size_t(d.N()), "targets")),
        encoded(BlockActivations::act(d, d.C, "encoded", 0)),
        dencoded(BlockActivations::act(d, d.C, "dencoded", 0)),
        lnf(BlockActivations::act(d, d.C, "lnf", 0)),
        lnf_mean(BlockActivations::stat(d, "lnf_mean", 0)),
        lnf_rstd(BlockActivations::stat(d, "lnf_rstd", 0)),
        logits(BlockActivations::act(d, d.Vp, "logits", 0)),
        probs(Tensor::transient(DType::f32, std::size_t(d.N()) * std::size_t(d.Vp), "probs")),
        losses(Tensor::host(DType::f32, std::size_t(d.N()), "losses")),
        dlnf(BlockActivations::act(d, d.C, "dlnf", 0)),
        dlogits(BlockActivations::act(d, d.Vp, "dlogits", 0)),
        dpreatt(BlockActivations::attention_size(d), sizeof(float)),
        datt(BlockActivations::attention_size(d), sizeof(float)) {
    blocks.reserve(std::size_t(L));
    for (int b = 0; b < L; ++b) blocks.emplace_back(d, b);
  }
};

GptModel::GptModel(const GptShape& shape, DType dtype, int B, int T) : shape_(shape), layout_(shape) {
  if (dtype != DType::f32 && dtype != DType::bf16) throw std::invalid_argument("GPT model dtype must be fp32 or bf16");
  if (B <= 0 || T <= 0 || T > shape.max_seq)
    throw std::invalid_argument("batch " + std::to_string(B) + " x seq " + std::to_string(T) +
                                ": need B > 0 and 0 < T <= max_seq = " + std::to_string(shape.max_seq));
  dims_ = tasks::Dims{dtype, B, T, shape.channels, shape.heads, shape.vocab, shape.padded_vocab};
  buffers_ = std::make_unique<Buffers>(dims_, shape.layers);
}

GptModel::~GptModel() = default;

std::size_t GptModel::layer_params(int layer) const { return layout_.layer_params(layer); }

std::string GptModel::layer_name(int layer) const {
  if (layer == 0) return "embedding";
  if (layer <= shape_.layers) return "block" + std::to_string(layer - 1);
  return "lnf+classifier";
}

std::vector<int> GptModel::shared_groups(int layer) const {
  if (layer == shape_.layers + 1) return {0};  // the classifier is tied to wte
  return {};
}

void GptModel::init_layer(int layer, std::span<float> params, std::uint64_t seed) const {
  if (params.size() != layer_params(layer)) throw std::invalid_argument("init_layer: wrong parameter count");
  // GPT-2's initialisation: N(0, 0.02) weights, N(0, 0.01) positions, residual projections
  // scaled by 1/sqrt(2L), zero biases, unit layernorm gains. The tensors are drawn in the
  // layer's order, each with a fresh distribution: saved runs depend on this exact sequence.
  std::mt19937_64 rng(seed * 1000003u + std::uint64_t(layer));
  const float residual_std = 0.02f / std::sqrt(2.0f * float(shape_.layers));
  const GptLayerKind kind = layout_.layer_kind(layer);
  for (const GptTensor& tensor : layout_.tensors()) {
    if (tensor.layer_kind != kind) continue;
    const std::span<float> values = params.subspan(tensor.layer_offset, tensor.layer_count);
    auto fill_normal = [&](float stddev) {
      std::normal_distribution<float> normal(0.0f, stddev);
      for (float& value : values) value = normal(rng);
    };
    switch (tensor.id) {
      case GptParam::wte: {
        fill_normal(0.02f);
        // Padding rows [V, Vp) of wte are never a target: keep them zero like llm.c.
        const std::size_t row = tensor.dims.back();
        std::fill(values.begin() + std::ptrdiff_t(std::size_t(shape_.vocab) * row), values.end(), 0.0f);
        break;
      }
      case GptParam::wpe:
        fill_normal(0.01f);
        break;
      case GptParam::qkvw:
      case GptParam::fcw:
        fill_normal(0.02f);
        break;
      case GptParam::attprojw:
      case GptParam::fcprojw:
        fill_normal(residual_std);
        break;
      case GptParam::ln1w:
      case GptParam::ln2w:
      case GptParam::lnfw:
        std::ranges::fill(values, 1.0f);
        break;
      default:
        std::ranges::fill(values, 0.0f);
        break;  // biases
    }
  }
}

void GptModel::set_batch(std::span<const int> inputs, std::span<const int> targets) {
  const std::size_t n = std::size_t(dims_.N());
  if (inputs.size() != n || targets.size() != n)
    throw std::invalid_argument("set_batch: need B*T = " + std::to_string(n) + " inputs and targets");
  for (std::size_t i = 0; i < n; ++i) {
    if (inputs[i] < 0 || inputs[i] >= shape_.vocab || targets[i] < 0 || targets[i] >= shape_.vocab)
      throw std::invalid_argument("set_batch: token id outside 0.." + std::to_string(shape_.vocab - 1));
  }
  tasks::submit_load_tokens(buffers_->tokens.handle(), inputs.data(), n, "load_inputs");
  tasks::submit_load_tokens(buffers_->targets.handle(), targets.data(), n, "load_targets");
}

double GptModel::mean_loss() const {
  auto view = buffers_->losses.view(Access::read);
  double sum = 0;
  for (float loss : view.as<float>()) sum += loss;
  return sum / double(dims_.N());
}

std::vector<float> GptModel::probabilities(int b, int t) const {
  if (b < 0 || b >= dims_.B || t < 0 || t >= dims_.T) throw std::out_of_range("probabilities: position out of range");
  auto view = buffers_->probs.view(Access::read);
  const float* row =
      view.as<float>().data() + (std::size_t(b) * std::size_t(dims_.T) + std::size_t(t)) * std::size_t(dims_.Vp);
  return std::vector<float>(row, row + dims_.V);
}

void GptModel::submit_forward(int layer, const GroupHandles& groups) {
  Buffers& buf = *buffers_;
  const GptTensor &wte = layout_[GptParam::wte], &lnfw = layout_[GptParam::lnfw], &lnfb = layout_[GptParam::lnfb];
  if (layer == 0) {
    tasks::submit_zero(buf.dencoded.handle(), "zero_dencoded");
    tasks::submit_encoder_forward(dims_, buf.encoded.handle(), buf.tokens.handle(), groups.param(0), wte.layer_offset,
                                  layout_[GptParam::wpe].layer_offset, "encoder_fwd");
    return;
  }
  if (layer <= shape_.layers) return submit_block_forward(layer - 1, groups);
  // Final layernorm, classifier tied to wte, softmax cross-entropy.
  const int last = shape_.layers - 1;
  const int head = shape_.layers + 1;
  tasks::submit_zero(buf.dlnf.handle(), "zero_dlnf");
  tasks::submit_zero(buf.dlogits.handle(), "zero_dlogits");
  tasks::submit_layernorm_forward(dims_, buf.lnf.handle(), buf.lnf_mean.handle(), buf.lnf_rstd.handle(),
                                  buf.blocks[std::size_t(last)].residual3.handle(),
                                  {groups.param(head), lnfw.layer_offset, (long long)lnfb.layer_offset}, "lnf_fwd");
  tasks::submit_matmul_forward(dims_, buf.logits.handle(), buf.lnf.handle(), {groups.param(0), wte.layer_offset, -1},
                               in_features(wte), out_features(wte), "classifier_fwd");
  tasks::submit_crossentropy_forward(dims_, buf.losses.handle(), buf.probs.handle(), buf.logits.handle(),
                                     buf.targets.handle(), "crossentropy_fwd");
}

void GptModel::submit_backward(int layer, const GroupHandles& groups) {
  Buffers& buf = *buffers_;
  const GptTensor &wte = layout_[GptParam::wte], &lnfw = layout_[GptParam::lnfw], &lnfb = layout_[GptParam::lnfb];
  if (layer == 0) {
    tasks::submit_encoder_backward(dims_, groups.grad(0), wte.layer_offset, layout_[GptParam::wpe].layer_offset,
                                   buf.dencoded.handle(), buf.tokens.handle(), "encoder_bwd");
    return;
  }
  if (layer <= shape_.layers) return submit_block_backward(layer - 1, groups);
  const int last = shape_.layers - 1;
  const int head = shape_.layers + 1;
  BlockActivations& top = buf.blocks[std::size_t(last)];
  tasks::submit_crossentropy_backward(dims_, buf.dlogits.handle(), buf.probs.handle(), buf.targets.handle(),
                                      "crossentropy_bwd");
  tasks::submit_matmul_backward(dims_, buf.dlnf.handle(), groups.grad(0), buf.dlogits.handle(), buf.lnf.handle(),
                                {groups.param(0), wte.layer_offset, -1}, in_features(wte), out_features(wte),
                                "classifier_bwd");
  tasks::submit_layernorm_backward(dims_, top.dresidual3.handle(), groups.grad(head), buf.dlnf.handle(),
                                   top.residual3.handle(),
                                   {groups.param(head), lnfw.layer_offset, (long long)lnfb.layer_offset},
                                   buf.lnf_mean.handle(), buf.lnf_rstd.handle(), "lnf_bwd");
}

void GptModel::submit_block_forward(int block, const GroupHandles& groups) {
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

  for (const Tensor* gradient : a.gradients()) tasks::submit_zero(gradient->handle(), "zero_" + gradient->name());
  tasks::submit_layernorm_forward(dims_, a.ln1.handle(), a.ln1_mean.handle(), a.ln1_rstd.handle(), input.handle(),
                                  weight(ln1w, ln1b), at("ln1_fwd", block));
  tasks::submit_matmul_forward(dims_, a.qkv.handle(), a.ln1.handle(), weight(qkvw, qkvb), in(qkvw), out(qkvw),
                               at("qkv_fwd", block));
  tasks::submit_attention_forward(dims_, a.atty.handle(), a.preatt.handle(), a.att.handle(), a.qkv.handle(),
                                  at("attention_fwd", block));
  tasks::submit_matmul_forward(dims_, a.attproj.handle(), a.atty.handle(), weight(attprojw, attprojb), in(attprojw),
                               out(attprojw), at("attproj_fwd", block));
  tasks::submit_residual_forward(dims_, a.residual2.handle(), input.handle(), a.attproj.handle(),
                                 at("residual2_fwd", block));
  tasks::submit_layernorm_forward(dims_, a.ln2.handle(), a.ln2_mean.handle(), a.ln2_rstd.handle(), a.residual2.handle(),
                                  weight(ln2w, ln2b), at("ln2_fwd", block));
  tasks::submit_matmul_forward(dims_, a.fch.handle(), a.ln2.handle(), weight(fcw, fcb), in(fcw), out(fcw),
                               at("fc_fwd", block));
  tasks::submit_gelu_forward(dims_, a.fch_gelu.handle(), a.fch.handle(), at("gelu_fwd", block));
  tasks::submit_matmul_forward(dims_, a.fcproj.handle(), a.fch_gelu.handle(), weight(fcprojw, fcprojb), in(fcprojw),
                               out(fcprojw), at("fcproj_fwd", block));
  tasks::submit_residual_forward(dims_, a.residual3.handle(), a.residual2.handle(), a.fcproj.handle(),
                                 at("residual3_fwd", block));
}

void GptModel::submit_block_backward(int block, const GroupHandles& groups) {
  using enum GptParam;
  Buffers& buf = *buffers_;
  BlockActivations& a = buf.blocks[std::size_t(block)];
  const Tensor& input = block == 0 ? buf.encoded : buf.blocks[std::size_t(block - 1)].residual3;
  const Tensor& dinput = block == 0 ? buf.dencoded : buf.blocks[std::size_t(block - 1)].dresidual3;
  const starpu_data_handle_t params = groups.param(block + 1);
  const starpu_data_handle_t grads = groups.grad(block + 1);
  auto weight = [&](GptParam w, GptParam b) {
    return tasks::WeightRef{params, layout_[w].layer_offset, (long long)layout_[b].layer_offset};
  };
  auto in = [&](GptParam w) { return in_features(layout_[w]); };
  auto out = [&](GptParam w) { return out_features(layout_[w]); };

  tasks::submit_residual_backward(dims_, a.dresidual2.handle(), a.dfcproj.handle(), a.dresidual3.handle(),
                                  at("residual3_bwd", block));
  tasks::submit_matmul_backward(dims_, a.dfch_gelu.handle(), grads, a.dfcproj.handle(), a.fch_gelu.handle(),
                                weight(fcprojw, fcprojb), in(fcprojw), out(fcprojw), at("fcproj_bwd", block));
  tasks::submit_gelu_backward(dims_, a.dfch.handle(), a.fch.handle(), a.dfch_gelu.handle(), at("gelu_bwd", block));
  tasks::submit_matmul_backward(dims_, a.dln2.handle(), grads, a.dfch.handle(), a.ln2.handle(), weight(fcw, fcb),
                                in(fcw), out(fcw), at("fc_bwd", block));
  tasks::submit_layernorm_backward(dims_, a.dresidual2.handle(), grads, a.dln2.handle(), a.residual2.handle(),
                                   weight(ln2w, ln2b), a.ln2_mean.handle(), a.ln2_rstd.handle(), at("ln2_bwd", block));
  tasks::submit_residual_backward(dims_, dinput.handle(), a.dattproj.handle(), a.dresidual2.handle(),
                                  at("residual2_bwd", block));
  tasks::submit_matmul_backward(dims_, a.datty.handle(), grads, a.dattproj.handle(), a.atty.handle(),
                                weight(attprojw, attprojb), in(attprojw), out(attprojw), at("attproj_bwd", block));
  tasks::submit_attention_backward(dims_, a.dqkv.handle(), buf.dpreatt.handle, buf.datt.handle, a.datty.handle(),
                                   a.qkv.handle(), a.att.handle(), at("attention_bwd", block));
  tasks::submit_matmul_backward(dims_, a.dln1.handle(), grads, a.dqkv.handle(), a.ln1.handle(), weight(qkvw, qkvb),
                                in(qkvw), out(qkvw), at("qkv_bwd", block));
  tasks::submit_layernorm_backward(dims_, dinput.handle(), grads, a.dln1.handle(), input.handle(), weight(ln1w, ln1b),
                                   a.ln1_mean.handle(), a.ln1_rstd.handle(), at("ln1_bwd", block));
}

namespace {

// The per-layer arrays (one per layer, of the layer's size) and the llm.c vector both match the layout.
template <class LayerParams>
bool matches(const GptLayout& layout, const std::vector<LayerParams>& layer_values, std::size_t llmc_size) {
  if (layer_values.size() != std::size_t(layout.layers()) || llmc_size != layout.param_count()) return false;
  for (int layer = 0; layer < layout.layers(); ++layer)
    if (layer_values[std::size_t(layer)].size() != layout.layer_params(layer)) return false;
  return true;
}

}  // namespace

void GptModel::layers_to_llmc(const std::vector<std::span<const float>>& layer_values, std::span<float> llmc) const {
  if (!matches(layout_, layer_values, llmc.size()))
    throw std::invalid_argument("layers_to_llmc: sizes do not match the model");
  for (int layer = 0; layer < layers(); ++layer)
    for (const LlmcRun& run : layout_.layer_runs(layer))
      std::copy_n(layer_values[std::size_t(layer)].begin() + std::ptrdiff_t(run.layer_offset), run.count,
                  llmc.begin() + std::ptrdiff_t(run.llmc_offset));
}

void GptModel::llmc_to_layers(std::span<const float> llmc, const std::vector<std::span<float>>& layer_values) const {
  if (!matches(layout_, layer_values, llmc.size()))
    throw std::invalid_argument("llmc_to_layers: sizes do not match the model");
  for (int layer = 0; layer < layers(); ++layer)
    for (const LlmcRun& run : layout_.layer_runs(layer))
      std::copy_n(llmc.begin() + std::ptrdiff_t(run.llmc_offset), run.count,
                  layer_values[std::size_t(layer)].begin() + std::ptrdiff_t(run.layer_offset));
}

}  // namespace starzero
