#include "tasks/nn_llama.hpp"

#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "tasks/nn_llama_kernels.hpp"
#include "tasks/nn_kernels.hpp"
#include "tasks/attention_dispatch.hpp"
#include "tasks/op_codelets.hpp"

namespace starzero::tasks {

namespace {

// ---- the functions the codelets run (tasks/op_codelets.hpp) --------------------------------------

using op_codelets::declared;
using op_costs::RowCost;

namespace ops {

// The GPT-2 encoder with an all-zero position table: x + 0 is x exactly, so out = wte[token]; in
// the backward the position table's gradient goes to the scratch buffer and is dropped.
constexpr auto embedding_forward = []<class T>(auto launch, const TaskBuffers& b, const LlamaArgs& a) {
  launch.zero(b.data("zeros"), b.bytes("zeros"));
  launch(kernels::encoder_forward<T>, STARZERO_CUDA_FUNC(kernels::cuda::encoder_forward<T>), b.get<T>("out"),
         b.get<int>("tokens"), b.get<T>("params", a.weight), static_cast<const T*>(b.get<T>("zeros")), a.d.B, a.d.T,
         a.d.C);
};

constexpr auto embedding_backward = []<class T>(auto launch, const TaskBuffers& b, const LlamaArgs& a) {
  launch.zero(b.data("scratch"), b.bytes("scratch"));
  launch(kernels::encoder_backward<T>, STARZERO_CUDA_FUNC(kernels::cuda::encoder_backward<T>),
         b.get<T>("grads", a.weight), b.get<T>("scratch"), b.get<T>("dout"), b.get<int>("tokens"), a.d.B, a.d.T, a.d.C);
};

constexpr auto rmsnorm_forward = []<class T>(auto launch, const TaskBuffers& b, const LlamaArgs& a) {
  launch(kernels::rmsnorm_forward<T>, STARZERO_CUDA_FUNC(kernels::cuda::rmsnorm_forward<T>), b.get<T>("out"),
         b.get<float>("rstd"), b.get<T>("inp"), b.get<T>("params", a.weight), a.d.N(), a.d.C, a.d.eps);
};

constexpr auto rmsnorm_backward_input = []<class T>(auto launch, const TaskBuffers& b, const LlamaArgs& a) {
  launch(kernels::rmsnorm_backward<T>, STARZERO_CUDA_FUNC(kernels::cuda::rmsnorm_backward<T>), b.get<T>("dinp"),
         nullptr, b.get<T>("dout"), b.get<T>("inp"), b.get<T>("params", a.weight), b.get<float>("rstd"), a.d.N(),
         a.d.C);
};

constexpr auto rmsnorm_backward_params = []<class T>(auto launch, const TaskBuffers& b, const LlamaArgs& a) {
  launch(kernels::rmsnorm_backward<T>, STARZERO_CUDA_FUNC(kernels::cuda::rmsnorm_backward<T>), nullptr,
         b.get<T>("grads", a.weight), b.get<T>("dout"), b.get<T>("inp"), nullptr, b.get<float>("rstd"), a.d.N(), a.d.C);
};

constexpr auto rope_forward = []<class T>(auto launch, const TaskBuffers& b, const LlamaArgs& a) {
  T* qkv = b.get<T>("qkv");
  launch(kernels::rope_forward<T>, STARZERO_CUDA_FUNC(kernels::cuda::rope_forward<T>), qkv, qkv, b.get<float>("freqs"),
         a.d.B, a.d.T, a.d.NH + a.d.NKV, a.d.hs(), a.d.qkv_channels());
};

constexpr auto rope_backward = []<class T>(auto launch, const TaskBuffers& b, const LlamaArgs& a) {
  launch(kernels::rope_backward<T>, STARZERO_CUDA_FUNC(kernels::cuda::rope_backward<T>), b.get<T>("dinp"),
         b.get<T>("dout"), b.get<float>("freqs"), a.d.B, a.d.T, a.d.NH + a.d.NKV, a.d.hs(), a.d.qkv_channels());
};

constexpr auto swiglu_forward = []<class T>(auto launch, const TaskBuffers& b, const LlamaArgs& a) {
  launch(kernels::swiglu_forward<T>, STARZERO_CUDA_FUNC(kernels::cuda::swiglu_forward<T>), b.get<T>("out"),
         b.get<T>("gate"), b.get<T>("up"), a.d.N(), a.d.H);
};

constexpr auto swiglu_backward = []<class T>(auto launch, const TaskBuffers& b, const LlamaArgs& a) {
  launch(kernels::swiglu_backward<T>, STARZERO_CUDA_FUNC(kernels::cuda::swiglu_backward<T>), b.get<T>("dgate"),
         b.get<T>("dup"), b.get<T>("dout"), b.get<T>("gate"), b.get<T>("up"), a.d.N(), a.d.H);
};

constexpr auto attention_gqa_forward = []<class T>(auto launch, const TaskBuffers& b, const LlamaArgs& a) {
  launch(kernels::attention_gqa_forward<T>, STARZERO_CUDA_FUNC(attention_dispatch::gqa_forward<T>),
         b.get<T>("out"), b.get<float>("lse"), b.get<T>("qkv"), a.d.B, a.d.T, a.d.NH, a.d.NKV, a.d.hs());
};

constexpr auto attention_gqa_backward = []<class T>(auto launch, const TaskBuffers& b, const LlamaArgs& a) {
  launch(kernels::attention_gqa_backward<T>, STARZERO_CUDA_FUNC(attention_dispatch::gqa_backward<T>),
         b.get<T>("dqkv"), b.get<T>("dout"), b.get<T>("qkv"), b.get<float>("lse"), a.d.B, a.d.T, a.d.NH, a.d.NKV,
         a.d.hs());
};

}  // namespace ops

// RoPE's costs: the channels it rotates per row, (NH + NKV)·hs; its fp32 table, T·hs.
double rotated_channels(const LlamaArgs& a) { return double(a.d.NH + a.d.NKV) * a.d.hs(); }
double rope_table(const LlamaArgs& a) { return double(a.d.T) * a.d.hs(); }

}  // namespace

// ---- the declarations ---------------------------------------------------------------------------
// Each op's cost above its codelet: what a task does per row of its N = B·T rows, and once per task
// (tasks/op_costs.hpp). s: bytes per stored element; Q = (NH + 2·NKV)·hs channels of a qkv row; R =
// (NH + NKV)·hs of them rotated. FLOP counts are the usual model counts (a multiply-add is 2, exp
// and sqrt count 1); bytes are what a task reads plus what it writes (an accumulated buffer twice).
namespace llama {

// The embedding, the 4-byte words the tokens: the GPT-2 encoder's with the zero position table a
// scratch buffer of T·C elements, written (and in the backward read) once more per task.
// FLOPs N·C (the add of the zero position); bytes s·(2·N·C + 2·T·C) + 4·N.
constexpr auto embedding_forward_cost = [](const LlamaArgs& a) {
  return RowCost{.flops = double(a.d.C), .stored = 2.0 * a.d.C, .stored_once = 2.0 * a.d.T * a.d.C, .words = 1};
};
Codelet<LlamaArgs> embedding_forward(declared<ops::embedding_forward, embedding_forward_cost>({
    .name = "llama_embedding_forward",
    .buffers = {{STARPU_W, "out"}, {STARPU_R, "tokens"}, {STARPU_R, "params"}, {STARPU_SCRATCH, "zeros"}},
}));
// FLOPs 2·N·C; bytes s·(3·N·C + 3·T·C) + 4·N.
constexpr auto embedding_backward_cost = [](const LlamaArgs& a) {
  return RowCost{.flops = 2.0 * a.d.C, .stored = 3.0 * a.d.C, .stored_once = 3.0 * a.d.T * a.d.C, .words = 1};
};
Codelet<LlamaArgs> embedding_backward(declared<ops::embedding_backward, embedding_backward_cost>({
    .name = "llama_embedding_backward",
    .buffers = {{STARPU_RW, "grads"}, {STARPU_R, "dout"}, {STARPU_R, "tokens"}, {STARPU_SCRATCH, "scratch"}},
}));

// RMSNorm: the weight C once; the 4-byte words rstd.
// FLOPs ≈ 4·N·C (square-sum, normalise, scale); bytes s·(2·N·C + C) + 4·N.
constexpr auto rmsnorm_forward_cost = [](const LlamaArgs& a) {
  return RowCost{.flops = 4.0 * a.d.C, .stored = 2.0 * a.d.C, .stored_once = double(a.d.C), .words = 1};
};
Codelet<LlamaArgs> rmsnorm_forward(declared<ops::rmsnorm_forward, rmsnorm_forward_cost>({
    .name = "llama_rmsnorm_forward",
    .buffers = {{STARPU_W, "out"}, {STARPU_W, "rstd"}, {STARPU_R, "inp"}, {STARPU_R, "params"}},
}));
// FLOPs ≈ 8·N·C; bytes s·(4·N·C + C) + 4·N (dinp accumulated, dout, inp, weight; rstd).
constexpr auto rmsnorm_backward_input_cost = [](const LlamaArgs& a) {
  return RowCost{.flops = 8.0 * a.d.C, .stored = 4.0 * a.d.C, .stored_once = double(a.d.C), .words = 1};
};
Codelet<LlamaArgs> rmsnorm_backward_input(declared<ops::rmsnorm_backward_input, rmsnorm_backward_input_cost>({
    .name = "llama_rmsnorm_backward_input",
    .buffers = {{STARPU_RW, "dinp"}, {STARPU_R, "dout"}, {STARPU_R, "inp"}, {STARPU_R, "params"}, {STARPU_R, "rstd"}},
}));
// FLOPs ≈ 3·N·C; bytes s·(2·N·C + 2·C) + 4·N.
constexpr auto rmsnorm_backward_params_cost = [](const LlamaArgs& a) {
  return RowCost{.flops = 3.0 * a.d.C, .stored = 2.0 * a.d.C, .stored_once = 2.0 * a.d.C, .words = 1};
};
Codelet<LlamaArgs> rmsnorm_backward_params(declared<ops::rmsnorm_backward_params, rmsnorm_backward_params_cost>({
    .name = "llama_rmsnorm_backward_params",
    .buffers = {{STARPU_RW, "grads"}, {STARPU_R, "dout"}, {STARPU_R, "inp"}, {STARPU_R, "rstd"}},
}));

// RoPE: the fp32 table T·hs once.
// FLOPs 3·N·R (two products and a sum per rotated channel); bytes 2·s·N·Q + 4·T·hs.
constexpr auto rope_forward_cost = [](const LlamaArgs& a) {
  return RowCost{.flops = 3.0 * rotated_channels(a), .stored = 2.0 * a.d.qkv_channels(), .words_once = rope_table(a)};
};
Codelet<LlamaArgs> rope_forward(declared<ops::rope_forward, rope_forward_cost>({
    .name = "llama_rope_forward",
    .buffers = {{STARPU_RW, "qkv"}, {STARPU_R, "freqs"}},
}));
// FLOPs 4·N·R (the rotation and the accumulation); bytes 3·s·N·Q + 4·T·hs.
constexpr auto rope_backward_cost = [](const LlamaArgs& a) {
  return RowCost{.flops = 4.0 * rotated_channels(a), .stored = 3.0 * a.d.qkv_channels(), .words_once = rope_table(a)};
};
Codelet<LlamaArgs> rope_backward(declared<ops::rope_backward, rope_backward_cost>({
    .name = "llama_rope_backward",
    .buffers = {{STARPU_RW, "dinp"}, {STARPU_R, "dout"}, {STARPU_R, "freqs"}},
}));

// SwiGLU over H channels. FLOPs ≈ 5·N·H (exp, add, divide, two products); bytes 3·s·N·H.
constexpr auto swiglu_forward_cost = [](const LlamaArgs& a) {
  return RowCost{.flops = 5.0 * a.d.H, .stored = 3.0 * a.d.H};
};
Codelet<LlamaArgs> swiglu_forward(declared<ops::swiglu_forward, swiglu_forward_cost>({
    .name = "llama_swiglu_forward",
    .buffers = {{STARPU_W, "out"}, {STARPU_R, "gate"}, {STARPU_R, "up"}},
}));
// FLOPs ≈ 12·N·H; bytes 7·s·N·H (dgate, dup accumulated; dout, gate, up read).
constexpr auto swiglu_backward_cost = [](const LlamaArgs& a) {
  return RowCost{.flops = 12.0 * a.d.H, .stored = 7.0 * a.d.H};
};
Codelet<LlamaArgs> swiglu_backward(declared<ops::swiglu_backward, swiglu_backward_cost>({
    .name = "llama_swiglu_backward",
    .buffers = {{STARPU_RW, "dgate"}, {STARPU_RW, "dup"}, {STARPU_R, "dout"}, {STARPU_R, "gate"}, {STARPU_R, "up"}},
}));

// The attention of all NH query heads over NKV key/value heads, as the GPU classes see it.
static sim::AttentionWork gqa_attention_work(const LlamaArgs& a, bool backward) {
  return {.B = double(a.d.B), .T = double(a.d.T), .heads = double(a.d.NH), .hs = double(a.d.hs()),
          .kv_heads = double(a.d.NKV), .backward = backward};
}

// nn_kernels' memory-efficient attention (the costs as nn_attention_forward's), the 4-byte words
// the log-sum-exps [B, NH, T]: FLOPs 4·B·T²·C = 4·N·T·C (the full T×T, NH heads of hs); bytes
// s·(N·Q + N·C) (qkv read, out written) + 4·N·NH.
constexpr auto attention_gqa_forward_cost = [](const LlamaArgs& a) {
  return RowCost{.flops = 4.0 * a.d.T * a.d.C, .stored = double(a.d.qkv_channels()) + a.d.C, .words = double(a.d.NH)};
};
Codelet<LlamaArgs> attention_gqa_forward(declared<ops::attention_gqa_forward, attention_gqa_forward_cost>({
    .name = "llama_attention_gqa_forward",
    .buffers = {{STARPU_W, "out"}, {STARPU_W, "lse"}, {STARPU_R, "qkv"}},
    .gpu = [](const LlamaArgs& a, Handles h) {
      return op_costs::attention(a.d.dtype, gqa_attention_work(a, false),
                                 op_costs::row_bytes<attention_gqa_forward_cost>(a, h));
    },
}));
// FLOPs 10·N·T·C (2.5 times the forward: the scores again, dp, dq, dk, dv); bytes s·(3·N·Q + N·C)
// (qkv read, dqkv accumulated, dout read) + 4·N·NH.
constexpr auto attention_gqa_backward_cost = [](const LlamaArgs& a) {
  return RowCost{.flops = 10.0 * a.d.T * a.d.C, .stored = 3.0 * a.d.qkv_channels() + a.d.C, .words = double(a.d.NH)};
};
Codelet<LlamaArgs> attention_gqa_backward(declared<ops::attention_gqa_backward, attention_gqa_backward_cost>({
    .name = "llama_attention_gqa_backward",
    .buffers = {{STARPU_RW, "dqkv"}, {STARPU_R, "dout"}, {STARPU_R, "qkv"}, {STARPU_R, "lse"}},
    .gpu = [](const LlamaArgs& a, Handles h) {
      return op_costs::attention(a.d.dtype, gqa_attention_work(a, true),
                                 op_costs::row_bytes<attention_gqa_backward_cost>(a, h));
    },
}));

}  // namespace llama

}  // namespace starzero::tasks
