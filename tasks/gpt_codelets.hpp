#pragma once
// StarPU codelets for the GPT-2 kernels (tasks/gpt_kernels.hpp): one submit function per forward
// and per backward, each one starpu_task_insert that reads like the data flow. Every codelet
// has a CPU and a CUDA implementation and a history-based performance model.
//
// Parameters live in one flat block per layer (a "group" handle); a task that needs a weight
// gets the group handle and the weight's element offset in it. Storage type (fp32 or bf16) is
// the dtype of the activations and of the parameter group; mean/rstd/att/probs/losses are fp32.
#include <starpu.h>

#include <cstddef>
#include <string>

#include "runtime/dtype.hpp"
#include "tasks/elementwise.hpp"

namespace starzero::tasks {

// Offsets of a weight and its bias inside a parameter group, in elements (bias -1: none).
struct WeightRef {
  starpu_data_handle_t group;
  std::size_t weight;
  long long bias;
};

// Shapes shared by the submit calls of one model.
struct GptDims {
  DType dtype;
  int B, T, C, NH, V, Vp;
  int N() const { return B * T; }
};

// A task writes its output handles (W) and accumulates into gradient handles (RW); gradients
// are zeroed with submit_zero (tasks/elementwise.hpp).
// tokens: a vector of B*T int32; copies `values` into it (asynchronously, a task).
void submit_load_tokens(starpu_data_handle_t tokens, const int* values, std::size_t count, const std::string& name);

void submit_encoder_forward(const GptDims& d, starpu_data_handle_t out, starpu_data_handle_t tokens,
                            starpu_data_handle_t embedding_group, std::size_t wte_offset, std::size_t wpe_offset,
                            const std::string& name);
void submit_encoder_backward(const GptDims& d, starpu_data_handle_t embedding_grad, std::size_t wte_offset,
                             std::size_t wpe_offset, starpu_data_handle_t dout, starpu_data_handle_t tokens,
                             const std::string& name);

void submit_layernorm_forward(const GptDims& d, starpu_data_handle_t out, starpu_data_handle_t mean,
                              starpu_data_handle_t rstd, starpu_data_handle_t inp, const WeightRef& w,
                              const std::string& name);
void submit_layernorm_backward(const GptDims& d, starpu_data_handle_t dinp, starpu_data_handle_t grad_group,
                               starpu_data_handle_t dout, starpu_data_handle_t inp, const WeightRef& w,
                               starpu_data_handle_t mean, starpu_data_handle_t rstd, const std::string& name);

// out[N,OC] = inp[N,C] · Wᵀ + b
void submit_matmul_forward(const GptDims& d, starpu_data_handle_t out, starpu_data_handle_t inp, const WeightRef& w,
                           int C, int OC, const std::string& name);
void submit_matmul_backward(const GptDims& d, starpu_data_handle_t dinp, starpu_data_handle_t grad_group,
                            starpu_data_handle_t dout, starpu_data_handle_t inp, const WeightRef& w, int C, int OC,
                            const std::string& name);

void submit_attention_forward(const GptDims& d, starpu_data_handle_t out, starpu_data_handle_t preatt,
                              starpu_data_handle_t att, starpu_data_handle_t qkv, const std::string& name);
// dpreatt and datt are scratch ([B,NH,T,T] fp32, StarPU-allocated per task).
void submit_attention_backward(const GptDims& d, starpu_data_handle_t dqkv, starpu_data_handle_t dpreatt,
                               starpu_data_handle_t datt, starpu_data_handle_t dout, starpu_data_handle_t qkv,
                               starpu_data_handle_t att, const std::string& name);

void submit_gelu_forward(const GptDims& d, starpu_data_handle_t out, starpu_data_handle_t inp, const std::string& name);
void submit_gelu_backward(const GptDims& d, starpu_data_handle_t dinp, starpu_data_handle_t inp,
                          starpu_data_handle_t dout, const std::string& name);

void submit_residual_forward(const GptDims& d, starpu_data_handle_t out, starpu_data_handle_t inp1,
                             starpu_data_handle_t inp2, const std::string& name);
void submit_residual_backward(const GptDims& d, starpu_data_handle_t dinp1, starpu_data_handle_t dinp2,
                              starpu_data_handle_t dout, const std::string& name);

void submit_crossentropy_forward(const GptDims& d, starpu_data_handle_t losses, starpu_data_handle_t probs,
                                 starpu_data_handle_t logits, starpu_data_handle_t targets, const std::string& name);
void submit_crossentropy_backward(const GptDims& d, starpu_data_handle_t dlogits, starpu_data_handle_t probs,
                                  starpu_data_handle_t targets, const std::string& name);

}  // namespace starzero::tasks
