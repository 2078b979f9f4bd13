#include "models/gpt.hpp"

#include "models/sharded_state.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
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

// The 12 per-layer tensors of a block, llm.c's order (= their order inside a block).
enum BlockTensor { ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, kBlockTensors };

std::array<std::size_t, kBlockTensors> block_tensor_sizes(std::size_t C) {
  return {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C};
}

std::array<std::size_t, kBlockTensors> block_tensor_offsets(std::size_t C) {
  const auto sizes = block_tensor_sizes(C);
  std::array<std::size_t, kBlockTensors> offsets{};
  std::exclusive_scan(sizes.begin(), sizes.end(), offsets.begin(), std::size_t{0});
  return offsets;
}

}  // namespace

GptShape gpt_preset(std::string_view name) {
  // {max_seq, vocab, padded_vocab, layers, heads, channels}
  if (name == "tiny") return GptShape{64, 256, 256, 4, 4, 128};
  if (name == "gpt2-124M") return GptShape{1024, 50257, 50304, 12, 12, 768};
  if (name == "gpt2-350M") return GptShape{1024, 50257, 50304, 24, 16, 1024};
  if (name == "gpt2-774M") return GptShape{1024, 50257, 50304, 36, 20, 1280};
  if (name == "gpt2-1558M") return GptShape{1024, 50257, 50304, 48, 25, 1600};
  std::string names;
  for (const auto& n : gpt_preset_names()) names += (names.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown model preset '" + std::string(name) + "'; valid: " + names);
}

std::vector<std::string> gpt_preset_names() { return {"tiny", "gpt2-124M", "gpt2-350M", "gpt2-774M", "gpt2-1558M"}; }

// Activations of one transformer block and their gradients (llm.c's names).
struct GptModel::BlockActivations {
  Tensor ln1, ln1_mean, ln1_rstd, qkv, atty, preatt, att, attproj, residual2, ln2, ln2_mean, ln2_rstd, fch,
      fch_gelu, fcproj, residual3;
  Tensor dln1, dqkv, datty, dattproj, dresidual2, dln2, dfch, dfch_gelu, dfcproj, dresidual3;

  BlockActivations(const tasks::GptDims& d, int block)
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

  static std::size_t attention_size(const tasks::GptDims& d) {
    return std::size_t(d.B) * std::size_t(d.NH) * std::size_t(d.T) * std::size_t(d.T);
  }
  static Tensor act(const tasks::GptDims& d, int width, const char* name, int block) {
    return Tensor::transient(d.dtype, std::size_t(d.N()) * std::size_t(width), at(name, block));
  }
  static Tensor stat(const tasks::GptDims& d, const char* name, int block) {
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

  Buffers(const tasks::GptDims& d, int L)
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

GptModel::GptModel(const GptShape& shape, DType dtype, int B, int T) : shape_(shape) {
  shape_.validate();
  if (dtype != DType::f32 && dtype != DType::bf16) throw std::invalid_argument("GPT model dtype must be fp32 or bf16");
  if (B <= 0 || T <= 0 || T > shape.max_seq)
    throw std::invalid_argument("batch " + std::to_string(B) + " x seq " + std::to_string(T) +
                                ": need B > 0 and 0 < T <= max_seq = " + std::to_string(shape.max_seq));
  dims_ = tasks::GptDims{dtype, B, T, shape.channels, shape.heads, shape.vocab, shape.padded_vocab};
  buffers_ = std::make_unique<Buffers>(dims_, shape.layers);
}

GptModel::~GptModel() = default;

std::size_t GptModel::layer_params(int layer) const { return gpt_layer_params(shape_, layer); }

std::string GptModel::layer_name(int layer) const {
  if (layer == 0) return "embedding";
  if (layer <= shape_.layers) return "block" + std::to_string(layer - 1);
  return "lnf+classifier";
}

std::vector<int> GptModel::shared_groups(int layer) const {
  if (layer == shape_.layers + 1) return {0};  // the classifier is tied to wte
  return {};
}

void GptModel::init_layer(int layer, std::span<float> block, std::uint64_t seed) const {
  if (block.size() != layer_params(layer)) throw std::invalid_argument("init_layer: wrong block size");
  // GPT-2's initialisation: N(0, 0.02) weights, N(0, 0.01) positions, residual projections
  // scaled by 1/sqrt(2L), zero biases, unit layernorm gains.
  std::mt19937_64 rng(seed * 1000003u + std::uint64_t(layer));
  auto fill_normal = [&](std::size_t offset, std::size_t count, float stddev) {
    std::normal_distribution<float> normal(0.0f, stddev);
    for (std::size_t i = 0; i < count; ++i) block[offset + i] = normal(rng);
  };
  auto fill = [&](std::size_t offset, std::size_t count, float value) {
    std::fill_n(block.begin() + std::ptrdiff_t(offset), count, value);
  };
  const std::size_t C = std::size_t(shape_.channels);
  if (layer == 0) {
    const std::size_t wte = std::size_t(shape_.padded_vocab) * C;
    fill_normal(0, wte, 0.02f);
    fill_normal(wte, std::size_t(shape_.max_seq) * C, 0.01f);
    // Padding rows of wte are never a target: keep them zero like llm.c.
    fill(std::size_t(shape_.vocab) * C, wte - std::size_t(shape_.vocab) * C, 0.0f);
    return;
  }
  if (layer == shape_.layers + 1) {
    fill(0, C, 1.0f);
    fill(C, C, 0.0f);
    return;
  }
  const auto sizes = block_tensor_sizes(C);
  const auto offsets = block_tensor_offsets(C);
  const float residual_std = 0.02f / std::sqrt(2.0f * float(shape_.layers));
  for (int t = 0; t < kBlockTensors; ++t) {
    switch (t) {
      case ln1w: case ln2w: fill(offsets[t], sizes[t], 1.0f); break;
      case qkvw: case fcw: fill_normal(offsets[t], sizes[t], 0.02f); break;
      case attprojw: case fcprojw: fill_normal(offsets[t], sizes[t], residual_std); break;
      default: fill(offsets[t], sizes[t], 0.0f); break;  // biases
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
  const float* row = view.as<float>().data() + (std::size_t(b) * std::size_t(dims_.T) + std::size_t(t)) * std::size_t(dims_.Vp);
  return std::vector<float>(row, row + dims_.V);
}

void GptModel::submit_forward(int layer, const GroupHandles& groups) {
  Buffers& buf = *buffers_;
  const std::size_t C = std::size_t(dims_.C);
  if (layer == 0) {
    tasks::submit_zero(buf.dencoded.handle(), "zero_dencoded");
    tasks::submit_encoder_forward(dims_, buf.encoded.handle(), buf.tokens.handle(), groups.param(0), 0,
                                  std::size_t(shape_.padded_vocab) * C, "encoder_fwd");
    return;
  }
  if (layer <= shape_.layers) return submit_block_forward(layer - 1, groups);
  // Final layernorm, classifier tied to wte, softmax cross-entropy.
  const int last = shape_.layers - 1;
  const int head = shape_.layers + 1;
  tasks::submit_zero(buf.dlnf.handle(), "zero_dlnf");
  tasks::submit_zero(buf.dlogits.handle(), "zero_dlogits");
  tasks::submit_layernorm_forward(dims_, buf.lnf.handle(), buf.lnf_mean.handle(), buf.lnf_rstd.handle(),
                                  buf.blocks[std::size_t(last)].residual3.handle(), {groups.param(head), 0, (long long)C},
                                  "lnf_fwd");
  tasks::submit_matmul_forward(dims_, buf.logits.handle(), buf.lnf.handle(), {groups.param(0), 0, -1}, dims_.C,
                               dims_.Vp, "classifier_fwd");
  tasks::submit_crossentropy_forward(dims_, buf.losses.handle(), buf.probs.handle(), buf.logits.handle(),
                                     buf.targets.handle(), "crossentropy_fwd");
}

void GptModel::submit_backward(int layer, const GroupHandles& groups) {
  Buffers& buf = *buffers_;
  const std::size_t C = std::size_t(dims_.C);
  if (layer == 0) {
    tasks::submit_encoder_backward(dims_, groups.grad(0), 0, std::size_t(shape_.padded_vocab) * C,
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
                                {groups.param(0), 0, -1}, dims_.C, dims_.Vp, "classifier_bwd");
  tasks::submit_layernorm_backward(dims_, top.dresidual3.handle(), groups.grad(head), buf.dlnf.handle(),
                                   top.residual3.handle(), {groups.param(head), 0, (long long)C},
                                   buf.lnf_mean.handle(), buf.lnf_rstd.handle(), "lnf_bwd");
}

void GptModel::submit_block_forward(int block, const GroupHandles& groups) {
  Buffers& buf = *buffers_;
  BlockActivations& a = buf.blocks[std::size_t(block)];
  const Tensor& input = block == 0 ? buf.encoded : buf.blocks[std::size_t(block - 1)].residual3;
  const starpu_data_handle_t params = groups.param(block + 1);
  const auto off = block_tensor_offsets(std::size_t(dims_.C));
  auto weight = [&](BlockTensor w, BlockTensor b) { return tasks::WeightRef{params, off[w], (long long)off[b]}; };
  const int C = dims_.C;

  for (const Tensor* gradient : a.gradients()) tasks::submit_zero(gradient->handle(), "zero_" + gradient->name());
  tasks::submit_layernorm_forward(dims_, a.ln1.handle(), a.ln1_mean.handle(), a.ln1_rstd.handle(), input.handle(),
                                  weight(ln1w, ln1b), at("ln1_fwd", block));
  tasks::submit_matmul_forward(dims_, a.qkv.handle(), a.ln1.handle(), weight(qkvw, qkvb), C, 3 * C,
                               at("qkv_fwd", block));
  tasks::submit_attention_forward(dims_, a.atty.handle(), a.preatt.handle(), a.att.handle(), a.qkv.handle(),
                                  at("attention_fwd", block));
  tasks::submit_matmul_forward(dims_, a.attproj.handle(), a.atty.handle(), weight(attprojw, attprojb), C, C,
                               at("attproj_fwd", block));
  tasks::submit_residual_forward(dims_, a.residual2.handle(), input.handle(), a.attproj.handle(),
                                 at("residual2_fwd", block));
  tasks::submit_layernorm_forward(dims_, a.ln2.handle(), a.ln2_mean.handle(), a.ln2_rstd.handle(),
                                  a.residual2.handle(), weight(ln2w, ln2b), at("ln2_fwd", block));
  tasks::submit_matmul_forward(dims_, a.fch.handle(), a.ln2.handle(), weight(fcw, fcb), C, 4 * C, at("fc_fwd", block));
  tasks::submit_gelu_forward(dims_, a.fch_gelu.handle(), a.fch.handle(), at("gelu_fwd", block));
  tasks::submit_matmul_forward(dims_, a.fcproj.handle(), a.fch_gelu.handle(), weight(fcprojw, fcprojb), 4 * C, C,
                               at("fcproj_fwd", block));
  tasks::submit_residual_forward(dims_, a.residual3.handle(), a.residual2.handle(), a.fcproj.handle(),
                                 at("residual3_fwd", block));
}

void GptModel::submit_block_backward(int block, const GroupHandles& groups) {
  Buffers& buf = *buffers_;
  BlockActivations& a = buf.blocks[std::size_t(block)];
  const Tensor& input = block == 0 ? buf.encoded : buf.blocks[std::size_t(block - 1)].residual3;
  const Tensor& dinput = block == 0 ? buf.dencoded : buf.blocks[std::size_t(block - 1)].dresidual3;
  const starpu_data_handle_t params = groups.param(block + 1);
  const starpu_data_handle_t grads = groups.grad(block + 1);
  const auto off = block_tensor_offsets(std::size_t(dims_.C));
  auto weight = [&](BlockTensor w, BlockTensor b) { return tasks::WeightRef{params, off[w], (long long)off[b]}; };
  const int C = dims_.C;

  tasks::submit_residual_backward(dims_, a.dresidual2.handle(), a.dfcproj.handle(), a.dresidual3.handle(),
                                  at("residual3_bwd", block));
  tasks::submit_matmul_backward(dims_, a.dfch_gelu.handle(), grads, a.dfcproj.handle(), a.fch_gelu.handle(),
                                weight(fcprojw, fcprojb), 4 * C, C, at("fcproj_bwd", block));
  tasks::submit_gelu_backward(dims_, a.dfch.handle(), a.fch.handle(), a.dfch_gelu.handle(), at("gelu_bwd", block));
  tasks::submit_matmul_backward(dims_, a.dln2.handle(), grads, a.dfch.handle(), a.ln2.handle(), weight(fcw, fcb), C,
                                4 * C, at("fc_bwd", block));
  tasks::submit_layernorm_backward(dims_, a.dresidual2.handle(), grads, a.dln2.handle(), a.residual2.handle(),
                                   weight(ln2w, ln2b), a.ln2_mean.handle(), a.ln2_rstd.handle(), at("ln2_bwd", block));
  tasks::submit_residual_backward(dims_, dinput.handle(), a.dattproj.handle(), a.dresidual2.handle(),
                                  at("residual2_bwd", block));
  tasks::submit_matmul_backward(dims_, a.datty.handle(), grads, a.dattproj.handle(), a.atty.handle(),
                                weight(attprojw, attprojb), C, C, at("attproj_bwd", block));
  tasks::submit_attention_backward(dims_, a.dqkv.handle(), buf.dpreatt.handle, buf.datt.handle, a.datty.handle(),
                                   a.qkv.handle(), a.att.handle(), at("attention_bwd", block));
  tasks::submit_matmul_backward(dims_, a.dln1.handle(), grads, a.dqkv.handle(), a.ln1.handle(), weight(qkvw, qkvb), C,
                                3 * C, at("qkv_bwd", block));
  tasks::submit_layernorm_backward(dims_, dinput.handle(), grads, a.dln1.handle(), input.handle(), weight(ln1w, ln1b),
                                   a.ln1_mean.handle(), a.ln1_rstd.handle(), at("ln1_bwd", block));
}

void GptModel::layers_to_llmc(const std::vector<std::span<const float>>& layer_blocks, std::span<float> llmc) const {
  if (layer_blocks.size() != std::size_t(layers()) || llmc.size() != shape_.param_count())
    throw std::invalid_argument("layers_to_llmc: sizes do not match the model");
  for (int layer = 0; layer < layers(); ++layer)
    for (const LlmcRun& run : gpt_layer_runs(shape_, layer))
      std::copy_n(layer_blocks[std::size_t(layer)].begin() + std::ptrdiff_t(run.block_offset), run.count,
                  llmc.begin() + std::ptrdiff_t(run.llmc_offset));
}

void GptModel::llmc_to_layers(std::span<const float> llmc, const std::vector<std::span<float>>& layer_blocks) const {
  if (layer_blocks.size() != std::size_t(layers()) || llmc.size() != shape_.param_count())
    throw std::invalid_argument("llmc_to_layers: sizes do not match the model");
  for (int layer = 0; layer < layers(); ++layer)
    for (const LlmcRun& run : gpt_layer_runs(shape_, layer))
      std::copy_n(llmc.begin() + std::ptrdiff_t(run.llmc_offset), run.count,
                  layer_blocks[std::size_t(layer)].begin() + std::ptrdiff_t(run.block_offset));
}

}  // namespace starzero
