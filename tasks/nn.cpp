#include "tasks/nn.hpp"

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string_view>
#include <vector>

#ifdef STARZERO_WITH_CUDA
#include <starpu_cublas_v2.h>
#endif

#include "tasks/nn_kernels.hpp"

namespace starzero::tasks {

namespace {

// ---- the functions the codelets run ------------------------------------------------------------
// One per op, for both devices: it reads its buffers by their declared meaning and calls the CPU
// kernel or the CUDA one (on the worker's stream) of the task's storage type.

enum class Device { cpu, cuda };

[[maybe_unused]] void* cuda_stream() {
#ifdef STARZERO_WITH_CUDA
  return starpu_cuda_get_local_stream();
#else
  return nullptr;
#endif
}
[[maybe_unused]] void* cublas_handle() {
#ifdef STARZERO_WITH_CUDA
  return starpu_cublas_get_local_handle();
#else
  return nullptr;
#endif
}

// Calls fn.operator()<T>() with T the storage type of `dtype`: float or bf16.
template <class Fn>
void with_storage(DType dtype, Fn&& fn) {
  if (dtype == DType::f32) fn.template operator()<float>();
  else fn.template operator()<bf16>();
}

// The bias inside a parameter (or gradient) group, null when there is none (offset -1).
template <class T>
T* bias_in(const TaskBuffers& b, std::string_view group, long long offset) {
  return offset < 0 ? nullptr : b.get<T>(group, std::size_t(offset));
}

template <Device device>
void run_encoder_forward(const TaskBuffers& b, const NnArgs& a) {
  with_storage(a.d.dtype, [&]<class T>() {
    T* out = b.get<T>("out");
    const int* tokens = b.get<int>("tokens");
    const T* wte = b.get<T>("params", a.weight);
    const T* wpe = b.get<T>("params", a.wpe);
    if constexpr (device == Device::cuda)
      kernels::cuda::encoder_forward(out, tokens, wte, wpe, a.d.B, a.d.T, a.d.C, cuda_stream());
    else
      kernels::encoder_forward(out, tokens, wte, wpe, a.d.B, a.d.T, a.d.C);
  });
}

template <Device device>
void run_encoder_backward(const TaskBuffers& b, const NnArgs& a) {
  with_storage(a.d.dtype, [&]<class T>() {
    T* dwte = b.get<T>("grads", a.weight);
    T* dwpe = b.get<T>("grads", a.wpe);
    const T* dout = b.get<T>("dout");
    const int* tokens = b.get<int>("tokens");
    if constexpr (device == Device::cuda)
      kernels::cuda::encoder_backward(dwte, dwpe, dout, tokens, a.d.B, a.d.T, a.d.C, cuda_stream());
    else
      kernels::encoder_backward(dwte, dwpe, dout, tokens, a.d.B, a.d.T, a.d.C);
  });
}

template <Device device>
void run_layernorm_forward(const TaskBuffers& b, const NnArgs& a) {
  with_storage(a.d.dtype, [&]<class T>() {
    T* out = b.get<T>("out");
    float* mean = b.get<float>("mean");
    float* rstd = b.get<float>("rstd");
    const T* inp = b.get<T>("inp");
    const T* weight = b.get<T>("params", a.weight);
    const T* bias = bias_in<T>(b, "params", a.bias);
    if constexpr (device == Device::cuda)
      kernels::cuda::layernorm_forward(out, mean, rstd, inp, weight, bias, a.d.N(), a.d.C, cuda_stream());
    else
      kernels::layernorm_forward(out, mean, rstd, inp, weight, bias, a.d.N(), a.d.C);
  });
}

template <Device device>
void run_layernorm_backward(const TaskBuffers& b, const NnArgs& a) {
  with_storage(a.d.dtype, [&]<class T>() {
    T* dinp = b.get<T>("dinp");
    T* dweight = b.get<T>("grads", a.weight);
    T* dbias = bias_in<T>(b, "grads", a.bias);
    const T* dout = b.get<T>("dout");
    const T* inp = b.get<T>("inp");
    const T* weight = b.get<T>("params", a.weight);
    const float* mean = b.get<float>("mean");
    const float* rstd = b.get<float>("rstd");
    if constexpr (device == Device::cuda)
      kernels::cuda::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, a.d.N(), a.d.C,
                                        cuda_stream());
    else
      kernels::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, a.d.N(), a.d.C);
  });
}

template <Device device>
void run_matmul_forward(const TaskBuffers& b, const NnArgs& a) {
  with_storage(a.d.dtype, [&]<class T>() {
    T* out = b.get<T>("out");
    const T* inp = b.get<T>("inp");
    const T* weight = b.get<T>("params", a.weight);
    const T* bias = bias_in<T>(b, "params", a.bias);
    if constexpr (device == Device::cuda)
      kernels::cuda::matmul_forward(out, inp, weight, bias, a.d.N(), a.C, a.OC, cublas_handle(), cuda_stream());
    else
      kernels::matmul_forward(out, inp, weight, bias, a.d.N(), a.C, a.OC);
  });
}

template <Device device>
void run_matmul_backward(const TaskBuffers& b, const NnArgs& a) {
  with_storage(a.d.dtype, [&]<class T>() {
    T* dinp = b.get<T>("dinp");
    T* dweight = b.get<T>("grads", a.weight);
    T* dbias = bias_in<T>(b, "grads", a.bias);
    const T* dout = b.get<T>("dout");
    const T* inp = b.get<T>("inp");
    const T* weight = b.get<T>("params", a.weight);
    if constexpr (device == Device::cuda)
      kernels::cuda::matmul_backward(dinp, dweight, dbias, dout, inp, weight, a.d.N(), a.C, a.OC, cublas_handle(),
                                     cuda_stream());
    else
      kernels::matmul_backward(dinp, dweight, dbias, dout, inp, weight, a.d.N(), a.C, a.OC);
  });
}

template <Device device>
void run_attention_forward(const TaskBuffers& b, const NnArgs& a) {
  with_storage(a.d.dtype, [&]<class T>() {
    T* out = b.get<T>("out");
    float* preatt = b.get<float>("preatt");
    float* att = b.get<float>("att");
    const T* qkv = b.get<T>("qkv");
    if constexpr (device == Device::cuda)
      kernels::cuda::attention_forward(out, preatt, att, qkv, a.d.B, a.d.T, a.d.C, a.d.NH, cuda_stream());
    else
      kernels::attention_forward(out, preatt, att, qkv, a.d.B, a.d.T, a.d.C, a.d.NH);
  });
}

template <Device device>
void run_attention_backward(const TaskBuffers& b, const NnArgs& a) {
  with_storage(a.d.dtype, [&]<class T>() {
    T* dqkv = b.get<T>("dqkv");
    float* dpreatt = b.get<float>("dpreatt");
    float* datt = b.get<float>("datt");
    const T* dout = b.get<T>("dout");
    const T* qkv = b.get<T>("qkv");
    const float* att = b.get<float>("att");
    if constexpr (device == Device::cuda)
      kernels::cuda::attention_backward(dqkv, dpreatt, datt, dout, qkv, att, a.d.B, a.d.T, a.d.C, a.d.NH,
                                        cuda_stream());
    else
      kernels::attention_backward(dqkv, dpreatt, datt, dout, qkv, att, a.d.B, a.d.T, a.d.C, a.d.NH);
  });
}

template <Device device>
void run_gelu_forward(const TaskBuffers& b, const NnArgs& a) {
  with_storage(a.d.dtype, [&]<class T>() {
    T* out = b.get<T>("out");
    const T* inp = b.get<T>("inp");
    const std::size_t n = b.elements("out");
    if constexpr (device == Device::cuda) kernels::cuda::gelu_forward(out, inp, n, cuda_stream());
    else kernels::gelu_forward(out, inp, n);
  });
}

template <Device device>
void run_gelu_backward(const TaskBuffers& b, const NnArgs& a) {
  with_storage(a.d.dtype, [&]<class T>() {
    T* dinp = b.get<T>("dinp");
    const T* inp = b.get<T>("inp");
    const T* dout = b.get<T>("dout");
    const std::size_t n = b.elements("dinp");
    if constexpr (device == Device::cuda) kernels::cuda::gelu_backward(dinp, inp, dout, n, cuda_stream());
    else kernels::gelu_backward(dinp, inp, dout, n);
  });
}

template <Device device>
void run_residual_forward(const TaskBuffers& b, const NnArgs& a) {
  with_storage(a.d.dtype, [&]<class T>() {
    T* out = b.get<T>("out");
    const T* inp1 = b.get<T>("inp1");
    const T* inp2 = b.get<T>("inp2");
    const std::size_t n = b.elements("out");
    if constexpr (device == Device::cuda) kernels::cuda::residual_forward(out, inp1, inp2, n, cuda_stream());
    else kernels::residual_forward(out, inp1, inp2, n);
  });
}

template <Device device>
void run_residual_backward(const TaskBuffers& b, const NnArgs& a) {
  with_storage(a.d.dtype, [&]<class T>() {
    T* dinp1 = b.get<T>("dinp1");
    T* dinp2 = b.get<T>("dinp2");
    const T* dout = b.get<T>("dout");
    const std::size_t n = b.elements("dinp1");
    if constexpr (device == Device::cuda) kernels::cuda::residual_backward(dinp1, dinp2, dout, n, cuda_stream());
    else kernels::residual_backward(dinp1, dinp2, dout, n);
  });
}

template <Device device>
void run_crossentropy_forward(const TaskBuffers& b, const NnArgs& a) {
  with_storage(a.d.dtype, [&]<class T>() {
    float* losses = b.get<float>("losses");
    float* probs = b.get<float>("probs");
    const T* logits = b.get<T>("logits");
    const int* targets = b.get<int>("targets");
    if constexpr (device == Device::cuda)
      kernels::cuda::softmax_crossentropy_forward(losses, probs, logits, targets, a.d.N(), a.d.V, a.d.Vp,
                                                  cuda_stream());
    else
      kernels::softmax_crossentropy_forward(losses, probs, logits, targets, a.d.N(), a.d.V, a.d.Vp);
  });
}

template <Device device>
void run_crossentropy_backward(const TaskBuffers& b, const NnArgs& a) {
  with_storage(a.d.dtype, [&]<class T>() {
    T* dlogits = b.get<T>("dlogits");
    const float* probs = b.get<float>("probs");
    const int* targets = b.get<int>("targets");
    if constexpr (device == Device::cuda)
      kernels::cuda::softmax_crossentropy_backward(dlogits, probs, targets, a.d.N(), a.d.V, a.d.Vp, cuda_stream());
    else
      kernels::softmax_crossentropy_backward(dlogits, probs, targets, a.d.N(), a.d.V, a.d.Vp);
  });
}

// ---- helpers of the cost functions ---------------------------------------------------------------
// Products are formed in double: no int overflow for large shapes.

double storage_size(const NnArgs& a) { return double(dtype_size(a.d.dtype)); }
double rows(const NnArgs& a) { return double(a.d.N()); }
// Elements of the first handle (the element-wise ops: all their vectors have this length).
double elements(Handles h) { return double(starpu_vector_get_nx(h[0])); }
// fp32 attention matrices [B, NH, T, T].
double attention_matrix_bytes(const NnArgs& a) { return 4.0 * a.d.B * a.d.NH * double(a.d.T) * a.d.T; }

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
});

}  // namespace

// ---- the declarations -------------------------------------------------------------------------------
// s: bytes per stored element (4 fp32, 2 bf16); N = B·T rows. FLOP counts are the usual model
// counts (a multiply-add is 2, tanh and exp count 1); bytes are what the task reads plus what it
// writes (an accumulated buffer twice).
namespace nn {

// FLOPs N·C (one add per element); bytes s·(2·N·C + T·C) + 4·N (out, wte rows, wpe, tokens).
Codelet<NnArgs> encoder_forward({
    .name = "nn_encoder_forward",
    .buffers = {{STARPU_W, "out"}, {STARPU_R, "tokens"}, {STARPU_R, "params"}},
    .cpu = run_encoder_forward<Device::cpu>,
    .cuda = STARZERO_CUDA_FUNC(run_encoder_forward<Device::cuda>),
    .flops = [](const NnArgs& a, Handles) { return rows(a) * a.d.C; },
    .bytes = [](const NnArgs& a, Handles) {
      return storage_size(a) * (2.0 * rows(a) * a.d.C + double(a.d.T) * a.d.C) + 4.0 * rows(a);
    },
});

// FLOPs 2·N·C (dwte and dwpe); bytes s·(3·N·C + 2·T·C) + 4·N.
Codelet<NnArgs> encoder_backward({
    .name = "nn_encoder_backward",
    .buffers = {{STARPU_RW, "grads"}, {STARPU_R, "dout"}, {STARPU_R, "tokens"}},
    .cpu = run_encoder_backward<Device::cpu>,
    .cuda = STARZERO_CUDA_FUNC(run_encoder_backward<Device::cuda>),
    .flops = [](const NnArgs& a, Handles) { return 2.0 * rows(a) * a.d.C; },
    .bytes = [](const NnArgs& a, Handles) {
      return storage_size(a) * (3.0 * rows(a) * a.d.C + 2.0 * a.d.T * a.d.C) + 4.0 * rows(a);
    },
});

// FLOPs ≈ 8·N·C (mean, variance, normalise, scale, shift); bytes s·(2·N·C + 2·C) + 8·N.
Codelet<NnArgs> layernorm_forward({
    .name = "nn_layernorm_forward",
    .buffers = {{STARPU_W, "out"}, {STARPU_W, "mean"}, {STARPU_W, "rstd"}, {STARPU_R, "inp"}, {STARPU_R, "params"}},
    .cpu = run_layernorm_forward<Device::cpu>,
    .cuda = STARZERO_CUDA_FUNC(run_layernorm_forward<Device::cuda>),
    .flops = [](const NnArgs& a, Handles) { return 8.0 * rows(a) * a.d.C; },
    .bytes = [](const NnArgs& a, Handles) {
      return storage_size(a) * (2.0 * rows(a) * a.d.C + 2.0 * a.d.C) + 8.0 * rows(a);
    },
});

// FLOPs ≈ 17·N·C (llm.c's two passes over each row); bytes s·(4·N·C + 5·C) + 8·N.
Codelet<NnArgs> layernorm_backward({
    .name = "nn_layernorm_backward",
    .buffers = {{STARPU_RW, "dinp"}, {STARPU_RW, "grads"}, {STARPU_R, "dout"}, {STARPU_R, "inp"},
                {STARPU_R, "params"}, {STARPU_R, "mean"}, {STARPU_R, "rstd"}},
    .cpu = run_layernorm_backward<Device::cpu>,
    .cuda = STARZERO_CUDA_FUNC(run_layernorm_backward<Device::cuda>),
    .flops = [](const NnArgs& a, Handles) { return 17.0 * rows(a) * a.d.C; },
    .bytes = [](const NnArgs& a, Handles) {
      return storage_size(a) * (4.0 * rows(a) * a.d.C + 5.0 * a.d.C) + 8.0 * rows(a);
    },
});

// FLOPs 2·N·C·OC (the bias add left out); bytes s·(N·C + OC·C + OC + N·OC).
Codelet<NnArgs> matmul_forward({
    .name = "nn_matmul_forward",
    .buffers = {{STARPU_W, "out"}, {STARPU_R, "inp"}, {STARPU_R, "params"}},
    .cpu = run_matmul_forward<Device::cpu>,
    .cuda = STARZERO_CUDA_FUNC(run_matmul_forward<Device::cuda>),
    .flops = [](const NnArgs& a, Handles) { return 2.0 * rows(a) * a.C * a.OC; },
    .bytes = [](const NnArgs& a, Handles) {
      return storage_size(a) * (rows(a) * a.C + double(a.OC) * a.C + a.OC + rows(a) * a.OC);
    },
});

// FLOPs 4·N·C·OC (dinp and dweight, 2·N·C·OC each); bytes s·(N·OC + 3·N·C + 3·OC·C + 2·OC).
Codelet<NnArgs> matmul_backward({
    .name = "nn_matmul_backward",
    .buffers = {{STARPU_RW, "dinp"}, {STARPU_RW, "grads"}, {STARPU_R, "dout"}, {STARPU_R, "inp"},
                {STARPU_R, "params"}},
    .cpu = run_matmul_backward<Device::cpu>,
    .cuda = STARZERO_CUDA_FUNC(run_matmul_backward<Device::cuda>),
    .flops = [](const NnArgs& a, Handles) { return 4.0 * rows(a) * a.C * a.OC; },
    .bytes = [](const NnArgs& a, Handles) {
      return storage_size(a) * (rows(a) * a.OC + 3.0 * rows(a) * a.C + 3.0 * a.OC * a.C + 2.0 * a.OC);
    },
});

// FLOPs 4·B·NH·T²·hs = 4·B·T²·C (q·kᵀ and att·v over the full T×T; the causal mask halves the
// real work, softmax left out); bytes s·4·N·C (qkv read, out written) + preatt and att written.
Codelet<NnArgs> attention_forward({
    .name = "nn_attention_forward",
    .buffers = {{STARPU_W, "out"}, {STARPU_W, "preatt"}, {STARPU_W, "att"}, {STARPU_R, "qkv"}},
    .cpu = run_attention_forward<Device::cpu>,
    .cuda = STARZERO_CUDA_FUNC(run_attention_forward<Device::cuda>),
    .flops = [](const NnArgs& a, Handles) { return 4.0 * a.d.B * double(a.d.T) * a.d.T * a.d.C; },
    .bytes = [](const NnArgs& a, Handles) {
      return storage_size(a) * 4.0 * rows(a) * a.d.C + 2.0 * attention_matrix_bytes(a);
    },
});

// FLOPs 8·B·T²·C (twice the forward); bytes s·10·N·C (dout, qkv read; dqkv accumulated) + att
// read and the dpreatt, datt scratch written.
Codelet<NnArgs> attention_backward({
    .name = "nn_attention_backward",
    .buffers = {{STARPU_RW, "dqkv"}, {STARPU_SCRATCH, "dpreatt"}, {STARPU_SCRATCH, "datt"}, {STARPU_R, "dout"},
                {STARPU_R, "qkv"}, {STARPU_R, "att"}},
    .cpu = run_attention_backward<Device::cpu>,
    .cuda = STARZERO_CUDA_FUNC(run_attention_backward<Device::cuda>),
    .flops = [](const NnArgs& a, Handles) { return 8.0 * a.d.B * double(a.d.T) * a.d.T * a.d.C; },
    .bytes = [](const NnArgs& a, Handles) {
      return storage_size(a) * 10.0 * rows(a) * a.d.C + 3.0 * attention_matrix_bytes(a);
    },
});

// n elements. FLOPs ≈ 8·n (cube, multiply-adds, tanh, scale); bytes 2·n·s.
Codelet<NnArgs> gelu_forward({
    .name = "nn_gelu_forward",
    .buffers = {{STARPU_W, "out"}, {STARPU_R, "inp"}},
    .cpu = run_gelu_forward<Device::cpu>,
    .cuda = STARZERO_CUDA_FUNC(run_gelu_forward<Device::cuda>),
    .flops = [](const NnArgs&, Handles h) { return 8.0 * elements(h); },
    .bytes = [](const NnArgs& a, Handles h) { return 2.0 * elements(h) * storage_size(a); },
});

// FLOPs ≈ 16·n (the forward again, sech², the chain rule, the accumulation); bytes 4·n·s.
Codelet<NnArgs> gelu_backward({
    .name = "nn_gelu_backward",
    .buffers = {{STARPU_RW, "dinp"}, {STARPU_R, "inp"}, {STARPU_R, "dout"}},
    .cpu = run_gelu_backward<Device::cpu>,
    .cuda = STARZERO_CUDA_FUNC(run_gelu_backward<Device::cuda>),
    .flops = [](const NnArgs&, Handles h) { return 16.0 * elements(h); },
    .bytes = [](const NnArgs& a, Handles h) { return 4.0 * elements(h) * storage_size(a); },
});

// FLOPs n; bytes 3·n·s.
Codelet<NnArgs> residual_forward({
    .name = "nn_residual_forward",
    .buffers = {{STARPU_W, "out"}, {STARPU_R, "inp1"}, {STARPU_R, "inp2"}},
    .cpu = run_residual_forward<Device::cpu>,
    .cuda = STARZERO_CUDA_FUNC(run_residual_forward<Device::cuda>),
    .flops = [](const NnArgs&, Handles h) { return elements(h); },
    .bytes = [](const NnArgs& a, Handles h) { return 3.0 * elements(h) * storage_size(a); },
});

// FLOPs 2·n (two accumulations); bytes 5·n·s.
Codelet<NnArgs> residual_backward({
    .name = "nn_residual_backward",
    .buffers = {{STARPU_RW, "dinp1"}, {STARPU_RW, "dinp2"}, {STARPU_R, "dout"}},
    .cpu = run_residual_backward<Device::cpu>,
    .cuda = STARZERO_CUDA_FUNC(run_residual_backward<Device::cuda>),
    .flops = [](const NnArgs&, Handles h) { return 2.0 * elements(h); },
    .bytes = [](const NnArgs& a, Handles h) { return 5.0 * elements(h) * storage_size(a); },
});

// FLOPs ≈ 4·N·V (max, exp, sum, normalise); bytes s·N·Vp (logits) + 4·N·Vp (probs) + 8·N.
Codelet<NnArgs> crossentropy_forward({
    .name = "nn_crossentropy_forward",
    .buffers = {{STARPU_W, "losses"}, {STARPU_W, "probs"}, {STARPU_R, "logits"}, {STARPU_R, "targets"}},
    .cpu = run_crossentropy_forward<Device::cpu>,
    .cuda = STARZERO_CUDA_FUNC(run_crossentropy_forward<Device::cuda>),
    .flops = [](const NnArgs& a, Handles) { return 4.0 * rows(a) * a.d.V; },
    .bytes = [](const NnArgs& a, Handles) {
      return (storage_size(a) + 4.0) * rows(a) * a.d.Vp + 8.0 * rows(a);
    },
});

// FLOPs 3·N·V (minus the one-hot, times 1/N, accumulate); bytes 4·N·Vp + 2·s·N·Vp + 4·N.
Codelet<NnArgs> crossentropy_backward({
    .name = "nn_crossentropy_backward",
    .buffers = {{STARPU_RW, "dlogits"}, {STARPU_R, "probs"}, {STARPU_R, "targets"}},
    .cpu = run_crossentropy_backward<Device::cpu>,
    .cuda = STARZERO_CUDA_FUNC(run_crossentropy_backward<Device::cuda>),
    .flops = [](const NnArgs& a, Handles) { return 3.0 * rows(a) * a.d.V; },
    .bytes = [](const NnArgs& a, Handles) {
      return (4.0 + 2.0 * storage_size(a)) * rows(a) * a.d.Vp + 4.0 * rows(a);
    },
});

}  // namespace nn

// ---- submission: the handles in the declared order ---------------------------------------------

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
  submit(nn::encoder_backward, {embedding_grad, dout, tokens},
         NnArgs{.d = d, .weight = wte_offset, .wpe = wpe_offset}, name);
}

void submit_layernorm_forward(const Dims& d, starpu_data_handle_t out, starpu_data_handle_t mean,
                              starpu_data_handle_t rstd, starpu_data_handle_t inp, const WeightRef& w,
                              const std::string& name) {
  submit(nn::layernorm_forward, {out, mean, rstd, inp, w.group}, NnArgs{.d = d, .weight = w.weight, .bias = w.bias},
         name);
}

void submit_layernorm_backward(const Dims& d, starpu_data_handle_t dinp, starpu_data_handle_t grad_group,
                               starpu_data_handle_t dout, starpu_data_handle_t inp, const WeightRef& w,
                               starpu_data_handle_t mean, starpu_data_handle_t rstd, const std::string& name) {
  submit(nn::layernorm_backward, {dinp, grad_group, dout, inp, w.group, mean, rstd},
         NnArgs{.d = d, .weight = w.weight, .bias = w.bias}, name);
}

void submit_matmul_forward(const Dims& d, starpu_data_handle_t out, starpu_data_handle_t inp, const WeightRef& w,
                           int C, int OC, const std::string& name) {
  submit(nn::matmul_forward, {out, inp, w.group},
         NnArgs{.d = d, .weight = w.weight, .bias = w.bias, .C = C, .OC = OC}, name);
}

void submit_matmul_backward(const Dims& d, starpu_data_handle_t dinp, starpu_data_handle_t grad_group,
                            starpu_data_handle_t dout, starpu_data_handle_t inp, const WeightRef& w, int C, int OC,
                            const std::string& name) {
  submit(nn::matmul_backward, {dinp, grad_group, dout, inp, w.group},
         NnArgs{.d = d, .weight = w.weight, .bias = w.bias, .C = C, .OC = OC}, name);
}

void submit_attention_forward(const Dims& d, starpu_data_handle_t out, starpu_data_handle_t preatt,
                              starpu_data_handle_t att, starpu_data_handle_t qkv, const std::string& name) {
  submit(nn::attention_forward, {out, preatt, att, qkv}, NnArgs{.d = d}, name);
}

void submit_attention_backward(const Dims& d, starpu_data_handle_t dqkv, starpu_data_handle_t dpreatt,
                               starpu_data_handle_t datt, starpu_data_handle_t dout, starpu_data_handle_t qkv,
                               starpu_data_handle_t att, const std::string& name) {
  submit(nn::attention_backward, {dqkv, dpreatt, datt, dout, qkv, att}, NnArgs{.d = d}, name);
}

void submit_gelu_forward(const Dims& d, starpu_data_handle_t out, starpu_data_handle_t inp, const std::string& name) {
  submit(nn::gelu_forward, {out, inp}, NnArgs{.d = d}, name);
}

void submit_gelu_backward(const Dims& d, starpu_data_handle_t dinp, starpu_data_handle_t inp,
                          starpu_data_handle_t dout, const std::string& name) {
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
                                  starpu_data_handle_t targets, const std::string& name) {
  submit(nn::crossentropy_backward, {dlogits, probs, targets}, NnArgs{.d = d}, name);
}

}  // namespace starzero::tasks
