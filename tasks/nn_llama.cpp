#include "tasks/nn_llama.hpp"

#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "tasks/nn_llama_kernels.hpp"
#include "tasks/nn_kernels.hpp"
#include "tasks/op_codelets.hpp"

namespace starzero::tasks {

namespace {

// ---- the functions the codelets run (tasks/op_codelets.hpp) --------------------------------------

template <auto op>
Codelet<LlamaArgs>::Declaration running(Codelet<LlamaArgs>::Declaration declaration) {
  return op_codelets::running<op, LlamaArgs>(std::move(declaration));
}

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
  launch(kernels::attention_gqa_forward<T>, STARZERO_CUDA_FUNC(kernels::cuda::attention_gqa_forward<T>),
         b.get<T>("out"), b.get<float>("lse"), b.get<T>("qkv"), a.d.B, a.d.T, a.d.NH, a.d.NKV, a.d.hs());
};

constexpr auto attention_gqa_backward = []<class T>(auto launch, const TaskBuffers& b, const LlamaArgs& a) {
  launch(kernels::attention_gqa_backward<T>, STARZERO_CUDA_FUNC(kernels::cuda::attention_gqa_backward<T>),
         b.get<T>("dqkv"), b.get<T>("dout"), b.get<T>("qkv"), b.get<float>("lse"), a.d.B, a.d.T, a.d.NH, a.d.NKV,
         a.d.hs());
};

}  // namespace ops

// ---- helpers of the cost functions (products in double) -----------------------------------------

double s(const LlamaArgs& a) { return double(dtype_size(a.d.dtype)); }
double rows(const LlamaArgs& a) { return double(a.d.N()); }
double qkv_width(const LlamaArgs& a) { return double(a.d.qkv_channels()); }
// Channels RoPE rotates per row: (NH + NKV)·hs.
double rotated(const LlamaArgs& a) { return double(a.d.NH + a.d.NKV) * a.d.hs(); }
// fp32 attention matrices [B, NH, T, T].
double attention_lse_bytes(const LlamaArgs& a) { return 4.0 * a.d.B * a.d.NH * double(a.d.T); }

}  // namespace

// ---- the declarations ---------------------------------------------------------------------------
// s: bytes per stored element; N = B·T rows; Q = (NH + 2·NKV)·hs channels of a qkv row; R =
// (NH + NKV)·hs of them rotated. FLOP counts are the usual model counts (a multiply-add is 2, exp
// and sqrt count 1); bytes are what a task reads plus what it writes (an accumulated buffer twice).
namespace llama {

// FLOPs N·C (the add of the zero position); bytes s·(2·N·C + 2·T·C) + 4·N.
Codelet<LlamaArgs> embedding_forward(running<ops::embedding_forward>({
    .name = "llama_embedding_forward",
    .buffers = {{STARPU_W, "out"}, {STARPU_R, "tokens"}, {STARPU_R, "params"}, {STARPU_SCRATCH, "zeros"}},
    .flops = [](const LlamaArgs& a, Handles) { return rows(a) * a.d.C; },
    .bytes = [](const LlamaArgs& a,
                Handles) { return s(a) * (2.0 * rows(a) * a.d.C + 2.0 * a.d.T * a.d.C) + 4.0 * rows(a); },
}));

// FLOPs 2·N·C; bytes s·(3·N·C + 3·T·C) + 4·N.
Codelet<LlamaArgs> embedding_backward(running<ops::embedding_backward>({
    .name = "llama_embedding_backward",
    .buffers = {{STARPU_RW, "grads"}, {STARPU_R, "dout"}, {STARPU_R, "tokens"}, {STARPU_SCRATCH, "scratch"}},
    .flops = [](const LlamaArgs& a, Handles) { return 2.0 * rows(a) * a.d.C; },
    .bytes = [](const LlamaArgs& a,
                Handles) { return s(a) * (3.0 * rows(a) * a.d.C + 3.0 * a.d.T * a.d.C) + 4.0 * rows(a); },
}));

// FLOPs ≈ 4·N·C (square-sum, normalise, scale); bytes s·(2·N·C + C) + 4·N.
Codelet<LlamaArgs> rmsnorm_forward(running<ops::rmsnorm_forward>({
    .name = "llama_rmsnorm_forward",
    .buffers = {{STARPU_W, "out"}, {STARPU_W, "rstd"}, {STARPU_R, "inp"}, {STARPU_R, "params"}},
    .flops = [](const LlamaArgs& a, Handles) { return 4.0 * rows(a) * a.d.C; },
    .bytes = [](const LlamaArgs& a, Handles) { return s(a) * (2.0 * rows(a) * a.d.C + a.d.C) + 4.0 * rows(a); },
}));

// FLOPs ≈ 8·N·C; bytes s·(4·N·C + C) + 4·N (dinp accumulated, dout, inp, weight; rstd).
Codelet<LlamaArgs> rmsnorm_backward_input(running<ops::rmsnorm_backward_input>({
    .name = "llama_rmsnorm_backward_input",
    .buffers = {{STARPU_RW, "dinp"}, {STARPU_R, "dout"}, {STARPU_R, "inp"}, {STARPU_R, "params"}, {STARPU_R, "rstd"}},
    .flops = [](const LlamaArgs& a, Handles) { return 8.0 * rows(a) * a.d.C; },
    .bytes = [](const LlamaArgs& a, Handles) { return s(a) * (4.0 * rows(a) * a.d.C + a.d.C) + 4.0 * rows(a); },
}));

// FLOPs ≈ 3·N·C; bytes s·(2·N·C + 2·C) + 4·N.
Codelet<LlamaArgs> rmsnorm_backward_params(running<ops::rmsnorm_backward_params>({
    .name = "llama_rmsnorm_backward_params",
    .buffers = {{STARPU_RW, "grads"}, {STARPU_R, "dout"}, {STARPU_R, "inp"}, {STARPU_R, "rstd"}},
    .flops = [](const LlamaArgs& a, Handles) { return 3.0 * rows(a) * a.d.C; },
    .bytes = [](const LlamaArgs& a, Handles) { return s(a) * (2.0 * rows(a) * a.d.C + 2.0 * a.d.C) + 4.0 * rows(a); },
}));

// FLOPs 3·N·R (two products and a sum per rotated channel); bytes 2·s·N·Q + 4·T·hs (the table).
Codelet<LlamaArgs> rope_forward(running<ops::rope_forward>({
    .name = "llama_rope_forward",
    .buffers = {{STARPU_RW, "qkv"}, {STARPU_R, "freqs"}},
    .flops = [](const LlamaArgs& a, Handles) { return 3.0 * rows(a) * rotated(a); },
    .bytes = [](const LlamaArgs& a,
                Handles) { return 2.0 * s(a) * rows(a) * qkv_width(a) + 4.0 * double(a.d.T) * a.d.hs(); },
}));

// FLOPs 4·N·R (the rotation and the accumulation); bytes 3·s·N·Q + 4·T·hs.
Codelet<LlamaArgs> rope_backward(running<ops::rope_backward>({
    .name = "llama_rope_backward",
    .buffers = {{STARPU_RW, "dinp"}, {STARPU_R, "dout"}, {STARPU_R, "freqs"}},
    .flops = [](const LlamaArgs& a, Handles) { return 4.0 * rows(a) * rotated(a); },
    .bytes = [](const LlamaArgs& a,
                Handles) { return 3.0 * s(a) * rows(a) * qkv_width(a) + 4.0 * double(a.d.T) * a.d.hs(); },
}));

// FLOPs ≈ 5·N·H (exp, add, divide, two products); bytes 3·s·N·H.
Codelet<LlamaArgs> swiglu_forward(running<ops::swiglu_forward>({
    .name = "llama_swiglu_forward",
    .buffers = {{STARPU_W, "out"}, {STARPU_R, "gate"}, {STARPU_R, "up"}},
    .flops = [](const LlamaArgs& a, Handles) { return 5.0 * rows(a) * a.d.H; },
    .bytes = [](const LlamaArgs& a, Handles) { return 3.0 * s(a) * rows(a) * a.d.H; },
}));

// FLOPs ≈ 12·N·H; bytes 7·s·N·H (dgate, dup accumulated; dout, gate, up read).
Codelet<LlamaArgs> swiglu_backward(running<ops::swiglu_backward>({
    .name = "llama_swiglu_backward",
    .buffers = {{STARPU_RW, "dgate"}, {STARPU_RW, "dup"}, {STARPU_R, "dout"}, {STARPU_R, "gate"}, {STARPU_R, "up"}},
    .flops = [](const LlamaArgs& a, Handles) { return 12.0 * rows(a) * a.d.H; },
    .bytes = [](const LlamaArgs& a, Handles) { return 7.0 * s(a) * rows(a) * a.d.H; },
}));

// nn_kernels' memory-efficient attention (the costs as nn_attention_forward's): FLOPs 4·B·T²·C (the
// full T×T, NH heads of hs); bytes s·(N·Q + N·C) (qkv read, out written) + lse written.
Codelet<LlamaArgs> attention_gqa_forward(running<ops::attention_gqa_forward>({
    .name = "llama_attention_gqa_forward",
    .buffers = {{STARPU_W, "out"}, {STARPU_W, "lse"}, {STARPU_R, "qkv"}},
    .flops = [](const LlamaArgs& a, Handles) { return 4.0 * a.d.B * double(a.d.T) * a.d.T * a.d.C; },
    .bytes =
        [](const LlamaArgs& a, Handles) {
          return s(a) * (rows(a) * qkv_width(a) + rows(a) * a.d.C) + attention_lse_bytes(a);
        },
}));

// FLOPs 10·B·T²·C (2.5 times the forward: the scores again, dp, dq, dk, dv); bytes
// s·(3·N·Q + N·C) (qkv read, dqkv accumulated, dout read) + lse read.
Codelet<LlamaArgs> attention_gqa_backward(running<ops::attention_gqa_backward>({
    .name = "llama_attention_gqa_backward",
    .buffers = {{STARPU_RW, "dqkv"}, {STARPU_R, "dout"}, {STARPU_R, "qkv"}, {STARPU_R, "lse"}},
    .flops = [](const LlamaArgs& a, Handles) { return 10.0 * a.d.B * double(a.d.T) * a.d.T * a.d.C; },
    .bytes =
        [](const LlamaArgs& a, Handles) {
          return s(a) * (3.0 * rows(a) * qkv_width(a) + rows(a) * a.d.C) + attention_lse_bytes(a);
        },
}));

}  // namespace llama

}  // namespace starzero::tasks
