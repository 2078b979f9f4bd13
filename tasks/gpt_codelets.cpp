#include "tasks/gpt_codelets.hpp"

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <vector>

#ifdef STARZERO_WITH_CUDA
#include <starpu_cublas_v2.h>
#endif

#include "runtime/codelet.hpp"
#include "runtime/task_name.hpp"
#include "tasks/gpt_kernels.hpp"

namespace starzero::tasks {

namespace {

// Everything a GPT codelet needs besides its buffers, passed by value (STARPU_VALUE).
struct Args {
  GptDims d{};
  std::size_t offset[2] = {0, 0};  // weight / wte, and wpe (encoder)
  long long bias = -1;             // bias offset, -1: none
  int C = 0, OC = 0;               // matmul shape
};

Args unpack(void* cl_arg) {
  Args a;
  starpu_codelet_unpack_args(cl_arg, &a);
  return a;
}

template <class T>
T* at(void* buffer, std::size_t offset = 0) {
  return reinterpret_cast<T*>(STARPU_VECTOR_GET_PTR(buffer)) + offset;
}
template <class T>
T* bias_at(void* buffer, long long offset) {
  return offset < 0 ? nullptr : at<T>(buffer, std::size_t(offset));
}
std::size_t elements(void* buffer) { return STARPU_VECTOR_GET_NX(buffer); }

#ifdef STARZERO_WITH_CUDA
void* stream() { return starpu_cuda_get_local_stream(); }
void* cublas() { return starpu_cublas_get_local_handle(); }
// Calls the CUDA kernel when the task runs on a CUDA worker, else the CPU kernel.
#define STARZERO_KERNEL(on_cuda, fn, ...) \
  ((on_cuda) ? kernels::cuda::fn(__VA_ARGS__, stream()) : kernels::fn(__VA_ARGS__))
#define STARZERO_MATMUL(on_cuda, fn, ...) \
  ((on_cuda) ? kernels::cuda::fn(__VA_ARGS__, cublas(), stream()) : kernels::fn(__VA_ARGS__))
#else
#define STARZERO_KERNEL(on_cuda, fn, ...) kernels::fn(__VA_ARGS__)
#define STARZERO_MATMUL(on_cuda, fn, ...) kernels::fn(__VA_ARGS__)
#endif

// ---- one run<T, on_cuda> per kernel: buffers in the order of the codelet's modes ------------

template <class T, bool on_cuda>
void encoder_forward_run(void** b, const Args& a) {
  STARZERO_KERNEL(on_cuda, encoder_forward, at<T>(b[0]), at<int>(b[1]), at<T>(b[2], a.offset[0]),
                  at<T>(b[2], a.offset[1]), a.d.B, a.d.T, a.d.C);
}
template <class T, bool on_cuda>
void encoder_backward_run(void** b, const Args& a) {
  STARZERO_KERNEL(on_cuda, encoder_backward, at<T>(b[0], a.offset[0]), at<T>(b[0], a.offset[1]), at<T>(b[1]),
                  at<int>(b[2]), a.d.B, a.d.T, a.d.C);
}
template <class T, bool on_cuda>
void layernorm_forward_run(void** b, const Args& a) {
  STARZERO_KERNEL(on_cuda, layernorm_forward, at<T>(b[0]), at<float>(b[1]), at<float>(b[2]), at<T>(b[3]),
                  at<T>(b[4], a.offset[0]), bias_at<T>(b[4], a.bias), a.d.N(), a.d.C);
}
template <class T, bool on_cuda>
void layernorm_backward_run(void** b, const Args& a) {
  // dinp, grad_group, dout, inp, group, mean, rstd
  STARZERO_KERNEL(on_cuda, layernorm_backward, at<T>(b[0]), at<T>(b[1], a.offset[0]), bias_at<T>(b[1], a.bias),
                  at<T>(b[2]), at<T>(b[3]), at<T>(b[4], a.offset[0]), at<float>(b[5]), at<float>(b[6]), a.d.N(),
                  a.d.C);
}
template <class T, bool on_cuda>
void matmul_forward_run(void** b, const Args& a) {
  STARZERO_MATMUL(on_cuda, matmul_forward, at<T>(b[0]), at<T>(b[1]), at<T>(b[2], a.offset[0]),
                  bias_at<T>(b[2], a.bias), a.d.N(), a.C, a.OC);
}
template <class T, bool on_cuda>
void matmul_backward_run(void** b, const Args& a) {
  // dinp, grad_group, dout, inp, group
  STARZERO_MATMUL(on_cuda, matmul_backward, at<T>(b[0]), at<T>(b[1], a.offset[0]), bias_at<T>(b[1], a.bias),
                  at<T>(b[2]), at<T>(b[3]), at<T>(b[4], a.offset[0]), a.d.N(), a.C, a.OC);
}
template <class T, bool on_cuda>
void attention_forward_run(void** b, const Args& a) {
  STARZERO_KERNEL(on_cuda, attention_forward, at<T>(b[0]), at<float>(b[1]), at<float>(b[2]), at<T>(b[3]), a.d.B,
                  a.d.T, a.d.C, a.d.NH);
}
template <class T, bool on_cuda>
void attention_backward_run(void** b, const Args& a) {
  // dqkv, dpreatt, datt, dout, qkv, att
  STARZERO_KERNEL(on_cuda, attention_backward, at<T>(b[0]), at<float>(b[1]), at<float>(b[2]), at<T>(b[3]),
                  at<T>(b[4]), at<float>(b[5]), a.d.B, a.d.T, a.d.C, a.d.NH);
}
template <class T, bool on_cuda>
void gelu_forward_run(void** b, const Args&) {
  STARZERO_KERNEL(on_cuda, gelu_forward, at<T>(b[0]), at<T>(b[1]), elements(b[0]));
}
template <class T, bool on_cuda>
void gelu_backward_run(void** b, const Args&) {
  STARZERO_KERNEL(on_cuda, gelu_backward, at<T>(b[0]), at<T>(b[1]), at<T>(b[2]), elements(b[0]));
}
template <class T, bool on_cuda>
void residual_forward_run(void** b, const Args&) {
  STARZERO_KERNEL(on_cuda, residual_forward, at<T>(b[0]), at<T>(b[1]), at<T>(b[2]), elements(b[0]));
}
template <class T, bool on_cuda>
void residual_backward_run(void** b, const Args&) {
  STARZERO_KERNEL(on_cuda, residual_backward, at<T>(b[0]), at<T>(b[1]), at<T>(b[2]), elements(b[0]));
}
template <class T, bool on_cuda>
void crossentropy_forward_run(void** b, const Args& a) {
  STARZERO_KERNEL(on_cuda, softmax_crossentropy_forward, at<float>(b[0]), at<float>(b[1]), at<T>(b[2]),
                  at<int>(b[3]), a.d.N(), a.d.V, a.d.Vp);
}
template <class T, bool on_cuda>
void crossentropy_backward_run(void** b, const Args& a) {
  STARZERO_KERNEL(on_cuda, softmax_crossentropy_backward, at<T>(b[0]), at<float>(b[1]), at<int>(b[2]), a.d.N(),
                  a.d.V, a.d.Vp);
}

// The StarPU entry points: unpack the arguments and pick the storage type.
template <template <class, bool> class Run, bool on_cuda>
void entry(void* buffers[], void* cl_arg) {
  const Args a = unpack(cl_arg);
  if (a.d.dtype == DType::f32) Run<float, on_cuda>::call(buffers, a);
  else Run<bf16, on_cuda>::call(buffers, a);
}

#define STARZERO_RUNNER(kernel)                                                   \
  template <class T, bool on_cuda>                                                \
  struct kernel##_runner {                                                        \
    static void call(void** b, const Args& a) { kernel##_run<T, on_cuda>(b, a); } \
  };
STARZERO_RUNNER(encoder_forward)
STARZERO_RUNNER(encoder_backward)
STARZERO_RUNNER(layernorm_forward)
STARZERO_RUNNER(layernorm_backward)
STARZERO_RUNNER(matmul_forward)
STARZERO_RUNNER(matmul_backward)
STARZERO_RUNNER(attention_forward)
STARZERO_RUNNER(attention_backward)
STARZERO_RUNNER(gelu_forward)
STARZERO_RUNNER(gelu_backward)
STARZERO_RUNNER(residual_forward)
STARZERO_RUNNER(residual_backward)
STARZERO_RUNNER(crossentropy_forward)
STARZERO_RUNNER(crossentropy_backward)

#define STARZERO_CODELET(var, kernel, ...)                                                                  \
  Codelet var("gpt_" #kernel, entry<kernel##_runner, false>, STARZERO_CUDA_FUNC((entry<kernel##_runner, true>)), \
              {__VA_ARGS__})

STARZERO_CODELET(encoder_forward_cl, encoder_forward, STARPU_W, STARPU_R, STARPU_R);
STARZERO_CODELET(encoder_backward_cl, encoder_backward, STARPU_RW, STARPU_R, STARPU_R);
STARZERO_CODELET(layernorm_forward_cl, layernorm_forward, STARPU_W, STARPU_W, STARPU_W, STARPU_R, STARPU_R);
STARZERO_CODELET(layernorm_backward_cl, layernorm_backward, STARPU_RW, STARPU_RW, STARPU_R, STARPU_R, STARPU_R,
                 STARPU_R, STARPU_R);
STARZERO_CODELET(matmul_forward_cl, matmul_forward, STARPU_W, STARPU_R, STARPU_R);
STARZERO_CODELET(matmul_backward_cl, matmul_backward, STARPU_RW, STARPU_RW, STARPU_R, STARPU_R, STARPU_R);
STARZERO_CODELET(attention_forward_cl, attention_forward, STARPU_W, STARPU_W, STARPU_W, STARPU_R);
STARZERO_CODELET(attention_backward_cl, attention_backward, STARPU_RW, STARPU_SCRATCH, STARPU_SCRATCH, STARPU_R,
                 STARPU_R, STARPU_R);
STARZERO_CODELET(gelu_forward_cl, gelu_forward, STARPU_W, STARPU_R);
STARZERO_CODELET(gelu_backward_cl, gelu_backward, STARPU_RW, STARPU_R, STARPU_R);
STARZERO_CODELET(residual_forward_cl, residual_forward, STARPU_W, STARPU_R, STARPU_R);
STARZERO_CODELET(residual_backward_cl, residual_backward, STARPU_RW, STARPU_RW, STARPU_R);
STARZERO_CODELET(crossentropy_forward_cl, crossentropy_forward, STARPU_W, STARPU_W, STARPU_R, STARPU_R);
STARZERO_CODELET(crossentropy_backward_cl, crossentropy_backward, STARPU_RW, STARPU_R, STARPU_R);

// ---- load_tokens: CPU and CUDA ----------------------------------------
void load_tokens_cpu(void* buffers[], void* cl_arg) {
  std::memcpy(at<int>(buffers[0]), cl_arg, elements(buffers[0]) * sizeof(int));
}
#ifdef STARZERO_WITH_CUDA
void load_tokens_cuda(void* buffers[], void* cl_arg) {
  cudaMemcpyAsync(at<int>(buffers[0]), cl_arg, elements(buffers[0]) * sizeof(int), cudaMemcpyHostToDevice,
                  starpu_cuda_get_local_stream());
}
// The tokens come from the task's argument buffer in host memory: the CUDA copy must finish
// before StarPU frees that buffer, so it is not STARPU_CUDA_ASYNC.
Codelet load_tokens_cl("load_tokens", load_tokens_cpu, load_tokens_cuda, {STARPU_W});
[[maybe_unused]] const bool load_tokens_synchronous = [] {
  load_tokens_cl.codelet.cuda_flags[0] = 0;
  return true;
}();
#else
Codelet load_tokens_cl("load_tokens", load_tokens_cpu, nullptr, {STARPU_W});
#endif

void check(int ret, const std::string& name) {
  if (ret != 0) throw std::runtime_error("submitting task " + name + " failed (StarPU code " + std::to_string(ret) + ")");
}

Args args_for(const GptDims& d) {
  Args a;
  a.d = d;
  return a;
}

}  // namespace

void submit_load_tokens(starpu_data_handle_t tokens, const int* values, std::size_t count, const std::string& name) {
  if (count != starpu_vector_get_nx(tokens)) throw std::invalid_argument(name + ": token count does not match");
  // A raw copy as the task's argument; StarPU frees it (malloc'd) when the task is done.
  void* copy = std::malloc(count * sizeof(int));
  if (!copy) throw std::bad_alloc();
  std::memcpy(copy, values, count * sizeof(int));
  check(starpu_task_insert(&load_tokens_cl.codelet, STARPU_W, tokens, STARPU_CL_ARGS, copy, count * sizeof(int),
                           STARPU_NAME, intern_task_name(name), 0),
        name);
}

void submit_encoder_forward(const GptDims& d, starpu_data_handle_t out, starpu_data_handle_t tokens,
                            starpu_data_handle_t embedding_group, std::size_t wte_offset, std::size_t wpe_offset,
                            const std::string& name) {
  Args a = args_for(d);
  a.offset[0] = wte_offset;
  a.offset[1] = wpe_offset;
  check(starpu_task_insert(&encoder_forward_cl.codelet, STARPU_W, out, STARPU_R, tokens, STARPU_R, embedding_group,
                           STARPU_VALUE, &a, sizeof a, STARPU_NAME, intern_task_name(name), 0),
        name);
}

void submit_encoder_backward(const GptDims& d, starpu_data_handle_t embedding_grad, std::size_t wte_offset,
                             std::size_t wpe_offset, starpu_data_handle_t dout, starpu_data_handle_t tokens,
                             const std::string& name) {
  Args a = args_for(d);
  a.offset[0] = wte_offset;
  a.offset[1] = wpe_offset;
  check(starpu_task_insert(&encoder_backward_cl.codelet, STARPU_RW, embedding_grad, STARPU_R, dout, STARPU_R, tokens,
                           STARPU_VALUE, &a, sizeof a, STARPU_NAME, intern_task_name(name), 0),
        name);
}

void submit_layernorm_forward(const GptDims& d, starpu_data_handle_t out, starpu_data_handle_t mean,
                              starpu_data_handle_t rstd, starpu_data_handle_t inp, const WeightRef& w,
                              const std::string& name) {
  Args a = args_for(d);
  a.offset[0] = w.weight;
  a.bias = w.bias;
  check(starpu_task_insert(&layernorm_forward_cl.codelet, STARPU_W, out, STARPU_W, mean, STARPU_W, rstd, STARPU_R, inp, STARPU_R, w.group,
                           STARPU_VALUE, &a, sizeof a, STARPU_NAME, intern_task_name(name), 0),
        name);
}

void submit_layernorm_backward(const GptDims& d, starpu_data_handle_t dinp, starpu_data_handle_t grad_group,
                               starpu_data_handle_t dout, starpu_data_handle_t inp, const WeightRef& w,
                               starpu_data_handle_t mean, starpu_data_handle_t rstd, const std::string& name) {
  Args a = args_for(d);
  a.offset[0] = w.weight;
  a.bias = w.bias;
  check(starpu_task_insert(&layernorm_backward_cl.codelet, STARPU_RW, dinp, STARPU_RW, grad_group, STARPU_R, dout, STARPU_R, inp, STARPU_R, w.group, STARPU_R, mean, STARPU_R, rstd,
                           STARPU_VALUE, &a, sizeof a, STARPU_NAME, intern_task_name(name), 0),
        name);
}

void submit_matmul_forward(const GptDims& d, starpu_data_handle_t out, starpu_data_handle_t inp, const WeightRef& w,
                           int C, int OC, const std::string& name) {
  Args a = args_for(d);
  a.offset[0] = w.weight;
  a.bias = w.bias;
  a.C = C;
  a.OC = OC;
  check(starpu_task_insert(&matmul_forward_cl.codelet, STARPU_W, out, STARPU_R, inp, STARPU_R, w.group,
                           STARPU_VALUE, &a, sizeof a, STARPU_NAME, intern_task_name(name), 0),
        name);
}

void submit_matmul_backward(const GptDims& d, starpu_data_handle_t dinp, starpu_data_handle_t grad_group,
                            starpu_data_handle_t dout, starpu_data_handle_t inp, const WeightRef& w, int C, int OC,
                            const std::string& name) {
  Args a = args_for(d);
  a.offset[0] = w.weight;
  a.bias = w.bias;
  a.C = C;
  a.OC = OC;
  check(starpu_task_insert(&matmul_backward_cl.codelet, STARPU_RW, dinp, STARPU_RW, grad_group, STARPU_R, dout, STARPU_R, inp, STARPU_R, w.group,
                           STARPU_VALUE, &a, sizeof a, STARPU_NAME, intern_task_name(name), 0),
        name);
}

void submit_attention_forward(const GptDims& d, starpu_data_handle_t out, starpu_data_handle_t preatt,
                              starpu_data_handle_t att, starpu_data_handle_t qkv, const std::string& name) {
  const Args a = args_for(d);
  check(starpu_task_insert(&attention_forward_cl.codelet, STARPU_W, out, STARPU_W, preatt, STARPU_W, att, STARPU_R, qkv,
                           STARPU_VALUE, &a, sizeof a, STARPU_NAME, intern_task_name(name), 0),
        name);
}

void submit_attention_backward(const GptDims& d, starpu_data_handle_t dqkv, starpu_data_handle_t dpreatt,
                               starpu_data_handle_t datt, starpu_data_handle_t dout, starpu_data_handle_t qkv,
                               starpu_data_handle_t att, const std::string& name) {
  const Args a = args_for(d);
  check(starpu_task_insert(&attention_backward_cl.codelet, STARPU_RW, dqkv, STARPU_SCRATCH, dpreatt, STARPU_SCRATCH, datt, STARPU_R, dout, STARPU_R, qkv, STARPU_R, att,
                           STARPU_VALUE, &a, sizeof a, STARPU_NAME, intern_task_name(name), 0),
        name);
}

void submit_gelu_forward(const GptDims& d, starpu_data_handle_t out, starpu_data_handle_t inp,
                         const std::string& name) {
  const Args a = args_for(d);
  check(starpu_task_insert(&gelu_forward_cl.codelet, STARPU_W, out, STARPU_R, inp,
                           STARPU_VALUE, &a, sizeof a, STARPU_NAME, intern_task_name(name), 0),
        name);
}

void submit_gelu_backward(const GptDims& d, starpu_data_handle_t dinp, starpu_data_handle_t inp,
                          starpu_data_handle_t dout, const std::string& name) {
  const Args a = args_for(d);
  check(starpu_task_insert(&gelu_backward_cl.codelet, STARPU_RW, dinp, STARPU_R, inp, STARPU_R, dout,
                           STARPU_VALUE, &a, sizeof a, STARPU_NAME, intern_task_name(name), 0),
        name);
}

void submit_residual_forward(const GptDims& d, starpu_data_handle_t out, starpu_data_handle_t inp1,
                             starpu_data_handle_t inp2, const std::string& name) {
  const Args a = args_for(d);
  check(starpu_task_insert(&residual_forward_cl.codelet, STARPU_W, out, STARPU_R, inp1, STARPU_R, inp2,
                           STARPU_VALUE, &a, sizeof a, STARPU_NAME, intern_task_name(name), 0),
        name);
}

void submit_residual_backward(const GptDims& d, starpu_data_handle_t dinp1, starpu_data_handle_t dinp2,
                              starpu_data_handle_t dout, const std::string& name) {
  const Args a = args_for(d);
  check(starpu_task_insert(&residual_backward_cl.codelet, STARPU_RW, dinp1, STARPU_RW, dinp2, STARPU_R, dout,
                           STARPU_VALUE, &a, sizeof a, STARPU_NAME, intern_task_name(name), 0),
        name);
}

void submit_crossentropy_forward(const GptDims& d, starpu_data_handle_t losses, starpu_data_handle_t probs,
                                 starpu_data_handle_t logits, starpu_data_handle_t targets, const std::string& name) {
  const Args a = args_for(d);
  check(starpu_task_insert(&crossentropy_forward_cl.codelet, STARPU_W, losses, STARPU_W, probs, STARPU_R, logits, STARPU_R, targets,
                           STARPU_VALUE, &a, sizeof a, STARPU_NAME, intern_task_name(name), 0),
        name);
}

void submit_crossentropy_backward(const GptDims& d, starpu_data_handle_t dlogits, starpu_data_handle_t probs,
                                  starpu_data_handle_t targets, const std::string& name) {
  const Args a = args_for(d);
  check(starpu_task_insert(&crossentropy_backward_cl.codelet, STARPU_RW, dlogits, STARPU_R, probs, STARPU_R, targets,
                           STARPU_VALUE, &a, sizeof a, STARPU_NAME, intern_task_name(name), 0),
        name);
}

}  // namespace starzero::tasks
