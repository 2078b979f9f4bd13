#include "tasks/nn.hpp"

#include <cassert>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "tasks/nn_kernels.hpp"
#include "tasks/attention_dispatch.hpp"
#include "tasks/op_codelets.hpp"

namespace starzero::tasks {

namespace {

// ---- the functions the codelets run -----------------------------------------------------------
// One op per codelet, for both devices (tasks/op_codelets.hpp).

// A declaration completed with the CPU and CUDA functions that run `op`.
template <auto op>
Codelet<NnArgs>::Declaration running(Codelet<NnArgs>::Declaration declaration) {
  return op_codelets::running<op, NnArgs>(std::move(declaration));
}
using op_codelets::declared;
using op_costs::gemm;
using op_costs::row_bytes;
using op_costs::row_flops;
using op_costs::RowCost;
using op_costs::rows;
using op_costs::storage_size;

// The bias inside a parameter (or gradient) group, null when there is none (offset -1).
template <class T>
T* bias_in(const TaskBuffers& b, std::string_view group, long long offset) {
  return offset < 0 ? nullptr : b.get<T>(group, std::size_t(offset));
}

namespace ops {

constexpr auto encoder_forward = []<class T>(auto launch, const TaskBuffers& b, const NnArgs& a) {
  launch(kernels::encoder_forward<T>, STARZERO_CUDA_FUNC(kernels::cuda::encoder_forward<T>), b.get<T>("out"),
         b.get<int>("tokens"), b.get<T>("params", a.weight), b.get<T>("params", a.wpe), a.d.B, a.d.T, a.d.C);
};

constexpr auto encoder_backward = []<class T>(auto launch, const TaskBuffers& b, const NnArgs& a) {
  launch(kernels::encoder_backward<T>, STARZERO_CUDA_FUNC(kernels::cuda::encoder_backward<T>),
         b.get<T>("grads", a.weight), b.get<T>("grads", a.wpe), b.get<T>("dout"), b.get<int>("tokens"), a.d.B, a.d.T,
         a.d.C);
};

constexpr auto layernorm_forward = []<class T>(auto launch, const TaskBuffers& b, const NnArgs& a) {
  launch(kernels::layernorm_forward<T>, STARZERO_CUDA_FUNC(kernels::cuda::layernorm_forward<T>), b.get<T>("out"),
         b.get<float>("mean"), b.get<float>("rstd"), b.get<T>("inp"), b.get<T>("params", a.weight),
         bias_in<T>(b, "params", a.bias), a.d.N(), a.d.C);
};

constexpr auto layernorm_backward_input = []<class T>(auto launch, const TaskBuffers& b, const NnArgs& a) {
  launch(kernels::layernorm_backward<T>, STARZERO_CUDA_FUNC(kernels::cuda::layernorm_backward<T>), b.get<T>("dinp"),
         nullptr, nullptr, b.get<T>("dout"), b.get<T>("inp"), b.get<T>("params", a.weight), b.get<float>("mean"),
         b.get<float>("rstd"), a.d.N(), a.d.C);
};

constexpr auto layernorm_backward_params = []<class T>(auto launch, const TaskBuffers& b, const NnArgs& a) {
  launch(kernels::layernorm_backward<T>, STARZERO_CUDA_FUNC(kernels::cuda::layernorm_backward<T>), nullptr,
         b.get<T>("grads", a.weight), bias_in<T>(b, "grads", a.bias), b.get<T>("dout"), b.get<T>("inp"), nullptr,
         b.get<float>("mean"), b.get<float>("rstd"), a.d.N(), a.d.C);
};

constexpr auto matmul_forward = []<class T>(auto launch, const TaskBuffers& b, const NnArgs& a) {
  launch(kernels::matmul_forward<T>, STARZERO_CUDA_FUNC(kernels::cuda::matmul_forward<T>), b.get<T>("out"),
         b.get<T>("inp"), b.get<T>("params", a.weight), bias_in<T>(b, "params", a.bias), a.d.N(), a.C, a.OC);
};

constexpr auto matmul_backward = []<class T>(auto launch, const TaskBuffers& b, const NnArgs& a) {
  launch(kernels::matmul_backward<T>, STARZERO_CUDA_FUNC(kernels::cuda::matmul_backward<T>), b.get<T>("dinp"),
         b.get<T>("grads", a.weight), bias_in<T>(b, "grads", a.bias), b.get<T>("dout"), b.get<T>("inp"),
         b.get<T>("params", a.weight), a.d.N(), a.C, a.OC);
};

constexpr auto matmul_backward_input = []<class T>(auto launch, const TaskBuffers& b, const NnArgs& a) {
  launch(kernels::matmul_backward<T>, STARZERO_CUDA_FUNC(kernels::cuda::matmul_backward<T>), b.get<T>("dinp"), nullptr,
         nullptr, b.get<T>("dout"), nullptr, b.get<T>("params", a.weight), a.d.N(), a.C, a.OC);
};

constexpr auto matmul_backward_weight = []<class T>(auto launch, const TaskBuffers& b, const NnArgs& a) {
  launch(kernels::matmul_backward<T>, STARZERO_CUDA_FUNC(kernels::cuda::matmul_backward<T>), nullptr,
         b.get<T>("grads", a.weight), bias_in<T>(b, "grads", a.bias), b.get<T>("dout"), b.get<T>("inp"), nullptr,
         a.d.N(), a.C, a.OC);
};

constexpr auto matmul_backward_weight_rows = []<class T>(auto launch, const TaskBuffers& b, const NnArgs& a) {
  launch(kernels::matmul_backward_weight_rows<T>, STARZERO_CUDA_FUNC(kernels::cuda::matmul_backward_weight_rows<T>),
         b.get<T>("dweight"), b.get<T>("dout"), b.get<T>("inp"), a.d.N(), a.C, a.OC, a.first_row, a.row_count);
};

constexpr auto bias_backward = []<class T>(auto launch, const TaskBuffers& b, const NnArgs& a) {
  launch(kernels::matmul_backward<T>, STARZERO_CUDA_FUNC(kernels::cuda::matmul_backward<T>), nullptr, nullptr,
         b.get<T>("dbias"), b.get<T>("dout"), nullptr, nullptr, a.d.N(), 0, a.OC);
};

// Attention: the whole op is heads [0, NH) with every buffer whole; a head group's written
// buffers are its blocks of columns (matrix buffers with their own leading dimension).
constexpr auto attention_forward = []<class T>(auto launch, const TaskBuffers& b, const NnArgs& a) {
  const int NH = a.d.NH;
  launch(kernels::attention_forward_heads<T>, STARZERO_CUDA_FUNC(attention_dispatch::forward_heads<T>),
         b.get<T>("out"), a.d.C, b.get<float>("lse"), NH * a.d.T, b.get<T>("qkv"), a.d.B, a.d.T, a.d.C, NH, 0, NH);
};

constexpr auto attention_backward = []<class T>(auto launch, const TaskBuffers& b, const NnArgs& a) {
  const int C = a.d.C, NH = a.d.NH;
  T* dqkv = b.get<T>("dqkv");
  launch(kernels::attention_backward_heads<T>, STARZERO_CUDA_FUNC(attention_dispatch::backward_heads<T>), dqkv,
         dqkv + C, dqkv + 2 * C, 3 * C, b.get<T>("dout"), b.get<T>("qkv"), b.get<float>("lse"), NH * a.d.T, a.d.B,
         a.d.T, C, NH, 0, NH);
};

constexpr auto attention_forward_heads = []<class T>(auto launch, const TaskBuffers& b, const NnArgs& a) {
  const int C = a.d.C, NH = a.d.NH;
  const auto [out, ld_out] = b.rows<T>("out", std::size_t(C));
  const auto [lse, ld_lse] = b.rows<float>("lse", std::size_t(NH) * a.d.T);
  launch(kernels::attention_forward_heads<T>, STARZERO_CUDA_FUNC(attention_dispatch::forward_heads<T>), out,
         int(ld_out), lse, int(ld_lse), b.get<T>("qkv"), a.d.B, a.d.T, C, NH, a.heads.first, a.heads.count);
};

constexpr auto attention_backward_heads = []<class T>(auto launch, const TaskBuffers& b, const NnArgs& a) {
  const int C = a.d.C, NH = a.d.NH;
  const auto [dq, ld_dq] = b.rows<T>("dq", std::size_t(3 * C));
  const auto [dk, ld_dk] = b.rows<T>("dk", std::size_t(3 * C));
  const auto [dv, ld_dv] = b.rows<T>("dv", std::size_t(3 * C));
  assert(ld_dk == ld_dq && ld_dv == ld_dq);
  (void)ld_dk, (void)ld_dv;
  const auto [lse, ld_lse] = b.rows<float>("lse", std::size_t(NH) * a.d.T);
  launch(kernels::attention_backward_heads<T>, STARZERO_CUDA_FUNC(attention_dispatch::backward_heads<T>), dq, dk,
         dv, int(ld_dq), b.get<T>("dout"), b.get<T>("qkv"), lse, int(ld_lse), a.d.B, a.d.T, C, NH, a.heads.first,
         a.heads.count);
};

constexpr auto gelu_forward = []<class T>(auto launch, const TaskBuffers& b, const NnArgs&) {
  launch(kernels::gelu_forward<T>, STARZERO_CUDA_FUNC(kernels::cuda::gelu_forward<T>), b.get<T>("out"), b.get<T>("inp"),
         b.elements("out"));
};

constexpr auto gelu_backward = []<class T>(auto launch, const TaskBuffers& b, const NnArgs&) {
  launch(kernels::gelu_backward<T>, STARZERO_CUDA_FUNC(kernels::cuda::gelu_backward<T>), b.get<T>("dinp"),
         b.get<T>("inp"), b.get<T>("dout"), b.elements("dinp"));
};

constexpr auto residual_forward = []<class T>(auto launch, const TaskBuffers& b, const NnArgs&) {
  launch(kernels::residual_forward<T>, STARZERO_CUDA_FUNC(kernels::cuda::residual_forward<T>), b.get<T>("out"),
         b.get<T>("inp1"), b.get<T>("inp2"), b.elements("out"));
};

constexpr auto residual_backward = []<class T>(auto launch, const TaskBuffers& b, const NnArgs&) {
  launch(kernels::residual_backward<T>, STARZERO_CUDA_FUNC(kernels::cuda::residual_backward<T>), b.get<T>("dinp1"),
         b.get<T>("dinp2"), b.get<T>("dout"), b.elements("dinp1"));
};

constexpr auto crossentropy_forward = []<class T>(auto launch, const TaskBuffers& b, const NnArgs& a) {
  launch(kernels::softmax_crossentropy_forward<T>, STARZERO_CUDA_FUNC(kernels::cuda::softmax_crossentropy_forward<T>),
         b.get<float>("losses"), b.get<float>("probs"), b.get<T>("logits"), b.get<int>("targets"), a.d.N(), a.d.V,
         a.d.Vp);
};

constexpr auto crossentropy_backward = []<class T>(auto launch, const TaskBuffers& b, const NnArgs& a) {
  launch(kernels::softmax_crossentropy_backward<T>, STARZERO_CUDA_FUNC(kernels::cuda::softmax_crossentropy_backward<T>),
         b.get<T>("dlogits"), b.get<float>("probs"), b.get<int>("targets"), a.d.N(), a.d.V, a.d.Vp, a.dloss);
};

}  // namespace ops

// ---- helpers of the costs that are not per row ----------------------------------------------------

// A head group's attention costs its share of the whole op's FLOPs (not a count per row).
double head_share(const NnArgs& a) { return double(a.heads.count) / a.d.NH; }
// The attention's fp32 log-sum-exps [B, NH, T].
double attention_lse_bytes(const NnArgs& a) { return 4.0 * a.d.B * a.d.NH * double(a.d.T); }
// An attention task of `heads` query heads (GPT: as many key/value heads) as the GPU classes see it.
sim::AttentionWork attention_work(const NnArgs& a, int heads, bool backward) {
  return {.B = double(a.d.B), .T = double(a.d.T), .heads = double(heads), .hs = double(a.d.C) / a.d.NH,
          .kv_heads = double(heads), .backward = backward};
}
// A head group's bytes: qkv read whole, its share of out and lse written (forward); qkv and dout
// read whole, its share of dqkv accumulated and of lse read (backward).
double attention_forward_heads_bytes(const NnArgs& a, Handles) {
  return storage_size(a) * (3.0 + head_share(a)) * rows(a) * a.d.C + attention_lse_bytes(a) * head_share(a);
}
double attention_backward_heads_bytes(const NnArgs& a, Handles) {
  return storage_size(a) * (4.0 + 6.0 * head_share(a)) * rows(a) * a.d.C + attention_lse_bytes(a) * head_share(a);
}

// A matmul's bias on the GPU, kernels of its own beside the GEMM (tasks/nn_kernels.cu): the bias
// copied into out, which the GEMM then reads again (beta = 1) (forward); dout read by the two-stage
// column sums and the bias gradient accumulated (backward). 0 without a bias.
double bias_pass_bytes(const NnArgs& a) { return a.bias < 0 ? 0.0 : storage_size(a) * (2.0 * rows(a) * a.OC + a.OC); }
double bias_gradient_pass_bytes(const NnArgs& a) {
  return a.bias < 0 ? 0.0 : storage_size(a) * (rows(a) * a.OC + 2.0 * a.OC);
}

// Elements of the first handle (the element-wise ops: all their vectors have this length).
double elements(Handles h) { return double(starpu_vector_get_nx(h[0])); }

// An element-wise op over the n elements of each of its buffers: FLOPs flops·n; bytes
// accesses·n·s, with `accesses` the stored elements read or written per element (an accumulated
// one twice).
template <auto op, int flops, int accesses>
Codelet<NnArgs>::Declaration elementwise(const char* name, std::vector<Buffer> buffers) {
  return running<op>({
      .name = name,
      .buffers = std::move(buffers),
      .flops = [](const NnArgs&, Handles h) { return flops * elements(h); },
      .bytes = [](const NnArgs& a, Handles h) { return accesses * elements(h) * storage_size(a); },
      .gpu = [](const NnArgs& a, Handles h) {
        return sim::GpuWork{.kind = sim::GpuCostClass::streaming, .flops = flops * elements(h),
                            .bytes = accesses * elements(h) * storage_size(a)};
      },
  });
}

// ---- load_tokens ---------------------------------------------------------------------------------

// The token values in host memory, alive until the task's end (submit_load_tokens).
struct HostTokens {
  const int* values;
};

void load_tokens_cpu(const TaskBuffers& b, const HostTokens& a) {
  std::memcpy(b.get<int>("tokens"), a.values, b.bytes("tokens"));
}
#ifdef STARZERO_WITH_CUDA
void load_tokens_cuda(const TaskBuffers& b, const HostTokens& a) {
  cudaMemcpyAsync(b.get<int>("tokens"), a.values, b.bytes("tokens"), cudaMemcpyHostToDevice,
                  starpu_cuda_get_local_stream());
}
#endif

// Synchronous on CUDA: the copy must be complete when the task ends and the host values are freed.
// 0 FLOPs; bytes: the tokens copied.
Codelet<HostTokens> load_tokens_codelet({
    .name = "load_tokens",
    .buffers = {{STARPU_W, "tokens"}},
    .cpu = load_tokens_cpu,
    .cuda = STARZERO_CUDA_FUNC(load_tokens_cuda),
    .cuda_launch = CudaLaunch::synchronous,
    .flops = [](const HostTokens&, Handles) { return 0.0; },
    .bytes = [](const HostTokens&, Handles h) { return double(starpu_data_get_size(h[0])); },
    // A host-to-device copy of a few KB: its launch (the PCIe time is StarPU's, not the kernel's).
    .gpu = [](const HostTokens&, Handles) { return sim::GpuWork{.kind = sim::GpuCostClass::copy}; },
});

}  // namespace

// ---- the declarations -------------------------------------------------------------------------------
// Each op's cost above its codelet: what a task does per row of its N = B·T rows, and once per task
// (tasks/op_costs.hpp); a head group's and the element-wise ops' their own. s: bytes per stored
// element (4 fp32, 2 bf16). FLOP counts are the usual model counts (a multiply-add is 2, tanh and
// exp count 1); bytes are what the task reads plus what it writes (an accumulated buffer twice).
namespace nn {

// FLOPs N·C (one add per element); bytes s·(2·N·C + T·C) + 4·N (out, wte rows, wpe, tokens).
constexpr auto encoder_forward_cost = [](const NnArgs& a) {
  return RowCost{.flops = double(a.d.C), .stored = 2.0 * a.d.C, .stored_once = double(a.d.T) * a.d.C, .words = 1};
};
Codelet<NnArgs> encoder_forward(declared<ops::encoder_forward, encoder_forward_cost>({
    .name = "nn_encoder_forward",
    .buffers = {{STARPU_W, "out"}, {STARPU_R, "tokens"}, {STARPU_R, "params"}},
}));
// FLOPs 2·N·C (dwte and dwpe); bytes s·(3·N·C + 2·T·C) + 4·N.
constexpr auto encoder_backward_cost = [](const NnArgs& a) {
  return RowCost{.flops = 2.0 * a.d.C, .stored = 3.0 * a.d.C, .stored_once = 2.0 * a.d.T * a.d.C, .words = 1};
};
Codelet<NnArgs> encoder_backward(declared<ops::encoder_backward, encoder_backward_cost>({
    .name = "nn_encoder_backward",
    .buffers = {{STARPU_RW, "grads"}, {STARPU_R, "dout"}, {STARPU_R, "tokens"}},
    // On a GPU: wpe's kernel, cub's radix sort of the tokens (up to 6 kernels), the chunk sums and
    // their combine: about 8 launches; its bytes at most the declared ones (a gradient row per
    // distinct token, not per position), plus the sort's ~84 bytes per row.
    .gpu = [](const NnArgs& a, Handles h) {
      return sim::GpuWork{.kind = sim::GpuCostClass::streaming, .flops = row_flops<encoder_backward_cost>(a, h),
                          .bytes = row_bytes<encoder_backward_cost>(a, h) + 84.0 * rows(a), .kernels = 8};
    },
}));

// Layernorm: the 4-byte words are mean and rstd.
// FLOPs ≈ 8·N·C (mean, variance, normalise, scale, shift); bytes s·(2·N·C + 2·C) + 8·N.
constexpr auto layernorm_forward_cost = [](const NnArgs& a) {
  return RowCost{.flops = 8.0 * a.d.C, .stored = 2.0 * a.d.C, .stored_once = 2.0 * a.d.C, .words = 2};
};
Codelet<NnArgs> layernorm_forward(declared<ops::layernorm_forward, layernorm_forward_cost>({
    .name = "nn_layernorm_forward",
    .buffers = {{STARPU_W, "out"}, {STARPU_W, "mean"}, {STARPU_W, "rstd"}, {STARPU_R, "inp"}, {STARPU_R, "params"}},
}));
// Layernorm backward as two tasks: the input gradient and the parameter gradients.
// Input gradient: FLOPs ≈ 12·N·C; bytes s·(4·N·C + C) + 8·N (dinp accumulated, dout, inp, weight).
constexpr auto layernorm_backward_input_cost = [](const NnArgs& a) {
  return RowCost{.flops = 12.0 * a.d.C, .stored = 4.0 * a.d.C, .stored_once = double(a.d.C), .words = 2};
};
Codelet<NnArgs> layernorm_backward_input(declared<ops::layernorm_backward_input, layernorm_backward_input_cost>({
    .name = "nn_layernorm_backward_input",
    .buffers = {{STARPU_RW, "dinp"},
                {STARPU_R, "dout"},
                {STARPU_R, "inp"},
                {STARPU_R, "params"},
                {STARPU_R, "mean"},
                {STARPU_R, "rstd"}},
}));
// Parameter gradients: FLOPs ≈ 5·N·C (normalise, two accumulations); bytes s·(2·N·C + 4·C) + 8·N.
constexpr auto layernorm_backward_params_cost = [](const NnArgs& a) {
  return RowCost{.flops = 5.0 * a.d.C, .stored = 2.0 * a.d.C, .stored_once = 4.0 * a.d.C, .words = 2};
};
Codelet<NnArgs> layernorm_backward_params(declared<ops::layernorm_backward_params, layernorm_backward_params_cost>({
    .name = "nn_layernorm_backward_params",
    .buffers = {{STARPU_RW, "grads"}, {STARPU_R, "dout"}, {STARPU_R, "inp"}, {STARPU_R, "mean"}, {STARPU_R, "rstd"}},
}));

// Matmuls: per row C inputs and OC outputs; the weight OC·C and the bias OC once.
// FLOPs 2·N·C·OC (the bias add left out); bytes s·(N·C + OC·C + OC + N·OC).
constexpr auto matmul_forward_cost = [](const NnArgs& a) {
  return RowCost{.flops = 2.0 * a.C * a.OC, .stored = double(a.C) + a.OC, .stored_once = double(a.OC) * a.C + a.OC};
};
Codelet<NnArgs> matmul_forward(declared<ops::matmul_forward, matmul_forward_cost>({
    .name = "nn_matmul_forward",
    .buffers = {{STARPU_W, "out"}, {STARPU_R, "inp"}, {STARPU_R, "params"}},
    // One cuBLAS GEMM [N, C]·[C, OC]; the bias: a pass over out (read and written) of its own.
    .gpu = [](const NnArgs& a, Handles h) {
      return gemm(a.d.dtype, rows(a), a.OC, a.C, row_flops<matmul_forward_cost>(a, h), row_bytes<matmul_forward_cost>(a, h),
                  bias_pass_bytes(a), a.bias >= 0 ? 2 : 1);
    },
}));
// FLOPs 4·N·C·OC (dinp and dweight, 2·N·C·OC each); bytes s·(N·OC + 3·N·C + 3·OC·C + 2·OC).
constexpr auto matmul_backward_cost = [](const NnArgs& a) {
  return RowCost{.flops = 4.0 * a.C * a.OC, .stored = a.OC + 3.0 * a.C, .stored_once = 3.0 * a.OC * a.C + 2.0 * a.OC};
};
Codelet<NnArgs> matmul_backward(declared<ops::matmul_backward, matmul_backward_cost>({
    .name = "nn_matmul_backward",
    .buffers = {{STARPU_RW, "dinp"}, {STARPU_RW, "grads"}, {STARPU_R, "dout"}, {STARPU_R, "inp"}, {STARPU_R, "params"}},
    // Two GEMMs, [N, OC]·[OC, C] and [OC, N]·[N, C]; the bias gradient: a pass over dout (its
    // two-stage column sums, two kernels).
    .gpu = [](const NnArgs& a, Handles h) {
      return gemm(a.d.dtype, rows(a), a.C, a.OC, row_flops<matmul_backward_cost>(a, h),
                  row_bytes<matmul_backward_cost>(a, h), bias_gradient_pass_bytes(a), a.bias >= 0 ? 4 : 2);
    },
}));
// The two halves of matmul_backward as tasks of their own.
// Input half, dinp += dout·W: FLOPs 2·N·C·OC; bytes s·(N·OC + 2·N·C + OC·C).
constexpr auto matmul_backward_input_cost = [](const NnArgs& a) {
  return RowCost{.flops = 2.0 * a.C * a.OC, .stored = a.OC + 2.0 * a.C, .stored_once = double(a.OC) * a.C};
};
Codelet<NnArgs> matmul_backward_input(declared<ops::matmul_backward_input, matmul_backward_input_cost>({
    .name = "nn_matmul_backward_input",
    .buffers = {{STARPU_RW, "dinp"}, {STARPU_R, "dout"}, {STARPU_R, "params"}},
    .gpu = [](const NnArgs& a, Handles h) {
      return gemm(a.d.dtype, rows(a), a.C, a.OC, row_flops<matmul_backward_input_cost>(a, h),
                  row_bytes<matmul_backward_input_cost>(a, h));
    },
}));
// Weight half, dW += doutᵀ·inp and db += Σ dout: FLOPs 2·N·C·OC + N·OC; bytes
// s·(N·OC + N·C + 2·OC·C + 2·OC).
constexpr auto matmul_backward_weight_cost = [](const NnArgs& a) {
  return RowCost{
      .flops = 2.0 * a.C * a.OC + a.OC, .stored = double(a.OC) + a.C, .stored_once = 2.0 * a.OC * a.C + 2.0 * a.OC};
};
Codelet<NnArgs> matmul_backward_weight(declared<ops::matmul_backward_weight, matmul_backward_weight_cost>({
    .name = "nn_matmul_backward_weight",
    .buffers = {{STARPU_RW, "grads"}, {STARPU_R, "dout"}, {STARPU_R, "inp"}},
    .gpu = [](const NnArgs& a, Handles h) {
      return gemm(a.d.dtype, a.OC, a.C, rows(a), row_flops<matmul_backward_weight_cost>(a, h),
                  row_bytes<matmul_backward_weight_cost>(a, h), bias_gradient_pass_bytes(a), a.bias >= 0 ? 3 : 1);
    },
}));
// The weight gradient cut by output channels, each cut a task writing its own piece of the
// gradient: dW[rows] += dout[:, rows]ᵀ·inp, FLOPs 2·N·C·rows; bytes s·(N·OC + N·C + 2·rows·C).
constexpr auto matmul_backward_weight_rows_cost = [](const NnArgs& a) {
  return RowCost{
      .flops = 2.0 * a.C * a.row_count, .stored = double(a.OC) + a.C, .stored_once = 2.0 * a.row_count * a.C};
};
Codelet<NnArgs> matmul_backward_weight_rows(
    declared<ops::matmul_backward_weight_rows, matmul_backward_weight_rows_cost>({
        .name = "nn_matmul_backward_weight_rows",
        .buffers = {{STARPU_RW, "dweight"}, {STARPU_R, "dout"}, {STARPU_R, "inp"}},
        .gpu = [](const NnArgs& a, Handles h) {
          return gemm(a.d.dtype, a.row_count, a.C, rows(a), row_flops<matmul_backward_weight_rows_cost>(a, h),
                      row_bytes<matmul_backward_weight_rows_cost>(a, h));
        },
    }));
// The bias gradient alone, db[OC] += Σ_rows dout: FLOPs N·OC; bytes s·(N·OC + 2·OC).
constexpr auto bias_backward_cost = [](const NnArgs& a) {
  return RowCost{.flops = double(a.OC), .stored = double(a.OC), .stored_once = 2.0 * a.OC};
};
Codelet<NnArgs> bias_backward(declared<ops::bias_backward, bias_backward_cost>({
    .name = "nn_bias_backward",
    .buffers = {{STARPU_RW, "dbias"}, {STARPU_R, "dout"}},
}));

// Attention, per row T keys of C channels: FLOPs 4·B·NH·T²·hs = 4·N·T·C (q·kᵀ and p·v over the
// full T×T: the causal mask halves the real work, which a memory-efficient kernel reaches at a
// lower fraction of the peak than a large GEMM; softmax left out); bytes s·4·N·C (qkv read, out
// written) + 4·N·NH (the fp32 log-sum-exps [B, NH, T] written). No T×T term: the kernel keeps its
// scores on chip.
constexpr auto attention_forward_cost = [](const NnArgs& a) {
  return RowCost{.flops = 4.0 * a.d.T * a.d.C, .stored = 4.0 * a.d.C, .words = double(a.d.NH)};
};
Codelet<NnArgs> attention_forward(declared<ops::attention_forward, attention_forward_cost>({
    .name = "nn_attention_forward",
    .buffers = {{STARPU_W, "out"}, {STARPU_W, "lse"}, {STARPU_R, "qkv"}},
    .gpu = [](const NnArgs& a, Handles h) {
      return op_costs::attention(a.d.dtype, attention_work(a, a.d.NH, false), row_bytes<attention_forward_cost>(a, h));
    },
}));
// FLOPs 10·N·T·C (2.5 times the forward: the scores again, then dp = dout·vᵀ, dq, dk and dv);
// bytes s·10·N·C (dout, qkv read; dqkv accumulated) + the log-sum-exps read.
constexpr auto attention_backward_cost = [](const NnArgs& a) {
  return RowCost{.flops = 10.0 * a.d.T * a.d.C, .stored = 10.0 * a.d.C, .words = double(a.d.NH)};
};
Codelet<NnArgs> attention_backward(declared<ops::attention_backward, attention_backward_cost>({
    .name = "nn_attention_backward",
    .buffers = {{STARPU_RW, "dqkv"}, {STARPU_R, "dout"}, {STARPU_R, "qkv"}, {STARPU_R, "lse"}},
    .gpu = [](const NnArgs& a, Handles h) {
      return op_costs::attention(a.d.dtype, attention_work(a, a.d.NH, true), row_bytes<attention_backward_cost>(a, h));
    },
}));

// A head group: the whole op's FLOPs times its share of the heads; bytes s·3·N·C (qkv, read
// whole) + the share of out and lse.
Codelet<NnArgs> attention_forward_heads(running<ops::attention_forward_heads>({
    .name = "nn_attention_forward_heads",
    .buffers = {{STARPU_R, "qkv"}, {STARPU_W, "out"}, {STARPU_W, "lse"}},
    .flops = [](const NnArgs& a, Handles) { return 4.0 * a.d.B * double(a.d.T) * a.d.T * a.d.C * head_share(a); },
    .bytes = attention_forward_heads_bytes,
    .gpu = [](const NnArgs& a, Handles h) {
      return op_costs::attention(a.d.dtype, attention_work(a, a.heads.count, false), attention_forward_heads_bytes(a, h));
    },
}));

// FLOPs: the share of the whole backward's; bytes s·4·N·C (qkv, dout read whole) + the share of
// dqkv accumulated (s·6·N·C) + the share of lse read.
Codelet<NnArgs> attention_backward_heads(running<ops::attention_backward_heads>({
    .name = "nn_attention_backward_heads",
    .buffers = {{STARPU_R, "qkv"},
                {STARPU_RW, "dq"},
                {STARPU_RW, "dk"},
                {STARPU_RW, "dv"},
                {STARPU_R, "dout"},
                {STARPU_R, "lse"}},
    .flops = [](const NnArgs& a, Handles) { return 10.0 * a.d.B * double(a.d.T) * a.d.T * a.d.C * head_share(a); },
    .bytes = attention_backward_heads_bytes,
    .gpu = [](const NnArgs& a, Handles h) {
      return op_costs::attention(a.d.dtype, attention_work(a, a.heads.count, true), attention_backward_heads_bytes(a, h));
    },
}));

// n elements. FLOPs ≈ 8·n (cube, multiply-adds, tanh, scale); bytes 2·n·s.
Codelet<NnArgs> gelu_forward(elementwise<ops::gelu_forward, 8, 2>("nn_gelu_forward",
                                                                  {{STARPU_W, "out"}, {STARPU_R, "inp"}}));

// FLOPs ≈ 16·n (the forward again, sech², the chain rule, the accumulation); bytes 4·n·s.
Codelet<NnArgs> gelu_backward(elementwise<ops::gelu_backward, 16, 4>(
    "nn_gelu_backward", {{STARPU_RW, "dinp"}, {STARPU_R, "inp"}, {STARPU_R, "dout"}}));

// FLOPs n; bytes 3·n·s.
Codelet<NnArgs> residual_forward(elementwise<ops::residual_forward, 1, 3>(
    "nn_residual_forward", {{STARPU_W, "out"}, {STARPU_R, "inp1"}, {STARPU_R, "inp2"}}));

// FLOPs 2·n (two accumulations); bytes 5·n·s.
Codelet<NnArgs> residual_backward(elementwise<ops::residual_backward, 2, 5>(
    "nn_residual_backward", {{STARPU_RW, "dinp1"}, {STARPU_RW, "dinp2"}, {STARPU_R, "dout"}}));

// The loss: the 4-byte words are the fp32 probs (Vp per row), the loss and the target.
// FLOPs ≈ 4·N·V (max, exp, sum, normalise); bytes s·N·Vp (logits) + 4·N·Vp (probs) + 8·N.
constexpr auto crossentropy_forward_cost = [](const NnArgs& a) {
  return RowCost{.flops = 4.0 * a.d.V, .stored = double(a.d.Vp), .words = a.d.Vp + 2.0};
};
Codelet<NnArgs> crossentropy_forward(declared<ops::crossentropy_forward, crossentropy_forward_cost>({
    .name = "nn_crossentropy_forward",
    .buffers = {{STARPU_W, "losses"}, {STARPU_W, "probs"}, {STARPU_R, "logits"}, {STARPU_R, "targets"}},
}));
// FLOPs 3·N·V (minus the one-hot, times 1/N, accumulate); bytes 4·N·Vp + 2·s·N·Vp + 4·N.
constexpr auto crossentropy_backward_cost = [](const NnArgs& a) {
  return RowCost{.flops = 3.0 * a.d.V, .stored = 2.0 * a.d.Vp, .words = a.d.Vp + 1.0};
};
Codelet<NnArgs> crossentropy_backward(declared<ops::crossentropy_backward, crossentropy_backward_cost>({
    .name = "nn_crossentropy_backward",
    .buffers = {{STARPU_RW, "dlogits"}, {STARPU_R, "probs"}, {STARPU_R, "targets"}},
}));

}  // namespace nn

// ---- submission: the handles in the declared order ---------------------------------------------

namespace {

void check_heads(const Dims& d, HeadGroup heads, const std::string& name) {
  if (heads.first < 0 || heads.count < 1 || heads.first + heads.count > d.NH)
    throw std::invalid_argument(name + ": heads " + std::to_string(heads.first) + ".." +
                                std::to_string(heads.first + heads.count - 1) + " are not heads of 0.." +
                                std::to_string(d.NH - 1));
}

}  // namespace

void submit_load_tokens(starpu_data_handle_t tokens, const int* values, std::size_t count, const std::string& name) {
  if (count != starpu_vector_get_nx(tokens)) throw std::invalid_argument(name + ": token count does not match");
  // The task copies from this host copy; its end-of-task callback holds the last reference.
  auto copy = std::make_shared<const std::vector<int>>(values, values + count);
  submit(load_tokens_codelet, {tokens}, HostTokens{copy->data()}, name, {.on_done = [copy] {}});
}

void submit_encoder_forward(const Dims& d, starpu_data_handle_t out, starpu_data_handle_t tokens,
                            starpu_data_handle_t embedding_group, std::size_t wte_offset, std::size_t wpe_offset,
                            const std::string& name) {
  submit(nn::encoder_forward, {out, tokens, embedding_group}, NnArgs{.d = d, .weight = wte_offset, .wpe = wpe_offset},
         name);
}

void submit_encoder_backward(const Dims& d, starpu_data_handle_t embedding_grad, std::size_t wte_offset,
                             std::size_t wpe_offset, starpu_data_handle_t dout, starpu_data_handle_t tokens,
                             const std::string& name) {
  submit(nn::encoder_backward, {embedding_grad, dout, tokens}, NnArgs{.d = d, .weight = wte_offset, .wpe = wpe_offset},
         name);
}

void submit_layernorm_forward(const Dims& d, starpu_data_handle_t out, starpu_data_handle_t mean,
                              starpu_data_handle_t rstd, starpu_data_handle_t inp, const WeightRef& w,
                              const std::string& name) {
  submit(nn::layernorm_forward, {out, mean, rstd, inp, w.group}, NnArgs{.d = d, .weight = w.weight, .bias = w.bias},
         name);
}

void submit_matmul_forward(const Dims& d, starpu_data_handle_t out, starpu_data_handle_t inp, const WeightRef& w, int C,
                           int OC, const std::string& name) {
  submit(nn::matmul_forward, {out, inp, w.group}, NnArgs{.d = d, .weight = w.weight, .bias = w.bias, .C = C, .OC = OC},
         name);
}

void submit_matmul_backward(const Dims& d, starpu_data_handle_t dinp, starpu_data_handle_t grad_group,
                            starpu_data_handle_t dout, starpu_data_handle_t inp, const WeightRef& w, int C, int OC,
                            const std::string& name) {
  submit(nn::matmul_backward, {dinp, grad_group, dout, inp, w.group},
         NnArgs{.d = d, .weight = w.weight, .bias = w.bias, .C = C, .OC = OC}, name);
}

void submit_layernorm_backward_input(const Dims& d, starpu_data_handle_t dinp, starpu_data_handle_t dout,
                                     starpu_data_handle_t inp, const WeightRef& w, starpu_data_handle_t mean,
                                     starpu_data_handle_t rstd, const std::string& name) {
  submit(nn::layernorm_backward_input, {dinp, dout, inp, w.group, mean, rstd},
         NnArgs{.d = d, .weight = w.weight, .bias = w.bias}, name);
}

void submit_layernorm_backward_params(const Dims& d, starpu_data_handle_t grad_group, starpu_data_handle_t dout,
                                      starpu_data_handle_t inp, const WeightRef& w, starpu_data_handle_t mean,
                                      starpu_data_handle_t rstd, const std::string& name) {
  submit(nn::layernorm_backward_params, {grad_group, dout, inp, mean, rstd},
         NnArgs{.d = d, .weight = w.weight, .bias = w.bias}, name);
}

void submit_matmul_backward_input(const Dims& d, starpu_data_handle_t dinp, starpu_data_handle_t dout,
                                  const WeightRef& w, int C, int OC, const std::string& name) {
  submit(nn::matmul_backward_input, {dinp, dout, w.group},
         NnArgs{.d = d, .weight = w.weight, .bias = w.bias, .C = C, .OC = OC}, name);
}

void submit_matmul_backward_weight(const Dims& d, starpu_data_handle_t grad_group, starpu_data_handle_t dout,
                                   starpu_data_handle_t inp, const WeightRef& w, int C, int OC,
                                   const std::string& name) {
  submit(nn::matmul_backward_weight, {grad_group, dout, inp},
         NnArgs{.d = d, .weight = w.weight, .bias = w.bias, .C = C, .OC = OC}, name);
}

void submit_matmul_backward_weight_rows(const Dims& d, starpu_data_handle_t dweight_rows, starpu_data_handle_t dout,
                                        starpu_data_handle_t inp, int C, int OC, int first_row, int row_count,
                                        const std::string& name) {
  submit(nn::matmul_backward_weight_rows, {dweight_rows, dout, inp},
         NnArgs{.d = d, .C = C, .OC = OC, .first_row = first_row, .row_count = row_count}, name);
}

void submit_bias_backward(const Dims& d, starpu_data_handle_t dbias, starpu_data_handle_t dout, int OC,
                          const std::string& name) {
  submit(nn::bias_backward, {dbias, dout}, NnArgs{.d = d, .OC = OC}, name);
}

void submit_attention_forward(const Dims& d, starpu_data_handle_t out, starpu_data_handle_t lse,
                              starpu_data_handle_t qkv, const std::string& name) {
  submit(nn::attention_forward, {out, lse, qkv}, NnArgs{.d = d}, name);
}

void submit_attention_backward(const Dims& d, starpu_data_handle_t dqkv, starpu_data_handle_t dout,
                               starpu_data_handle_t qkv, starpu_data_handle_t lse, const std::string& name) {
  submit(nn::attention_backward, {dqkv, dout, qkv, lse}, NnArgs{.d = d}, name);
}

void submit_attention_forward_heads(const Dims& d, HeadGroup heads, starpu_data_handle_t out,
                                    starpu_data_handle_t lse, starpu_data_handle_t qkv, const std::string& name) {
  check_heads(d, heads, name);
  submit(nn::attention_forward_heads, {qkv, out, lse}, NnArgs{.d = d, .heads = heads}, name);
}

void submit_attention_backward_heads(const Dims& d, HeadGroup heads, starpu_data_handle_t dq, starpu_data_handle_t dk,
                                     starpu_data_handle_t dv, starpu_data_handle_t dout, starpu_data_handle_t qkv,
                                     starpu_data_handle_t lse, const std::string& name) {
  check_heads(d, heads, name);
  submit(nn::attention_backward_heads, {qkv, dq, dk, dv, dout, lse}, NnArgs{.d = d, .heads = heads}, name);
}

void submit_gelu_forward(const Dims& d, starpu_data_handle_t out, starpu_data_handle_t inp, const std::string& name) {
  submit(nn::gelu_forward, {out, inp}, NnArgs{.d = d}, name);
}

void submit_gelu_backward(const Dims& d, starpu_data_handle_t dinp, starpu_data_handle_t inp, starpu_data_handle_t dout,
                          const std::string& name) {
  submit(nn::gelu_backward, {dinp, inp, dout}, NnArgs{.d = d}, name);
}

void submit_residual_forward(const Dims& d, starpu_data_handle_t out, starpu_data_handle_t inp1,
                             starpu_data_handle_t inp2, const std::string& name) {
  submit(nn::residual_forward, {out, inp1, inp2}, NnArgs{.d = d}, name);
}

void submit_residual_backward(const Dims& d, starpu_data_handle_t dinp1, starpu_data_handle_t dinp2,
                              starpu_data_handle_t dout, const std::string& name) {
  submit(nn::residual_backward, {dinp1, dinp2, dout}, NnArgs{.d = d}, name);
}

void submit_crossentropy_forward(const Dims& d, starpu_data_handle_t losses, starpu_data_handle_t probs,
                                 starpu_data_handle_t logits, starpu_data_handle_t targets, const std::string& name) {
  submit(nn::crossentropy_forward, {losses, probs, logits, targets}, NnArgs{.d = d}, name);
}

void submit_crossentropy_backward(const Dims& d, starpu_data_handle_t dlogits, starpu_data_handle_t probs,
                                  starpu_data_handle_t targets, const std::string& name, float dloss) {
  submit(nn::crossentropy_backward, {dlogits, probs, targets}, NnArgs{.d = d, .dloss = dloss}, name);
}

}  // namespace starzero::tasks
