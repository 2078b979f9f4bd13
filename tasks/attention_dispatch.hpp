#pragma once
// The CUDA functions of the attention codelets (tasks/nn.cpp, tasks/nn_llama.cpp): the session's
// kernel (tasks/attention_kernel.hpp) with the own CUDA kernels' signatures. cuDNN's flash
// attention (tasks/attention_cudnn.hpp) where the session chose it, the build has it and the
// storage type is bf16; the own kernel otherwise, and for a shape cuDNN refuses. Private to tasks/.
#include <type_traits>

#include "runtime/dtype.hpp"
#include "tasks/attention_kernel.hpp"
#include "tasks/nn_kernels.hpp"
#ifdef STARZERO_WITH_CUDNN
#include "tasks/attention_cudnn.hpp"
#endif

namespace starzero::tasks::attention_dispatch {

// kernels::cuda::attention_forward_gqa's arguments.
template <class T>
void forward_gqa(T* out, int ld_out, float* lse, int ld_lse, const T* qkv, int B, int Tn, int NH, int NKV, int hs,
                 int h0, int nh, void* stream) {
#ifdef STARZERO_WITH_CUDNN
  if constexpr (std::is_same_v<T, bf16>) {
    const cudnn_attention::CudnnAttentionShape shape{
        .B = B, .T = Tn, .NH = NH, .NKV = NKV, .hs = hs, .h0 = h0, .nh = nh, .ld_out = ld_out, .ld_lse = ld_lse};
    if (session_attention() == AttentionKernel::cudnn && cudnn_attention::forward(shape, out, lse, qkv, stream))
      return;
  }
#endif
  kernels::cuda::attention_forward_gqa(out, ld_out, lse, ld_lse, qkv, B, Tn, NH, NKV, hs, h0, nh, stream);
}

// kernels::cuda::attention_backward_gqa's arguments; accumulates into dq, dk, dv as it does.
template <class T>
void backward_gqa(T* dq, T* dk, T* dv, int ld_dinp, const T* dout, const T* qkv, const float* lse, int ld_lse, int B,
                  int Tn, int NH, int NKV, int hs, int h0, int nh, void* stream) {
#ifdef STARZERO_WITH_CUDNN
  if constexpr (std::is_same_v<T, bf16>) {
    const cudnn_attention::CudnnAttentionShape shape{.B = B, .T = Tn, .NH = NH, .NKV = NKV, .hs = hs, .h0 = h0,
                                                     .nh = nh, .ld_lse = ld_lse, .ld_dinp = ld_dinp, .backward = true};
    if (session_attention() == AttentionKernel::cudnn &&
        cudnn_attention::backward(shape, dq, dk, dv, dout, qkv, lse, stream))
      return;
  }
#endif
  kernels::cuda::attention_backward_gqa(dq, dk, dv, ld_dinp, dout, qkv, lse, ld_lse, B, Tn, NH, NKV, hs, h0, nh, stream);
}

// GPT-2's head groups (kernels::cuda::attention_forward_heads / attention_backward_heads).
template <class T>
void forward_heads(T* out, int ld_out, float* lse, int ld_lse, const T* inp, int B, int Tn, int C, int NH, int h0,
                   int nh, void* stream) {
  forward_gqa(out, ld_out, lse, ld_lse, inp, B, Tn, NH, NH, C / NH, h0, nh, stream);
}
template <class T>
void backward_heads(T* dq, T* dk, T* dv, int ld_dinp, const T* dout, const T* inp, const float* lse, int ld_lse, int B,
                    int Tn, int C, int NH, int h0, int nh, void* stream) {
  backward_gqa(dq, dk, dv, ld_dinp, dout, inp, lse, ld_lse, B, Tn, NH, NH, C / NH, h0, nh, stream);
}

// Llama's whole op (kernels::cuda::attention_gqa_forward / attention_gqa_backward).
template <class T>
void gqa_forward(T* out, float* lse, const T* qkv, int B, int Tn, int NH, int NKV, int hs, void* stream) {
  forward_gqa(out, NH * hs, lse, NH * Tn, qkv, B, Tn, NH, NKV, hs, 0, NH, stream);
}
template <class T>
void gqa_backward(T* dqkv, const T* dout, const T* qkv, const float* lse, int B, int Tn, int NH, int NKV, int hs,
                  void* stream) {
  T* const dk = dqkv != nullptr ? dqkv + NH * hs : nullptr;
  T* const dv = dqkv != nullptr ? dqkv + (NH + NKV) * hs : nullptr;
  backward_gqa(dqkv, dk, dv, (NH + 2 * NKV) * hs, dout, qkv, lse, NH * Tn, B, Tn, NH, NKV, hs, 0, NH, stream);
}

}  // namespace starzero::tasks::attention_dispatch
