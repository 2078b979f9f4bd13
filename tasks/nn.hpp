#pragma once
// Neural-network ops as StarPU tasks: one submit function per forward and per backward of the
// kernels in tasks/nn_kernels.hpp, used by every model (GPT-2, the MLP) and the benchmark. Each
// submit function is one submission of a codelet declared once in nn.cpp (runtime/codelet.hpp),
// with a CPU and a CUDA implementation, a history-based performance model, and FLOP and byte
// counts.
//
// Parameters live in one flat array per layer (a "group" handle); a task that needs a weight
// gets the group handle and the weight's element offset in it. Storage type (fp32 or bf16) is
// the dtype of the activations and of the parameter group; mean/rstd/att/probs/losses are fp32.
#include <starpu.h>

#include <cstddef>
#include <string>

#include "runtime/codelet.hpp"
#include "runtime/dtype.hpp"
#include "tasks/elementwise.hpp"

namespace starzero::tasks {

// Offsets of a weight and its bias inside a parameter group, in elements (bias -1: none).
struct WeightRef {
  starpu_data_handle_t group;
  std::size_t weight;
  long long bias;
};

// Shapes shared by the submit calls of one model: batch B, sequence T, channels C, heads NH,
// vocabulary V padded to Vp.
struct Dims {
  DType dtype;
  int B, T, C, NH, V, Vp;
  int N() const { return B * T; }
};

// A task writes its output handles (W) and accumulates into gradient handles (RW); gradients
// are zeroed with submit_zero (tasks/elementwise.hpp).
// tokens: a vector of B*T int32; copies `values` into it (asynchronously, a task).
void submit_load_tokens(starpu_data_handle_t tokens, const int* values, std::size_t count, const std::string& name);

void submit_encoder_forward(const Dims& d, starpu_data_handle_t out, starpu_data_handle_t tokens,
                            starpu_data_handle_t embedding_group, std::size_t wte_offset, std::size_t wpe_offset,
                            const std::string& name);
void submit_encoder_backward(const Dims& d, starpu_data_handle_t embedding_grad, std::size_t wte_offset,
                             std::size_t wpe_offset, starpu_data_handle_t dout, starpu_data_handle_t tokens,
                             const std::string& name);

void submit_layernorm_forward(const Dims& d, starpu_data_handle_t out, starpu_data_handle_t mean,
                              starpu_data_handle_t rstd, starpu_data_handle_t inp, const WeightRef& w,
                              const std::string& name);

// Layernorm backward as two independent tasks (the kernel's bits either way): the input
// gradient (dinp += ..., reads the weight from its parameter group; a task per tile of rows),
// and the parameter gradients (dweight and dbias in grad_group at w's offsets, sums over all
// rows of dout).
void submit_layernorm_backward_input(const Dims& d, starpu_data_handle_t dinp, starpu_data_handle_t dout,
                                     starpu_data_handle_t inp, const WeightRef& w, starpu_data_handle_t mean,
                                     starpu_data_handle_t rstd, const std::string& name);
void submit_layernorm_backward_params(const Dims& d, starpu_data_handle_t grad_group, starpu_data_handle_t dout,
                                      starpu_data_handle_t inp, const WeightRef& w, starpu_data_handle_t mean,
                                      starpu_data_handle_t rstd, const std::string& name);

// out[N,OC] = inp[N,C] · Wᵀ + b
void submit_matmul_forward(const Dims& d, starpu_data_handle_t out, starpu_data_handle_t inp, const WeightRef& w, int C,
                           int OC, const std::string& name);
void submit_matmul_backward(const Dims& d, starpu_data_handle_t dinp, starpu_data_handle_t grad_group,
                            starpu_data_handle_t dout, starpu_data_handle_t inp, const WeightRef& w, int C, int OC,
                            const std::string& name);

// The two halves of matmul backward, independent of each other: dinp += dout·W (a task per tile
// of rows), and dW += doutᵀ·inp, db += Σ dout into grad_group at w's offsets (all rows).
void submit_matmul_backward_input(const Dims& d, starpu_data_handle_t dinp, starpu_data_handle_t dout,
                                  const WeightRef& w, int C, int OC, const std::string& name);
void submit_matmul_backward_weight(const Dims& d, starpu_data_handle_t grad_group, starpu_data_handle_t dout,
                                   starpu_data_handle_t inp, const WeightRef& w, int C, int OC,
                                   const std::string& name);

// The weight half cut by output channels, for a gradient split into pieces: dweight_rows (the
// piece holding rows [first_row, first_row + row_count) of dW) += dout[:, those rows]ᵀ·inp, and
// the bias gradient as a task of its own (dbias[OC] += Σ_rows dout).
void submit_matmul_backward_weight_rows(const Dims& d, starpu_data_handle_t dweight_rows, starpu_data_handle_t dout,
                                        starpu_data_handle_t inp, int C, int OC, int first_row, int row_count,
                                        const std::string& name);
void submit_bias_backward(const Dims& d, starpu_data_handle_t dbias, starpu_data_handle_t dout, int OC,
                          const std::string& name);

// Causal multi-head attention over all heads, memory-efficient (tasks/nn_kernels.hpp): out [N,C]
// and lse [B,NH,T] fp32 (each query row's log-sum-exp, all the backward needs besides qkv) from
// qkv [N,3C]. No [T,T] matrix is stored or allocated by StarPU.
void submit_attention_forward(const Dims& d, starpu_data_handle_t out, starpu_data_handle_t lse,
                              starpu_data_handle_t qkv, const std::string& name);
void submit_attention_backward(const Dims& d, starpu_data_handle_t dqkv, starpu_data_handle_t dout,
                               starpu_data_handle_t qkv, starpu_data_handle_t lse, const std::string& name);

// Heads [first, first + count) of NH: a head group of the attention.
struct HeadGroup {
  int first = 0, count = 0;
};
// The attention of one head group, so that groups run as tasks of their own; every head's math is
// the whole op's. qkv (and dout) are read whole. The group writes only its own blocks of
// columns (Tensor::split_columns; matrix handles): out's columns [first·hs, (first+count)·hs) of
// [N,C]; lse's [first·T, (first+count)·T) of [B, NH·T]; in the backward the same columns of the
// q, k and v parts of dqkv [N,3C] (dq, dk, dv, accumulated).
void submit_attention_forward_heads(const Dims& d, HeadGroup heads, starpu_data_handle_t out,
                                    starpu_data_handle_t lse, starpu_data_handle_t qkv, const std::string& name);
void submit_attention_backward_heads(const Dims& d, HeadGroup heads, starpu_data_handle_t dq, starpu_data_handle_t dk,
                                     starpu_data_handle_t dv, starpu_data_handle_t dout, starpu_data_handle_t qkv,
                                     starpu_data_handle_t lse, const std::string& name);

void submit_gelu_forward(const Dims& d, starpu_data_handle_t out, starpu_data_handle_t inp, const std::string& name);
void submit_gelu_backward(const Dims& d, starpu_data_handle_t dinp, starpu_data_handle_t inp, starpu_data_handle_t dout,
                          const std::string& name);

void submit_residual_forward(const Dims& d, starpu_data_handle_t out, starpu_data_handle_t inp1,
                             starpu_data_handle_t inp2, const std::string& name);
void submit_residual_backward(const Dims& d, starpu_data_handle_t dinp1, starpu_data_handle_t dinp2,
                              starpu_data_handle_t dout, const std::string& name);

void submit_crossentropy_forward(const Dims& d, starpu_data_handle_t losses, starpu_data_handle_t probs,
                                 starpu_data_handle_t logits, starpu_data_handle_t targets, const std::string& name);
// Targets below 0 are masked (tasks/loss_mask.hpp): loss 0, and no gradient in the backward.
// dloss: the gradient of the loss per counted row (the mean over N rows: 1.0f / float(N), N the
// rows of the whole micro-batch when d's rows are one tile of them).
void submit_crossentropy_backward(const Dims& d, starpu_data_handle_t dlogits, starpu_data_handle_t probs,
                                  starpu_data_handle_t targets, const std::string& name, float dloss);

// ---- the declarations, for scheduling, simulation and tests ------------------------------------

// What every nn task carries by value besides its buffers.
struct NnArgs {
  Dims d{};
  std::size_t weight = 0;            // offset of the weight (the encoder: of wte) in its parameter group
  std::size_t wpe = 0;               // the encoder: offset of wpe in the embedding group
  long long bias = -1;               // offset of the bias, -1: none
  int C = 0, OC = 0;                 // matmul: input and output channels
  float dloss = 0;                   // cross-entropy backward: the gradient of the loss per row
  int first_row = 0, row_count = 0;  // matmul weight rows: the output channels of the piece
  HeadGroup heads{};                 // attention of a head group: its heads
};

// Codelet "nn_<op>" for each op above (load_tokens: "load_tokens").
namespace nn {
extern Codelet<NnArgs> encoder_forward, encoder_backward;
extern Codelet<NnArgs> layernorm_forward, layernorm_backward_input, layernorm_backward_params;
extern Codelet<NnArgs> matmul_forward, matmul_backward, matmul_backward_input, matmul_backward_weight,
    matmul_backward_weight_rows, bias_backward;
extern Codelet<NnArgs> attention_forward, attention_backward, attention_forward_heads, attention_backward_heads;
extern Codelet<NnArgs> gelu_forward, gelu_backward;
extern Codelet<NnArgs> residual_forward, residual_backward;
extern Codelet<NnArgs> crossentropy_forward, crossentropy_backward;
}  // namespace nn

}  // namespace starzero::tasks
