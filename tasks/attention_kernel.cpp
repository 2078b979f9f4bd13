#include "tasks/attention_kernel.hpp"

#include <atomic>
#include <stdexcept>

namespace starzero::tasks {

namespace {
std::atomic<AttentionKernel> session_kernel{AttentionKernel::own};
}

std::optional<AttentionRequest> parse_attention_request(std::string_view text) {
  if (text == "auto") return AttentionRequest::automatic;
  if (text == "cudnn") return AttentionRequest::cudnn;
  if (text == "own") return AttentionRequest::own;
  return std::nullopt;
}

const char* attention_kernel_name(AttentionKernel kernel) {
  return kernel == AttentionKernel::cudnn ? "cudnn" : "own";
}

bool cudnn_linked() {
#ifdef STARZERO_WITH_CUDNN
  return true;
#else
  return false;
#endif
}

ResolvedAttention resolve_attention(AttentionRequest request, bool gpu, bool two_byte, bool in_sim) {
  if (request == AttentionRequest::own) return {AttentionKernel::own, "--attention own"};
  // Why cuDNN cannot run here, or "" when it can.
  std::string refused;
  if (!gpu)
    refused = "no GPU";
  else if (!two_byte)
    refused = "fp32 (cuDNN's flash attention is bf16)";
  else if (!in_sim && !cudnn_linked())
    refused = "this build has no cuDNN";
  if (refused.empty()) return {AttentionKernel::cudnn, in_sim ? "cuDNN flash attention, charged by its published rates" : "cuDNN flash attention"};
  if (request == AttentionRequest::cudnn) throw std::invalid_argument("--attention cudnn: " + refused);
  return {AttentionKernel::own, "own kernel: " + refused};
}

void set_session_attention(AttentionKernel kernel) { session_kernel.store(kernel); }
AttentionKernel session_attention() { return session_kernel.load(); }

}  // namespace starzero::tasks
